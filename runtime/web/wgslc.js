// wgslc.js: loads a wgslc artifact over HTTP and replays it on WebGPU (navigator.gpu), as the Rust runtime does.
//
// No dependencies and no build step: import it as an ES module (it imports artifact.js, which lies beside it). The
// artifact (plan.json, kernels/*.wgsl, weights.safetensors) is its only contract with the compiler; artifact.js reads
// and checks plan.json schema version 2, including the decoder section of `--kv-cache` artifacts, whose program
// Session.generate interprets.
//
// Everything is built once in loadSession (buffers, weights, shader modules, pipelines, bind groups, read-back
// buffers); Session.run writes the inputs, encodes the dispatches in a few submits of a compute pass each
// (submitRanges: the GPU runs the first while the rest are encoded) and reads the outputs back. Runs on one session
// are serialized (they share the plan's buffers). Error messages use the Rust runtime's wording, so one search finds
// both.

import { affine, atValues, checkLimits, dimValues, inputBytes, kernelModule, layoutOf, neededLimits, outputData, parsePlan, relayout, submitRanges, SUBMIT_MAX, subgroupsUsable, valuesAt, weightCopies, wordsOf, workgroupsAt } from "./artifact.js";

export { FORMAT, VERSION, parsePlan } from "./artifact.js";

/** Loads the artifact directory at `url` (a URL ending in a directory, with or without the trailing slash). */
export async function loadSession(url, options = {}) {
  const t0 = performance.now();
  const base = new URL(String(url).endsWith("/") ? String(url) : `${url}/`, globalThis.location?.href);
  const plan = parsePlan(await (await fetchOk(new URL("plan.json", base))).text());

  let device = options.device;
  let adapterInfo = null;
  const ownsDevice = !device;
  if (!device) {
    ({ device, adapterInfo } = await requestDevice(plan, options));
  } else {
    checkLimits(plan, device.limits);
  }
  const subgroups = subgroupsOn(device.features, adapterInfo ?? device.adapterInfo, options);
  const sources = await Promise.all(plan.kernels.map((k) => fetchKernel(base, k, kernelModule(k, subgroups))));
  const lost = { reason: null };
  device.lost.then((info) => {
    lost.reason = `${info.reason}: ${info.message}`;
  });

  const created = [];
  try {
    // Shader modules first: a compilation error names its kernel, line and column before any GPU memory is taken.
    const modules = new Map();
    for (const [i, k] of plan.kernels.entries()) {
      if (modules.has(k.wgsl)) continue;
      const module = device.createShaderModule({ label: k.name, code: sources[i] });
      modules.set(k.wgsl, module);
    }
    await Promise.all(
      plan.kernels.map(async (k) => {
        const info = await modules.get(k.wgsl).getCompilationInfo();
        const errors = info.messages.filter((m) => m.type === "error");
        if (errors.length) {
          const text = errors.map((m) => `${kernelModule(k, subgroups)}:${m.lineNum}:${m.linePos}: ${m.message}`).join("; ");
          throw new Error(`GPU error: kernel '${k.name}': shader compilation failed: ${text}`);
        }
      }),
    );

    // Pipelines compile in parallel while the weights stream in. Each one's time is from the request to its
    // completion, so it includes waiting for the compiler's threads: an upper bound on its own compile time.
    const tPipelines = performance.now();
    const pipelineMs = [];
    const pipelinesDone = Promise.all(
      plan.kernels.map((k, i) =>
        device
          .createComputePipelineAsync({
            label: k.name,
            layout: "auto",
            compute: { module: modules.get(k.wgsl), entryPoint: k.entry_point },
          })
          .then((p) => {
            pipelineMs[i] = { name: k.name, ms: performance.now() - tPipelines };
            return p;
          })
          .catch((e) => {
            throw new Error(`GPU error: kernel '${k.name}': ${e.message}`);
          }),
      ),
    );
    pipelinesDone.catch(() => {}); // awaited below; an early weight error must not leave it unhandled

    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
    const buffers = await scoped(device, "creating buffers", () =>
      plan.buffers.map((b) => {
        const buf = device.createBuffer({ label: b.name, size: b.size, usage, mappedAtCreation: b.kind === "weight" });
        created.push(buf);
        return buf;
      }),
    );
    await streamWeights(base, plan, buffers, options.fetch ?? globalThis.fetch.bind(globalThis));
    // Ranged dims start at their max, so a replay without inputs runs the largest shape.
    if (plan.ranges) device.queue.writeBuffer(buffers[plan.ranges.buffer], 0, Int32Array.from(plan.ranges.dims, (d) => d.max));
    for (const [i, b] of plan.buffers.entries()) if (b.kind === "weight") buffers[i].unmap();
    const weightsMs = performance.now() - tPipelines;

    const pipelines = await pipelinesDone;
    const bindGroups = await scoped(device, "creating bind groups", () =>
      plan.kernels.map((k, i) =>
        device.createBindGroup({
          label: k.name,
          layout: pipelines[i].getBindGroupLayout(0),
          entries: k.bindings.map((b) => ({
            binding: b.binding,
            resource: { buffer: buffers[b.buffer], offset: b.offset, size: b.size },
          })),
        }),
      ),
    );
    const readback = await scoped(device, "creating read-back buffers", () =>
      plan.outputs.map((o) => {
        const buf = device.createBuffer({
          label: o.name,
          size: plan.buffers[o.buffer].size,
          usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
        });
        created.push(buf);
        return buf;
      }),
    );
    if (lost.reason) throw new Error(`GPU error: device lost: ${lost.reason}`);
    const loadStats = { totalMs: performance.now() - t0, weightsMs, pipelines: pipelineMs };
    return new Session({ device, ownsDevice, adapterInfo, plan, buffers, pipelines, bindGroups, readback, lost, loadStats, subgroups });
  } catch (e) {
    for (const b of created) b.destroy();
    if (ownsDevice) device.destroy();
    throw e;
  }
}

/** A loaded artifact, ready to run. */
export class Session {
  #s;
  #queue = Promise.resolve();
  #timing = null;
  #replay;

  constructor(state) {
    this.#s = state;
    this.#replay = { dispatches: state.plan.dispatches, values: null }; // a run's bucket and dims (none: at the max)
    /** Graph inputs in model order: [{ name, dtype, shape }]. */
    this.inputs = state.plan.inputs.map(publicSpec);
    /** Graph outputs in model order: [{ name, dtype, shape }]. */
    this.outputs = state.plan.outputs.map(publicSpec);
    /** The GPUDevice the session runs on. */
    this.device = state.device;
    /** The adapter's GPUAdapterInfo when the session requested its own device, else null. */
    this.adapterInfo = state.adapterInfo;
    /** Whether kernels replay their subgroup modules (`options.subgroups: false` turns them off). */
    this.subgroups = state.subgroups;
    /** The plan as read from plan.json. */
    this.plan = state.plan;
    /** Where the load's time went: { totalMs, weightsMs, pipelines: [{ name, ms }] } (ms until each was ready). */
    this.loadStats = state.loadStats;
    /** The profile of the last run({ profile: true }), or null. */
    this.lastProfile = null;
  }

  /**
   * Runs the plan once. `inputs` maps each input's name to a typed array (or an array of numbers, or
   * { data, shape } to have the shape checked too). Resolves to { [outputName]: { data, shape } }.
   * With { profile: true }, per-kernel GPU times are in `session.lastProfile` (and the result's `profile`).
   */
  run(inputs, options = {}) {
    const r = this.#queue.then(() => this.#run(inputs, options));
    this.#queue = r.catch(() => {});
    return r;
  }

  async #run(inputs, options) {
    const { device, plan, buffers, readback } = this.#s;
    if (!this.#s.pipelines) throw new Error("GPU error: the session was destroyed");
    this.#checkLost();
    const given = Object.keys(inputs ?? {});
    for (const name of given) {
      if (!plan.inputs.some((s) => s.name === name)) {
        const names = plan.inputs.map((s) => s.name).join(", ");
        throw new Error(`input '${name}': the model has no such input (inputs: ${names})`);
      }
    }
    for (const spec of plan.inputs) {
      if (!(spec.name in inputs)) {
        throw new Error(`artifact: the model takes ${plan.inputs.length} inputs, ${given.length} were given (missing '${spec.name}')`);
      }
    }
    // Ranged dims: each dim's value from the inputs' shapes; inputs go in at their bucket's or the max's layout.
    const values = plan.ranges ? dimValues(plan, inputs) : null;
    const layout = values ? layoutOf(plan, values) : null;
    const data = plan.inputs.map((spec) => {
      if (!values) return inputBytes(spec, inputs[spec.name]);
      const actual = atValues(spec, values);
      return relayout(inputBytes(actual, inputs[spec.name]), actual.shape, atValues(spec, layout.at).shape, true);
    });
    for (const [i, spec] of plan.inputs.entries()) device.queue.writeBuffer(buffers[spec.buffer], 0, data[i]);
    if (values) device.queue.writeBuffer(buffers[plan.ranges.buffer], 0, Int32Array.from(values));
    if (values) this.#replay = { ...layout, values };

    let profile = null;
    await scoped(device, "replay", () => {
      const copyOut = (enc) => {
        for (const [i, o] of plan.outputs.entries()) {
          enc.copyBufferToBuffer(buffers[o.buffer], 0, readback[i], 0, readback[i].size);
        }
      };
      if (!options.profile) return this.#submitReplay(copyOut);
      const enc = device.createCommandEncoder({ label: "wgslc replay" });
      profile = this.#encodeProfiled(enc);
      if (!profile) this.#encode(enc, this.#replay.dispatches);
      copyOut(enc);
      device.queue.submit([enc.finish()]);
    });
    if (options.profile && !profile) profile = await this.#profileBySubmit();
    await Promise.all(readback.map((b) => b.mapAsync(GPUMapMode.READ))).catch((e) => {
      this.#checkLost();
      throw new Error(`GPU error: read-back failed: ${e.message}`);
    });
    const out = {};
    for (const [i, spec] of plan.outputs.entries()) {
      if (values) {
        const actual = atValues(spec, values);
        const laid = atValues(spec, layout.at).shape;
        const words = new Uint32Array(readback[i].getMappedRange(), 0, laid.reduce((a, d) => a * d, 1));
        out[spec.name] = { data: outputData(actual, relayout(words, actual.shape, laid, false).buffer), shape: [...actual.shape] };
      } else {
        out[spec.name] = { data: outputData(spec, readback[i].getMappedRange()), shape: [...spec.shape] };
      }
      readback[i].unmap();
    }
    if (profile && profile.read) profile = await profile.read();
    if (profile) {
      this.lastProfile = profile;
      if (!("profile" in out)) Object.defineProperty(out, "profile", { value: profile, enumerable: false });
    }
    return out;
  }

  // Dispatches of the replay in one compute pass, at the last run's ranged dims.
  #encode(enc, dispatches) {
    const pass = enc.beginComputePass({ label: "wgslc" });
    this.#dispatch(pass, dispatches, true);
    pass.end();
  }

  // The replay in submits of a pass each (artifact.js's submitRanges, the Rust runtime's rule): the GPU runs the
  // first while the next are encoded. `last(enc)` adds commands after the last pass, in its submit.
  #submitReplay(last) {
    const { device } = this.#s;
    const { dispatches } = this.#replay;
    const ranges = submitRanges(dispatches.length);
    if (ranges.length === 0) ranges.push([0, 0]);
    for (const [i, [from, to]] of ranges.entries()) {
      const enc = device.createCommandEncoder({ label: "wgslc replay" });
      this.#encode(enc, dispatches.slice(from, to));
      if (i === ranges.length - 1) last?.(enc);
      device.queue.submit([enc.finish()]);
    }
  }

  // With timestamp-query: each dispatch in a pass of its own with timestamps at its start and end (WebGPU has no
  // timestamps between the dispatches of one pass), all in the one submit. Returns null without the feature.
  #encodeProfiled(enc) {
    const { device, plan } = this.#s;
    if (!device.features.has("timestamp-query")) return null;
    const { dispatches } = this.#replay;
    const n = dispatches.length;
    if (!this.#timing || this.#timing.n !== n) {
      const perSet = 4096 / 2;
      const sets = [];
      for (let at = 0; at < n; at += perSet) {
        const count = 2 * Math.min(perSet, n - at);
        const querySet = device.createQuerySet({ type: "timestamp", count });
        const resolve = device.createBuffer({ size: count * 8, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC });
        const read = device.createBuffer({ size: count * 8, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
        sets.push({ at, count, querySet, resolve, read });
      }
      this.#timing = { n, sets };
    }
    const { sets } = this.#timing;
    for (const [i, d] of dispatches.entries()) {
      const set = sets[Math.floor(i / 2048)];
      const q = 2 * (i - set.at);
      const pass = enc.beginComputePass({
        timestampWrites: { querySet: set.querySet, beginningOfPassWriteIndex: q, endOfPassWriteIndex: q + 1 },
      });
      this.#dispatch(pass, [d]);
      pass.end();
    }
    for (const s of sets) {
      enc.resolveQuerySet(s.querySet, 0, s.count, s.resolve, 0);
      enc.copyBufferToBuffer(s.resolve, 0, s.read, 0, s.count * 8);
    }
    // Read after the submit: a buffer whose mapping is pending may not be used in it.
    const read = async () => {
      const kernels = [];
      for (const s of sets) {
        await s.read.mapAsync(GPUMapMode.READ);
        const t = new BigUint64Array(s.read.getMappedRange().slice(0));
        s.read.unmap();
        for (let j = 0; j < s.count / 2; j++) {
          const d = dispatches[s.at + j];
          kernels.push({ name: plan.kernels[d].name, ms: Number(t[2 * j + 1] - t[2 * j]) / 1e6 });
        }
      }
      return { timestamps: true, kernels };
    };
    return { read };
  }

  // Without timestamp-query: each dispatch submitted on its own and waited for (per-submit overhead included).
  async #profileBySubmit() {
    const { device, plan } = this.#s;
    const kernels = [];
    for (const d of this.#replay.dispatches) {
      const start = performance.now();
      const enc = device.createCommandEncoder();
      const pass = enc.beginComputePass();
      this.#dispatch(pass, [d]);
      pass.end();
      device.queue.submit([enc.finish()]);
      await device.queue.onSubmittedWorkDone();
      kernels.push({ name: plan.kernels[d].name, ms: performance.now() - start });
    }
    return { timestamps: false, kernels };
  }

  /**
   * Replays the plan `iterations` times without reading outputs back (inputs stay as last written), each replay
   * waited for, and resolves to { ms, encodeMs }: wall time per replay, and the CPU time per replay spent encoding
   * its passes and submitting them (the JavaScript side of the per-dispatch overhead). For benchmarks.
   */
  async timeReplay(iterations) {
    const { device } = this.#s;
    let encodeMs = 0;
    const start = performance.now();
    for (let i = 0; i < iterations; i++) {
      const t = performance.now();
      this.#submitReplay();
      encodeMs += performance.now() - t;
      await device.queue.onSubmittedWorkDone();
    }
    this.#checkLost();
    const n = Math.max(iterations, 1);
    return { ms: (performance.now() - start) / n, encodeMs: encodeMs / n };
  }

  /**
   * Generates greedily from `promptIds` (an array or typed array of token ids) on a decoder artifact (compiled
   * with --kv-cache), as the Rust runtime's Session::generate does: the prompt in prefill steps, then one decode step
   * per token; the KV cache, the chosen tokens and the loop's inputs stay on the GPU. Options: maxNewTokens (default
   * 32), eos (stop after this id), stepsPerSubmit (default 16; the tokens are read back after each submit when eos or
   * onToken is given), onToken(id, index) called for each new token as it is read back; temperature, topK and seed
   * draw tokens instead (any of them samples; the others default to 1, 0 = the whole vocabulary, and a random seed):
   * the plan's Sample kernel keeps the logits at or above the topK-th largest and draws from their softmax at the
   * temperature (0 is greedy), keyed by the seed's low 32 bits and the position, so a seed draws the same tokens as
   * the Rust runtime's. Resolves to { tokens (the prompt and the new tokens, numbers), prefillMs, decodeMs,
   * decodeSteps, submits, and seed when sampling }.
   */
  generate(promptIds, options = {}) {
    const r = this.#queue.then(() => this.#generate(promptIds, options));
    this.#queue = r.catch(() => {});
    return r;
  }

  async #generate(promptIds, options) {
    const { device, plan, buffers } = this.#s;
    if (!this.#s.pipelines) throw new Error("GPU error: the session was destroyed");
    this.#checkLost();
    const bad = (m) => new Error(`input 'input_ids': ${m}`);
    const d = plan.decoder;
    if (!d) throw new Error("artifact: this artifact has no decoder section: compile the model with --kv-cache");
    const step = (name) => {
      const s = d.steps.find((s) => s.name === name);
      if (!s) throw new Error(`artifact: the decoder section has no '${name}' step`);
      return s;
    };
    const decode = step("decode");
    const prefill = step("prefill");
    const prompt = Array.from(promptIds ?? [], Number);
    const maxNew = options.maxNewTokens ?? 32;
    const perSubmit = options.stepsPerSubmit ?? 16;
    const eos = options.eos ?? null;
    const onToken = options.onToken ?? null;
    if (prompt.length === 0) throw bad("the prompt is empty");
    if (!(Number.isInteger(maxNew) && maxNew >= 1 && Number.isInteger(perSubmit) && perSubmit >= 1)) {
      throw bad("max_new_tokens and steps_per_submit must be at least 1");
    }
    const total = prompt.length + maxNew;
    if (total > d.capacity) {
      throw bad(`the prompt (${prompt.length} tokens) plus ${maxNew} new tokens is ${total}, more than the ${d.capacity} tokens of KV cache this artifact was compiled for (--kv-cache ${d.capacity})`);
    }
    const badId = prompt.find((t) => !(Number.isInteger(t) && t >= 0 && t <= 2147483647));
    if (badId !== undefined) throw bad(`token id ${badId} is not a valid id`);
    const sampling = options.temperature != null || options.topK != null || options.seed != null;
    const temperature = options.temperature ?? 1;
    const topK = options.topK ?? 0;
    const seed = options.seed ?? Math.floor(Math.random() * 4294967296);
    if (sampling) {
      if (!(Number.isFinite(temperature) && temperature >= 0)) throw bad(`the temperature must be 0 or more, not ${temperature}`);
      if (!(Number.isInteger(topK) && topK >= 0 && topK <= 2147483647)) throw bad(`top-k must be a whole number, not ${topK}`);
      if (!(Number.isInteger(seed) && seed >= 0 && seed <= Number.MAX_SAFE_INTEGER)) throw bad(`the seed must be a whole number, not ${seed}`);
    }
    const recompile = (what) => new Error(`artifact: this artifact was compiled before wgslc ${what}: compile it again`);
    if (sampling && d.steps.some((st) => !st.sample)) throw recompile("could sample");
    if (!d.program) throw recompile("described its generation loop as data");
    const input = (i) => ({ spec: plan.inputs[i], buf: buffers[plan.inputs[i].buffer] });
    const storage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
    const temp = [];
    const make = (label, size, usage) => {
      const b = device.createBuffer({ label, size, usage });
      temp.push(b);
      return b;
    };
    if (d.tokens == null) throw recompile("kept the token history on the GPU");
    try {
      const len = prompt.length;
      const history = input(d.tokens).buf;
      const readback = make("wgslc tokens read-back", 4 * d.capacity, GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST);
      // The program's constants, written once per generation.
      const constants = d.program.constants.map((c) => {
        const words = wordsOf(plan.inputs[c.like], valuesAt(c.values, { len }, prompt));
        const b = make("wgslc loop constant", Math.max(4, words.byteLength), storage);
        device.queue.writeBuffer(b, 0, words);
        return b;
      });
      if (sampling) {
        // The seed folded to 32 bits as the Rust runtime does (seed ^ seed >> 32).
        const big = BigInt(seed);
        const folded = Number(BigInt.asUintN(32, big ^ (big >> 32n)));
        device.queue.writeBuffer(input(decode.sample.temperature).buf, 0, wordsOf(input(decode.sample.temperature).spec, [temperature]));
        device.queue.writeBuffer(input(decode.sample.params).buf, 0, Uint32Array.from([topK, folded]));
      }
      // Whether the GPU has (next to) nothing queued, as the Rust runtime's Interpreter::idle: at the start and after
      // each wait for it.
      const gpu = { idle: true };
      const run = (label, phases) => this.#phase(label, phases, { sampling, prompt, constants, gpu });

      // Prefill: the start, then one submit per chunk (the last one with the `last` phase).
      const t0 = performance.now();
      await run("wgslc start", [[d.program.start, { len }]]);
      for (let pos = 0; pos < len; pos += prefill.tokens) {
        const v = { pos, real: Math.min(prefill.tokens, len - pos), len };
        await run("wgslc prefill", [[d.program.chunk, v], [pos + v.real === len ? d.program.last : [], v]]);
      }
      await device.queue.onSubmittedWorkDone();
      gpu.idle = true;
      this.#checkLost();
      const prefillMs = performance.now() - t0;

      const t1 = performance.now();
      await run("wgslc decode start", [[d.program.decode_start, { len }]]);
      const read = async (count) => {
        const enc = device.createCommandEncoder();
        enc.copyBufferToBuffer(history, 0, readback, 0, 4 * count);
        device.queue.submit([enc.finish()]);
        await readback.mapAsync(GPUMapMode.READ, 0, 4 * count);
        const t = Array.from(new Int32Array(readback.getMappedRange(0, 4 * count).slice(0)));
        readback.unmap();
        gpu.idle = true;
        return t;
      };
      const watch = eos !== null || onToken !== null;
      let produced = len + 1;
      let tokens = null;
      let reported = len;
      const report = (t) => {
        for (; reported < t.length; reported++) onToken?.(t[reported], reported);
      };
      const stopped = () => eos !== null && tokens !== null && tokens.slice(len).includes(eos);
      if (watch) {
        tokens = await read(produced);
        report(tokens);
      }
      let steps = 0;
      let submits = 0;
      while (produced < total && !stopped()) {
        const k = Math.min(perSubmit, total - produced);
        // Each step with the position of the token it reads.
        await run(decode.name, Array.from({ length: k }, (_, i) => [d.program.step, { pos: produced + i - 1, len }]));
        produced += k;
        steps += k;
        submits += 1;
        if (watch) {
          tokens = await read(produced);
          const at = eos === null ? -1 : tokens.slice(len).indexOf(eos);
          report(at >= 0 ? tokens.slice(0, len + at + 1) : tokens);
        }
      }
      if (!watch) tokens = await read(produced);
      this.#checkLost();
      const decodeMs = performance.now() - t1;
      if (eos !== null) {
        const at = tokens.slice(len).indexOf(eos);
        if (at >= 0) tokens = tokens.slice(0, len + at + 1);
      }
      const result = { tokens, prefillMs, decodeMs, decodeSteps: steps, submits };
      if (sampling) result.seed = seed;
      return result;
    } finally {
      for (const b of temp) b.destroy();
    }
  }

  // Runs phases of the decoder's program (each instructions with their variables) as the Rust runtime's
  // Interpreter::phase does: the writes first, then the commands, consecutive dispatches in one pass, in the
  // submits of submitRanges on an idle GPU, else in one.
  #phase(label, phases, { sampling, prompt, constants, gpu }) {
    const { device, plan, buffers } = this.#s;
    const steps = plan.decoder.steps;
    const out = (i) => buffers[plan.outputs[i].buffer];
    const buffer = (b) => b.input != null ? buffers[plan.inputs[b.input].buffer] : b.output != null ? out(b.output)
      : b.token != null ? out(sampling ? steps[b.token].sample.token : steps[b.token].next_token) : constants[b.constant];
    const commands = [];
    for (const [instrs, v] of phases) {
      for (const ins of instrs) {
        if (ins.write) {
          const spec = plan.inputs[ins.write.input];
          const values = valuesAt(ins.write.values, v, prompt);
          if (values.length > spec.shape.reduce((a, x) => a * x, 1)) {
            throw new Error(`artifact: decoder program: ${values.length} values for input '${spec.name}'`);
          }
          device.queue.writeBuffer(buffers[spec.buffer], 0, wordsOf(spec, values));
        } else if (ins.clear != null) {
          commands.push({ clear: buffers[plan.inputs[ins.clear].buffer] });
        } else if (ins.run != null) {
          for (const k of sampling ? steps[ins.run].sample.dispatches : steps[ins.run].dispatches) commands.push({ dispatch: k });
        } else if (ins.advance != null) {
          commands.push({ dispatch: steps[ins.advance].advance[sampling ? "sample" : "greedy"] });
        } else {
          const c = ins.copy;
          commands.push({ from: buffer(c.from.buffer), fromAt: affine(c.from.offset, v), to: buffer(c.to.buffer), toAt: affine(c.to.offset, v), bytes: affine(c.bytes, v) });
        }
      }
    }
    if (commands.length === 0) return Promise.resolve();
    // On an idle GPU the dispatches go in the submits of submitRanges (as a replay's), so the GPU starts on the
    // first while the rest are encoded; behind a phase of SUBMIT_MAX dispatches or more, in one submit (the GPU is
    // busy meanwhile). Copies and clears stay in order between them.
    const total = commands.filter((c) => c.dispatch != null).length;
    const ends = gpu.idle ? submitRanges(total).map((r) => r[1]) : [total];
    if (total >= SUBMIT_MAX) gpu.idle = false;
    return scoped(device, label, () => {
      let enc = device.createCommandEncoder({ label });
      let done = 0;
      let submit = 0;
      for (let i = 0; i < commands.length;) {
        let j = i;
        while (j < commands.length && commands[j].dispatch != null && j - i < ends[submit] - done) j++;
        if (j > i) {
          const pass = enc.beginComputePass({ label });
          this.#dispatch(pass, commands.slice(i, j).map((c) => c.dispatch));
          pass.end();
          done += j - i;
          i = j;
          if (done === ends[submit] && submit + 1 < ends.length) {
            device.queue.submit([enc.finish()]);
            enc = device.createCommandEncoder({ label });
            submit++;
          }
          continue;
        }
        const c = commands[i++];
        if (c.clear) enc.clearBuffer(c.clear);
        else enc.copyBufferToBuffer(c.from, c.fromAt, c.to, c.toAt, c.bytes);
      }
      device.queue.submit([enc.finish()]);
    });
  }

  // Kernels in order, into an open compute pass. `ranged`: at the last run's dims, each scaled kernel's workgroups
  // as the Rust runtime counts them (RunLayout::workgroups), else every kernel's whole grid.
  #dispatch(pass, dispatches, ranged = false) {
    const { plan, pipelines, bindGroups } = this.#s;
    const { values, at } = this.#replay;
    for (const d of dispatches) {
      const k = plan.kernels[d];
      const w = ranged && values ? workgroupsAt(k, values, at) : [...k.workgroups];
      pass.setPipeline(pipelines[d]);
      pass.setBindGroup(0, bindGroups[d]);
      pass.dispatchWorkgroups(w[0], w[1], w[2]);
    }
  }

  #checkLost() {
    if (this.#s.lost.reason) throw new Error(`GPU error: device lost: ${this.#s.lost.reason}`);
  }

  /** Frees the session's GPU buffers (and the device, when the session created it). */
  destroy() {
    const s = this.#s;
    if (!s.pipelines) return;
    for (const b of [...s.buffers, ...s.readback]) b.destroy();
    for (const t of this.#timing?.sets ?? []) {
      t.querySet.destroy();
      t.resolve.destroy();
      t.read.destroy();
    }
    if (s.ownsDevice) s.device.destroy();
    s.pipelines = s.bindGroups = null;
  }
}

// ---- device -------------------------------------------------------------------------------------------------

// Whether kernels replay their subgroup modules: asked for (options.subgroups, on unless false), the feature with
// WebGPU's subgroup sizes (artifact.js's subgroupsUsable, the Rust runtime's rule) and WGSL's subgroup_id builtin.
function subgroupsOn(features, info, options) {
  const ids = globalThis.navigator?.gpu?.wgslLanguageFeatures?.has("subgroup_id");
  return options.subgroups !== false && Boolean(ids) && subgroupsUsable(features.has("subgroups"), info?.subgroupMinSize, info?.subgroupMaxSize);
}

async function requestDevice(plan, options) {
  if (!globalThis.navigator?.gpu) {
    throw new Error("no GPU adapter found: navigator.gpu is missing (WebGPU is off in this browser or context)");
  }
  const adapter = await navigator.gpu.requestAdapter({ powerPreference: options.powerPreference ?? "high-performance" });
  if (!adapter) throw new Error("no GPU adapter found: navigator.gpu.requestAdapter() returned null");
  checkLimits(plan, adapter.limits);
  const requiredLimits = {};
  for (const [name, need] of Object.entries(neededLimits(plan))) {
    // Ask only for what exceeds WebGPU's defaults (checkLimits made sure the adapter has it).
    if (need > defaultLimit(name)) requiredLimits[name] = need;
  }
  const sg = subgroupsOn(adapter.features, adapter.info, options);
  const requiredFeatures = ["timestamp-query", ...(sg ? ["subgroups"] : [])].filter((f) => adapter.features.has(f));
  let device;
  try {
    device = await adapter.requestDevice({ label: "wgslc", requiredLimits, requiredFeatures });
  } catch (e) {
    throw new Error(`the GPU refused the device: ${e.message}`);
  }
  return { device, adapterInfo: adapter.info ?? null };
}

function defaultLimit(name) {
  return {
    maxBufferSize: 268435456,
    maxStorageBufferBindingSize: 134217728,
    maxStorageBuffersPerShaderStage: 8,
    maxComputeWorkgroupsPerDimension: 65535,
  }[name];
}

// Runs `f` inside validation and out-of-memory error scopes; rejects with what they caught.
async function scoped(device, what, f) {
  device.pushErrorScope("out-of-memory");
  device.pushErrorScope("validation");
  let r;
  try {
    r = f();
  } finally {
    const v = await device.popErrorScope();
    const o = await device.popErrorScope();
    if (v || o) throw new Error(`GPU error: ${what}: ${(v ?? o).message}`);
  }
  return r;
}

// ---- files --------------------------------------------------------------------------------------------------

// Fetches `url`; a network error or an HTTP error status becomes "cannot read 'NAME': reason", NAME being the file
// as the plan names it (or the URL).
async function fetchOk(url, name = String(url), fetchFn = globalThis.fetch.bind(globalThis)) {
  let res;
  try {
    res = await fetchFn(url);
  } catch (e) {
    throw new Error(`cannot read '${name}': ${e.message}`);
  }
  if (!res.ok) throw new Error(`cannot read '${name}': HTTP ${res.status} ${res.statusText}`.trimEnd());
  return res;
}

async function fetchKernel(base, k, path) {
  try {
    return await (await fetchOk(new URL(path, base), path)).text();
  } catch (e) {
    throw new Error(`artifact: kernel '${k.name}': ${e.message}`);
  }
}

// Streams weights.safetensors into the weight buffers, which are mapped at creation: each chunk of the body is
// copied straight into the mapped ranges it covers, so JavaScript never holds a second whole copy of the weights.
// Every tensor the plan names is checked against the file's header (dtype, shape, byte length) before any copy.
async function streamWeights(base, plan, buffers, fetchFn) {
  const bad = (m) => new Error(`artifact: ${m}`);
  const url = new URL("weights.safetensors", base);
  let res;
  try {
    res = await fetchOk(url, "weights.safetensors", fetchFn);
  } catch (e) {
    throw bad(`cannot open weights.safetensors: ${e.message}`);
  }
  const reader = byteReader(res);

  const head = await reader.read(8);
  if (head.length < 8) throw bad("weights.safetensors: the file is shorter than its header");
  const headerLen = Number(new DataView(head.buffer, head.byteOffset, 8).getBigUint64(0, true));
  if (headerLen > 100_000_000) throw bad(`weights.safetensors: a header of ${headerLen} bytes is not plausible`);
  const headerBytes = await reader.read(headerLen);
  if (headerBytes.length < headerLen) throw bad("weights.safetensors: the header is truncated");
  let header;
  try {
    header = JSON.parse(new TextDecoder().decode(headerBytes));
  } catch (e) {
    throw bad(`weights.safetensors: the header is not JSON: ${e.message}`);
  }

  const copies = weightCopies(plan, header);
  const mapped = new Map();
  for (const c of copies) {
    if (!mapped.has(c.w.buffer)) mapped.set(c.w.buffer, new Uint8Array(buffers[c.w.buffer].getMappedRange()));
    c.target = mapped.get(c.w.buffer);
  }

  // pos: bytes of the data section consumed so far; next: the first copy not yet complete.
  let pos = 0;
  let next = 0;
  while (next < copies.length) {
    const chunk = await reader.next();
    if (!chunk) break;
    const chunkEnd = pos + chunk.length;
    for (let i = next; i < copies.length && copies[i].begin < chunkEnd; i++) {
      const c = copies[i];
      const from = Math.max(c.begin, pos);
      const to = Math.min(c.end, chunkEnd);
      if (from < to) c.target.set(chunk.subarray(from - pos, to - pos), c.w.offset + (from - c.begin));
    }
    pos = chunkEnd;
    while (next < copies.length && copies[next].end <= pos) next++;
  }
  reader.cancel();
  if (next < copies.length) {
    throw bad(`weights.safetensors: the file ends at ${pos} data bytes, tensor '${copies[next].w.name}' needs ${copies[next].end}`);
  }
}

// Reads a response body as a stream: read(n) for the first bytes, then next() chunk by chunk.
function byteReader(res) {
  const stream = res.body?.getReader();
  let whole = stream ? null : res.arrayBuffer().then((b) => new Uint8Array(b));
  let pending = new Uint8Array(0);
  let streamDone = false;
  const pull = async () => {
    if (whole) {
      const w = await whole;
      whole = null;
      streamDone = true;
      return w;
    }
    if (!stream || streamDone) return null;
    const { done, value } = await stream.read();
    if (done) {
      streamDone = true;
      return null;
    }
    return value;
  };
  return {
    async read(n) {
      const parts = [pending];
      let have = pending.length;
      while (have < n) {
        const c = await pull();
        if (!c) break;
        parts.push(c);
        have += c.length;
      }
      const all = parts.length === 1 ? parts[0] : concat(parts, have);
      pending = all.subarray(Math.min(n, all.length));
      return all.subarray(0, Math.min(n, all.length));
    },
    async next() {
      if (pending.length) {
        const p = pending;
        pending = new Uint8Array(0);
        return p;
      }
      return pull();
    },
    cancel() {
      if (stream && !streamDone) stream.cancel().catch(() => {});
    },
  };
}

function concat(parts, n) {
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function publicSpec(s) {
  const p = { name: s.name, dtype: s.dtype, shape: [...s.shape] };
  if (s.ranged && s.ranged.length) p.ranged = s.ranged.map((a) => ({ ...a }));
  return p;
}
