//! The `wgslc` command line. See README.md for the contract; other tools are built on it.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wgslc::runtime::{Gpu, HostTensor, Session, ShaderChecks};

#[derive(Parser)]
#[command(name = "wgslc", version, about = "Compile ONNX models to fused WGSL and replay them on WebGPU")]
struct Cli {
    /// No progress display and no informational lines on stderr (errors still go there).
    #[arg(long, global = true)]
    quiet: bool,
    /// Load artifacts with wgpu's runtime checks on their kernels (index clamps, loop bounds), as for untrusted
    /// shaders: for artifacts you did not compile. Off by default: wgslc's kernels need neither, and they cost
    /// products up to 25 %.
    #[arg(long, global = true)]
    shader_checks: bool,
    /// Replay every kernel's plain module, never its subgroup module (by default, kernels that have one use it
    /// where the adapter offers WebGPU's subgroups with subgroups of 4 to 128 invocations).
    #[arg(long, global = true)]
    no_subgroups: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Compile a model into an artifact directory (plan.json, kernels/*.wgsl, weights.safetensors).
    Compile {
        /// The model file: ONNX (.onnx) or a torch.export archive (.pt2).
        model: PathBuf,
        /// Output directory.
        #[arg(short = 'o', long = "out")]
        out: PathBuf,
        /// Bind a named symbolic dimension: NAME=VALUE, or NAME=MIN..MAX for one artifact that runs at every
        /// value in the range (repeatable).
        #[arg(long = "dim", value_name = "NAME=N|NAME=MIN..MAX")]
        dims: Vec<String>,
        /// With a ranged dim: cut its range into buckets, each compiled for its own values and sharing the
        /// artifact's buffers and weights, so a run costs about what an artifact compiled for its length costs.
        /// `auto` (the default): buckets ending at the powers of two in the range (powers of four beyond 12
        /// buckets), for one ranged dim; `none`: one tiling for the whole range; or the buckets' ends, E1,E2,...
        /// (increasing, below MAX; the last bucket ends at MAX).
        #[arg(long = "buckets", value_name = "auto|none|E1,E2,...", default_value = "auto")]
        buckets: String,
        /// Override an input's shape: INPUT=AxBxC (repeatable).
        #[arg(long = "shape", value_name = "INPUT=AxBxC")]
        shapes: Vec<String>,
        /// Specialize an input to a value at compile time: INPUT=FILE.npy (repeatable). The input stops being
        /// a run-time input; use it for shape-like parameters a model leaves as inputs.
        #[arg(long = "const", value_name = "INPUT=FILE.npy")]
        constants: Vec<String>,
        /// Keep one kernel per op (no fusion), for comparison and debugging.
        #[arg(long = "no-fuse")]
        no_fuse: bool,
        /// The device limits to compile for: `default` (WebGPU's defaults, which every device has) or a JSON file
        /// of WebGPU limit names (maxStorageBufferBindingSize, maxBufferSize, …; others keep the default).
        /// Weights larger than one binding are split into blocks.
        #[arg(long = "limits", value_name = "default|FILE.json", default_value = "default")]
        limits: String,
        /// Write into DIR although it is not empty and holds no artifact (files already there are still never
        /// replaced or deleted). Without it, DIR must be new, empty, or a previous artifact, which is replaced.
        #[arg(long = "force")]
        force: bool,
        /// Give every intermediate a buffer of its own (no reuse by lifetime), for comparison and debugging.
        #[arg(long = "no-reuse")]
        no_reuse: bool,
        /// Activation memory the planner may spend, as a multiple of the lower bound, so that kernels bind their
        /// inputs read-only (two sets of arenas; faster on NVIDIA GPUs). Default 1.25; 2 or more always allows it.
        #[arg(long = "memory-budget", value_name = "RATIO")]
        memory_budget: Option<f64>,
        /// Whether Q·Kᵀ → softmax → ·V becomes one attention kernel with an online softmax or three kernels.
        /// Default: fused for `--target gpu`, unfused for `--target cpu`.
        #[arg(long = "attention", value_enum)]
        attention: Option<Mode>,
        /// Whether MobileNet-style inverted-residual blocks are fused: a 1x1 expansion computed inside the
        /// depthwise convolution that reads it, and the whole expansion → depthwise → projection as one kernel where
        /// the projection has at most 64 channels. `unfused` keeps a kernel per convolution. Default: fused for
        /// `--target gpu`, unfused for `--target cpu`.
        #[arg(long = "inverted-residual", value_enum)]
        inverted_residual: Option<Mode>,
        /// The kind of adapter to shape the kernels for: `gpu` (the default) or `cpu`, a CPU implementation of
        /// WebGPU or Vulkan (SwiftShader, which Chrome uses without a usable GPU; Mesa's lavapipe): few workgroups,
        /// matrix-vector products whose sums over K stay in at most 4 threads, weights in their stored layout, no
        /// product split along K, and (unless --attention or --inverted-residual say otherwise) attention and
        /// inverted-residual blocks a kernel per op. The artifact runs on any adapter either way.
        #[arg(long = "target", value_enum, default_value_t = TargetKind::Gpu)]
        target: TargetKind,
        /// Compile a decoder for generation with a KV cache of MAX tokens (prompt plus generated) held on the GPU:
        /// a one-token decode step and a prefill step, replayed by `wgslc generate`. The model's inputs must be
        /// input_ids, attention_mask, position_ids (cache_position optional) and past_key_values.N.key/value,
        /// its outputs logits and present.N.key/value (other cache names with --state; a .pt2's outputs after the
        /// logits pair with its other inputs in order).
        #[arg(long = "kv-cache", value_name = "MAX")]
        kv_cache: Option<usize>,
        /// With --kv-cache: tokens per prefill step (a longer prompt takes several). Default: min(64, MAX - 1).
        #[arg(long = "prefill-chunk", value_name = "N", requires = "kv_cache")]
        prefill_chunk: Option<usize>,
        /// With --kv-cache: pair a cache output with its input when they are not named present.N.* and
        /// past_key_values.N.* (repeatable).
        #[arg(long = "state", value_name = "OUTPUT=INPUT", requires = "kv_cache")]
        state: Vec<String>,
        /// Store the weights of products and lookup tables narrower than the model has them: f16 (float16), q8 or
        /// q4 (8- or 4-bit codes in blocks along K, one float16 scale a block). Each weight's error is written in
        /// report.json, the bytes before and after in the text report.
        #[arg(long = "weights", value_enum, value_name = "f16|q8|q4")]
        weights: Option<Weights>,
        /// With --weights q8|q4: elements per quantization block along K (a power of two from 16 to 256).
        #[arg(long = "block", value_name = "N", default_value_t = 32, requires = "weights")]
        block: usize,
        /// Print what a stage produced to stdout and stop: the IR after import, layout (--kv-cache's proven cache
        /// layout), infer, last_row (a prefill step's LM head over its last token), lower, dce, ranges (ranged dims
        /// masked), merge, legalize, kmajor, narrow, weights, tabulate (a decoder's position tables) or split; with
        /// schedule also the kernels (folds, recipes) and why each boundary stands; with memory also the buffer
        /// plan; with emit also every kernel's WGSL.
        #[arg(long = "dump-after", value_name = "STAGE")]
        dump_after: Option<String>,
    },
    /// Run a compiled artifact on the GPU.
    Run {
        /// The artifact directory.
        dir: PathBuf,
        /// Inputs: FILE.npy in graph-input order, or NAME=FILE.npy (repeatable).
        #[arg(long = "input", value_name = "FILE.npy")]
        inputs: Vec<String>,
        /// Output directory: output_0.npy, output_1.npy, … and outputs.json.
        #[arg(short = 'o', long = "out")]
        out: PathBuf,
    },
    /// Generate tokens greedily with a decoder artifact (`compile --kv-cache`): prefill the prompt, then one decode
    /// step per token, the KV cache and the chosen tokens staying on the GPU. Writes OUTDIR/tokens.npy (int64
    /// [1, prompt + generated]) and prints one JSON line with prefill_ms, decode_tokens, decode_ms, tokens_per_s.
    Generate {
        /// The artifact directory.
        dir: PathBuf,
        /// The prompt: an integer .npy of shape [1, L] or [L].
        #[arg(long = "input-ids", value_name = "FILE.npy")]
        input_ids: PathBuf,
        /// Tokens to generate (prompt plus these may not exceed the --kv-cache capacity).
        #[arg(long = "max-new-tokens", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        max_new_tokens: u64,
        /// Stop after this token id.
        #[arg(long, value_name = "ID")]
        eos: Option<i64>,
        /// Decode steps per submit; with --eos the tokens are read back after each submit.
        #[arg(long = "steps-per-submit", value_name = "K", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
        steps_per_submit: u64,
        /// Sample at this temperature instead of taking the most likely token (0: greedy). Any of --temperature,
        /// --top-k and --seed samples; the others default to 1.0, 0 (the whole vocabulary) and a fresh seed.
        #[arg(long, value_name = "T", allow_negative_numbers = true)]
        temperature: Option<f32>,
        /// Sample from the K most likely tokens only.
        #[arg(long = "top-k", value_name = "K")]
        top_k: Option<u32>,
        /// The sampling seed (printed in the JSON line; the same seed gives the same tokens on any device).
        #[arg(long, value_name = "S")]
        seed: Option<u64>,
        /// Output directory for tokens.npy.
        #[arg(short = 'o', long = "out")]
        out: PathBuf,
    },
    /// Print the fusion report of a compiled artifact (DIR/report.json) as text, JSON or one offline HTML file.
    Report {
        /// The artifact directory.
        dir: PathBuf,
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
        /// Memory bandwidth for the floor times, GB/s.
        #[arg(long, default_value_t = 3000.0)]
        bandwidth: f64,
        /// Write to this file instead of standard output.
        #[arg(short = 'o', long = "out")]
        out: Option<PathBuf>,
    },
    /// Time replays of a compiled artifact on the GPU (inputs are random unless given).
    Bench {
        /// The artifact directory.
        dir: PathBuf,
        /// Inputs as for `run`; missing ones are filled with deterministic pseudo-random values.
        #[arg(long = "input", value_name = "FILE.npy")]
        inputs: Vec<String>,
        /// Timed replays (at least 1).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
        iterations: u64,
        /// Untimed replays first.
        #[arg(long, default_value_t = 5)]
        warmup: usize,
        /// Also print every dispatch's time in replay order (one JSON line), the slowest kinds of kernel (kernels
        /// whose names differ only in numbers, as one per layer, summed) and the slowest kernels: GPU timestamps
        /// around each dispatch of the one-pass replay where the adapter has them, else each dispatch submitted
        /// and timed on its own (per-submit overhead included).
        #[arg(long)]
        profile: bool,
        /// Decoder artifacts (`compile --kv-cache`): replay only this step (`decode` or `prefill`); `prefill` with
        /// its loop inputs (mask, positions, tokens) as a generation writes them for a prompt's first whole chunk.
        #[arg(long, value_name = "STEP", conflicts_with = "decode")]
        step: Option<String>,
        /// Decoder artifacts: time generation instead of replays (greedy, a pseudo-random prompt) and print
        /// tokens/s, ms/token, dispatches/token, GPU time/token and the share of the bandwidth floor; with
        /// --profile, every kernel of one decode step with its time and bandwidth.
        #[arg(long, conflicts_with = "inputs")]
        decode: bool,
        /// With --decode: prompt tokens.
        #[arg(long, value_name = "N", default_value_t = 32, requires = "decode", value_parser = clap::value_parser!(u64).range(1..))]
        prompt: u64,
        /// With --decode: tokens to generate.
        #[arg(long, value_name = "N", default_value_t = 128, requires = "decode", value_parser = clap::value_parser!(u64).range(2..))]
        tokens: u64,
        /// With --decode: decode steps per submit.
        #[arg(long = "steps-per-submit", value_name = "K", default_value_t = 16, requires = "decode", value_parser = clap::value_parser!(u64).range(1..))]
        steps_per_submit: u64,
        /// Ranged artifacts (`compile --dim NAME=MIN..MAX`): time the replay at each of these values of the dim
        /// (NAME=N1,N2,...; the other ranged dims at their max), with pseudo-random inputs of those lengths: one
        /// JSON line each, with `dims` and, in an artifact compiled in buckets, the `bucket` that ran.
        #[arg(long = "dim", value_name = "NAME=N1,N2,...", conflicts_with_all = ["inputs", "decode", "step"])]
        dims: Option<String>,
    },
}

/// `--weights`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Weights {
    F16,
    Q8,
    Q4,
}

/// `--target`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum TargetKind {
    Gpu,
    Cpu,
}

/// Whether a fusion is applied (`--attention`, `--inverted-residual`).
#[derive(Clone, Copy, clap::ValueEnum)]
enum Mode {
    Fused,
    Unfused,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ReportFormat {
    Text,
    Json,
    Html,
}

fn main() {
    if let Err(e) = real_main() {
        // One line on stderr: the chain of causes, joined.
        let msg = format!("{e:#}").replace('\n', " ");
        eprintln!("wgslc: error: {msg}");
        std::process::exit(1);
    }
}

fn parse_kv(s: &str, what: &str) -> Result<(String, String)> {
    let (k, v) = s.split_once('=').with_context(|| format!("{what} '{s}' is not of the form NAME=VALUE"))?;
    if k.is_empty() {
        bail!("{what} '{s}' has an empty name");
    }
    Ok((k.to_string(), v.to_string()))
}

/// A spinner on stderr while something slow runs (a compile, a weight load). indicatif draws it only on a
/// terminal; `--quiet` hides it everywhere.
fn spinner(quiet: bool, msg: &str) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new_spinner();
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        pb.set_style(style);
    }
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    pb
}

/// Loads an artifact behind a spinner.
fn load(dir: &Path, quiet: bool, gpu: Arc<Gpu>) -> Result<Session> {
    let pb = spinner(quiet, &format!("loading {}", dir.display()));
    let r = Session::load_with(dir, gpu).with_context(|| format!("loading '{}'", dir.display()));
    pb.finish_and_clear();
    r
}

fn real_main() -> Result<()> {
    let cli = Cli::parse();
    let quiet = cli.quiet;
    let checks = if cli.shader_checks { ShaderChecks::Checked } else { ShaderChecks::Trusted };
    let gpu = || Gpu::with_options(checks, !cli.no_subgroups);
    // Informational lines on stderr, which --quiet silences.
    let info = |line: String| {
        if !quiet {
            eprintln!("{line}");
        }
    };
    match cli.cmd {
        Cmd::Compile {
            model,
            out,
            dims,
            buckets,
            shapes,
            constants,
            no_fuse,
            limits,
            force,
            no_reuse,
            memory_budget,
            attention,
            inverted_residual,
            target,
            kv_cache,
            prefill_chunk,
            state,
            weights,
            block,
            dump_after,
        } => {
            let attention = attention.map(|m| match m {
                Mode::Fused => wgslc_passes::AttentionMode::Fused,
                Mode::Unfused => wgslc_passes::AttentionMode::Unfused,
            });
            let inverted_residual = inverted_residual.map(|m| match m {
                Mode::Fused => wgslc_passes::InvertedResidualMode::Fused,
                Mode::Unfused => wgslc_passes::InvertedResidualMode::Unfused,
            });
            if memory_budget.is_some_and(|b| !b.is_finite() || b < 1.0) {
                bail!("--memory-budget takes a ratio of at least 1.0");
            }
            let limits = match limits.as_str() {
                "default" => wgslc::Limits::default(),
                file => {
                    let text = std::fs::read_to_string(file).with_context(|| format!("reading --limits '{file}'"))?;
                    wgslc::Limits::from_json(&text).map_err(|e| anyhow::anyhow!("--limits '{file}': {e}"))?
                }
            };
            let weights = match weights {
                None => wgslc::WeightFormat::Keep,
                Some(Weights::F16) => wgslc::WeightFormat::F16,
                Some(Weights::Q8) => wgslc::WeightFormat::Q8,
                Some(Weights::Q4) => wgslc::WeightFormat::Q4,
            };
            let mut opts = wgslc::CompileOptions {
                no_fuse,
                limits,
                force,
                no_reuse,
                memory_budget,
                attention,
                inverted_residual,
                target: match target {
                    TargetKind::Gpu => wgslc_passes::Target::Gpu,
                    TargetKind::Cpu => wgslc_passes::Target::Cpu,
                },
                weights,
                weight_block: Some(block),
                buckets: match buckets.as_str() {
                    "auto" => wgslc::Buckets::Auto,
                    "none" => wgslc::Buckets::None,
                    ends => wgslc::Buckets::Ends(
                        ends.split(',')
                            .map(|e| {
                                e.trim().parse::<usize>().with_context(|| {
                                    format!("--buckets: '{e}' is not a bucket's end (auto, none or E1,E2,...)")
                                })
                            })
                            .collect::<Result<_>>()?,
                    ),
                },
                ..Default::default()
            };
            for d in dims {
                let (k, v) = parse_kv(&d, "--dim")?;
                let int = |s: &str| {
                    s.trim().parse::<usize>().with_context(|| format!("--dim {k}: '{s}' is not a non-negative integer"))
                };
                match v.split_once("..") {
                    Some((lo, hi)) => {
                        let (min, max) = (int(lo)?, int(hi)?);
                        opts.ranges.push(wgslc::DimRange { name: k.clone(), min, max });
                    }
                    None => {
                        let n = int(&v)?;
                        opts.dims.insert(k, n);
                    }
                }
            }
            for s in shapes {
                let (k, v) = parse_kv(&s, "--shape")?;
                let dims = if v.is_empty() {
                    vec![]
                } else {
                    v.split('x')
                        .map(|d| {
                            d.parse::<usize>()
                                .with_context(|| format!("--shape {k}: '{d}' in '{v}' is not a dimension"))
                        })
                        .collect::<Result<Vec<_>>>()?
                };
                opts.shapes.insert(k, dims);
            }
            for c in constants {
                let (k, v) = parse_kv(&c, "--const")?;
                let t = wgslc::npy::read(Path::new(&v)).with_context(|| format!("--const {k}"))?;
                opts.constants.insert(k.clone(), wgslc::constant_from_host(&t));
            }
            if let Some(capacity) = kv_cache {
                if prefill_chunk == Some(0) {
                    bail!("--prefill-chunk takes a positive number of tokens");
                }
                let state = state.iter().map(|s| parse_kv(s, "--state")).collect::<Result<Vec<_>>>()?;
                opts.kv_cache = Some(wgslc::KvCache {
                    capacity,
                    chunk: prefill_chunk.unwrap_or(64).min(capacity.saturating_sub(1)).max(1),
                    state,
                    fixed: Default::default(),
                });
            }
            if let Some(pass) = dump_after {
                print!("{}", wgslc::dump_after(&model, &opts, &pass)?);
                return Ok(());
            }
            let pb = spinner(quiet, "compiling");
            let bar = pb.clone();
            opts.progress = wgslc::Progress::new(move |stage| bar.set_message(format!("compiling: {stage}")));
            let s = wgslc::compile(&model, &out, &opts).with_context(|| format!("compiling '{}'", model.display()));
            pb.finish_and_clear();
            let s = s?;
            let source = if model.extension().is_some_and(|e| e == "pt2") { "ATen" } else { "ONNX" };
            let buckets = s.plan.ranges.as_ref().map_or(0, |r| r.buckets.len());
            let dispatches = match buckets {
                0 => format!("{} dispatches", s.plan.dispatches.len()),
                n => format!("{n} buckets, {} dispatches at the max", s.plan.dispatches.len()),
            };
            info(format!(
                "wgslc: compiled {} {source} nodes into {} kernels ({dispatches}) in {}",
                s.source_nodes,
                s.kernels,
                out.display()
            ));
            for note in &s.notes {
                info(format!("wgslc: note: {note}"));
            }
        }
        Cmd::Run { dir, inputs, out } => {
            let session = load(&dir, quiet, gpu()?)?;
            info(format!("wgslc: running on {}", session.gpu().describe()));
            let tensors = load_inputs(&session, &inputs, false)?;
            let outputs = session.run(&tensors)?;
            std::fs::create_dir_all(&out).with_context(|| format!("creating '{}'", out.display()))?;
            let mut names = serde_json::Map::new();
            for (i, (t, spec)) in outputs.iter().zip(session.outputs()).enumerate() {
                let file = out.join(format!("output_{i}.npy"));
                wgslc::npy::write_as(&file, t, spec.dtype.name())?;
                names.insert(i.to_string(), serde_json::Value::String(spec.name.clone()));
                info(format!("wgslc: output '{}' {} {:?} -> {}", spec.name, spec.dtype, t.shape, file.display()));
            }
            let json = serde_json::to_string_pretty(&serde_json::Value::Object(names))? + "\n";
            std::fs::write(out.join("outputs.json"), json).with_context(|| format!("writing '{}'", out.display()))?;
        }
        Cmd::Generate { dir, input_ids, max_new_tokens, eos, steps_per_submit, temperature, top_k, seed, out } => {
            use wgslc::runtime::{GenerateOptions, Sampling, TensorData};
            if let Some(t) = temperature.filter(|t| !(t.is_finite() && *t >= 0.0)) {
                bail!("--temperature must be 0 or more, not {t}");
            }
            let sampling = (temperature.is_some() || top_k.is_some() || seed.is_some()).then(|| Sampling {
                temperature: temperature.unwrap_or(1.0),
                top_k: top_k.unwrap_or(0) as usize,
                seed: seed.unwrap_or_else(|| {
                    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                    now.as_nanos() as u64 ^ u64::from(std::process::id())
                }),
            });
            let t = wgslc::npy::read(&input_ids).with_context(|| format!("--input-ids '{}'", input_ids.display()))?;
            if t.shape.len() > 2 || (t.shape.len() == 2 && t.shape[0] != 1) {
                bail!("--input-ids: expected a prompt of shape [1, L] or [L], got {:?}", t.shape);
            }
            let prompt: Vec<i64> = match t.data {
                TensorData::I64(v) => v,
                TensorData::I32(v) => v.into_iter().map(i64::from).collect(),
                _ => bail!("--input-ids: expected int64 or int32 token ids"),
            };
            let session = load(&dir, quiet, gpu()?)?;
            info(format!("wgslc: generating on {}", session.gpu().describe()));
            let opts = GenerateOptions {
                max_new_tokens: max_new_tokens as usize,
                eos,
                steps_per_submit: steps_per_submit as usize,
                sampling,
            };
            let g = session.generate(&prompt, &opts)?;
            std::fs::create_dir_all(&out).with_context(|| format!("creating '{}'", out.display()))?;
            let file = out.join("tokens.npy");
            let tokens = HostTensor { shape: vec![1, g.tokens.len()], data: TensorData::I64(g.tokens.clone()) };
            wgslc::npy::write(&file, &tokens)?;
            let round = |x: f64| (x * 1e3).round() / 1e3;
            let tps = if g.decode_ms > 0.0 { g.decode_steps as f64 / (g.decode_ms / 1e3) } else { 0.0 };
            let mut line = serde_json::json!({
                "adapter": session.gpu().describe(),
                "prompt_tokens": prompt.len(),
                "generated_tokens": g.tokens.len() - prompt.len(),
                "prefill_ms": round(g.prefill_ms),
                "decode_tokens": g.decode_steps,
                "decode_ms": round(g.decode_ms),
                "tokens_per_s": round(tps),
                "steps_per_submit": steps_per_submit,
                "submits": g.submits,
            });
            if let Some(s) = sampling {
                line["temperature"] = s.temperature.into();
                line["top_k"] = s.top_k.into();
                line["seed"] = s.seed.into();
            }
            println!("{line}");
            info(format!("wgslc: {} tokens -> {}", g.tokens.len(), file.display()));
        }
        Cmd::Report { dir, format, bandwidth, out } => {
            let path = dir.join("report.json");
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading '{}'", path.display()))?;
            let report: wgslc_emit::report::Report =
                serde_json::from_str(&text).with_context(|| format!("'{}' is not a wgslc report", path.display()))?;
            use wgslc_emit::report::{REPORT_FORMAT, REPORT_VERSION};
            if report.format != REPORT_FORMAT || report.version > REPORT_VERSION {
                bail!(
                    "'{}' is a {} report of version {}; this wgslc reads {REPORT_FORMAT} up to version {REPORT_VERSION}",
                    path.display(),
                    report.format,
                    report.version
                );
            }
            if !(bandwidth > 0.0 && bandwidth.is_finite()) {
                bail!("--bandwidth must be a positive number of GB/s");
            }
            let report = report.with_bandwidth(bandwidth);
            let body = match format {
                ReportFormat::Text => report.to_text(),
                ReportFormat::Json => report.to_json(),
                ReportFormat::Html => report.to_html(),
            };
            match out {
                Some(p) => std::fs::write(&p, body).with_context(|| format!("writing '{}'", p.display()))?,
                None => print!("{body}"),
            }
        }
        Cmd::Bench {
            dir,
            inputs,
            iterations,
            warmup,
            profile,
            step,
            decode,
            prompt,
            tokens,
            steps_per_submit,
            dims,
        } => {
            let mut session = load(&dir, quiet, gpu()?)?;
            if decode {
                let runs = iterations.min(5) as usize;
                return bench_decode(
                    session,
                    prompt as usize,
                    tokens as usize,
                    steps_per_submit as usize,
                    runs,
                    profile,
                );
            }
            if let Some(step) = &step {
                session.replay_step(step)?;
            }
            let runs: Vec<(Vec<HostTensor>, serde_json::Value)> = match &dims {
                Some(arg) => ranged_bench_inputs(&session, arg)?,
                None => {
                    let mut tensors = load_inputs(&session, &inputs, true)?;
                    if step.as_deref() == Some("prefill") {
                        first_chunk_inputs(&session, &mut tensors)?;
                    }
                    vec![(tensors, serde_json::Value::Null)]
                }
            };
            for (tensors, at) in runs {
                bench_replay(&session, &tensors, at, iterations as usize, warmup, profile)?;
            }
        }
    }
    Ok(())
}

/// `bench --dim NAME=N1,N2,...`: pseudo-random inputs at each value of the ranged dim NAME (the others at their
/// max), each with what its JSON line adds: `dims` and, where the artifact has buckets, the `bucket` that runs it.
fn ranged_bench_inputs(session: &Session, arg: &str) -> Result<Vec<(Vec<HostTensor>, serde_json::Value)>> {
    let (name, list) = parse_kv(arg, "--dim")?;
    let plan = session.plan();
    let Some(r) = &plan.ranges else {
        bail!("--dim {name}: this artifact has no ranged dim (compile with --dim NAME=MIN..MAX)")
    };
    let names: Vec<&str> = r.dims.iter().map(|d| d.name.as_str()).collect();
    let Some(d) = r.dims.iter().position(|d| d.name == name || d.name.split('=').any(|n| n == name)) else {
        bail!("--dim {name}: the artifact's ranged dims are {}", names.join(", "));
    };
    let mut out = Vec::new();
    for v in list.split(',') {
        let n: usize = v.trim().parse().with_context(|| format!("--dim {name}: '{v}' is not a length"))?;
        let dim = &r.dims[d];
        if n < dim.min || n > dim.max {
            bail!("--dim {name}: {n} is outside its range {}..{}", dim.min, dim.max);
        }
        let mut values: Vec<usize> = r.dims.iter().map(|d| d.max).collect();
        values[d] = n;
        let tensors =
            plan.inputs.iter().enumerate().map(|(i, spec)| pseudo_random(&spec.at_values(&values), i as u64)).collect();
        let mut at = serde_json::json!({ "dims": { dim.name.clone(): n } });
        if let Some(b) = r.layout(&values).bucket {
            at["bucket"] = serde_json::json!([r.buckets[b].min, r.buckets[b].max]);
        }
        out.push((tensors, at));
    }
    Ok(out)
}

/// One `bench` line: a run with `tensors` (which picks a ranged artifact's dims and bucket), warm-up replays, then
/// `iterations` timed ones; with `profile`, the slowest kinds of kernel and kernels. `at` (an object) adds its
/// fields to the line.
fn bench_replay(
    session: &Session,
    tensors: &[HostTensor],
    at: serde_json::Value,
    iterations: usize,
    warmup: usize,
    profile: bool,
) -> Result<()> {
    session.run(tensors)?;
    session.time_replay(warmup)?;
    // One replay (one submit, waited for) per sample, as the mean over all of them always was.
    let mut ms: Vec<f64> =
        (0..iterations).map(|_| session.time_replay(1).map(|t| t * 1e3)).collect::<Result<_, _>>()?;
    let mean = ms.iter().sum::<f64>() / ms.len() as f64;
    ms.sort_by(f64::total_cmp);
    let round = |x: f64| (x * 1e4).round() / 1e4;
    let mut line = serde_json::json!({
        "adapter": session.gpu().describe(),
        "dispatches": session.replayed(),
        "iterations": iterations,
        "ms_per_inference": round(mean),
        "min_ms": round(ms[0]),
        "median_ms": round(ms[ms.len() / 2]),
        "max_ms": round(ms[ms.len() - 1]),
    });
    if let (Some(line), serde_json::Value::Object(extra)) = (line.as_object_mut(), at) {
        line.extend(extra);
    }
    println!("{line}");
    if profile {
        let p = wgslc::profile::profile(session, iterations.min(50))?;
        let total: f64 = p.kernels.iter().map(|k| k.1).sum();
        let method = if p.timestamps { "gpu timestamps in one pass" } else { "one submit per dispatch" };
        // Every dispatch in replay order (for scripts that set one replay's kernels beside another's), then the
        // slowest kinds and kernels for a reader.
        let each: Vec<serde_json::Value> =
            p.kernels.iter().map(|(name, ms)| serde_json::json!([name, round(*ms)])).collect();
        println!("{}", serde_json::json!({ "profile": method, "kernels_ms": round(total), "kernels": each }));
        // Kernels of one kind (their names without the numbers that tell layers apart), summed.
        let mut kinds: Vec<(String, usize, f64)> = Vec::new();
        for (name, ms) in &p.kernels {
            let kind: String = name.chars().filter(|c| !c.is_ascii_digit()).collect();
            match kinds.iter_mut().find(|k| k.0 == kind) {
                Some(k) => (k.1, k.2) = (k.1 + 1, k.2 + ms),
                None => kinds.push((kind, 1, *ms)),
            }
        }
        kinds.sort_by(|a, b| b.2.total_cmp(&a.2));
        for (kind, count, ms) in kinds.into_iter().take(15) {
            let share = ((ms / total.max(f64::MIN_POSITIVE)) * 1e3).round() / 1e3;
            println!("{}", serde_json::json!({ "kind": kind, "count": count, "ms": round(ms), "share": share }));
        }
        let mut times: Vec<(usize, &(String, f64))> = p.kernels.iter().enumerate().collect();
        times.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        for (i, (name, ms)) in times.into_iter().take(15) {
            let share = ((ms / total.max(f64::MIN_POSITIVE)) * 1e3).round() / 1e3;
            println!("{}", serde_json::json!({ "dispatch": i, "kernel": name, "ms": round(*ms), "share": share }));
        }
    }
    Ok(())
}

/// `wgslc bench --decode`: generations of `tokens` tokens after a pseudo-random prompt of `prompt` tokens (one
/// untimed, then the fastest of `runs`), the decode step's GPU time by timestamps, and the bandwidth floor: the
/// bytes the decode step's kernels bind (weights, cache, activations; each region once) over the device's copy
/// bandwidth. One JSON line; with `profile`, one more per kernel of the decode step in dispatch order.
fn bench_decode(
    mut session: Session,
    prompt: usize,
    tokens: usize,
    steps_per_submit: usize,
    runs: usize,
    profile: bool,
) -> Result<()> {
    use wgslc::runtime::GenerateOptions;
    let plan = session.plan().clone();
    let Some(d) = &plan.decoder else {
        bail!("--decode: this artifact has no decoder section (compile the model with --kv-cache)");
    };
    let step = d.steps.iter().find(|s| s.name == "decode").context("the decoder section has no 'decode' step")?;
    let vocab = *plan.outputs[step.logits].shape.last().context("logits without a vocabulary axis")?;
    // A fixed pseudo-random prompt (an LCG), the same on every run and device.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let ids: Vec<i64> = (0..prompt)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((x >> 33) % vocab.max(1) as u64) as i64
        })
        .collect();
    let opts = GenerateOptions { max_new_tokens: tokens, eos: None, steps_per_submit, sampling: None };
    session.generate(&ids, &GenerateOptions { max_new_tokens: tokens.min(8), ..opts.clone() })?;
    let mut best: Option<wgslc::runtime::Generation> = None;
    for _ in 0..runs.max(1) {
        let g = session.generate(&ids, &opts)?;
        if best.as_ref().is_none_or(|b| g.decode_ms < b.decode_ms) {
            best = Some(g);
        }
    }
    let g = best.expect("at least one run");
    let steps = g.decode_steps.max(1) as f64;
    let ms_per_token = g.decode_ms / steps;
    // Bytes one decode step binds: every distinct bound region of its kernels.
    let kernel_bytes = |k: &wgslc_artifact::Kernel| k.bindings.iter().map(|b| b.size).sum::<u64>();
    let mut regions: Vec<(usize, u64, u64)> = step
        .dispatches
        .iter()
        .flat_map(|&i| plan.kernels[i].bindings.iter().map(|b| (b.buffer, b.offset, b.size)))
        .collect();
    regions.sort_unstable();
    regions.dedup();
    let bytes: u64 = regions.iter().map(|r| r.2).sum();
    let gbps = wgslc::bandwidth::copy_bandwidth(session.gpu(), 10)?;
    let floor_ms = bytes as f64 / (gbps * 1e9) * 1e3;
    session.replay_step("decode")?;
    let p = wgslc::profile::profile(&session, 20)?;
    let gpu_ms: f64 = p.kernels.iter().map(|k| k.1).sum();
    let round = |x: f64| (x * 1e4).round() / 1e4;
    println!(
        "{}",
        serde_json::json!({
            "adapter": session.gpu().describe(),
            "prompt_tokens": prompt,
            "new_tokens": tokens,
            "steps_per_submit": steps_per_submit,
            "tokens_per_s": round(steps / (g.decode_ms / 1e3)),
            "ms_per_token": round(ms_per_token),
            "host_ms_per_token": round(g.host_ms / steps),
            "prefill_ms": round(g.prefill_ms),
            "dispatches_per_token": step.dispatches.len() + usize::from(step.advance.is_some()),
            "copies_per_token": round(g.copies as f64 / steps),
            "gpu_ms_per_token": round(gpu_ms),
            "gpu_time": if p.timestamps { "gpu timestamps in one pass" } else { "one submit per dispatch" },
            "bytes_per_token": bytes,
            "copy_gb_per_s": round(gbps),
            "floor_ms_per_token": round(floor_ms),
            "floor_share": round(floor_ms / ms_per_token),
        })
    );
    if profile {
        for (i, ((name, ms), &k)) in p.kernels.iter().zip(&step.dispatches).enumerate() {
            let b = kernel_bytes(&plan.kernels[k]);
            let gb_s = if *ms > 0.0 { b as f64 / (ms * 1e-3) / 1e9 } else { 0.0 };
            println!(
                "{}",
                serde_json::json!({ "dispatch": i, "kernel": name, "us": round(ms * 1e3), "bytes": b, "gb_per_s": round(gb_s) })
            );
        }
    }
    Ok(())
}

/// Matches `--input` arguments to graph inputs (positional, or NAME=FILE), reading each .npy.
fn load_inputs(session: &Session, args: &[String], fill_missing: bool) -> Result<Vec<HostTensor>> {
    let specs = session.inputs();
    let mut by_name: HashMap<String, PathBuf> = HashMap::new();
    let mut positional = Vec::new();
    for a in args {
        match a.split_once('=') {
            Some((k, v)) if specs.iter().any(|s| s.name == k) => {
                by_name.insert(k.to_string(), PathBuf::from(v));
            }
            Some((k, _)) if !Path::new(a).exists() => {
                let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
                bail!("--input {a}: the model has no input '{k}' (inputs: {})", names.join(", "));
            }
            _ => positional.push(PathBuf::from(a)),
        }
    }
    if positional.len() + by_name.len() > specs.len() {
        bail!("{} inputs given, the model takes {}", positional.len() + by_name.len(), specs.len());
    }
    let mut pos = positional.into_iter();
    let mut out = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        let path = by_name.remove(&spec.name).or_else(|| pos.next());
        let t = match path {
            Some(p) => wgslc::npy::read(&p).with_context(|| format!("input {i} '{}'", spec.name))?,
            None if fill_missing => pseudo_random(spec, i as u64),
            None => bail!("missing input {i} '{}' ({} {:?})", spec.name, spec.dtype, spec.shape),
        };
        out.push(t);
    }
    Ok(out)
}

/// `bench --step prefill`: the loop inputs as a generation writes them for its first chunk (the decoder program's
/// `start` and `chunk` writes at position 0, a whole chunk of prompt tokens), so that the replay masks, places and
/// picks as a prompt's prefill does rather than over pseudo-random masks.
fn first_chunk_inputs(session: &Session, tensors: &mut [HostTensor]) -> Result<()> {
    use wgslc::runtime::TensorData;
    let plan = session.plan();
    let Some(d) = &plan.decoder else { return Ok(()) };
    let (Some(program), Some(prefill)) = (&d.program, d.steps.iter().find(|s| s.name == "prefill")) else {
        return Ok(());
    };
    let real = prefill.tokens as i64;
    let prompt: Vec<i64> = (0..real).map(|i| i % 16).collect();
    let vars = wgslc::artifact::Vars { pos: 0, real, len: real };
    for ins in program.start.iter().chain(&program.chunk) {
        let wgslc::artifact::Instr::Write(w) = ins else { continue };
        let values = w.values.at(vars, &prompt).map_err(|e| anyhow::anyhow!("the decoder program: {e}"))?;
        let t = tensors.get_mut(w.input).context("the decoder program writes an input the plan lacks")?;
        if values.len() > t.data.len() {
            bail!("the decoder program writes {} values into input {}", values.len(), w.input);
        }
        for (i, &x) in values.iter().enumerate() {
            match &mut t.data {
                TensorData::F32(v) => v[i] = x as f32,
                TensorData::I64(v) => v[i] = x,
                TensorData::I32(v) => v[i] = x as i32,
                TensorData::Bool(v) => v[i] = x != 0,
            }
        }
    }
    Ok(())
}

/// Deterministic inputs for benchmarks: floats in [-1, 1), integers in [0, 16), alternating bools.
fn pseudo_random(spec: &wgslc::artifact::TensorSpec, seed: u64) -> HostTensor {
    use wgslc::runtime::TensorData;
    let n: usize = spec.shape.iter().product();
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let data = match spec.storage {
        wgslc::artifact::StorageType::F32 => {
            TensorData::F32((0..n).map(|_| (next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0).collect())
        }
        wgslc::artifact::StorageType::I32 if spec.dtype == wgslc::artifact::Dtype::Int64 => {
            TensorData::I64((0..n).map(|_| (next() % 16) as i64).collect())
        }
        wgslc::artifact::StorageType::I32 => TensorData::I32((0..n).map(|_| (next() % 16) as i32).collect()),
        wgslc::artifact::StorageType::U32 => TensorData::Bool((0..n).map(|i| i % 2 == 0).collect()),
    };
    HostTensor { shape: spec.shape.clone(), data }
}
