#!/usr/bin/env python3
"""wgslc.js against onnxruntime-web's WebGPU provider, in the same headless Chromium (WebGPU on SwiftShader unless
--adapter says otherwise), and wgslc's Rust runtime on this machine's Vulkan adapter, on the same models.

    .venv/bin/python scripts/web_bench.py --wgslc target/release/wgslc --ort-web DIST [--iterations N] CASE_DIR...

CASE_DIR is a testdata-style case (model.onnx, input_<i>.npy, optional meta.json with "dims"). DIST is
onnxruntime-web's dist/ folder (`npm pack onnxruntime-web@1.30.0 && tar xzf onnxruntime-web-1.30.0.tgz` gives
package/dist). Prints one JSON line per model and a Markdown table: load time (wgslc: plan, kernels, weights and
every pipeline; onnxruntime-web: InferenceSession.create), median time per run with inputs written and outputs read
back, wgslc's replay time alone and its CPU encoding time per dispatch, the slowest pipeline, and `wgslc bench` on
the native adapter (lavapipe here). `--chain N` adds a model of N tiny Abs ops in a row, compiled `--no-fuse` (N
dispatches of one workgroup each): its replay time over N is the whole per-dispatch cost of a replay. Serves on
127.0.0.1 only; needs numpy (and onnx for --chain).
"""
import argparse
import http.server
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PAGE = r"""<!doctype html><meta charset="utf-8"><script type="module">
import { loadSession } from "/wgslc.js";
import * as ort from "/ort/ort.webgpu.min.mjs";
ort.env.wasm.wasmPaths = "/ort/";
ort.env.wasm.numThreads = 1;
const post = (b) => fetch("/result", { method: "POST", body: JSON.stringify(b) });
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const TYPES = { float32: Float32Array, int64: BigInt64Array, int32: Int32Array, bool: Uint8Array };
const cases = await (await fetch("/cases.json")).json();
for (const c of cases) {
  const r = { name: c.name };
  const inputs = [];
  for (const inp of c.inputs) {
    const bytes = await (await fetch(`/m/${c.name}/${inp.file}`)).arrayBuffer();
    inputs.push({ ...inp, data: new TYPES[inp.dtype](bytes) });
  }
  try {
    let t = performance.now();
    const s = await loadSession(`/m/${c.name}/artifact/`);
    r.wgslc_load_ms = performance.now() - t;
    r.slowest_pipeline_ms = Math.max(...s.loadStats.pipelines.map((p) => p.ms));
    r.dispatches = s.plan.dispatches.length;
    const feeds = Object.fromEntries(inputs.map((x, i) => [s.inputs[i].name, { data: x.data, shape: x.shape }]));
    t = performance.now();
    await s.run(feeds);
    r.wgslc_first_run_ms = performance.now() - t;
    for (let i = 0; i < 2; i++) await s.run(feeds);
    const times = [];
    for (let i = 0; i < c.iterations; i++) { t = performance.now(); await s.run(feeds); times.push(performance.now() - t); }
    r.wgslc_run_ms = median(times);
    const rep = await s.timeReplay(c.iterations);
    r.wgslc_replay_ms = rep.ms;
    r.wgslc_encode_us_per_dispatch = (1000 * rep.encodeMs) / r.dispatches;
    s.destroy();
  } catch (e) { r.wgslc_error = String(e.message ?? e); }
  try {
    let t = performance.now();
    const sess = await ort.InferenceSession.create(`/m/${c.name}/model.onnx`, { executionProviders: ["webgpu"] });
    r.ort_load_ms = performance.now() - t;
    const feeds = Object.fromEntries(sess.inputNames.map((n, i) => [n, new ort.Tensor(inputs[i].dtype, inputs[i].data, inputs[i].shape)]));
    // onnxruntime-web compiles its shaders during the first runs, not in create(): time the first apart.
    t = performance.now();
    await sess.run(feeds);
    r.ort_first_run_ms = performance.now() - t;
    for (let i = 0; i < 2; i++) await sess.run(feeds);
    const times = [];
    for (let i = 0; i < c.iterations; i++) { t = performance.now(); await sess.run(feeds); times.push(performance.now() - t); }
    r.ort_run_ms = median(times);
    await sess.release();
  } catch (e) { r.ort_error = String(e.message ?? e); }
  await post(r);
}
await post({ done: true });
</script>"""


def chain_case(d, n):
    """A case of n Abs ops in a row over 64 floats: n dispatches of one workgroup each when compiled --no-fuse."""
    import onnx
    from onnx import TensorProto, helper
    os.makedirs(d, exist_ok=True)
    nodes = [helper.make_node("Abs", [f"t{i}"], [f"t{i + 1}"]) for i in range(n)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [64])],
                          [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [64])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), os.path.join(d, "model.onnx"))
    np.save(os.path.join(d, "input_0.npy"), np.linspace(-1, 1, 64, dtype=np.float32))
    json.dump({"no_fuse": True}, open(os.path.join(d, "meta.json"), "w"))
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--wgslc", required=True)
    ap.add_argument("--ort-web", required=True, help="onnxruntime-web's dist/ folder")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    ap.add_argument("--adapter", default="swiftshader", help="--use-webgpu-adapter value (swiftshader)")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--chain", type=int, default=0, help="also time a chain of N one-workgroup dispatches")
    a = ap.parse_args()

    tmp = tempfile.mkdtemp()
    if a.chain:
        a.cases.append(chain_case(os.path.join(tmp, "chain"), a.chain))
    listing, native = [], {}
    for d in a.cases:
        name = os.path.basename(os.path.normpath(d))
        out = os.path.join(tmp, "m", name)
        os.makedirs(out)
        meta = json.load(open(os.path.join(d, "meta.json"))) if os.path.exists(os.path.join(d, "meta.json")) else {}
        dims = sum([["--dim", f"{k}={v}"] for k, v in meta.get("dims", {}).items()], [])
        flags = ["--no-fuse"] if meta.get("no_fuse") else []
        subprocess.run([a.wgslc, "compile", os.path.join(d, "model.onnx"), "-o", os.path.join(out, "artifact")] + dims + flags,
                       check=True, capture_output=True)
        shutil.copy(os.path.join(d, "model.onnx"), out)
        inputs, files = [], []
        i = 0
        while os.path.exists(os.path.join(d, f"input_{i}.npy")):
            x = np.load(os.path.join(d, f"input_{i}.npy"))
            dtype = {"float32": "float32", "float64": "float32", "int64": "int64", "int32": "int32", "bool": "bool"}[str(x.dtype)]
            np.ascontiguousarray(x.astype({"bool": np.uint8}.get(dtype, dtype))).tofile(os.path.join(out, f"input_{i}.bin"))
            inputs.append({"file": f"input_{i}.bin", "dtype": dtype, "shape": list(x.shape)})
            files.append(os.path.join(d, f"input_{i}.npy"))
            i += 1
        listing.append({"name": name, "inputs": inputs, "iterations": a.iterations})
        r = subprocess.run([a.wgslc, "bench", os.path.join(out, "artifact"), "--iterations", str(a.iterations)]
                           + sum([["--input", f] for f in files], []), capture_output=True, text=True)
        native[name] = json.loads(r.stdout.strip().splitlines()[0]) if r.returncode == 0 else {"error": r.stderr[-300:]}
    json.dump(listing, open(os.path.join(tmp, "cases.json"), "w"))
    open(os.path.join(tmp, "bench.html"), "w").write(PAGE)

    results = queue.Queue()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def translate_path(self, path):
            path = path.split("?")[0]
            if path in ("/wgslc.js", "/artifact.js"):
                return os.path.join(ROOT, "runtime", "web", path[1:])
            if path.startswith("/ort/"):
                return os.path.join(a.ort_web, os.path.basename(path))
            return os.path.join(tmp, path.lstrip("/"))

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(204)
            self.end_headers()
            results.put(json.loads(body))

        def log_message(self, *args):
            pass

    Handler.extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript",
                              ".js": "text/javascript", ".wasm": "application/wasm"}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    profile = tempfile.mkdtemp()
    browser = subprocess.Popen([a.chromium, "--headless=new", "--no-sandbox", "--no-first-run", "--enable-unsafe-webgpu",
                                f"--use-webgpu-adapter={a.adapter}", f"--user-data-dir={profile}",
                                f"http://127.0.0.1:{server.server_address[1]}/bench.html"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    try:
        while True:
            r = results.get(timeout=a.timeout)
            if r.get("done"):
                break
            r["native"] = native[r["name"]]
            print(json.dumps(r), flush=True)
            rows.append(r)
    finally:
        browser.kill()
        server.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(profile, ignore_errors=True)

    f = lambda r, k, p=1: f"{r[k]:.{p}f}" if isinstance(r.get(k), (int, float)) else r.get(k.split("_")[0] + "_error", "–")[:60]
    print("\n| model | dispatches | wgslc.js load ms | first run | run ms | replay ms | encode µs/dispatch "
          "| onnxruntime-web load ms | first run | run ms | Rust runtime, native adapter, ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        nat = r["native"].get("ms_per_inference")
        print(f"| {r['name']} | {r.get('dispatches', '–')} | {f(r, 'wgslc_load_ms', 0)} | {f(r, 'wgslc_first_run_ms', 0)} | "
              f"{f(r, 'wgslc_run_ms', 2)} | {f(r, 'wgslc_replay_ms', 2)} | {f(r, 'wgslc_encode_us_per_dispatch', 1)} | "
              f"{f(r, 'ort_load_ms', 0)} | {f(r, 'ort_first_run_ms', 0)} | {f(r, 'ort_run_ms', 2)} | {nat if nat is not None else '–'} |")


if __name__ == "__main__":
    sys.exit(main())
