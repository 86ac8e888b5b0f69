// Runs every case listed in /cases.json through wgslc.js and posts each one's outputs (or error) to /result, then
// /done. The server (cli/tests/browser.rs) compares the outputs with the references; nothing is judged here.
import { loadSession } from "/wgslc.js";
import { submitRanges } from "/artifact.js";

const post = (path, body) => fetch(path, { method: "POST", body: JSON.stringify(body) });
const log = (line) => {
  console.log(line);
  document.getElementById("log").textContent += `${line}\n`;
};

// Inputs are stored as raw little-endian bytes of the reference's dtype; int64 goes in as BigInt64Array, as a page
// holding token ids would pass it.
const INPUT_TYPES = { float32: Float32Array, int64: BigInt64Array, int32: Int32Array, bool: Uint8Array };

function base64(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

// What an output came back as; a Uint8Array is bool or uint8, a Uint16Array float16 bits or uint16, as the output's
// dtype says.
function kind(data, dtype) {
  if (data instanceof Float32Array) return "float32";
  if (globalThis.Float16Array && data instanceof Float16Array) return "float16";
  if (data instanceof Float64Array) return "float64";
  if (data instanceof BigInt64Array) return "int64";
  if (data instanceof Int32Array) return "int32";
  if (data instanceof Uint8Array) return dtype === "bool" ? "bool" : "uint8";
  if (data instanceof Int8Array) return "int8";
  if (data instanceof Int16Array) return "int16";
  if (data instanceof Uint16Array) return dtype === "float16" ? "float16" : "uint16";
  return data?.constructor?.name ?? typeof data;
}

async function main() {
  const adapter = await navigator.gpu?.requestAdapter();
  if (!adapter) {
    await post("/fatal", { error: `Chromium has no WebGPU adapter (navigator.gpu ${navigator.gpu ? "returned none" : "is missing"})` });
    return;
  }
  const info = adapter.info ?? {};
  await post("/adapter", {
    info: { vendor: info.vendor, architecture: info.architecture, description: info.description },
    subgroups: adapter.features.has("subgroups") && Boolean(navigator.gpu.wgslLanguageFeatures?.has("subgroup_id")),
    subgroup_sizes: [info.subgroupMinSize, info.subgroupMaxSize],
  });
  // The rules both runtimes must apply alike, for the server to set beside the Rust crate's.
  const ranges = Array.from({ length: 301 }, (_, n) => submitRanges(n));
  await post("/result", { id: "rules__submit_ranges", ranges });
  const cases = await (await fetch("/cases.json")).json();
  for (const c of cases) {
    log(`${c.id}: loading`);
    const r = { id: c.id };
    if (c.malformed) {
      // A malformed artifact must be refused with an Error; the server checks its wording.
      try {
        (await loadSession(`/malformed/${c.malformed}/`)).destroy();
        r.error = "loaded without an error";
      } catch (e) {
        r.refused = String(e?.message ?? e);
      }
      log(`${c.id}: ${r.refused ?? r.error}`);
      await post("/result", r);
      continue;
    }
    if (c.generate) {
      // Decoder artifacts: greedy and sampled generations; the server compares the tokens.
      try {
        const session = await loadSession(`/cases/${c.dir ?? c.id}/`, { subgroups: c.subgroups ?? true });
        r.subgroups = session.subgroups;
        r.generations = [];
        for (const g of c.generate) {
          const seen = [];
          const opts = { maxNewTokens: g.max_new_tokens, stepsPerSubmit: g.steps_per_submit, onToken: (t, i) => seen.push([t, i]) };
          if (g.eos !== null) opts.eos = g.eos;
          if (g.temperature != null) Object.assign(opts, { temperature: g.temperature, topK: g.top_k, seed: g.seed });
          const out = await session.generate(g.prompt, opts);
          r.generations.push({ tokens: out.tokens, seen, decode_steps: out.decodeSteps });
        }
        r.too_long = await session.generate(c.generate[0].prompt, { maxNewTokens: 1000 }).then(() => "accepted", (e) => e.message);
        session.destroy();
      } catch (e) {
        r.error = String(e?.message ?? e);
      }
      log(`${c.id}: ${r.error ?? "generated"}`);
      await post("/result", r);
      continue;
    }
    try {
      const t0 = performance.now();
      const session = await loadSession(`/cases/${c.dir}/`);
      r.load_ms = performance.now() - t0;
      r.slowest_pipeline_ms = Math.max(0, ...session.loadStats.pipelines.map((p) => p.ms));
      const inputs = {};
      for (const inp of c.inputs) {
        const bytes = await (await fetch(`/cases/${c.dir}/${inp.file}`)).arrayBuffer();
        inputs[inp.name] = { data: new INPUT_TYPES[inp.dtype](bytes), shape: inp.shape };
      }
      const t1 = performance.now();
      const out = await session.run(inputs);
      r.run_ms = performance.now() - t1;
      r.outputs = session.outputs.map((o) => {
        const t = out[o.name];
        return { name: o.name, kind: kind(t.data, o.dtype), shape: t.shape, b64: base64(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength)) };
      });
      if (c.profile) {
        // Bad inputs must be refused as the Rust runtime refuses them (the server compares the messages).
        const first = session.inputs[0];
        const wrong = { ...inputs, [first.name]: { data: inputs[first.name].data, shape: [...first.shape, 1] } };
        r.bad_shape = await session.run(wrong).then(() => "accepted", (e) => e.message);
        const other = first.dtype === "float32" ? new Int32Array(inputs[first.name].data.length) : new Float32Array(inputs[first.name].data.length);
        r.bad_dtype = await session.run({ ...inputs, [first.name]: { data: other, shape: first.shape } }).then(() => "accepted", (e) => e.message);
        // The profiled run encodes differently (a pass per dispatch); its outputs must be the same.
        const p = await session.run(inputs, { profile: true });
        const same = session.outputs.every((o) => base64(new Uint8Array(p[o.name].data.buffer)) === base64(new Uint8Array(out[o.name].data.buffer)));
        const prof = session.lastProfile;
        r.profile = { timestamps: prof.timestamps, kernels: prof.kernels.length, dispatches: session.plan.dispatches.length, valid: prof.kernels.every((k) => k.ms >= 0 && Number.isFinite(k.ms)), same };
      }
      session.destroy();
    } catch (e) {
      r.error = String(e?.message ?? e);
    }
    log(`${c.id}: ${r.error ?? "ran"}`);
    await post("/result", r);
  }
  await post("/done", {});
}

main().catch((e) => post("/fatal", { error: `harness: ${e?.stack ?? e}` }));
