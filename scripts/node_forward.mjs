// Forward passes in Node on Dawn (Chrome's WebGPU implementation, the npm package `webgpu`): wgslc.js loads each
// artifact over HTTP from 127.0.0.1, as a page would, and runs it. Run by scripts/bench_models.py --dawn:
//
//     node scripts/node_forward.mjs CONFIG.json
//
// CONFIG: {"webgpu": DIR (the package: index.js, dist/), "wgslc_js": runtime/web/wgslc.js copied beside its
// artifact.js into a folder whose package.json says "type": "module", "root": DIR served on 127.0.0.1,
// "models": [{"name", "artifact": path under root, "inputs": [.npy paths under root], "output": file to write the
// first output's float32 values to}], "iterations": N, "rounds": R, "dawn": [create() flags]}.
// Prints one JSON line per model: load_ms, first_run_ms (its first run: inputs written, outputs read back),
// run_ms (the median of N such runs), replay_ms (Session.timeReplay: the submits of a run, waited for; no input
// or output copies, as `wgslc bench` times; the median of R rounds of N), encode_us_per_dispatch (the CPU time
// wgslc.js takes to encode and submit, per dispatch), dispatches, and the adapter's description; with "profile": P in
// CONFIG, also kernels: [[name, ms], ...] in replay order, each the median of P profiled runs (wgslc.js's
// run({ profile: true }): a pass per dispatch with timestamps at its start and end).
import fs from "node:fs";
import path from "node:path";
import { emit, median, setup } from "./node_stack.mjs";

const { cfg, origin, loadSession, server } = await setup();

// A .npy file (version 1 or 2, little-endian, C order) as { data, shape } with the typed array its dtype names.
const NPY_TYPES = { "<f4": Float32Array, "<i8": BigInt64Array, "<i4": Int32Array, "|b1": Uint8Array, "|u1": Uint8Array };
function readNpy(file) {
  const buf = fs.readFileSync(file);
  const major = buf[6];
  const headerLen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = buf.toString("latin1", start, start + headerLen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${file}: Fortran order`);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(",").map((s) => s.trim()).filter(Boolean).map(Number);
  const T = NPY_TYPES[descr];
  if (!T) throw new Error(`${file}: dtype ${descr}`);
  const body = buf.subarray(start + headerLen);
  const bytes = body.buffer.slice(body.byteOffset, body.byteOffset + body.byteLength);
  return { data: new T(bytes), shape };
}

for (const m of cfg.models) {
  const row = { runtime: "wgslc.js", name: m.name };
  try {
    let t = performance.now();
    const s = await loadSession(`${origin}/${m.artifact}/`);
    row.load_ms = performance.now() - t;
    row.adapter = [s.adapterInfo?.vendor, s.adapterInfo?.architecture, s.adapterInfo?.description].filter(Boolean).join(" ");
    row.dispatches = s.plan.dispatches.length;
    const given = m.inputs.map((p) => readNpy(path.join(cfg.root, p)));
    const feeds = Object.fromEntries(s.inputs.map((spec, i) => [spec.name, given[i]]));
    t = performance.now();
    const out = await s.run(feeds);
    row.first_run_ms = performance.now() - t;
    const first = out[s.outputs[0].name];
    fs.writeFileSync(path.join(cfg.root, m.output), Buffer.from(Float32Array.from(first.data).buffer));
    for (let i = 0; i < 5; i++) await s.run(feeds);
    const runs = [];
    for (let i = 0; i < cfg.iterations; i++) {
      t = performance.now();
      await s.run(feeds);
      runs.push(performance.now() - t);
    }
    row.run_ms = median(runs);
    await s.timeReplay(5);
    const replays = [];
    const encodes = [];
    for (let r = 0; r < cfg.rounds; r++) {
      const rep = await s.timeReplay(cfg.iterations);
      replays.push(rep.ms);
      encodes.push(rep.encodeMs);
    }
    row.replay_ms = median(replays);
    row.replay_rounds_ms = replays;
    row.encode_us_per_dispatch = (1000 * median(encodes)) / row.dispatches;
    // With "profile": N, N profiled runs (a pass per dispatch, timestamps around each): every dispatch's median.
    if (cfg.profile > 0) {
      const each = [];
      for (let i = 0; i < cfg.profile; i++) {
        const p = (await s.run(feeds, { profile: true })).profile;
        if (!p || !p.timestamps) throw new Error("profile: the adapter has no timestamp-query");
        p.kernels.forEach((k, j) => (each[j] ??= { name: k.name, ms: [] }).ms.push(k.ms));
      }
      row.kernels = each.map((k) => [k.name, median(k.ms)]);
    }
    s.destroy();
  } catch (e) {
    row.error = String(e.message ?? e);
  }
  emit(row);
}
server.close();
process.exit(0);
