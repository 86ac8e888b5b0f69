// The example page: loads an artifact with wgslc.js, runs it, shows the outputs against onnxruntime's reference
// outputs, the adapter and the time per run, and renders the artifact's fusion report (report.json).
import { loadSession } from "../../runtime/web/wgslc.js";

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
const fmtShape = (s) => `[${s.join(", ")}]`;

// The bundled artifacts (compiled from testdata/models by `wgslc compile`) and their onnxruntime references.
const MODELS = ["transformer", "cnn", "mlp"].map((name) => ({
  name,
  artifact: `artifacts/${name}/`,
  inputs: [`../../testdata/models/${name}/input_0.npy`],
  outputs: [`../../testdata/models/${name}/output_0.npy`],
}));

let session = null;

// A minimal .npy reader (version 1-3, C order, little-endian float32/float64/int64/int32/bool).
async function readNpy(url) {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`cannot read '${url}': HTTP ${res.status}`);
  const buf = await res.arrayBuffer();
  const view = new DataView(buf);
  const major = view.getUint8(6);
  const headerLen = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const start = major === 1 ? 10 : 12;
  const header = new TextDecoder().decode(new Uint8Array(buf, start, headerLen));
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(",").map((s) => s.trim()).filter(Boolean).map(Number);
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${url}: Fortran order is not supported`);
  const body = buf.slice(start + headerLen);
  const types = { "<f4": Float32Array, "<f8": Float64Array, "<i8": BigInt64Array, "<i4": Int32Array, "|b1": Uint8Array };
  if (!types[descr]) throw new Error(`${url}: dtype ${descr} is not supported by this page`);
  return { data: new types[descr](body), shape };
}

function pseudoRandom(spec, seed) {
  const n = spec.shape.reduce((a, d) => a * d, 1);
  let x = (seed * 2654435761) >>> 0 || 1;
  const next = () => ((x ^= x << 13), (x ^= x >>> 17), (x ^= x << 5), (x >>> 0) / 4294967296);
  if (spec.dtype.startsWith("float")) return Float32Array.from({ length: n }, () => next() * 2 - 1);
  if (spec.dtype === "bool") return Uint8Array.from({ length: n }, (_, i) => i % 2);
  if (spec.dtype === "int64") return BigInt64Array.from({ length: n }, () => BigInt(Math.floor(next() * 16)));
  return Int32Array.from({ length: n }, () => Math.floor(next() * 16));
}

function maxAbsDiff(a, b) {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(Number(a[i]) - Number(b[i])));
  return m;
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function loadAndRun() {
  const picked = MODELS.find((m) => m.name === $("model").value);
  const url = $("url").value.trim() || picked.artifact;
  const model = $("url").value.trim() ? null : picked;
  const runs = Math.max(1, Math.min(1000, Number($("runs").value) || 20));
  $("run").innerHTML = "";
  $("status").className = "muted";
  $("status").textContent = `Loading ${url} …`;
  session?.destroy();
  session = null;
  try {
    session = await loadSession(url);
    const st = session.loadStats;
    const inputs = {};
    const refs = model ? await Promise.all(model.inputs.map(readNpy)) : [];
    session.inputs.forEach((spec, i) => {
      inputs[spec.name] = refs[i] ? { data: refs[i].data, shape: refs[i].shape } : pseudoRandom(spec, i + 1);
    });
    const expected = model ? await Promise.all(model.outputs.map(readNpy)) : [];
    const first = await session.run(inputs);
    const times = [];
    for (let i = 0; i < runs; i++) {
      const t = performance.now();
      await session.run(inputs);
      times.push(performance.now() - t);
    }
    const replay = await session.timeReplay(runs);
    const info = session.adapterInfo ?? {};
    const adapter = [info.vendor, info.architecture, info.description].filter(Boolean).join(" / ") || "(not exposed)";
    $("status").className = "ok";
    $("status").textContent = `Ran ${esc(url)}.`;
    let html = `<table>
      <tr><th>adapter</th><td class="mono">${esc(adapter)}</td></tr>
      <tr><th>load</th><td>${st.totalMs.toFixed(0)} ms (${session.plan.kernels.length} pipelines, slowest ready after ${Math.max(0, ...st.pipelines.map((p) => p.ms)).toFixed(0)} ms; weights ${st.weightsMs.toFixed(0)} ms)</td></tr>
      <tr><th>dispatches per run</th><td>${session.plan.dispatches.length} (one compute pass, one submit)</td></tr>
      <tr><th>time per run</th><td>${median(times).toFixed(2)} ms median of ${runs} (inputs written, outputs read back); replay alone ${replay.ms.toFixed(2)} ms (${replay.encodeMs.toFixed(3)} ms of it encoding on the CPU)</td></tr>
    </table><h3>Outputs</h3><table><tr><th>name</th><th>dtype</th><th>shape</th><th>first values</th><th>max |Δ| vs onnxruntime</th></tr>`;
    session.outputs.forEach((o, i) => {
      const got = first[o.name].data;
      const head = Array.from(got.slice(0, 6), (x) => (typeof x === "bigint" ? String(x) : Number(x).toPrecision(5))).join(", ");
      const diff = expected[i] ? maxAbsDiff(got, expected[i].data).toExponential(2) : "no reference";
      html += `<tr><td class="mono">${esc(o.name)}</td><td>${esc(o.dtype)}</td><td>${fmtShape(o.shape)}</td><td class="mono">${esc(head)}${got.length > 6 ? ", …" : ""}</td><td class="n">${diff}</td></tr>`;
    });
    $("run").innerHTML = `${html}</table>`;
    await showReport(url);
  } catch (e) {
    $("status").className = "bad";
    $("status").textContent = String(e.message ?? e);
  }
}

async function showReport(url) {
  const res = await fetch(new URL("report.json", new URL(url.endsWith("/") ? url : `${url}/`, location.href)));
  if (!res.ok) {
    $("report").innerHTML = `<p class="muted">This artifact has no report.json.</p>`;
    return;
  }
  $("report").innerHTML = renderReport(await res.json());
}

function renderReport(r) {
  const kb = (b) => (b / 1024).toFixed(1);
  const maxFloor = Math.max(...r.kernels.map((k) => k.floor_us), 1e-9);
  let html = `<table>
    <tr><th>source nodes</th><td class="n">${r.source_nodes}</td><th>dispatches</th><td class="n">${r.dispatches} (${(r.dispatches / Math.max(r.source_nodes, 1)).toFixed(2)} per node)</td></tr>
    <tr><th>bytes moved</th><td class="n">${kb(r.bytes_moved)} KiB</td><th>unfused</th><td class="n">${kb(r.unfused_bytes_moved)} KiB</td></tr>
    <tr><th>FLOPs</th><td class="n">${r.flops.toLocaleString()}</td><th>bandwidth floor</th><td class="n">${r.floor_us.toFixed(2)} µs at ${r.bandwidth_gbps} GB/s</td></tr>
  </table><h3>Kernels</h3><table><tr><th>#</th><th>kernel</th><th>nodes</th><th class="n">read KiB</th><th class="n">written KiB</th><th class="n">FLOPs</th><th>floor</th></tr>`;
  r.kernels.forEach((k, i) => {
    const nodes = k.nodes.map((n) => `${esc(n.op)}`).join(" → ");
    const w = Math.max(1, Math.round((120 * k.floor_us) / maxFloor));
    html += `<tr><td class="n">${i}</td><td class="mono">${esc(k.name)}</td><td>${nodes}</td><td class="n">${kb(k.bytes_read)}</td><td class="n">${kb(k.bytes_written)}</td><td class="n">${k.flops.toLocaleString()}</td><td class="nowrap"><span class="bar" style="width:${w}px"></span> ${k.floor_us.toFixed(3)} µs</td></tr>`;
  });
  html += `</table><h3>Why each kernel boundary remains</h3><table><tr><th>producer</th><th>consumer</th><th>value</th><th class="n">KiB</th><th>reason</th></tr>`;
  for (const b of r.boundaries) {
    html += `<tr><td class="mono">${esc(b.producer.name)}</td><td class="mono">${esc(b.consumer.name)}</td><td class="mono">${esc(b.value)}</td><td class="n">${kb(b.bytes)}</td><td>${esc(b.reason)}</td></tr>`;
  }
  const m = r.memory;
  html += `</table><h3>Memory plan</h3><table>
    <tr><th>planned activations</th><td class="n">${kb(m.planned_bytes)} KiB</td><th>liveness lower bound</th><td class="n">${kb(m.lower_bound_bytes)} KiB</td></tr>
    <tr><th>a buffer per value</th><td class="n">${kb(m.naive_bytes)} KiB</td><th>weights</th><td class="n">${kb(m.weights_bytes)} KiB</td></tr>
  </table>`;
  if (r.folded.length) html += `<p>Folded into their readers' index math (no kernel): ${r.folded.map((f) => `<code>${esc(f.name)}</code>`).join(", ")}</p>`;
  return html;
}

for (const m of MODELS) $("model").append(new Option(m.name, m.name));
$("go").addEventListener("click", loadAndRun);
for (const [tab, view] of [["tab-run", "view-run"], ["tab-report", "view-report"]]) {
  $(tab).addEventListener("click", () => {
    for (const [t, v] of [["tab-run", "view-run"], ["tab-report", "view-report"]]) {
      $(t).setAttribute("aria-selected", String(t === tab));
      $(v).hidden = v !== view;
    }
  });
}
if (new URLSearchParams(location.search).has("autorun")) loadAndRun();
