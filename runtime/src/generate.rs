//! Token generation on a decoder artifact (`wgslc compile --kv-cache`): the plan's decoder section says which
//! inputs the loop fills, which outputs hold each step's new cache rows and its chosen token, and which
//! dispatches each step replays (see `wgslc_artifact::Decoder`).
//!
//! **Architecture Invariant:** after the prompt is written, nothing goes through the host per token. A decode step
//! that writes its cache in place is followed, in the same compute pass, by the plan's advance kernel, which puts
//! its chosen token into the next step's `input_ids` and the token history and moves the cache row, position and
//! mask word on: a submit's steps are one compute pass. A step that copies its rows instead has its token copied
//! on the GPU into `input_ids` and the history, its rows into the cache and its position and mask word from small
//! constant buffers written once per generation. The host encodes `steps_per_submit` steps per submit and reads
//! the history back only between submits when it must stop at an end-of-sequence token.

use crate::{RuntimeError, Session};
use wgslc_artifact::{Decoder, Step};

/// How [`Session::generate`] runs.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Tokens to generate after the prompt (at least 1).
    pub max_new_tokens: usize,
    /// Stop after this token (it is kept in the output).
    pub eos: Option<i64>,
    /// Decode steps encoded into one submit (at least 1). Larger amortizes submission; with `eos` the run reads
    /// the tokens back after each submit, so it overshoots an end-of-sequence token by fewer than this many steps
    /// (the overshoot is discarded).
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
    /// Submits of the decode loop.
    pub submits: usize,
    /// Buffer copies the decode loop encoded (the token, the position, the cache rows, the mask word).
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
    /// Generates greedily (or drawing tokens, with [`GenerateOptions::sampling`]) from `prompt` (token ids) on a decoder artifact: the prompt in prefill steps, then one
    /// decode step per token, the cache and the chosen tokens staying on the GPU. Errors name what does not fit:
    /// an artifact without a decoder section, an empty prompt, prompt plus new tokens over the cache's capacity.
    pub fn generate(&self, prompt: &[i64], opts: &GenerateOptions) -> Result<Generation, RuntimeError> {
        let bad = |m: String| RuntimeError::Input { name: "input_ids".into(), reason: m };
        let d = self.plan.decoder.as_ref().ok_or_else(|| {
            RuntimeError::Invalid("this artifact has no decoder section: compile the model with --kv-cache".into())
        })?;
        let step = |name: &str| {
            d.steps
                .iter()
                .find(|s| s.name == name)
                .ok_or_else(|| RuntimeError::Invalid(format!("the decoder section has no '{name}' step")))
        };
        let (decode, prefill) = (step("decode")?, step("prefill")?);
        if decode.tokens != 1 {
            return Err(RuntimeError::Invalid("the decode step must take one token".into()));
        }
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
        }
        // The output each step chooses its token into, and the dispatches that compute it.
        let choice = |st: &'_ Step| -> Result<(usize, Vec<usize>), RuntimeError> {
            match (&opts.sampling, &st.sample) {
                (None, _) => Ok((st.next_token, st.dispatches.clone())),
                (Some(_), Some(sm)) => Ok((sm.token, sm.dispatches.clone())),
                (Some(_), None) => Err(RuntimeError::Invalid(
                    "this artifact was compiled before wgslc could sample: compile it again to sample".into(),
                )),
            }
        };
        let (decode_token, decode_dispatches) = choice(decode)?;
        let (prefill_token, prefill_dispatches) = choice(prefill)?;
        let recompile = |what: &str| {
            RuntimeError::Invalid(format!("this artifact was compiled before wgslc {what}: compile it again"))
        };
        let history = d.tokens.ok_or_else(|| recompile("kept the token history on the GPU"))?;
        // A decode step that writes in place advances on the GPU (its advance kernel after it, in the same pass).
        let advance = match (decode.cache_row, decode.advance) {
            (Some(_), None) => return Err(recompile("advanced the decode loop on the GPU")),
            (_, a) => a.map(|a| if opts.sampling.is_some() { a.sample } else { a.greedy }),
        };
        let _guard = self.run_lock.lock().unwrap_or_else(|p| p.into_inner());
        let gpu = &self.gpu;
        let dev = &gpu.device;
        let input = |i: usize| (&self.plan.inputs[i], &self.buffers[self.plan.inputs[i].buffer]);
        let output = |i: usize| (&self.plan.outputs[i], &self.buffers[self.plan.outputs[i].buffer]);

        // Per generation: the history's read-back and, for a decode step that copies its rows, one mask word of 1
        // and the positions 0..capacity.
        let (readback, window) = gpu.scoped("generation buffers", || {
            let buf = |label: &str, size: u64, usage| {
                dev.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(label),
                    size,
                    usage,
                    mapped_at_creation: false,
                })
            };
            let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
            let bytes = 4 * d.capacity as u64;
            let readback =
                buf("wgslc tokens read-back", bytes, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
            let window =
                advance.is_none().then(|| (buf("wgslc mask one", 4, storage), buf("wgslc positions", bytes, storage)));
            (readback, window)
        })?;
        if let (Some(s), Some(sm)) = (&opts.sampling, &decode.sample) {
            let (t, p) = (input(sm.temperature), input(sm.params));
            gpu.queue.write_buffer(t.1, 0, &s.temperature.to_le_bytes());
            let seed = (s.seed ^ (s.seed >> 32)) as u32;
            gpu.queue.write_buffer(p.1, 0, &p.0.words([s.top_k as i64, i64::from(seed as i32)]));
        }
        let (mask_spec, mask_buf) = input(decode.attention_mask);
        if let Some((one, iota)) = &window {
            gpu.queue.write_buffer(one, 0, &mask_spec.words([1]));
            if let Some(p) = decode.position_ids {
                gpu.queue.write_buffer(iota, 0, &input(p).0.words(0..d.capacity as i64));
            }
        }
        let (history_spec, history) = input(history);
        gpu.queue.write_buffer(history, 0, &history_spec.words(prompt.iter().copied()));

        // Prefill, one submit per chunk; the cache starts zeroed.
        let start = std::time::Instant::now();
        let mut enc = dev.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("wgslc cache") });
        for s in &d.state {
            enc.clear_buffer(&self.buffers[self.plan.inputs[s.input].buffer], 0, None);
        }
        gpu.queue.submit([enc.finish()]);
        let n = prefill.tokens;
        for (c, chunk) in prompt.chunks(n).enumerate() {
            let (pos, real) = (c * n, chunk.len());
            let write = |i: usize, data: Vec<u8>| gpu.queue.write_buffer(input(i).1, 0, &data);
            let pad = *chunk.last().expect("chunks are not empty");
            write(
                prefill.input_ids,
                input(prefill.input_ids).0.words((0..n).map(|i| chunk.get(i).copied().unwrap_or(pad))),
            );
            // A prefill step that writes in place sees every key at its position, the whole chunk unmasked (its
            // padding comes after the real tokens, which causality hides from them: a mask derived from the
            // attention mask's sum then puts the chunk at its positions); otherwise its own keys come after the
            // window's rows.
            let at_positions = prefill.cache_row.is_some();
            let keys = if at_positions { d.capacity } else { d.rows + n };
            let mask = (0..keys).map(|j| {
                i64::from(if at_positions { j < pos + n } else { j < pos || (j >= d.rows && j < d.rows + real) })
            });
            write(prefill.attention_mask, input(prefill.attention_mask).0.words(mask));
            if let Some(p) = prefill.position_ids {
                write(p, input(p).0.words((0..n).map(|i| (pos + i.min(real - 1)) as i64)));
            }
            if let Some(p) = prefill.cache_position {
                let first = if at_positions { pos } else { d.rows };
                write(p, input(p).0.words((0..n).map(|i| (first + i) as i64)));
            }
            if let Some(r) = prefill.cache_row {
                write(r, input(r).0.words([pos as i64]));
            }
            if let Some(p) = prefill.last_index {
                write(p, input(p).0.words([real as i64 - 1]));
            }
            gpu.scoped("prefill", || {
                let mut enc =
                    dev.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("wgslc prefill") });
                self.encode_step(&mut enc, &prefill.name, &prefill_dispatches);
                self.copy_rows(&mut enc, d, prefill, pos, real);
                if pos + real == prompt.len() {
                    let (_, next) = output(prefill_token);
                    enc.copy_buffer_to_buffer(next, 0, history, 4 * prompt.len() as u64, 4);
                    enc.copy_buffer_to_buffer(next, 0, input(decode.input_ids).1, 0, 4);
                }
                gpu.queue.submit([enc.finish()]);
            })?;
        }
        dev.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| RuntimeError::Gpu(e.to_string()))?;
        gpu.check_lost()?;
        let prefill_ms = start.elapsed().as_secs_f64() * 1e3;

        // Decode: the mask holds the prompt's rows and the step's own. A step that advances on the GPU starts at
        // the prompt's end (row, position and mask word there), and each step's advance kernel moves them on;
        // otherwise the step's token is at row `rows` and its row is added after it runs, when its cache rows are
        // copied there.
        let start = std::time::Instant::now();
        let first = prompt.len(); // the position of the first decode step's token
        let at = |i: Option<usize>| i.map(input);
        let mask = (0..d.rows + 1)
            .map(|j| i64::from(j < first || (advance.is_some() && j == first) || (j == d.rows && advance.is_none())));
        gpu.queue.write_buffer(mask_buf, 0, &mask_spec.words(mask));
        if let Some((spec, buf)) = at(decode.cache_position) {
            gpu.queue.write_buffer(buf, 0, &spec.words([d.rows as i64]));
        }
        if advance.is_some() {
            for (spec, buf) in [at(decode.cache_row), at(decode.position_ids)].into_iter().flatten() {
                gpu.queue.write_buffer(buf, 0, &spec.words([first as i64]));
            }
        }
        let mut produced = prompt.len() + 1; // tokens in the history
        let mut steps = 0;
        let mut submits = 0;
        let mut tokens: Option<Vec<i64>> = None;
        if opts.eos.is_some() {
            tokens = self.read_tokens(history, &readback, produced)?.into();
        }
        let mut host = std::time::Duration::ZERO;
        let mut copies = 0;
        while produced < total && !stopped(tokens.as_deref(), prompt.len(), opts.eos) {
            let k = opts.steps_per_submit.min(total - produced);
            let encoding = std::time::Instant::now();
            copies += gpu.scoped("decode", || {
                let mut enc =
                    dev.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("wgslc decode") });
                let mut copies = 0;
                if let Some(a) = advance {
                    // The submit's steps in one compute pass.
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some(&decode.name),
                        timestamp_writes: None,
                    });
                    for &d in (0..k).flat_map(|_| decode_dispatches.iter().chain([&a])) {
                        self.dispatch(&mut pass, d, None);
                    }
                }
                for i in (0..k).filter(|_| advance.is_none()) {
                    let (one, iota) = window.as_ref().expect("a decode step that copies its rows");
                    let pos = produced + i - 1; // the position of the token this step reads
                    if let Some(p) = decode.position_ids {
                        enc.copy_buffer_to_buffer(iota, 4 * pos as u64, input(p).1, 0, 4);
                        copies += 1;
                    }
                    self.encode_step(&mut enc, &decode.name, &decode_dispatches);
                    let (_, next) = output(decode_token);
                    enc.copy_buffer_to_buffer(next, 0, history, 4 * (pos + 1) as u64, 4);
                    enc.copy_buffer_to_buffer(next, 0, input(decode.input_ids).1, 0, 4);
                    copies += 2;
                    if pos < d.rows {
                        copies += self.copy_rows(&mut enc, d, decode, pos, 1);
                        enc.copy_buffer_to_buffer(one, 0, mask_buf, 4 * pos as u64, 4);
                        copies += 1;
                    }
                }
                gpu.queue.submit([enc.finish()]);
                copies
            })?;
            host += encoding.elapsed();
            produced += k;
            steps += k;
            submits += 1;
            if opts.eos.is_some() {
                tokens = Some(self.read_tokens(history, &readback, produced)?);
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

    /// One step's dispatches in one compute pass.
    fn encode_step(&self, enc: &mut wgpu::CommandEncoder, label: &str, dispatches: &[usize]) {
        let mut pass =
            enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some(label), timestamp_writes: None });
        dispatches.iter().for_each(|&d| self.dispatch(&mut pass, d, None));
    }

    /// Copies the step's first `count` new rows of every cache into the cache at row `pos`; returns how many
    /// copies it encoded.
    fn copy_rows(&self, enc: &mut wgpu::CommandEncoder, d: &Decoder, step: &Step, pos: usize, count: usize) -> usize {
        let mut copies = 0;
        for (s, p) in d.state.iter().zip(&step.present) {
            let past = &self.plan.inputs[s.input];
            let out = &self.plan.outputs[p.output];
            let outer: usize = past.shape[..s.axis].iter().product();
            let inner = past.shape[s.axis + 1..].iter().product::<usize>() as u64 * 4;
            let (src_rows, dst_rows) = (out.shape[s.axis] as u64, past.shape[s.axis] as u64);
            for o in 0..outer as u64 {
                enc.copy_buffer_to_buffer(
                    &self.buffers[out.buffer],
                    (o * src_rows + p.first_row as u64) * inner,
                    &self.buffers[past.buffer],
                    (o * dst_rows + pos as u64) * inner,
                    count as u64 * inner,
                );
                copies += 1;
            }
        }
        copies
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
