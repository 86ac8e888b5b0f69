//! Token generation on a decoder artifact (`wgslc compile --kv-cache`): an interpreter of the decoder section's
//! program (`wgslc_artifact::Program`), which says what each phase of the loop writes, replays and copies. The
//! runtime knows the loop's shape (prefill chunks, then decode steps, several a submit, stopping at an
//! end-of-sequence token) and nothing of the cache layout or of what the loop's inputs mean.
//!
//! **Architecture Invariant:** after the prompt is written, nothing goes through the host per token: a decode
//! step's program has no writes (`Plan::check` refuses them), so a batch of steps (`steps_per_submit`) is commands
//! on the GPU alone, consecutive dispatches in one compute pass (queued, where the GPU is idle, in the growing
//! submits of `wgslc_artifact::submit_ranges`, so it starts on the first while the rest are encoded). The host
//! reads the token history back only between batches when it must stop at an end-of-sequence token.

use crate::{RuntimeError, Session};
use std::cell::Cell;
use wgslc_artifact::{submit_ranges, Buf, Decoder, Instr, Vars, SUBMIT_MAX};

/// How [`Session::generate`] runs.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Tokens to generate after the prompt (at least 1).
    pub max_new_tokens: usize,
    /// Stop after this token (it is kept in the output).
    pub eos: Option<i64>,
    /// Decode steps encoded together (at least 1), split into submits only where the GPU is idle. Larger amortizes
    /// submission; with `eos` the run reads the tokens back after each such batch, so it overshoots an
    /// end-of-sequence token by fewer than this many steps (the overshoot is discarded).
    pub steps_per_submit: usize,
    /// Draw each token instead of taking the most likely one (`None`: greedy).
    pub sampling: Option<Sampling>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions { max_new_tokens: 32, eos: None, steps_per_submit: 16, sampling: None }
    }
}

/// How tokens are drawn, on the GPU (the plan's `Sample` kernels): the logits below the `top_k`-th largest are
/// dropped (ties with it kept, as transformers' top-k does), and the token is drawn from the softmax of the rest
/// at `temperature` (Gumbel-max: the largest `logit / temperature + noise`). The noise is a hash of the seed,
/// the token's position and the vocabulary index, so a seed gives the same tokens on every device and in both
/// runtimes (not torch's tokens: its random numbers are its own).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// Above 0; larger flattens the distribution. 0 takes the most likely token (greedy).
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0: the whole vocabulary).
    pub top_k: usize,
    /// The random stream; folded to 32 bits (`seed ^ seed >> 32`).
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling { temperature: 1.0, top_k: 0, seed: 0 }
    }
}

/// What a generation produced.
#[derive(Clone, Debug)]
pub struct Generation {
    /// The prompt followed by the generated tokens.
    pub tokens: Vec<i64>,
    /// Wall time of the prefill (every chunk, to completion); it chooses the first generated token.
    pub prefill_ms: f64,
    /// Decode steps run (tokens after the first, including any overshoot past an end-of-sequence token).
    pub decode_steps: usize,
    /// Wall time of the decode steps, to the last token read back.
    pub decode_ms: f64,
    /// Batches of `steps_per_submit` steps the decode loop encoded (each queued in one or more submits).
    pub submits: usize,
    /// Buffer copies the decode loop encoded (what the program copies on the GPU each step: 0 for a step that advances
    /// on the GPU).
    pub copies: usize,
    /// Host time of the decode loop's encoding and submits (the part of `decode_ms` the CPU spends; the rest
    /// is waiting for the GPU).
    pub host_ms: f64,
}

/// Whether the generated part of `tokens` holds the end-of-sequence token.
fn stopped(tokens: Option<&[i64]>, prompt: usize, eos: Option<i64>) -> bool {
    matches!((tokens, eos), (Some(t), Some(e)) if t[prompt..].contains(&e))
}

impl Session {
    /// Generates greedily (or drawing tokens, with [`GenerateOptions::sampling`]) from `prompt` (token ids) on a
    /// decoder artifact: the prompt in prefill steps, then one decode step per token, the cache and the chosen
    /// tokens staying on the GPU. Errors name what does not fit: an artifact without a decoder section, an empty
    /// prompt, prompt plus new tokens over the cache's capacity.
    pub fn generate(&self, prompt: &[i64], opts: &GenerateOptions) -> Result<Generation, RuntimeError> {
        let bad = |m: String| RuntimeError::Input { name: "input_ids".into(), reason: m };
        let d = self.plan.decoder.as_ref().ok_or_else(|| {
            RuntimeError::Invalid("this artifact has no decoder section: compile the model with --kv-cache".into())
        })?;
        let recompile = |what: &str| {
            RuntimeError::Invalid(format!("this artifact was compiled before wgslc {what}: compile it again"))
        };
        let program = d.program.as_ref().ok_or_else(|| recompile("described its generation loop as data"))?;
        let step = |name: &str| {
            d.steps
                .iter()
                .find(|s| s.name == name)
                .ok_or_else(|| RuntimeError::Invalid(format!("the decoder section has no '{name}' step")))
        };
        let (decode, prefill) = (step("decode")?, step("prefill")?);
        if prompt.is_empty() {
            return Err(bad("the prompt is empty".into()));
        }
        if opts.max_new_tokens == 0 || opts.steps_per_submit == 0 {
            return Err(bad("max_new_tokens and steps_per_submit must be at least 1".into()));
        }
        let total = prompt.len().saturating_add(opts.max_new_tokens);
        if total > d.capacity {
            return Err(bad(format!(
                "the prompt ({} tokens) plus {} new tokens is {total}, more than the {} tokens of KV cache this \
                 artifact was compiled for (--kv-cache {})",
                prompt.len(),
                opts.max_new_tokens,
                d.capacity,
                d.capacity
            )));
        }
        if let Some(&t) = prompt.iter().find(|&&t| !(0..=i32::MAX as i64).contains(&t)) {
            return Err(bad(format!("token id {t} is not a valid id")));
        }
        if let Some(s) = &opts.sampling {
            if !(s.temperature.is_finite() && s.temperature >= 0.0) {
                return Err(bad(format!("the temperature must be 0 or more, not {}", s.temperature)));
            }
            if s.top_k > i32::MAX as usize {
                return Err(bad(format!("top-k {} is larger than any vocabulary", s.top_k)));
            }
            if d.steps.iter().any(|st| st.sample.is_none()) {
                return Err(recompile("could sample"));
            }
        }
        let history = d.tokens.ok_or_else(|| recompile("kept the token history on the GPU"))?;
        let _guard = self.run_lock.lock().unwrap_or_else(|p| p.into_inner());
        let gpu = &self.gpu;
        let input = |i: usize| (&self.plan.inputs[i], &self.buffers[self.plan.inputs[i].buffer]);

        // Per generation: the history's read-back and the program's constants.
        let len = prompt.len() as i64;
        let constants = program
            .constants
            .iter()
            .map(|c| Ok(input(c.like).0.words(c.values.at(Vars { len, ..Vars::default() }, prompt).map_err(invalid)?)))
            .collect::<Result<Vec<_>, RuntimeError>>()?;
        let (readback, constants) = gpu.scoped("generation buffers", || {
            let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
            let buf = |label: &str, size: u64, usage| {
                gpu.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(label),
                    size,
                    usage,
                    mapped_at_creation: false,
                })
            };
            let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
            let readback = buf("wgslc tokens read-back", 4 * d.capacity as u64, usage);
            let constants: Vec<wgpu::Buffer> = constants
                .iter()
                .map(|words| {
                    let b = buf("wgslc loop constant", (words.len() as u64).max(4), storage);
                    gpu.queue.write_buffer(&b, 0, words);
                    b
                })
                .collect();
            (readback, constants)
        })?;
        if let (Some(s), Some(sm)) = (&opts.sampling, &decode.sample) {
            let (t, p) = (input(sm.temperature), input(sm.params));
            gpu.queue.write_buffer(t.1, 0, &s.temperature.to_le_bytes());
            let seed = (s.seed ^ (s.seed >> 32)) as u32;
            gpu.queue.write_buffer(p.1, 0, &p.0.words([s.top_k as i64, i64::from(seed as i32)]));
        }
        let idle = Cell::new(true);
        let run = Interpreter { s: self, d, sampling: opts.sampling.is_some(), prompt, constants: &constants, idle };

        // Prefill: the start, then one submit per chunk (the last one with the `last` phase).
        let start = std::time::Instant::now();
        let at_len = Vars { len, ..Vars::default() };
        run.phase("wgslc start", &[(&program.start, at_len)])?;
        let n = prefill.tokens;
        for (c, chunk) in prompt.chunks(n).enumerate() {
            let v = Vars { pos: (c * n) as i64, real: chunk.len() as i64, len };
            let last: &[Instr] = if c * n + chunk.len() == prompt.len() { &program.last } else { &[] };
            run.phase("wgslc prefill", &[(&program.chunk, v), (last, v)])?;
        }
        gpu.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| RuntimeError::Gpu(e.to_string()))?;
        run.idle.set(true);
        gpu.check_lost()?;
        let prefill_ms = start.elapsed().as_secs_f64() * 1e3;

        // Decode: `steps_per_submit` steps a submit.
        let start = std::time::Instant::now();
        run.phase("wgslc decode start", &[(&program.decode_start, at_len)])?;
        let (_, history) = input(history);
        let mut produced = prompt.len() + 1; // tokens in the history
        let (mut steps, mut submits, mut copies) = (0, 0, 0);
        let mut tokens: Option<Vec<i64>> = None;
        if opts.eos.is_some() {
            tokens = self.read_tokens(history, &readback, produced)?.into();
            run.idle.set(true);
        }
        let mut host = std::time::Duration::ZERO;
        while produced < total && !stopped(tokens.as_deref(), prompt.len(), opts.eos) {
            let k = opts.steps_per_submit.min(total - produced);
            let encoding = std::time::Instant::now();
            // The position of the token each step reads.
            let at = |i: usize| Vars { pos: (produced + i - 1) as i64, len, real: 0 };
            let phases: Vec<(&[Instr], Vars)> = (0..k).map(|i| (&program.step[..], at(i))).collect();
            copies += run.phase(&decode.name, &phases)?;
            host += encoding.elapsed();
            produced += k;
            steps += k;
            submits += 1;
            if opts.eos.is_some() {
                tokens = Some(self.read_tokens(history, &readback, produced)?);
                run.idle.set(true);
            }
        }
        let mut tokens = match tokens {
            Some(t) => t,
            None => self.read_tokens(history, &readback, produced)?,
        };
        let decode_ms = start.elapsed().as_secs_f64() * 1e3;
        if let Some(eos) = opts.eos {
            if let Some(i) = tokens[prompt.len()..].iter().position(|&t| t == eos) {
                tokens.truncate(prompt.len() + i + 1);
            }
        }
        let host_ms = host.as_secs_f64() * 1e3;
        Ok(Generation { tokens, prefill_ms, decode_steps: steps, decode_ms, submits, copies, host_ms })
    }

    fn read_tokens(&self, history: &wgpu::Buffer, rb: &wgpu::Buffer, n: usize) -> Result<Vec<i64>, RuntimeError> {
        let gpu = &self.gpu;
        let bytes = 4 * n as u64;
        gpu.scoped("reading tokens", || {
            let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            enc.copy_buffer_to_buffer(history, 0, rb, 0, bytes);
            gpu.queue.submit([enc.finish()]);
        })?;
        gpu.map_read(&[rb])?;
        let t = rb
            .slice(..bytes)
            .get_mapped_range()
            .map(|v| v.chunks_exact(4).map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect())
            .map_err(|e| RuntimeError::Gpu(format!("reading tokens: {e}")));
        rb.unmap();
        t
    }
}

fn invalid(m: String) -> RuntimeError {
    RuntimeError::Invalid(format!("decoder program: {m}"))
}

/// One generation's reading of the program.
struct Interpreter<'a> {
    s: &'a Session,
    d: &'a Decoder,
    sampling: bool,
    prompt: &'a [i64],
    constants: &'a [wgpu::Buffer],
    /// Whether the GPU has (next to) nothing queued: at the start and after each wait for it. A phase submitted
    /// then is split by `submit_ranges` so the GPU starts on its first dispatches; one submitted behind a phase of
    /// at least `SUBMIT_MAX` dispatches goes in one submit (the GPU is busy meanwhile; more submits only cost).
    idle: Cell<bool>,
}

/// A command of a phase, resolved.
enum Command<'a> {
    Dispatch(usize),
    Clear(&'a wgpu::Buffer),
    Copy { from: &'a wgpu::Buffer, from_at: u64, to: &'a wgpu::Buffer, to_at: u64, bytes: u64 },
}

impl<'a> Interpreter<'a> {
    /// Runs phases (instructions with their variables): their writes first, then their commands, consecutive
    /// dispatches in one compute pass, in the submits of `submit_ranges` where the GPU is idle (`idle`), else
    /// in one. Returns the copies it encoded.
    fn phase(&self, label: &str, phases: &[(&[Instr], Vars)]) -> Result<usize, RuntimeError> {
        let (plan, gpu) = (&self.s.plan, &self.s.gpu);
        let mut commands = Vec::new();
        for &(instrs, v) in phases {
            for ins in instrs {
                match ins {
                    Instr::Write(w) => {
                        let (spec, buf) = (&plan.inputs[w.input], &self.s.buffers[plan.inputs[w.input].buffer]);
                        let values = w.values.at(v, self.prompt).map_err(invalid)?;
                        if values.len() > spec.shape.iter().product() {
                            return Err(invalid(format!("{} values for input '{}'", values.len(), spec.name)));
                        }
                        gpu.queue.write_buffer(buf, 0, &spec.words(values));
                    }
                    Instr::Clear(i) => commands.push(Command::Clear(&self.s.buffers[plan.inputs[*i].buffer])),
                    Instr::Run(s) => {
                        let st = &self.d.steps[*s];
                        let ds = match (&st.sample, self.sampling) {
                            (Some(sm), true) => &sm.dispatches,
                            _ => &st.dispatches,
                        };
                        commands.extend(ds.iter().map(|&k| Command::Dispatch(k)));
                    }
                    Instr::Advance(s) => {
                        let a = self.d.steps[*s].advance.expect("checked by the plan");
                        commands.push(Command::Dispatch(if self.sampling { a.sample } else { a.greedy }));
                    }
                    Instr::Copy(c) => {
                        let (from, to) = (self.buffer(c.from.buffer), self.buffer(c.to.buffer));
                        let (from_at, to_at, bytes) = (c.from.offset.at(v), c.to.offset.at(v), c.bytes.at(v));
                        let fits = |at: i64, b: &wgpu::Buffer| {
                            at >= 0 && bytes >= 0 && (at | bytes) % 4 == 0 && (at + bytes) as u64 <= b.size()
                        };
                        if !fits(from_at, from) || !fits(to_at, to) {
                            return Err(invalid(format!(
                                "a copy of {bytes} bytes at {from_at} → {to_at} is out of range"
                            )));
                        }
                        let (from_at, to_at, bytes) = (from_at as u64, to_at as u64, bytes as u64);
                        commands.push(Command::Copy { from, from_at, to, to_at, bytes });
                    }
                }
            }
        }
        if commands.is_empty() {
            return Ok(0);
        }
        // On an idle GPU the dispatches go in the submits of `submit_ranges` (as a replay's), so the GPU starts on
        // the first while the rest are encoded; copies and clears stay in order between them.
        let total = commands.iter().filter(|c| matches!(c, Command::Dispatch(_))).count();
        let ends: Vec<usize> = match self.idle.get() {
            true => submit_ranges(total).iter().map(|r| r.end).collect(),
            false => vec![total],
        };
        if total >= SUBMIT_MAX {
            self.idle.set(false);
        }
        gpu.scoped(label, || {
            let encoder = || gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) });
            let mut enc = encoder();
            let (mut copies, mut done, mut submit) = (0, 0, 0);
            let mut rest = &commands[..];
            while let Some(first) = rest.first() {
                match *first {
                    Command::Dispatch(_) => {
                        let run = rest.iter().take_while(|c| matches!(c, Command::Dispatch(_))).count();
                        let run = run.min(ends[submit] - done);
                        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                            label: Some(label),
                            timestamp_writes: None,
                        });
                        for c in &rest[..run] {
                            if let Command::Dispatch(k) = c {
                                self.s.dispatch(&mut pass, *k, None);
                            }
                        }
                        drop(pass);
                        (done, rest) = (done + run, &rest[run..]);
                        if done == ends[submit] && submit + 1 < ends.len() {
                            gpu.queue.submit([std::mem::replace(&mut enc, encoder()).finish()]);
                            submit += 1;
                        }
                        continue;
                    }
                    Command::Clear(b) => enc.clear_buffer(b, 0, None),
                    Command::Copy { from, from_at, to, to_at, bytes } => {
                        enc.copy_buffer_to_buffer(from, from_at, to, to_at, bytes);
                        copies += 1;
                    }
                }
                rest = &rest[1..];
            }
            gpu.queue.submit([enc.finish()]);
            copies
        })
    }

    fn buffer(&self, b: Buf) -> &'a wgpu::Buffer {
        let plan = &self.s.plan;
        let output = |i: usize| &self.s.buffers[plan.outputs[i].buffer];
        match b {
            Buf::Input(i) => &self.s.buffers[plan.inputs[i].buffer],
            Buf::Output(i) => output(i),
            Buf::Token(s) => {
                let st = &self.d.steps[s];
                match (&st.sample, self.sampling) {
                    (Some(sm), true) => output(sm.token),
                    _ => output(st.next_token),
                }
            }
            Buf::Constant(c) => &self.constants[c],
        }
    }
}
