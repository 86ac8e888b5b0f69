// Greedy decode in Node on Dawn (Chrome's WebGPU implementation, the npm package `webgpu`): wgslc.js's
// Session.generate on a wgslc artifact, and onnxruntime-web's WebGPU provider on an onnxruntime-genai builder model
// (the format it is tuned for), the same prompt and token count. Run by scripts/web_decode_bench.py:
//
//     node scripts/node_decode.mjs CONFIG.json
//
// CONFIG: {"webgpu": DIR (the package: index.js, dist/), "ort": DIR (onnxruntime-web's dist: ort.webgpu.mjs,
// ort-wasm-simd-threaded.asyncify.{mjs,wasm}), "wgslc_js": runtime/web/wgslc.js copied beside its artifact.js into
// a folder whose package.json says "type": "module", "root": DIR served on 127.0.0.1 (holds the artifacts),
// "wgslc": [{"name", "artifact": path under root, "steps_per_submit": [..]}], "onnx": [{"name", "model": file,
// "kv_heads", "head_dim", "kv_dtype": "float16"|"float32"}], "prompt": [ids], "new": N, "rounds": R, "subgroups": false
// to keep wgslc.js's kernels on their plain modules}.
// Prints one JSON line per measurement: tok/s over the decode steps (the prompt's prefill excluded), its tokens.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { emit, median, setup } from "./node_stack.mjs";

const { cfg, origin, loadSession, server } = await setup();
for (const w of cfg.wgslc ?? []) {
  const t = performance.now();
  const s = await loadSession(`${origin}/${w.artifact}/`, { subgroups: cfg.subgroups ?? true });
  const load_ms = performance.now() - t;
  await s.generate(cfg.prompt, { maxNewTokens: 4, stepsPerSubmit: 1 });
  for (const k of w.steps_per_submit) {
    const runs = [];
    let tokens = null;
    // One untimed round first (the GPU's clocks rise while it runs), then the timed ones.
    for (let r = -1; r < cfg.rounds; r++) {
      const g = await s.generate(cfg.prompt, { maxNewTokens: cfg.new, stepsPerSubmit: k });
      if (r < 0) continue;
      runs.push(g.decodeSteps / (g.decodeMs / 1e3));
      tokens = g.tokens.slice(cfg.prompt.length);
    }
    emit({ runtime: "wgslc.js", name: w.name, steps_per_submit: k, tok_s: median(runs), runs, load_ms, tokens, subgroups: s.subgroups });
  }
  s.destroy();
}

// onnxruntime-web's WebGPU provider: its web build in Node, single-threaded, the wasm handed over as bytes.
const f16 = (h) => {
  const e = (h >> 10) & 31;
  const m = h & 1023;
  const v = e === 0 ? m * 2 ** -24 : e === 31 ? (m ? NaN : Infinity) : (1 + m / 1024) * 2 ** (e - 15);
  return h & 32768 ? -v : v;
};
if ((cfg.onnx ?? []).length) {
  const ort = await import(pathToFileURL(path.join(cfg.ort, "ort.webgpu.mjs")).href);
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.wasmBinary = fs.readFileSync(path.join(cfg.ort, "ort-wasm-simd-threaded.asyncify.wasm"));
  // Its device, with the adapter's shader-f16 and subgroups (what a browser's adapter gives it) and limits.
  const adapter = await navigator.gpu.requestAdapter({ powerPreference: "high-performance" });
  const features = ["shader-f16", "subgroups", "timestamp-query"].filter((f) => adapter.features.has(f));
  const limits = ["maxBufferSize", "maxStorageBufferBindingSize", "maxComputeWorkgroupStorageSize",
    "maxComputeInvocationsPerWorkgroup", "maxComputeWorkgroupSizeX", "maxStorageBuffersPerShaderStage"];
  const requiredLimits = Object.fromEntries(limits.map((l) => [l, adapter.limits[l]]));
  const device = await adapter.requestDevice({ requiredFeatures: features, requiredLimits });
  // onnxruntime-web's threaded wasm writes from views of a SharedArrayBuffer, which dawn.node refuses ("Invalid
  // argument"): hand it a copy (a browser takes either).
  const queue = Object.getPrototypeOf(device.queue);
  const writeBuffer = queue.writeBuffer;
  queue.writeBuffer = function (buffer, offset, data, ...rest) {
    return writeBuffer.call(this, buffer, offset, data?.buffer instanceof SharedArrayBuffer ? data.slice() : data, ...rest);
  };
  ort.env.webgpu.device = device;
  emit({ adapter: adapter.info?.description ?? "", features });
  for (const o of cfg.onnx) {
    const t = performance.now();
    const data = path.join(path.dirname(o.model), `${path.basename(o.model)}.data`);
    const sess = await ort.InferenceSession.create(fs.readFileSync(o.model), {
      executionProviders: ["webgpu"],
      preferredOutputLocation: "gpu-buffer",
      externalData: fs.existsSync(data) ? [{ path: path.basename(data), data: fs.readFileSync(data) }] : undefined,
    });
    const load_ms = performance.now() - t;
    const past = sess.inputNames.filter((n) => n.startsWith("past_key_values"));
    const int64 = (xs, shape) => new ort.Tensor("int64", BigInt64Array.from(xs.map(BigInt)), shape);
    const generate = async (count) => {
      const Kv = o.kv_dtype === "float16" ? Uint16Array : Float32Array;
      let feeds = Object.fromEntries(past.map((n) => [n, new ort.Tensor(o.kv_dtype, new Kv(0), [1, o.kv_heads, 0, o.head_dim])]));
      let ids = cfg.prompt;
      let total = 0;
      const tokens = [];
      let t0 = 0;
      for (let i = 0; i < count; i++) {
        if (i === 1) t0 = performance.now();
        const pos = Array.from(ids, (_, j) => total + j);
        total += ids.length;
        feeds.input_ids = int64(ids, [1, ids.length]);
        feeds.attention_mask = int64(Array(total).fill(1), [1, total]);
        if (sess.inputNames.includes("position_ids")) feeds.position_ids = int64(pos, [1, ids.length]);
        const out = await sess.run(feeds);
        const logits = out.logits;
        const all = await logits.getData(true);
        const vocab = logits.dims[logits.dims.length - 1];
        const row = all.subarray(all.length - vocab);
        const value = logits.type === "float16" ? (j) => f16(row[j]) : (j) => row[j];
        let best = 0;
        for (let j = 1; j < vocab; j++) if (value(j) > value(best)) best = j;
        tokens.push(best);
        for (const n of past) feeds[n]?.dispose?.();
        feeds = Object.fromEntries(past.map((n) => [n, out[n.replace("past_key_values", "present")]]));
        ids = [best];
      }
      for (const n of past) feeds[n]?.dispose?.();
      return { tokens, tok_s: (count - 1) / ((performance.now() - t0) / 1e3) };
    };
    await generate(4);
    const runs = [];
    let tokens = null;
    for (let r = -1; r < cfg.rounds; r++) {
      const g = await generate(cfg.new);
      if (r < 0) continue;
      runs.push(g.tok_s);
      tokens = g.tokens;
    }
    emit({ runtime: "onnxruntime-web webgpu", name: o.name, tok_s: median(runs), runs, load_ms, tokens });
    await sess.release();
  }
}
server.close();
process.exit(0);
