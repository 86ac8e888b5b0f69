//! The pipeline from a model file to an artifact, as one list of named stages: the frontend (`import`), the graph
//! passes of [`wgslc_passes::GRAPH_PASSES`], then `split` (weights larger than one binding, in blocks: it needs
//! the device limits), `schedule` (fusion), `memory` (the buffer plan) and `emit`
//! (naga-validated WGSL). [`compile`] runs them all and writes the artifact; [`dump_after`] stops after any stage
//! and prints what it produced. The `wgslc` binary and build scripts call this crate; it pulls in no CLI parser,
//! no GPU runtime and no file formats beyond the model's and the artifact's.
//!
//! **Architecture Invariant:** everything between reading the model and writing the artifact happens in memory;
//! the only files written are the artifact's (plan.json, kernels/, weights.safetensors) and report.json.

mod decoder;
mod dump;
mod layout;
mod out_dir;
mod ranged;

use std::collections::HashMap;
use std::path::Path;
use wgslc_emit::{Limits, Validated};
use wgslc_ir::Graph;
use wgslc_passes::{MemoryPlan, Schedule};

pub use dump::{print_memory, print_schedule};
pub use ranged::RangedCompile;
use ranged::{check_ranges, grid_scales, probe_dims, ranges_section};
use wgslc_onnx::decoder::CacheLayout;
pub use wgslc_onnx::decoder::KvCache;
pub use wgslc_passes::{DimRange, WeightChange, WeightFormat};

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
    /// so that kernels bind their inputs read-only (faster on NVIDIA GPUs). `None`: 1.10.
    pub memory_budget: Option<f64>,
    /// `--attention fused|unfused`: whether Q·Kᵀ → softmax → ·V becomes one kernel (the default).
    pub attention: wgslc_passes::AttentionMode,
    /// `--inverted-residual fused|unfused`: whether MobileNet's expansion → depthwise (→ projection) chains become
    /// one kernel each (the default).
    pub inverted_residual: wgslc_passes::InvertedResidualMode,
    /// `--force`: write into a non-empty directory that holds no artifact (its other files are still never
    /// replaced).
    pub force: bool,
    /// `--kv-cache MAX`: compile a decoder's decode and prefill steps around a GPU-resident cache (see
    /// `wgslc_onnx::decoder`).
    pub kv_cache: Option<KvCache>,
    /// `--weights f16|q8|q4`: store the products' weights and lookup tables narrower than the model has them
    /// (`wgslc_passes::narrow_weights`).
    pub weights: WeightFormat,
    /// `--block N`: elements per quantization block along K for `--weights q8|q4` (`None`: 32).
    pub weight_block: Option<usize>,
    /// Told each stage's name as it starts.
    pub progress: Progress,
}

impl CompileOptions {
    pub fn fuse_options(&self) -> wgslc_passes::FuseOptions {
        wgslc_passes::FuseOptions {
            fuse: !self.no_fuse,
            max_storage_buffers: self.limits.max_storage_buffers_per_shader_stage as usize,
            attention: self.attention,
            inverted_residual: self.inverted_residual,
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

/// The stages after the graph passes, in order.
const LATE_STAGES: &[&str] = &["weights", "split", "schedule", "memory", "emit"];

/// Every stage name, in pipeline order: `import`, the graph passes, `schedule`, `memory`, `emit`.
pub fn stages() -> Vec<&'static str> {
    std::iter::once("import").chain(wgslc_passes::pass_names()).chain(LATE_STAGES.iter().copied()).collect()
}

/// How far a pipeline run got: the graph after the last stage run, and what the later stages produced.
pub struct Compiled {
    pub graph: Graph,
    /// `--kv-cache`: where the loop's tensors are.
    pub decoder: Option<wgslc_onnx::decoder::DecoderLayout>,
    /// Ranged dims: the ranged axes of the inputs and outputs, the input carrying the dims' values, and which
    /// kernels' workgroup counts follow the dims.
    pub ranged: Option<RangedCompile>,
    pub schedule: Option<Schedule>,
    pub memory: Option<MemoryPlan>,
    pub kernels: Option<Vec<Validated>>,
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
) -> Result<(Graph, Option<wgslc_onnx::decoder::DecoderLayout>), CompileError> {
    let mut io = wgslc_ir::ImportOptions {
        dims: opts.dims.clone(),
        shapes: opts.shapes.clone(),
        constants: opts.constants.clone(),
    };
    match model.extension().and_then(|e| e.to_str()) {
        Some("onnx") => match &opts.kv_cache {
            None => Ok((wgslc_onnx::import_file(model, &io)?, None)),
            Some(kv) => {
                let bytes = std::fs::read(model)
                    .map_err(|source| wgslc_onnx::ImportError::Io { path: model.to_owned(), source })?;
                let proto = wgslc_onnx::decode_model(&bytes)?;
                drop(bytes);
                let mut kv = kv.clone();
                kv.fixed.extend(opts.constants.keys().cloned());
                let wgslc_onnx::decoder::DecoderModel { model: proto, shapes, layout } =
                    wgslc_onnx::decoder::decoder_model(proto, &kv, cache)?;
                for (k, v) in shapes {
                    if io.shapes.get(&k).is_some_and(|s| *s != v) {
                        return Err(CompileError::Decoder(format!(
                            "--shape {k} conflicts with the shape --kv-cache gives it ({v:?})"
                        )));
                    }
                    io.shapes.insert(k, v);
                }
                let dir = model.parent().map(Path::to_path_buf).unwrap_or_else(|| ".".into());
                Ok((wgslc_onnx::import_model(&proto, Some(&dir), &io)?, Some(layout)))
            }
        },
        Some("pt2") => match &opts.kv_cache {
            None => Ok((wgslc_pt2::import_file(model, &io)?, None)),
            Some(_) => Err(CompileError::Decoder(
                "--kv-cache reads ONNX decoders (their cache as graph inputs and outputs); export the model to \
                 ONNX for it"
                    .into(),
            )),
        },
        _ => Err(CompileError::Format(model.display().to_string())),
    }
}

/// Runs the pipeline on a model file up to and including stage `stop_after` (every stage when `None`).
pub fn run(model: &Path, opts: &CompileOptions, stop_after: Option<&str>) -> Result<Compiled, CompileError> {
    if let Some(s) = stop_after.filter(|s| !stages().contains(s)) {
        return Err(CompileError::UnknownStage(s.into(), stages().join(", ")));
    }
    let ranged_opts = check_ranges(opts)?;
    let opts = ranged_opts.as_ref().unwrap_or(opts);
    opts.progress.stage("import");
    let (mut g, mut decoder) = import_model(model, opts, CacheLayout::Window)?;
    if let (Some(window), false) = (&decoder, stop_after == Some("import")) {
        opts.progress.stage("cache layout");
        match layout::prove(model, opts, &g, window) {
            Ok(()) => {}
            // A mask that does not move with the window's keys: every key at its position instead, where the
            // model's caches allow it.
            Err(CompileError::Decoder(why)) => {
                let neither = |e: CompileError| {
                    let e = match e {
                        CompileError::Decoder(m) => m,
                        e => e.to_string(),
                    };
                    CompileError::Decoder(format!("{why}; and with every key at its position: {e}"))
                };
                let (pg, positions) = import_model(model, opts, CacheLayout::Positions).map_err(neither)?;
                let positions = positions.expect("a decoder import has a layout");
                layout::prove(model, opts, &pg, &positions).map_err(neither)?;
                (g, decoder) = (pg, Some(positions));
            }
            Err(e) => return Err(e),
        }
    }
    let mut c = Compiled {
        graph: Graph::new(),
        decoder,
        ranged: None,
        schedule: None,
        memory: None,
        kernels: None,
        weights: Vec::new(),
    };
    if stop_after == Some("import") {
        c.graph = g;
        return Ok(c);
    }
    let graph_stop = stop_after.filter(|s| !LATE_STAGES.contains(s));
    opts.progress.stage("graph passes");
    // The ranged axes are found after `AT`; a dump of an earlier stage shows the graph at each dim's max.
    const AT: &str = "dce";
    let passes = wgslc_passes::pass_names();
    let early = graph_stop.is_some_and(|s| passes.iter().position(|p| *p == s) <= passes.iter().position(|p| *p == AT));
    if opts.ranges.is_empty() || early {
        wgslc_passes::run_pipeline_with(&mut g, graph_stop, !opts.no_fuse)?;
        if graph_stop.is_none() {
            narrow_weights(&mut c, &mut g, opts)?;
            if stop_after == Some("weights") {
                c.graph = g;
                return Ok(c);
            }
        }
        if let (Some(layout), None, false) = (&c.decoder, graph_stop, opts.no_fuse) {
            tabulate_positions(&mut g, layout)?;
        }
        late_stages(&mut c, g, opts, graph_stop, stop_after)?;
        return Ok(c);
    }
    // The dims at their max, then each at its probe value: the ranged axes are where the graphs differ.
    wgslc_passes::run_passes(&mut g, None, Some(AT), !opts.no_fuse)?;
    let (dims, probes) = probe_dims(model, opts, AT)?;
    let axes = wgslc_passes::find_ranged_axes(&g, &dims, &probes)?;
    let ranged = wgslc_passes::mask_ranges(&mut g, &dims, &axes)?;
    wgslc_passes::verify(&g, wgslc_passes::Stage::Inferred)?;
    wgslc_passes::run_passes(&mut g, Some(AT), graph_stop, !opts.no_fuse)?;
    if graph_stop.is_none() {
        narrow_weights(&mut c, &mut g, opts)?;
        if stop_after == Some("weights") {
            c.graph = g;
            return Ok(c);
        }
    }
    late_stages(&mut c, g, opts, graph_stop, stop_after)?;
    let mut scales = Vec::new();
    if let Some(kernels) = c.kernels.as_ref().filter(|_| stop_after.is_none()) {
        // Each probe compiled to kernels the same way: which workgroup counts follow which dim.
        let mut probe_kernels = Vec::new();
        for mut pg in probes {
            let compiled = (|| {
                wgslc_passes::mask_ranges(&mut pg, &dims, &axes).ok()?;
                wgslc_passes::run_passes(&mut pg, Some(AT), None, !opts.no_fuse).ok()?;
                wgslc_passes::narrow_weights(&mut pg, opts.weights, opts.weight_block.unwrap_or(32)).ok()?;
                let mut pc = Compiled {
                    graph: Graph::new(),
                    decoder: None,
                    ranged: None,
                    schedule: None,
                    memory: None,
                    kernels: None,
                    weights: Vec::new(),
                };
                late_stages(&mut pc, pg, opts, None, None).ok()?;
                Some((pc.graph, pc.kernels?))
            })();
            probe_kernels.push(compiled);
        }
        scales = grid_scales(&c.graph, kernels, &probe_kernels, &dims, &ranged.masked);
    }
    c.ranged = Some(RangedCompile { ranged, scales });
    Ok(c)
}

/// The `weights` stage (`--weights`): the products' weights and lookup tables stored narrower, before anything
/// computes constants of its own (the decoder's position tables).
fn narrow_weights(c: &mut Compiled, g: &mut Graph, opts: &CompileOptions) -> Result<(), CompileError> {
    opts.progress.stage("weights");
    let block = opts.weight_block.unwrap_or(32);
    if !(16..=256).contains(&block) || !block.is_power_of_two() {
        return Err(CompileError::Block(block));
    }
    c.weights = wgslc_passes::narrow_weights(g, opts.weights, block)?;
    wgslc_passes::verify(g, wgslc_passes::Stage::Legalized)?;
    Ok(())
}

/// What a decoder's decode step computes from its position alone (rotary tables), looked up in a table over every
/// position the cache holds (`tabulate_bounded_input`), when fusing: its position inputs (`position_ids`,
/// `cache_position`) lie below the capacity.
fn tabulate_positions(g: &mut Graph, layout: &wgslc_onnx::decoder::DecoderLayout) -> Result<(), CompileError> {
    /// The most a table may take: a 32,768-token cache with 256 floats a position.
    const MAX_TABLE_BYTES: u64 = 32 << 20;
    for step in layout.steps.iter().filter(|s| s.tokens == 1) {
        for name in [&step.position_ids, &step.cache_position].into_iter().flatten() {
            let Some(&v) = g.inputs.iter().find(|&&v| g.value(v).name == *name) else { continue };
            wgslc_passes::tabulate_bounded_input(g, v, layout.rows + 1, MAX_TABLE_BYTES)?;
        }
    }
    Ok(())
}

/// `split`, `schedule`, `memory` and `emit` on a graph after the graph passes, as far as `stop_after` asks.
fn late_stages(
    c: &mut Compiled,
    mut g: Graph,
    opts: &CompileOptions,
    graph_stop: Option<&str>,
    stop_after: Option<&str>,
) -> Result<(), CompileError> {
    if graph_stop.is_none() {
        opts.progress.stage("split");
        // Weights larger than one binding, in blocks their readers address.
        let limits = &opts.limits;
        let bindings = limits.max_storage_buffers_per_shader_stage as usize;
        wgslc_passes::split_weights(&mut g, limits.max_storage_buffer_binding_size, bindings)?;
        wgslc_passes::verify(&g, wgslc_passes::Stage::Legalized)?;
        if stop_after != Some("split") {
            opts.progress.stage("schedule");
            let sched = wgslc_passes::schedule(&g, &opts.fuse_options())?;
            if stop_after != Some("schedule") {
                opts.progress.stage("memory");
                let mem = wgslc_passes::plan_memory_with(&g, &sched, &opts.memory_options())?;
                if stop_after != Some("memory") {
                    opts.progress.stage("emit");
                    c.kernels = Some(wgslc_emit::emit(&g, &sched, &mem, &opts.limits)?);
                }
                c.memory = Some(mem);
            }
            c.schedule = Some(sched);
        }
    }
    c.graph = g;
    Ok(())
}

/// Compiles a model into an artifact directory: every stage (every kernel naga-validated and checked against the
/// limits), then plan.json, kernels/, weights.safetensors and report.json. `out_dir` must not exist, be empty or
/// hold a previous artifact, which is replaced (files of the user's in it are never touched); see `out_dir.rs`.
pub fn compile(model: &Path, out_dir: &Path, opts: &CompileOptions) -> Result<Summary, CompileError> {
    let target = out_dir::check(out_dir, opts.force)?;
    let Compiled { graph: g, decoder, ranged, schedule, memory, kernels, weights } = run(model, opts, None)?;
    let (sched, mem, kernels) = (schedule.expect("scheduled"), memory.expect("planned"), kernels.expect("emitted"));
    let source_nodes = count_source_nodes(model).unwrap_or_else(|| g.num_nodes());
    // Written beside the target first: a failure leaves the target as it was (see out_dir.rs).
    opts.progress.stage("write");
    let staged = target.staging()?;
    let written = (|| {
        // plan.json's one author: the emitter's plan with the decoder and ranges sections, written once.
        let mut plan = wgslc_emit::build_plan(&g, &mem, &kernels);
        if let Some(layout) = &decoder {
            plan.decoder = Some(decoder::section(&g, &plan, &kernels, &mem, layout)?);
            plan.check().map_err(|e| CompileError::Decoder(format!("the decoder section is invalid: {e}")))?;
        }
        if let Some(r) = &ranged {
            ranges_section(&mut plan, r)?;
        }
        wgslc_emit::write_artifact(&staged, &g, &mem, &kernels, &plan)?;
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
        let rpath = staged.join("report.json");
        std::fs::write(&rpath, report.to_json())
            .map_err(|source| wgslc_emit::EmitError::Io { path: rpath.display().to_string(), source })?;
        Ok::<_, CompileError>((plan, report))
    })();
    let (plan, report) = match written {
        Ok(w) => w,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staged);
            return Err(e);
        }
    };
    target.install(&staged)?;
    Ok(Summary { source_nodes, kernels: kernels.len(), plan, report, notes: notes(&g) })
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
