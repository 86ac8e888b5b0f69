// What scripts/node_decode.mjs and scripts/node_forward.mjs share: Dawn (the npm package `webgpu`, Chrome's WebGPU
// implementation) as `navigator.gpu`, the config's root served on 127.0.0.1 (wgslc.js fetches artifacts over HTTP,
// as in a browser), wgslc.js's loadSession, and output helpers.
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { pathToFileURL } from "node:url";

/** Reads CONFIG.json (argv[2]) and sets the stack up: { cfg, origin, loadSession, server }. */
export async function setup() {
  const cfg = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  const { create, globals } = await import(pathToFileURL(path.join(cfg.webgpu, "index.js")).href);
  Object.assign(globalThis, globals);
  Object.defineProperty(globalThis, "navigator", { value: { gpu: create(cfg.dawn ?? []) }, configurable: true });
  const server = http.createServer((req, res) => {
    const file = path.join(cfg.root, decodeURIComponent(new URL(req.url, "http://x").pathname));
    if (!file.startsWith(cfg.root) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "content-length": fs.statSync(file).size });
    fs.createReadStream(file).pipe(res);
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  // wgslc.js as an ES module (Node takes a `.js` file outside a `"type": "module"` package as CommonJS).
  const { loadSession } = await import(pathToFileURL(cfg.wgslc_js).href);
  return { cfg, origin: `http://127.0.0.1:${server.address().port}`, loadSession, server };
}

/** Python's statistics.median: the middle one, or the mean of the middle two. */
export const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

/** One JSON line on stdout. */
export const emit = (o) => console.log(JSON.stringify(o));
