//! The pipeline from a model file to an artifact, as one list of named stages: the frontend (`import`), the graph
//! passes of [`wgslc_passes::GRAPH_PASSES`], then `split` (weights larger than one binding, in blocks: it needs
//! the device limits), `schedule` (fusion), `memory` (the buffer plan) and `emit`
//! (naga-validated WGSL). [`compile`] runs them all and writes the artifact; [`dump_after`] stops after any stage
//! and prints what it produced. The `wgslc` binary and build scripts call this crate; it pulls in no CLI parser,
//! no GPU runtime and no file formats beyond the model's and the artifact's.
//!
//! **Architecture Invariant:** everything between reading the model and writing the artifact happens in memory;
//! the only files written are the artifact's (plan.json, kernels/, weights.safetensors) and report.json.

mod buckets;
mod decoder;
mod dump;
mod layout;
mod out_dir;
mod pipeline;
mod ranged;
mod source;

use std::collections::HashMap;
use std::path::Path;
use wgslc_emit::{Limits, Validated};
use wgslc_ir::Graph;
use wgslc_passes::{MemoryPlan, Schedule};

pub use buckets::MAX_AUTO as MAX_AUTO_BUCKETS;
pub use dump::{print_memory, print_schedule};
pub use pipeline::{run, stages};
use ranged::ranges_section;
pub use ranged::RangedCompile;
use wgslc_passes::CacheLayout;
pub use wgslc_passes::KvCache;
pub use wgslc_passes::{DimRange, Target, WeightChange, WeightFormat};

/// Everything that can stop a compile, by layer.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error(transparent)]
    Import(#[from] wgslc_onnx::ImportError),
    #[error(transparent)]
    Pt2(#[from] wgslc_pt2::Pt2Error),
    #[error(transparent)]
    Pass(#[from] wgslc_passes::PassError),
    #[error(transparent)]
    Emit(#[from] wgslc_emit::EmitError),
    #[error("'{0}': unknown model format (expected .onnx or .pt2)")]
    Format(String),
    #[error("unknown stage '{0}' for --dump-after (stages: {1})")]
    UnknownStage(String, String),
    #[error(
        "'{0}' is not empty and holds no wgslc artifact (no plan.json): compile into a new or empty directory, or \
         pass --force to add the artifact's files to it"
    )]
    OutDir(String),
    #[error("'{0}' exists and is not part of the previous artifact: not replaced (nothing was changed)")]
    OutDirFile(String),
    #[error("--kv-cache: {0}")]
    Decoder(String),
    #[error("--dim {0}")]
    Range(String),
    #[error("--buckets: {0}")]
    Buckets(String),
    #[error("{name}'s bucket {lo}..{hi} (--buckets): {source}")]
    Bucket { name: String, lo: usize, hi: usize, source: Box<CompileError> },
    #[error("--block {0}: quantization blocks are a power of two from 16 to 256 elements")]
    Block(usize),
}

/// What [`Progress`] calls.
type StageFn = dyn Fn(&str) + Send + Sync;

/// A callback told the name of each stage as it starts (for progress display); none by default.
#[derive(Clone, Default)]
pub struct Progress(Option<std::sync::Arc<StageFn>>);

impl Progress {
    pub fn new(f: impl Fn(&str) + Send + Sync + 'static) -> Progress {
        Progress(Some(std::sync::Arc::new(f)))
    }

    fn stage(&self, name: &str) {
        if let Some(f) = &self.0 {
            f(name);
        }
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Progress(callback)" } else { "Progress(none)" })
    }
}

#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    /// Values for named symbolic dims (`--dim NAME=N`).
    pub dims: HashMap<String, usize>,
    /// Named symbolic dims that take any value in a range at run time (`--dim NAME=MIN..MAX`): one artifact for
    /// every value, its memory planned for MAX (`wgslc_passes::apply_ranges`).
    pub ranges: Vec<wgslc_passes::DimRange>,
    /// Whole input shapes (`--shape INPUT=AxBxC`).
    pub shapes: HashMap<String, Vec<usize>>,
    /// Inputs specialized to constant values (`--const INPUT=FILE.npy`).
    pub constants: HashMap<String, wgslc_ir::Tensor>,
    /// The device limits to compile for; WebGPU's defaults unless set.
    pub limits: Limits,
    /// `--no-fuse`: one kernel per op, for comparison and debugging.
    pub no_fuse: bool,
    /// `--no-reuse`: one buffer per intermediate instead of the liveness-based plan.
    pub no_reuse: bool,
    /// `--memory-budget RATIO`: how much activation memory, as a multiple of the lower bound, the planner may spend
    /// so that kernels bind their inputs read-only (faster on NVIDIA GPUs). `None`: 1.25.
    pub memory_budget: Option<f64>,
    /// `--attention fused|unfused`: whether Q·Kᵀ → softmax → ·V becomes one kernel. `None`: the target's default
    /// (fused for a GPU, unfused for a CPU).
    pub attention: Option<wgslc_passes::AttentionMode>,
    /// `--inverted-residual fused|unfused`: whether MobileNet's expansion → depthwise (→ projection) chains become
    /// one kernel each. `None`: the target's default (fused for a GPU, unfused for a CPU).
    pub inverted_residual: Option<wgslc_passes::InvertedResidualMode>,
    /// `--force`: write into a non-empty directory that holds no artifact (its other files are still never
    /// replaced).
    pub force: bool,
    /// `--kv-cache MAX`: compile a decoder's decode and prefill steps around a GPU-resident cache (see
    /// `wgslc_passes::DecoderPlan`).
    pub kv_cache: Option<KvCache>,
    /// `--weights f16|q8|q4`: store the products' weights and lookup tables narrower than the model has them
    /// (`wgslc_passes::narrow_weights`).
    pub weights: WeightFormat,
    /// `--block N`: elements per quantization block along K for `--weights q8|q4` (`None`: 32).
    pub weight_block: Option<usize>,
    /// `--target gpu|cpu`: what kind of adapter the kernels are shaped for (`wgslc_passes::Target`), and the
    /// defaults of `attention` and `inverted_residual`.
    pub target: wgslc_passes::Target,
    /// `--buckets`: how a ranged dim's range is cut into parts compiled each for its own values (one tiling for
    /// the whole range costs short runs the max's; docs/design/ranged.md).
    pub buckets: Buckets,
    /// Told each stage's name as it starts.
    pub progress: Progress,
}

/// How a ranged dim's range is compiled (`--buckets auto|none|E1,E2,...`): in parts (buckets) that share the
/// artifact's buffers and weights, each compiled for its own values, so that a run pays about what an artifact
/// compiled for its length pays; or as one tiling for the whole range.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Buckets {
    /// Buckets ending at the powers of two inside the range (at the powers of four where that would make more
    /// than [`MAX_AUTO_BUCKETS`]), for one ranged dim (dims that share their range, tied by the model, count
    /// as one); one tiling otherwise.
    #[default]
    Auto,
    /// One tiling for the whole range (the artifact before buckets).
    None,
    /// Buckets ending at these values (each in `MIN..MAX`, increasing), the last ending at MAX.
    Ends(Vec<usize>),
}

impl CompileOptions {
    pub fn fuse_options(&self) -> wgslc_passes::FuseOptions {
        wgslc_passes::FuseOptions {
            fuse: !self.no_fuse,
            max_storage_buffers: self.limits.max_storage_buffers_per_shader_stage as usize,
            // A CPU pays full price for the fused kernels' barriers and recomputed borders (docs/performance.md).
            attention: self.attention.unwrap_or(match self.target {
                wgslc_passes::Target::Gpu => wgslc_passes::AttentionMode::Fused,
                wgslc_passes::Target::Cpu => wgslc_passes::AttentionMode::Unfused,
            }),
            inverted_residual: self.inverted_residual.unwrap_or(match self.target {
                wgslc_passes::Target::Gpu => wgslc_passes::InvertedResidualMode::Fused,
                wgslc_passes::Target::Cpu => wgslc_passes::InvertedResidualMode::Unfused,
            }),
            target: self.target,
            ..Default::default()
        }
    }

    pub fn memory_options(&self) -> wgslc_passes::MemoryOptions {
        wgslc_passes::MemoryOptions {
            reuse: !self.no_reuse,
            max_buffer_size: self.limits.max_buffer_size,
            split_budget: self.memory_budget.unwrap_or(wgslc_passes::MemoryOptions::default().split_budget),
        }
    }
}

/// What a compile produced.
#[derive(Clone, Debug)]
pub struct Summary {
    /// ONNX nodes in the model file.
    pub source_nodes: usize,
    /// Kernels written (each dispatched once).
    pub kernels: usize,
    pub plan: wgslc_artifact::Plan,
    pub report: wgslc_emit::report::Report,
    /// Where the artifact computes differently from what the model declares (float64 in f32), for the user.
    pub notes: Vec<String>,
}

/// The notes of [`Summary::notes`] for a compiled graph.
fn notes(g: &Graph) -> Vec<String> {
    let wide: Vec<&str> = g
        .value_ids()
        .filter(|&v| g.value(v).ty.as_ref().is_some_and(|t| t.dtype == wgslc_ir::DType::F64))
        .map(|v| g.value(v).name.as_str())
        .collect();
    match wide.first() {
        Some(first) => vec![format!(
            "{} float64 value(s), '{first}' first, are computed in float32 (WGSL has no f64): expect float32's \
             precision and range",
            wide.len()
        )],
        None => Vec::new(),
    }
}

/// How far a pipeline run got: the graph after the last stage run, and what the later stages produced.
pub struct Compiled {
    pub graph: Graph,
    /// `--kv-cache`: where the loop's tensors are.
    pub decoder: Option<wgslc_passes::DecoderLayout>,
    /// Ranged dims: the ranged axes of the inputs and outputs, the input carrying the dims' values, and which
    /// kernels' workgroup counts follow the dims.
    pub ranged: Option<RangedCompile>,
    pub schedule: Option<Schedule>,
    pub memory: Option<MemoryPlan>,
    pub kernels: Option<Vec<Validated>>,
    /// `--kv-cache` with a decode step that writes in place: its advance kernels (greedy, then sampling), which
    /// the plan holds after `kernels` and dispatches only between decode steps.
    pub advance: Vec<Validated>,
    /// `--weights`: each weight stored narrower, with its bytes and error.
    pub weights: Vec<WeightChange>,
}

/// Imports a model file into the IR.
pub fn import(model: &Path, opts: &CompileOptions) -> Result<Graph, CompileError> {
    Ok(import_model(model, opts, CacheLayout::Window)?.0)
}

/// Imports a model file, rewritten into a decoder's steps with `--kv-cache`.
fn import_model(
    model: &Path,
    opts: &CompileOptions,
    cache: CacheLayout,
) -> Result<(Graph, Option<wgslc_passes::DecoderLayout>), CompileError> {
    let io = wgslc_ir::ImportOptions {
        dims: opts.dims.clone(),
        shapes: opts.shapes.clone(),
        constants: opts.constants.clone(),
    };
    let Some(kv) = &opts.kv_cache else {
        return match model.extension().and_then(|e| e.to_str()) {
            Some("onnx") => Ok((wgslc_onnx::import_file(model, &io)?, None)),
            Some("pt2") => Ok((wgslc_pt2::import_file(model, &io)?, None)),
            _ => Err(CompileError::Format(model.display().to_string())),
        };
    };
    // Each step imported at its shapes, then rewritten into one graph (`wgslc_passes::DecoderPlan`).
    let source = source::Source::open(model)?;
    let mut io = io;
    let genai = source.genai_dims(&io.dims);
    io.dims.extend(genai);
    let mut kv = kv.clone();
    kv.fixed.extend(opts.constants.keys().cloned());
    let plan = wgslc_passes::DecoderPlan::new(&source.signature(&io.dims)?, &kv, cache)?;
    let mut steps = Vec::new();
    for kind in [wgslc_passes::StepKind::Decode, wgslc_passes::StepKind::Prefill] {
        let mut io = io.clone();
        for (k, v) in plan.step_shapes(kind) {
            if io.shapes.get(&k).is_some_and(|s| *s != v) {
                return Err(CompileError::Decoder(format!(
                    "--shape {k} conflicts with the shape --kv-cache gives it ({v:?})"
                )));
            }
            io.shapes.insert(k, v);
        }
        steps.push(source.import(&io)?);
    }
    let prefill = steps.pop().expect("two steps");
    let decode = steps.pop().expect("two steps");
    let (g, layout) = plan.build(decode, prefill)?;
    Ok((g, Some(layout)))
}

/// Compiles a model into an artifact directory: every stage (every kernel naga-validated and checked against the
/// limits), then plan.json, kernels/, weights.safetensors and report.json. `out_dir` must not exist, be empty or
/// hold a previous artifact, which is replaced (files of the user's in it are never touched); see `out_dir.rs`.
/// A ranged dim cut into buckets (`CompileOptions::buckets`) is compiled once per bucket (`buckets.rs`).
pub fn compile(model: &Path, out_dir: &Path, opts: &CompileOptions) -> Result<Summary, CompileError> {
    let target = out_dir::check(out_dir, opts.force)?;
    let bucketed = match buckets::cuts(opts)? {
        Some(cuts) => buckets::build(model, opts, &cuts)?,
        None => None,
    };
    let built = match bucketed {
        Some(b) => b,
        None => build(model, opts, &Default::default())?,
    };
    // Written beside the target first: a failure leaves the target as it was (see out_dir.rs).
    opts.progress.stage("write");
    let staged = target.staging()?;
    let written = (|| {
        wgslc_emit::write_files(&staged, &built.plan, &built.wgsl, &built.weights)?;
        let rpath = staged.join("report.json");
        std::fs::write(&rpath, built.report.to_json())
            .map_err(|source| wgslc_emit::EmitError::Io { path: rpath.display().to_string(), source })?;
        Ok::<_, CompileError>(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&staged);
        return Err(e);
    }
    target.install(&staged)?;
    let Built { plan, wgsl, report, notes, source_nodes, .. } = built;
    Ok(Summary { source_nodes, kernels: wgsl.len(), plan, report, notes })
}

/// A compile's artifact before it is written: plan.json's plan (written once, by [`compile`]), each of its kernels'
/// modules in `plan.kernels`' order, the weights, the report and the notes.
pub(crate) struct Built {
    pub plan: wgslc_artifact::Plan,
    pub wgsl: Vec<wgslc_emit::KernelSource>,
    pub weights: wgslc_emit::WeightTensors,
    pub report: wgslc_emit::report::Report,
    pub notes: Vec<String>,
    pub source_nodes: usize,
}

/// Every stage, then the plan with its decoder and ranges sections, the weights' bytes and the report.
pub(crate) fn build(model: &Path, opts: &CompileOptions, extras: &pipeline::Extras) -> Result<Built, CompileError> {
    let Compiled { graph: g, decoder, ranged, schedule, memory, kernels, advance, weights } =
        pipeline::run_with(model, opts, None, extras)?;
    let (sched, mem, mut kernels) = (schedule.expect("scheduled"), memory.expect("planned"), kernels.expect("emitted"));
    let dispatched = kernels.len();
    // The advance kernels come after every dispatched one, greedy then sampling.
    let advance_at = match advance.len() {
        0 => None,
        2 => Some(wgslc_artifact::Advance { greedy: dispatched, sample: dispatched + 1 }),
        n => {
            return Err(CompileError::Decoder(format!(
                "{n} advance kernels, expected greedy and sampling (a wgslc bug)"
            )))
        }
    };
    kernels.extend(advance);
    let source_nodes = count_source_nodes(model).unwrap_or_else(|| g.num_nodes());
    let mut plan = wgslc_emit::build_plan(&g, &mem, &kernels);
    plan.dispatches.truncate(dispatched);
    if let Some(layout) = &decoder {
        plan.decoder = Some(decoder::section(&g, &plan, &kernels[..dispatched], advance_at, &mem, layout)?);
        plan.check().map_err(|e| CompileError::Decoder(format!("the decoder section is invalid: {e}")))?;
    }
    if let Some(r) = &ranged {
        ranges_section(&mut plan, r)?;
    }
    let tensors = wgslc_emit::weight_tensors(&g, &mem, &plan)?;
    let mut report = wgslc_emit::report::build(&g, &sched, &mem, &kernels, &plan, source_nodes);
    if opts.weights != WeightFormat::Keep {
        report.weights = Some(wgslc_emit::report::WeightsReport {
            format: opts.weights.name().into(),
            block: opts.weight_block.unwrap_or(32),
            bytes_before: weights.iter().map(|w| w.bytes_before).sum(),
            bytes_after: weights.iter().map(|w| w.bytes_after).sum(),
            tensors: weights
                .iter()
                .map(|w| wgslc_emit::report::WeightTensorReport {
                    name: w.name.clone(),
                    shape: w.shape.clone(),
                    bytes_before: w.bytes_before,
                    bytes_after: w.bytes_after,
                    max_abs_error: w.max_abs_error,
                    rel_rms_error: w.rel_rms_error,
                })
                .collect(),
        });
    }
    let wgsl = kernels.iter().map(wgslc_emit::KernelSource::of).collect();
    Ok(Built { plan, wgsl, weights: tensors, report, notes: notes(&g), source_nodes })
}

/// Nodes in the model file's main graph (ONNX: Constant nodes included; .pt2: the program's ATen nodes), for the
/// report.
fn count_source_nodes(model: &Path) -> Option<usize> {
    let bytes = std::fs::read(model).ok()?;
    match model.extension().and_then(|e| e.to_str()) {
        Some("pt2") => wgslc_pt2::op_types(&bytes).ok().map(|ops| ops.len()),
        _ => wgslc_onnx::op_types(&bytes).ok().map(|ops| ops.len()),
    }
}

/// Runs the pipeline up to `stage` and returns what it produced as text: the IR, and after `schedule` the
/// kernels with their folds, recipes and boundaries, after `memory` the buffer plan, after `emit` every kernel's
/// WGSL. For finding which stage broke a model, or why two nodes did not fuse.
pub fn dump_after(model: &Path, opts: &CompileOptions, stage: &str) -> Result<String, CompileError> {
    let c = run(model, opts, Some(stage))?;
    let mut s = wgslc_ir::print(&c.graph);
    if let Some(sched) = &c.schedule {
        s.push('\n');
        s.push_str(&print_schedule(&c.graph, sched));
    }
    if let Some(mem) = &c.memory {
        s.push('\n');
        s.push_str(&print_memory(&c.graph, mem));
    }
    for k in c.kernels.iter().flatten() {
        s.push_str(&format!("\n// ---- {} ({})\n{}", k.kernel.name, k.kernel.kind, k.kernel.wgsl));
    }
    Ok(s)
}
