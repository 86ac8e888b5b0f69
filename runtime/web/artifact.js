// artifact.js: the wgslc artifact's contract for wgslc.js, as the Rust crate wgslc-artifact (runtime/artifact) is the
// wgpu runtime's: plan.json parsed and checked (field lists and enums generated from docs/plan.schema.json), what
// the decoder program's values are at the loop's variables (program.rs), and host tensors in and out of the plan's
// storage words, ranged dims included (host.rs), the weights file's header against the plan. No device, no I/O,
// no dependencies; wgslc.js imports it.

export const FORMAT = "wgslc-plan";
export const VERSION = 2;

// ---- generated from docs/plan.schema.json by cli/tests/schemas.rs (WGSLC_UPDATE_SCHEMAS=1 rewrites it) ----
// Each object's fields and each enum's values, as the Rust runtime's serde types accept them.
const FIELDS = {
  Advance: ["greedy", "sample"],
  Affine: ["c", "len", "pos", "real"],
  Binding: ["access", "binding", "buffer", "offset", "size"],
  Bucket: ["dispatches", "max", "min"],
  Buffer: ["kind", "name", "size"],
  Constant: ["like", "values"],
  Copy: ["bytes", "from", "to"],
  Decoder: ["capacity", "program", "rows", "state", "steps", "tokens"],
  DimRange: ["max", "min", "name"],
  GridScale: ["axis", "dim"],
  Iota: ["last", "len", "start"],
  Kernel: ["bindings", "entry_point", "name", "scale", "subgroups", "wgsl", "workgroups"],
  Mask: ["len", "ranges"],
  Place: ["buffer", "offset"],
  Plan: ["buffers", "decoder", "dispatches", "format", "inputs", "kernels", "outputs", "ranges", "version", "weights"],
  Present: ["first_row", "output"],
  Program: ["chunk", "constants", "decode_start", "last", "start", "step"],
  RangedAxis: ["axis", "dim", "factor"],
  Ranges: ["buckets", "buffer", "dims"],
  StateSpec: ["axis", "input"],
  Step: ["advance", "attention_mask", "cache_position", "cache_row", "dispatches", "input_ids", "last_index",
    "logits", "name", "next_token", "position_ids", "present", "sample", "tokens"],
  StepSample: ["dispatches", "params", "temperature", "token"],
  TensorSpec: ["buffer", "dtype", "name", "ranged", "shape", "storage"],
  WeightSpec: ["buffer", "name", "offset", "shape", "storage"],
  Write: ["input", "values"],
};
const ENUMS = {
  Access: ["read", "read_write"],
  Buf: ["input", "output", "token", "constant"],
  BufferKind: ["input", "output", "weight", "intermediate"],
  Dtype: ["float32", "float16", "bfloat16", "float64", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2",
    "float8e5m2fnuz", "float4e2m1", "int64", "int32", "int16", "int8", "uint8", "uint16", "uint32", "uint64", "int4",
    "uint4", "int2", "uint2", "bool"],
  Instr: ["clear", "write", "run", "advance", "copy"],
  StorageType: ["f32", "i32", "u32"],
  Values: ["iota", "prompt", "mask"],
};
// ---- end of generated code ----

// ---- plan.json --------------------------------------------------------------------------------------------

/** Parses and checks plan.json's text, as wgslc_artifact::Plan::parse does (format and version first). */
export function parsePlan(text) {
  let plan;
  try {
    plan = JSON.parse(text);
  } catch (e) {
    throw new Error(`plan.json is not a valid plan: ${e.message}`);
  }
  const bad = (m) => {
    throw new Error(`plan.json: ${m}`);
  };
  if (plan === null || typeof plan !== "object") throw new Error("plan.json is not a valid plan: not an object");
  if (typeof plan.format === "string" && plan.format !== FORMAT) bad(`format is '${plan.format}', expected '${FORMAT}'`);
  if (Number.isInteger(plan.version) && plan.version !== VERSION) {
    bad(`schema version ${plan.version} is not supported (this runtime reads ${VERSION}); recompile the model`);
  }
  for (const f of ["inputs", "outputs", "buffers", "weights", "kernels", "dispatches"]) {
    if (!Array.isArray(plan[f])) throw new Error(`plan.json is not a valid plan: missing field \`${f}\``);
  }
  // Unknown fields are refused, as the Rust runtime's serde types refuse them: a newer compiler's plan must not be
  // half-understood.
  const known = (what, obj, fields) => {
    const extra = Object.keys(obj ?? {}).find((f) => !fields.includes(f));
    if (extra !== undefined) throw new Error(`plan.json is not a valid plan: unknown field \`${extra}\` in ${what}`);
  };
  // An enum's value outside the schema's is refused too, as serde refuses it.
  const oneOf = (what, value, e) => {
    if (!ENUMS[e].includes(value)) throw new Error(`plan.json is not a valid plan: unknown variant \`${value}\` in ${what}`);
  };
  known("the plan", plan, FIELDS.Plan);
  for (const t of [...plan.inputs, ...plan.outputs]) {
    known(`'${t.name}'`, t, FIELDS.TensorSpec);
    oneOf(`'${t.name}'`, t.dtype, "Dtype");
    oneOf(`'${t.name}'`, t.storage, "StorageType");
    for (const a of t.ranged ?? []) known(`'${t.name}'`, a, FIELDS.RangedAxis);
  }
  if (plan.ranges != null) {
    known("ranges", plan.ranges, FIELDS.Ranges);
    for (const d of plan.ranges.dims ?? []) known("ranges", d, FIELDS.DimRange);
    for (const b of plan.ranges.buckets ?? []) known("ranges", b, FIELDS.Bucket);
  }
  for (const b of plan.buffers) {
    known(`buffer '${b.name}'`, b, FIELDS.Buffer);
    oneOf(`buffer '${b.name}'`, b.kind, "BufferKind");
  }
  for (const w of plan.weights) {
    known(`weight '${w.name}'`, w, FIELDS.WeightSpec);
    oneOf(`weight '${w.name}'`, w.storage, "StorageType");
  }
  for (const k of plan.kernels) {
    known(`kernel '${k.name}'`, k, FIELDS.Kernel);
    if (k.scale != null) known(`kernel '${k.name}'`, k.scale, FIELDS.GridScale);
    for (const b of k.bindings ?? []) {
      known(`kernel '${k.name}'`, b, FIELDS.Binding);
      oneOf(`kernel '${k.name}'`, b.access, "Access");
    }
  }
  if (plan.format !== FORMAT) bad(`format is '${plan.format}', expected '${FORMAT}'`);
  if (plan.version !== VERSION) bad(`schema version ${plan.version} is not supported (this runtime reads ${VERSION})`);
  const size = (shape) => shape.reduce((a, d) => a * d, 4);
  for (const b of plan.buffers) {
    if (!(b.size > 0) || b.size % 4 !== 0) bad(`buffer '${b.name}' has size ${b.size}, not a positive multiple of 4`);
  }
  for (const [what, specs, kind] of [["input", plan.inputs, "input"], ["output", plan.outputs, "output"]]) {
    for (const t of specs) {
      const b = plan.buffers[t.buffer];
      if (!b) bad(`${what} '${t.name}' names buffer ${t.buffer} of ${plan.buffers.length}`);
      if (b.kind !== kind || size(t.shape) > b.size) bad(`${what} '${t.name}' does not fit its buffer '${b.name}'`);
    }
  }
  for (const w of plan.weights) {
    const b = plan.buffers[w.buffer];
    const fits = b && b.kind === "weight" && w.offset + size(w.shape) <= b.size;
    if (!fits || w.offset % 256 !== 0) bad(`weight '${w.name}' is outside its weight buffer or misaligned`);
  }
  // A decoder step that writes the cache in place writes the cache inputs' buffers, and only those.
  const dec = plan.decoder;
  const caches = dec && Array.isArray(dec.steps) && dec.steps.some((st) => st.cache_row != null) && Array.isArray(dec.state)
    ? dec.state.map((s) => plan.inputs[s.input]?.buffer)
    : [];
  // A step's advance kernels write its loop inputs and the token history, and only those.
  const advancers = [];
  const loopInputs = [];
  for (const st of dec && Array.isArray(dec.steps) ? dec.steps : []) {
    if (!st.advance) continue;
    advancers.push(st.advance.greedy, st.advance.sample);
    for (const i of [st.input_ids, st.cache_row, st.attention_mask, st.position_ids, dec.tokens]) {
      if (i != null && plan.inputs[i]) loopInputs.push(plan.inputs[i].buffer);
    }
  }
  for (const [ki, k] of plan.kernels.entries()) {
    for (const p of k.subgroups == null ? [k.wgsl] : [k.wgsl, k.subgroups]) {
      if (typeof p !== "string" || p.startsWith("/") || p.split("/").some((c) => c === ".." || c === "." || c === "")) {
        bad(`kernel '${k.name}' has a path outside the artifact: '${p}'`);
      }
    }
    if (k.workgroups.some((w) => w > 65535)) bad(`kernel '${k.name}' dispatches ${fmt(k.workgroups)} workgroups`);
    for (const [i, b] of k.bindings.entries()) {
      const buf = plan.buffers[b.buffer];
      if (!buf) bad(`kernel '${k.name}' binds buffer ${b.buffer} of ${plan.buffers.length}`);
      if (b.binding !== i) bad(`kernel '${k.name}': bindings must be numbered 0..n in order`);
      if (b.offset % 256 !== 0 || !(b.size > 0) || b.size % 4 !== 0 || b.offset + b.size > buf.size) {
        bad(`kernel '${k.name}' binding ${b.binding} (${b.offset}+${b.size}) is outside buffer '${buf.name}' (${buf.size} bytes) or misaligned`);
      }
      const cache = buf.kind === "input" && caches.includes(b.buffer);
      const advanced = advancers.includes(ki) && loopInputs.includes(b.buffer);
      if (b.access === "read_write" && (buf.kind === "weight" || buf.kind === "input") && !cache && !advanced) {
        bad(`kernel '${k.name}' writes ${buf.kind === "weight" ? "Weight" : "Input"} buffer '${buf.name}'`);
      }
    }
    for (const [i, w] of k.bindings.entries()) {
      if (w.access !== "read_write") continue;
      if (k.bindings.some((r) => r.access === "read" && r.buffer === w.buffer)) {
        bad(`kernel '${k.name}' binds buffer ${w.buffer} both read-only and read-write`);
      }
      const overlaps = (r) => r.offset < w.offset + w.size && w.offset < r.offset + r.size;
      if (k.bindings.slice(i + 1).some((r) => r.buffer === w.buffer && r.access === "read_write" && overlaps(r))) {
        bad(`kernel '${k.name}' binds overlapping writable ranges of buffer ${w.buffer}`);
      }
    }
  }
  const d = plan.dispatches.find((d) => !(d >= 0 && d < plan.kernels.length));
  if (d !== undefined) bad(`dispatch names kernel ${d} of ${plan.kernels.length}`);
  if (plan.decoder !== undefined && plan.decoder !== null) checkDecoder(plan, known, oneOf);
  checkRanges(plan);
  return plan;
}

// The ranges section (`--dim NAME=MIN..MAX`), checked as wgslc_artifact::Plan::check_ranges does.
function checkRanges(plan) {
  const bad = (m) => {
    throw new Error(`plan.json: ranges: ${m}`);
  };
  const r = plan.ranges;
  const dims = r ? r.dims : [];
  if (r) {
    const b = plan.buffers[r.buffer];
    if (!Array.isArray(r.dims) || !(b && b.kind === "input" && b.size >= 4 * r.dims.length)) {
      bad(`buffer ${r.buffer} cannot hold the dims' values`);
    }
    for (const [i, d] of r.dims.entries()) {
      if (!(Number.isInteger(d.min) && d.min >= 1 && d.min <= d.max)) bad(`dim '${d.name}' has range ${d.min}..${d.max}`);
      if (!plan.inputs.some((t) => (t.ranged ?? []).some((a) => a.dim === i))) bad(`dim '${d.name}' is in no input's shape`);
    }
  }
  for (const k of plan.kernels) {
    if (k.scale != null && !(k.scale.axis >= 0 && k.scale.axis <= 2 && dims[k.scale.dim])) {
      bad(`kernel '${k.name}' scales its workgroups by a dim or axis the plan lacks`);
    }
  }
  for (const t of [...plan.inputs, ...plan.outputs]) {
    for (const a of t.ranged ?? []) {
      const d = dims[a.dim];
      if (!(d && a.factor > 0 && t.shape[a.axis] === a.factor * d.max)) bad(`'${t.name}' axis ${a.axis} does not follow a dim of the plan`);
    }
  }
  if (r && (r.buckets ?? []).length > 0) checkBuckets(plan, r);
}

// Buckets, as wgslc_artifact::Plan::check_buckets: one dim cut into consecutive ranges from its min to its max,
// each bucket's dispatches kernels of its own, the last bucket's the plan's dispatches.
function checkBuckets(plan, r) {
  const bad = (m) => {
    throw new Error(`plan.json: ranges: buckets: ${m}`);
  };
  if (r.dims.length !== 1) bad(`${r.dims.length} dims; buckets cut exactly one`);
  const d = r.dims[0];
  let next = d.min;
  const owner = new Map();
  for (const [i, b] of r.buckets.entries()) {
    if (b.min !== next || !(b.max >= b.min) || b.max > d.max) {
      bad(`bucket ${i} holds ${b.min}..${b.max}, expected a range from ${next} to at most ${d.max}`);
    }
    next = b.max + 1;
    for (const k of b.dispatches) {
      if (!(Number.isInteger(k) && k >= 0 && k < plan.kernels.length)) bad(`bucket ${i} dispatches kernel ${k} of ${plan.kernels.length}`);
      if (owner.has(k) && owner.get(k) !== i) bad(`kernel ${k} is dispatched by buckets ${owner.get(k)} and ${i}`);
      owner.set(k, i);
    }
  }
  if (next !== d.max + 1) bad(`they end at ${next - 1}, not at '${d.name}''s max ${d.max}`);
  if (fmt(r.buckets[r.buckets.length - 1].dispatches) !== fmt(plan.dispatches)) bad("the plan's dispatches are not the last bucket's");
}

// The decoder section (`wgslc compile --kv-cache`), checked as wgslc_artifact::Plan::check_decoder does.
function checkDecoder(plan, known, oneOf) {
  const d = plan.decoder;
  const bad = (m) => {
    throw new Error(`plan.json: decoder: ${m}`);
  };
  known("the decoder section", d, FIELDS.Decoder);
  if (!Array.isArray(d.state) || !Array.isArray(d.steps)) throw new Error("plan.json is not a valid plan: decoder without state or steps");
  if (d.capacity !== d.rows + 1 || !(d.rows > 0)) bad(`capacity ${d.capacity} with ${d.rows} cache rows`);
  const len = (t) => t.shape.reduce((a, x) => a * x, 1);
  const cacheRows = d.steps.some((st) => st.cache_row != null) ? d.capacity : d.rows;
  for (const s of d.state) {
    known("a decoder state entry", s, FIELDS.StateSpec);
    const t = plan.inputs[s.input];
    if (!(t && s.axis < t.shape.length && t.shape[s.axis] === cacheRows && t.storage === "f32")) {
      bad(`state input ${s.input} is not a float cache of ${cacheRows} rows`);
    }
  }
  if (d.tokens != null) {
    const t = plan.inputs[d.tokens];
    if (!(t && len(t) === d.capacity && t.storage !== "f32")) bad(`the token history (input ${d.tokens}) is not ${d.capacity} integers`);
  }
  for (const st of d.steps) {
    known(`decoder step '${st.name}'`, st, FIELDS.Step);
    for (const p of st.present ?? []) known(`a present output of step '${st.name}'`, p, FIELDS.Present);
    const n = st.tokens;
    if (!(n > 0 && n <= d.rows) || !st.dispatches.every((k) => k >= 0 && k < plan.kernels.length)) {
      bad(`step '${st.name}' has ${n} tokens or a dispatch out of range`);
    }
    const next = plan.outputs[st.next_token];
    if (!(next && len(next) === 1 && next.storage !== "f32") || !plan.outputs[st.logits]) {
      bad(`step '${st.name}': next_token or logits is not a valid output`);
    }
    if (st.sample !== undefined && st.sample !== null) {
      const sm = st.sample;
      known(`the sampling of step '${st.name}'`, sm, FIELDS.StepSample);
      const tok = plan.outputs[sm.token];
      const t = plan.inputs[sm.temperature];
      const p = plan.inputs[sm.params];
      const fits = tok && len(tok) === 1 && tok.storage !== "f32" && t && len(t) === 1 && t.storage === "f32" &&
        p && len(p) === 2 && p.storage !== "f32" && Array.isArray(sm.dispatches) &&
        sm.dispatches.every((k) => k >= 0 && k < plan.kernels.length);
      if (!fits) bad(`step '${st.name}': the sampling token, inputs or dispatches are not valid`);
    }
    if (st.advance) {
      known(`the advance of step '${st.name}'`, st.advance, FIELDS.Advance);
      const own = (k) => Number.isInteger(k) && k >= 0 && k < plan.kernels.length && !plan.dispatches.includes(k);
      if (!(n === 1 && st.cache_row != null && d.tokens != null && own(st.advance.greedy) && own(st.advance.sample))) {
        bad(`step '${st.name}' advances on the GPU: it needs one token, a cache row, the token history and advance kernels of its own`);
      }
    }
  }
  if (d.program != null) checkProgram(plan, known, oneOf);
}

// The decoder's program, checked as wgslc_artifact::Plan::check_program does.
function checkProgram(plan, known, oneOf) {
  const d = plan.decoder;
  const p = d.program;
  const bad = (m) => {
    throw new Error(`plan.json: decoder program: ${m}`);
  };
  // A variant with data is an object of one key, the variant's name.
  const variant = (what, x, e) => {
    const keys = Object.keys(x ?? {});
    if (keys.length !== 1) throw new Error(`plan.json is not a valid plan: ${what} is not one variant of ${e}`);
    oneOf(what, keys[0], e);
    return keys[0];
  };
  const affines = (what, ...xs) => xs.forEach((a) => known(what, a, FIELDS.Affine));
  const values = (what, v) => {
    const k = variant(what, v, "Values");
    const x = v[k];
    known(what, x, k === "mask" ? FIELDS.Mask : FIELDS.Iota);
    if (k === "mask") x.ranges.forEach((r) => affines(what, ...r));
    else affines(what, x.len, x.start, ...(x.last == null ? [] : [x.last]));
  };
  const writable = (i) => plan.inputs[i] != null && !(plan.inputs[i].storage === "f32" && plan.inputs[i].dtype === "int64");
  const place = (what, pl) => {
    known(what, pl, FIELDS.Place);
    affines(what, pl.offset);
    const k = variant(what, pl.buffer, "Buf");
    const i = pl.buffer[k];
    return (k === "input" ? plan.inputs : k === "output" ? plan.outputs : k === "token" ? d.steps : p.constants)[i] != null;
  };
  known("the decoder program", p, FIELDS.Program);
  for (const [i, c] of p.constants.entries()) {
    known("a program constant", c, FIELDS.Constant);
    values("a program constant", c.values);
    if (!writable(c.like)) bad(`constant ${i} is written like input ${c.like}, which is not an input it can be`);
  }
  for (const name of ["start", "chunk", "last", "decode_start", "step"]) {
    let commands = false;
    for (const [n, ins] of p[name].entries()) {
      const what = `phase '${name}'`;
      const k = variant(what, ins, "Instr");
      const x = ins[k];
      if (k === "write" && (commands || name === "last" || name === "step")) {
        bad(`phase '${name}' writes after its commands or where it may not write`);
      }
      commands ||= k !== "write";
      let ok;
      if (k === "clear") ok = name !== "step" && plan.inputs[x] != null;
      else if (k === "run") ok = d.steps[x] != null;
      else if (k === "advance") ok = d.steps[x]?.advance != null;
      else if (k === "write") {
        known(what, x, FIELDS.Write);
        values(what, x.values);
        if (!writable(x.input)) bad(`phase '${name}': instruction ${n} writes input ${x.input}, which is missing or an int64 stored as floats`);
        ok = true;
      } else {
        known(what, x, FIELDS.Copy);
        affines(what, x.bytes);
        ok = place(what, x.from) && place(what, x.to);
      }
      if (!ok) bad(`phase '${name}': instruction ${n} names something the plan does not have`);
    }
  }
}

// ---- tensors ------------------------------------------------------------------------------------------------

// A spec's shape with its ranged axes named: [1, sequence_length, 64].
function shapeText(spec, plan) {
  return fmt(spec.shape.map((e, i) => {
    const a = (spec.ranged ?? []).find((x) => x.axis === i);
    if (!a) return e;
    const name = plan.ranges.dims[a.dim].name;
    return a.factor === 1 ? name : `${a.factor}*${name}`;
  }));
}

// Each ranged dim's value, from the inputs' shapes (given as { data, shape }, or derived from the length where an
// input has one ranged axis), as Session::run finds them in the Rust runtime.
export function dimValues(plan, inputs) {
  const dims = plan.ranges.dims;
  const values = dims.map(() => null);
  for (const spec of plan.inputs) {
    const ranged = spec.ranged ?? [];
    if (ranged.length === 0) continue;
    const err = (reason) => new Error(`input '${spec.name}': ${reason}`);
    const v = inputs[spec.name];
    let shape = v && !ArrayBuffer.isView(v) && !Array.isArray(v) && v.shape ? [...v.shape] : null;
    if (!shape) {
      const data = v && !ArrayBuffer.isView(v) && !Array.isArray(v) && "data" in v ? v.data : v;
      if (ranged.length !== 1 || data == null || data.length === undefined) {
        throw err(`pass { data, shape }: its shape ${shapeText(spec, plan)} has ranged axes`);
      }
      const a = ranged[0];
      const rest = spec.shape.reduce((p, e, i) => (i === a.axis ? p : p * e), 1);
      shape = spec.shape.map((e, i) => (i === a.axis ? (rest > 0 ? data.length / rest : 0) : e));
    }
    if (shape.length !== spec.shape.length) {
      throw err(`expected ${spec.shape.length} dims (shape ${shapeText(spec, plan)}), got shape ${fmt(shape)}`);
    }
    for (const a of ranged) {
      const d = dims[a.dim];
      const e = shape[a.axis];
      const n = e / a.factor;
      if (!Number.isInteger(n) || n < d.min || n > d.max) {
        const scaled = a.factor === 1 ? "" : ` times ${a.factor}`;
        throw err(`axis ${a.axis} is ${e}: it must be ${d.name}${scaled}, in ${d.min}..${d.max} (shape ${shapeText(spec, plan)}, got ${fmt(shape)})`);
      }
      if (values[a.dim] && values[a.dim][0] !== n) {
        throw err(`axis ${a.axis} gives ${d.name} = ${n}, but input '${values[a.dim][1]}' gives ${values[a.dim][0]}`);
      }
      values[a.dim] ??= [n, spec.name];
    }
  }
  return values.map((v, i) => {
    if (!v) throw new Error(`artifact: no input gives dim '${dims[i].name}'`);
    return v[0];
  });
}

// ---- the decoder's program (wgslc_artifact::Program) --------------------------------------------------------

// An affine value of the loop's variables: c + pos·pos + real·real + len·len.
export function affine(a, v) {
  return (a.c ?? 0) + (a.pos ?? 0) * (v.pos ?? 0) + (a.real ?? 0) * (v.real ?? 0) + (a.len ?? 0) * (v.len ?? 0);
}

// A write's values at the variables `v` (wgslc_artifact::Values::at): an iota, the prompt's tokens at one, or a mask.
export function valuesAt(values, v, prompt) {
  const [kind, x] = Object.entries(values)[0];
  const n = Math.max(0, affine(x.len, v));
  if (kind === "mask") {
    return Array.from({ length: n }, (_, i) => (x.ranges.some(([f, t]) => affine(f, v) <= i && i < affine(t, v)) ? 1 : 0));
  }
  const start = affine(x.start, v);
  const last = x.last == null ? Infinity : affine(x.last, v);
  const index = Array.from({ length: n }, (_, i) => start + Math.min(i, last));
  if (kind === "iota") return index;
  return index.map((i) => {
    if (!(i >= 0 && i < prompt.length)) {
      throw new Error(`artifact: decoder program: the program reads token ${i} of a prompt of ${prompt.length} tokens`);
    }
    return prompt[i];
  });
}

// Values as an input's storage words.
export function wordsOf(spec, values) {
  const T = spec.storage === "f32" ? Float32Array : spec.storage === "u32" ? Uint32Array : Int32Array;
  return T.from(values);
}

// Where a run at the dims' `values` goes, as Ranges::layout in Rust: the dispatches it replays (the plan's, or
// those of the bucket that holds the values) and the values its tensors are laid out at and its scaled kernels
// count workgroups against (the bucket's max, else each dim's).
export function layoutOf(plan, values) {
  const r = plan.ranges;
  const b = (r.buckets ?? []).find((b) => values[0] >= b.min && values[0] <= b.max);
  return b ? { dispatches: b.dispatches, at: [b.max] } : { dispatches: plan.dispatches, at: r.dims.map((d) => d.max) };
}

// A kernel's workgroups at the run's `values` laid out at `at` (RunLayout::workgroups): along the axis its scale
// names, ceil(W · n / at), at least 1 and at most W.
export function workgroupsAt(k, values, at) {
  const w = [...k.workgroups];
  if (k.scale) w[k.scale.axis] = Math.min(w[k.scale.axis], Math.max(1, Math.ceil((w[k.scale.axis] * values[k.scale.dim]) / at[k.scale.dim])));
  return w;
}

// A tensor spec at the run's dim values (its ranged axes at factor · n).
export function atValues(spec, values) {
  const shape = [...spec.shape];
  for (const a of spec.ranged ?? []) shape[a.axis] = a.factor * values[a.dim];
  return { ...spec, shape };
}

// Moves a `small`-shaped tensor of 4-byte words between its dense layout and its place in a `big` layout (each axis
// at least as long): into `big` (the rest zero) when `pad`, out of it otherwise.
export function relayout(src, small, big, pad) {
  if (small.length === 0 || fmt(small) === fmt(big)) return src;
  const rank = small.length;
  const row = small[rank - 1];
  const strides = big.map(() => 1);
  for (let i = rank - 2; i >= 0; i--) strides[i] = strides[i + 1] * big[i + 1];
  const rows = small.slice(0, -1).reduce((a, d) => a * d, 1);
  const out = new src.constructor(pad ? big.reduce((a, d) => a * d, 1) : rows * row);
  const idx = new Array(rank - 1).fill(0);
  for (let r = 0; r < rows; r++) {
    const at = idx.reduce((a, x, i) => a + x * strides[i], 0);
    if (pad) out.set(src.subarray(r * row, (r + 1) * row), at);
    else out.set(src.subarray(at, at + row), r * row);
    for (let a = rank - 2; a >= 0; a--) {
      if (++idx[a] < small[a]) break;
      idx[a] = 0;
    }
  }
  return out;
}

export function fmt(xs) {
  return `[${xs.join(", ")}]`;
}

// Float16Array where the browser has it (Chrome 135, Firefox 129, Safari 18.2); elsewhere float16 data travels as
// Uint16Array of its bits.
const F16 = globalThis.Float16Array;

const TYPED_NAMES = [
  [Float32Array, "float32"], [Float64Array, "float64"], [Int8Array, "int8"], [Uint8Array, "uint8"],
  [Uint8ClampedArray, "uint8"], [Int16Array, "int16"], [Uint16Array, "uint16"], [Int32Array, "int32"],
  [Uint32Array, "uint32"], [BigInt64Array, "int64"], [BigUint64Array, "uint64"],
  ...(F16 ? [[F16, "float16"]] : []),
];

// The value of float16 bits h, and the float16 bits of x rounded to nearest even (for Uint16Array data).
function f16Value(h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

function f16Bits(x) {
  const u = new Uint32Array(new Float32Array([x]).buffer)[0];
  const sign = (u >>> 16) & 0x8000;
  const e = (u >>> 23) & 0xff;
  const m = u & 0x7fffff;
  if (e === 0xff) return sign | 0x7c00 | (m ? 0x200 : 0);
  // Keep `shift` low bits of the 24-bit significand off: 13 for a normal float16, more below its range.
  const exp = e - 112;
  const shift = exp > 0 ? 13 : 14 - exp;
  if (shift > 24) return sign;
  const full = m | 0x800000;
  let h = (exp > 0 ? (exp << 10) | (m >>> 13) : full >>> shift);
  const rem = full & ((1 << shift) - 1);
  const half = 1 << (shift - 1);
  if (rem > half || (rem === half && (h & 1))) h += 1;
  return h >= 0x7c00 ? sign | 0x7c00 : sign | h;
}

function kindOf(data) {
  if (Array.isArray(data)) return data.every((x) => typeof x === "boolean") ? "bool" : "array";
  for (const [T, name] of TYPED_NAMES) if (data instanceof T) return name;
  return typeof data;
}

// One input's storage bytes: shape (when given) and element count checked, integers range-checked into i32.
export function inputBytes(spec, value) {
  const err = (reason) => new Error(`input '${spec.name}': ${reason}`);
  let data = value;
  if (value && !ArrayBuffer.isView(value) && !Array.isArray(value) && "data" in value) {
    data = value.data;
    if (value.shape && fmt(value.shape) !== fmt(spec.shape)) {
      throw err(`expected shape ${fmt(spec.shape)}, got ${fmt(value.shape)}`);
    }
  }
  const kind = kindOf(data);
  const n = spec.shape.reduce((a, d) => a * d, 1);
  if (data == null || (!ArrayBuffer.isView(data) && !Array.isArray(data))) {
    throw err(`expected a typed array of ${spec.dtype} data, got ${kind}`);
  }
  if (data.length !== n) throw err(`expected ${n} elements, got ${data.length}`);
  const mismatch = () => err(`expected ${spec.dtype} data, got ${kind}`);
  switch (spec.storage) {
    case "f32":
      if (kind === "float32") return data;
      if (kind === "float64" || kind === "array" || kind === "float16") return Float32Array.from(data, Number);
      // A float16 (bfloat16) input's bits, as where the browser has no Float16Array.
      if (kind === "uint16" && spec.dtype === "float16") return Float32Array.from(data, f16Value);
      if (kind === "uint16" && spec.dtype === "bfloat16") {
        return new Float32Array(Uint32Array.from(data, (h) => h << 16).buffer);
      }
      throw mismatch();
    case "i32": {
      if (kind === "int32") return data;
      if (kind === "float32" || kind === "float64" || kind === "bool") throw mismatch();
      const out = new Int32Array(n);
      for (let i = 0; i < n; i++) {
        const x = data[i];
        const v = typeof x === "bigint" ? x : Number(x);
        if (typeof v === "number" && !Number.isInteger(v)) throw err(`value ${x} is not an integer`);
        if (v < -2147483648 || v > 2147483647) {
          throw err(`value ${x} does not fit in i32 (int64 inputs are narrowed on the GPU)`);
        }
        out[i] = Number(v);
      }
      return out;
    }
    case "u32": {
      if (!(kind === "bool" || kind === "uint8" || kind === "array")) throw mismatch();
      const out = new Uint32Array(n);
      for (let i = 0; i < n; i++) out[i] = data[i] ? 1 : 0;
      return out;
    }
    default:
      throw err(`unknown storage type '${spec.storage}'`);
  }
}

// One output as the typed array of its declared dtype (int64 as BigInt64Array, bool as Uint8Array of 0/1).
export function outputData(spec, bytes) {
  const n = spec.shape.reduce((a, d) => a * d, 1);
  switch (spec.storage) {
    case "f32": {
      const f = new Float32Array(bytes, 0, n);
      if (spec.dtype === "float16") return F16 ? F16.from(f) : Uint16Array.from(f, f16Bits);
      return spec.dtype === "float64" ? Float64Array.from(f) : f.slice();
    }
    case "i32": {
      const v = new Int32Array(bytes, 0, n);
      const T = { int64: BigInt64Array, uint64: BigUint64Array, int8: Int8Array, uint8: Uint8Array, int16: Int16Array, uint16: Uint16Array, uint32: Uint32Array, int4: Int8Array, int2: Int8Array, uint4: Uint8Array, uint2: Uint8Array }[spec.dtype];
      if (T === BigInt64Array || T === BigUint64Array) return T.from(v, (x) => BigInt(x));
      return T ? T.from(v) : v.slice();
    }
    case "u32":
      return Uint8Array.from(new Uint32Array(bytes, 0, n), (x) => (x ? 1 : 0));
    default:
      throw new Error(`output '${spec.name}': unknown storage type '${spec.storage}'`);
  }
}

// ---- the device (wgslc_artifact's device.rs) ----------------------------------------------------------------

// What the plan needs of the device, by WebGPU limit name.
export function neededLimits(plan) {
  const max = (xs) => xs.reduce((a, x) => Math.max(a, x), 0);
  return {
    maxBufferSize: max(plan.buffers.map((b) => b.size)),
    maxStorageBufferBindingSize: max(plan.kernels.flatMap((k) => k.bindings.map((b) => b.size))),
    maxStorageBuffersPerShaderStage: max(plan.kernels.map((k) => k.bindings.length)),
    maxComputeWorkgroupsPerDimension: max(plan.kernels.flatMap((k) => k.workgroups)),
  };
}

export function checkLimits(plan, limits) {
  for (const b of plan.buffers) {
    if (b.size > limits.maxBufferSize) {
      throw new Error(`the device cannot run this artifact: buffer '${b.name}' is ${b.size} bytes, the device allows ${limits.maxBufferSize} (maxBufferSize)`);
    }
  }
  for (const k of plan.kernels) {
    if (k.bindings.length > limits.maxStorageBuffersPerShaderStage) {
      throw new Error(`the device cannot run this artifact: kernel '${k.name}' binds ${k.bindings.length} storage buffers (maxStorageBuffersPerShaderStage is ${limits.maxStorageBuffersPerShaderStage})`);
    }
    const b = k.bindings.find((b) => b.size > limits.maxStorageBufferBindingSize);
    if (b) {
      throw new Error(`the device cannot run this artifact: kernel '${k.name}' binds ${b.size} bytes at binding ${b.binding} (maxStorageBufferBindingSize is ${limits.maxStorageBufferBindingSize})`);
    }
    if (k.workgroups.some((w) => w > limits.maxComputeWorkgroupsPerDimension)) {
      throw new Error(`the device cannot run this artifact: kernel '${k.name}' dispatches ${fmt(k.workgroups)} workgroups (maxComputeWorkgroupsPerDimension is ${limits.maxComputeWorkgroupsPerDimension})`);
    }
  }
}

// The smallest and largest subgroups WebGPU allows (wgslc_artifact::SUBGROUP_SIZES).
export const SUBGROUP_SIZES = [4, 128];

/**
 * Whether a device may replay kernels' subgroup modules, as wgslc_artifact::subgroups_usable: the `subgroups`
 * feature, with subgroups of SUBGROUP_SIZES, powers of two. (wgslc.js also needs WGSL's `subgroup_id`.)
 */
export function subgroupsUsable(feature, min, max) {
  const pow2 = (s) => Number.isInteger(s) && s > 0 && (s & (s - 1)) === 0;
  return Boolean(feature) && SUBGROUP_SIZES[0] <= min && min <= max && max <= SUBGROUP_SIZES[1] && pow2(min) && pow2(max);
}

/** The path of the module a kernel replays (wgslc_artifact::Kernel::module). */
export function kernelModule(k, subgroups) {
  return subgroups && k.subgroups ? k.subgroups : k.wgsl;
}

/**
 * How a replay of `n` dispatches is split into submits, as wgslc_artifact::submit_ranges: [start, end) ranges of
 * SUBMIT_FIRST dispatches, then twice as many each time up to SUBMIT_MAX, so the GPU starts on the first few while
 * the rest are encoded (a submit's commands are recorded for the GPU only when it is submitted).
 */
export const SUBMIT_FIRST = 4;
export const SUBMIT_MAX = 64;
export function submitRanges(n) {
  const out = [];
  for (let at = 0, size = SUBMIT_FIRST; at < n; at += size, size = Math.min(2 * size, SUBMIT_MAX)) {
    out.push([at, Math.min(at + size, n)]);
  }
  return out;
}

// Storage types (every one 4 bytes) and the safetensors dtype each is written as.
const SAFETENSORS_DTYPE = { f32: "F32", i32: "I32", u32: "U32" };

// Each weight the plan names, checked against the weights.safetensors header (dtype, shape, byte length): its
// data section's byte range and where it goes ({ begin, end, target: null, w }), in file order.
export function weightCopies(plan, header) {
  const bad = (m) => new Error(`artifact: ${m}`);
  const copies = plan.weights.map((w) => {
    const t = Object.hasOwn(header, w.name) && w.name !== "__metadata__" ? header[w.name] : null;
    if (!t) throw bad(`weight '${w.name}': tensor not found in weights.safetensors`);
    const dtype = SAFETENSORS_DTYPE[w.storage];
    const [begin, end] = t.data_offsets ?? [];
    const n = w.shape.reduce((a, d) => a * d, 1);
    if (t.dtype !== dtype || fmt(t.shape ?? []) !== fmt(w.shape)) {
      throw bad(`weight '${w.name}' is ${t.dtype} ${fmt(t.shape ?? [])} in weights.safetensors, the plan expects ${dtype} ${fmt(w.shape)}`);
    }
    if (!(Number.isSafeInteger(begin) && end - begin === 4 * n)) {
      throw bad(`weights.safetensors: tensor '${w.name}' has data offsets ${fmt([begin, end])} for ${n} elements`);
    }
    return { begin, end, target: null, w };
  });
  return copies.sort((a, b) => a.begin - b.begin);
}
