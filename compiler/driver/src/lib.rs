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
mod out_dir;

use std::collections::HashMap;
use std::path::Path;
use wgslc_emit::{Limits, Validated};
use wgslc_ir::Graph;
use wgslc_passes::{MemoryPlan, Schedule};

pub use dump::{print_memory, print_schedule};
pub use wgslc_onnx::decoder::KvCache;
pub use wgslc_passes::DimRange;

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
const LATE_STAGES: &[&str] = &["split", "schedule", "memory", "emit"];

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
}

/// What a compile with ranged dims adds to the artifact.
pub struct RangedCompile {
    pub ranged: wgslc_passes::Ranged,
    /// Per kernel (emission order): the workgroup axis that follows a dim, where one does.
    pub scales: Vec<Option<wgslc_artifact::GridScale>>,
}

/// Imports a model file into the IR.
pub fn import(model: &Path, opts: &CompileOptions) -> Result<Graph, CompileError> {
    Ok(import_model(model, opts)?.0)
}

/// Imports a model file, rewritten into a decoder's steps with `--kv-cache`.
fn import_model(
    model: &Path,
    opts: &CompileOptions,
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
                    wgslc_onnx::decoder::decoder_model(proto, &kv)?;
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
    let (mut g, decoder) = import_model(model, opts)?;
    let mut c = Compiled { graph: Graph::new(), decoder, ranged: None, schedule: None, memory: None, kernels: None };
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
    late_stages(&mut c, g, opts, graph_stop, stop_after)?;
    let mut scales = Vec::new();
    if let Some(kernels) = c.kernels.as_ref().filter(|_| stop_after.is_none()) {
        // Each probe compiled to kernels the same way: which workgroup counts follow which dim.
        let mut probe_kernels = Vec::new();
        for mut pg in probes {
            let compiled = (|| {
                wgslc_passes::mask_ranges(&mut pg, &dims, &axes).ok()?;
                wgslc_passes::run_passes(&mut pg, Some(AT), None, !opts.no_fuse).ok()?;
                let mut pc = Compiled {
                    graph: Graph::new(),
                    decoder: None,
                    ranged: None,
                    schedule: None,
                    memory: None,
                    kernels: None,
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

/// The ranged dims as the graph knows them, each with its probe (the model imported and run to `at` with that dim
/// at [`wgslc_passes::probe_value`], the others at their max). Exporters name one length with several symbols
/// (torch's dynamo exporter gives each input its own): a dim whose probe alone does not compile is probed together
/// with the other dims of the same range, then with as few of them as still compile, and the group is one dim
/// (named `a=b`), whose inputs must then agree at run time.
fn probe_dims(
    model: &Path,
    opts: &CompileOptions,
    at: &str,
) -> Result<(Vec<wgslc_passes::DimRange>, Vec<Graph>), CompileError> {
    let probe = |names: &[&str], b: usize| -> Result<Graph, String> {
        let mut p = opts.clone();
        for n in names {
            p.dims.insert(n.to_string(), b);
        }
        let (mut pg, _) = import_model(model, &p).map_err(|e| e.to_string())?;
        wgslc_passes::run_passes(&mut pg, None, Some(at), !opts.no_fuse).map_err(|e| e.to_string())?;
        Ok(pg)
    };
    let ranges = &opts.ranges;
    let (mut dims, mut probes) = (Vec::new(), Vec::new());
    let mut done = vec![false; ranges.len()];
    for i in 0..ranges.len() {
        if done[i] {
            continue;
        }
        let r = &ranges[i];
        let b = wgslc_passes::probe_value(r);
        let alone = match probe(&[&r.name], b) {
            Ok(pg) => {
                done[i] = true;
                dims.push(r.clone());
                probes.push(pg);
                continue;
            }
            Err(e) => e,
        };
        let name = |j: usize| ranges[j].name.as_str();
        let mut group: Vec<usize> =
            (i..ranges.len()).filter(|&j| !done[j] && (ranges[j].min, ranges[j].max) == (r.min, r.max)).collect();
        let names = |group: &[usize]| group.iter().map(|&j| name(j)).collect::<Vec<_>>();
        let mut pg = match probe(&names(&group), b) {
            Ok(pg) if group.len() > 1 => pg,
            _ => {
                return Err(CompileError::Range(format!(
                    "{}={}..{}: the model does not compile at {}={b}: {alone}",
                    r.name, r.min, r.max, r.name
                )))
            }
        };
        // As few as still compile: a dim of the same range that the graph does not tie to this one stays its own.
        let mut k = 1;
        while k < group.len() {
            let mut fewer = group.clone();
            fewer.remove(k);
            match probe(&names(&fewer), b) {
                Ok(p) if fewer.len() > 1 => {
                    group = fewer;
                    pg = p;
                }
                _ => k += 1,
            }
        }
        for &j in &group {
            done[j] = true;
        }
        dims.push(wgslc_passes::DimRange { name: names(&group).join("="), min: r.min, max: r.max });
        probes.push(pg);
    }
    Ok((dims, probes))
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
        wgslc_passes::split_weights(&mut g, opts.limits.max_storage_buffer_binding_size)?;
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

/// A kernel that says what its workgroup axes walk (a product: columns along x, rows along y): an axis whose
/// walked extent is `k·max` at max and `k·probe` in the probe scales with that dim when everything the kernel
/// writes is the product's `[.., rows, cols]` with that axis ranged (not a transposed store, not rows that fold a
/// batch in front of the dim), unless it writes a masked value along it (its padding must hold the fill) or
/// another axis scales already.
fn declared_scale(
    g: &Graph,
    k: &Validated,
    probes: &[Option<(Graph, Vec<Validated>)>],
    ranges: &[wgslc_passes::DimRange],
    masked: &HashMap<wgslc_ir::ValueId, Vec<usize>>,
    i: usize,
) -> Option<wgslc_artifact::GridScale> {
    use wgslc_emit::Walks;
    let grid = k.kernel.grid;
    let (cols, rows) = (grid[0].map(|a| a.extent), grid[1].map(|a| a.extent));
    // The axis of a written value that a walk covers, for a value shaped [.., rows, cols] (else none is known).
    let value_axis = |shape: &[usize], walks: Walks| {
        let r = shape.len();
        (r >= 2 && Some(shape[r - 2]) == rows && Some(shape[r - 1]) == cols).then(|| {
            if walks == Walks::Rows {
                r - 2
            } else {
                r - 1
            }
        })
    };
    let mut found = None;
    for (d, (pg, pk)) in probes.iter().flatten().enumerate() {
        for (a, (ga, gb)) in grid.iter().zip(pk[i].kernel.grid).enumerate() {
            let (Some(ga), Some(gb)) = (ga, gb) else { continue };
            if ga.extent == gb.extent {
                continue;
            }
            let (max, b) = (ranges[d].max, wgslc_passes::probe_value(&ranges[d]));
            if ga.extent % max != 0 || ga.extent / max * b != gb.extent {
                return None;
            }
            // Every written value is the product as computed ([.., rows, cols], batches along z; not stored
            // transposed, not rows that fold a batch in front of the dim), the walked axis its ranged one, and not
            // one whose padding holds a mask's fill.
            let ok = k.kernel.bindings.iter().filter(|&&(_, w)| w).all(|&(v, _)| {
                match value_axis(&g.ty(v).shape, ga.walks) {
                    Some(j) => {
                        g.ty(v).shape[j] != pg.ty(v).shape[j] && !masked.get(&v).is_some_and(|axes| axes.contains(&j))
                    }
                    None => false,
                }
            });
            if !ok {
                continue;
            }
            if found.is_some() {
                return None;
            }
            found = Some(wgslc_artifact::GridScale { axis: a, dim: d });
        }
    }
    found
}

/// Which kernels may dispatch fewer workgroups for a smaller value of a ranged dim: a kernel whose probe (the same
/// kernel compiled with one dim at its probe value) differs in the workgroup count along exactly one axis, whose
/// every written tensor, and every value its nodes compute, differs along at most one axis with nothing but 1s in
/// front of it (so its valid entries are a prefix in the order it computes them), and whose probe needed no more workgroups than `ceil(W · probe / max)` (the same tiling),
/// runs `ceil(W · n / max)` workgroups along that axis. Anything else (a probe that compiled otherwise, an
/// in-place write, a kernel writing a masked value, whose padding a reduction reads as the fill) keeps its counts:
/// always correct, the padding computed too.
fn grid_scales(
    g: &Graph,
    kernels: &[Validated],
    probes: &[Option<(Graph, Vec<Validated>)>],
    ranges: &[wgslc_passes::DimRange],
    masked: &HashMap<wgslc_ir::ValueId, Vec<usize>>,
) -> Vec<Option<wgslc_artifact::GridScale>> {
    let mut out = vec![None; kernels.len()];
    let same = |pk: &Vec<Validated>| {
        pk.len() == kernels.len()
            && pk
                .iter()
                .zip(kernels)
                .all(|(a, b)| a.kernel.name == b.kernel.name && a.kernel.bindings == b.kernel.bindings)
    };
    if !probes.iter().all(|p| p.as_ref().is_some_and(|(_, pk)| same(pk))) {
        return out;
    }
    'kernel: for (i, k) in kernels.iter().enumerate() {
        if k.kernel.stored_bytes.is_some() {
            continue;
        }
        if k.kernel.grid.iter().any(Option::is_some) {
            out[i] = declared_scale(g, k, probes, ranges, masked, i);
            continue;
        }
        if k.kernel.bindings.iter().any(|&(v, w)| w && masked.contains_key(&v)) {
            continue;
        }
        let mut found = None;
        for (d, (pg, pk)) in probes.iter().flatten().enumerate() {
            let (wa, wb) = (k.kernel.workgroups, pk[i].kernel.workgroups);
            let diff: Vec<usize> = (0..3).filter(|&a| wa[a] != wb[a]).collect();
            if diff.is_empty() {
                continue;
            }
            if diff.len() != 1 || found.is_some() {
                continue 'kernel;
            }
            let a = diff[0];
            // What it writes follows the dim, with only 1s in front of its ranged axis, and so does everything its
            // nodes compute on the way (a kernel iterating another layout, e.g. one that stores transposed, has a
            // value with the dim behind another axis).
            let leading = |v: wgslc_ir::ValueId, must: bool| {
                let (sa, sb) = (&g.ty(v).shape, &pg.ty(v).shape);
                let d: Vec<usize> = (0..sa.len()).filter(|&j| sa[j] != sb[j]).collect();
                match d[..] {
                    [] => !must,
                    [j] => sa[..j].iter().all(|&e| e == 1),
                    _ => false,
                }
            };
            let prefix = k.kernel.bindings.iter().filter(|&&(_, w)| w).all(|&(v, _)| leading(v, true))
                && k.kernel.nodes.iter().flat_map(|&n| g.node(n).outputs.clone()).all(|v| leading(v, false));
            let (max, b) = (ranges[d].max as u64, wgslc_passes::probe_value(&ranges[d]) as u64);
            let covers = wb[a] as u64 <= (wa[a] as u64 * b).div_ceil(max);
            if !prefix || !covers {
                continue 'kernel;
            }
            found = Some(wgslc_artifact::GridScale { axis: a, dim: d });
        }
        out[i] = found;
    }
    out
}

/// Checks the ranged dims (`--dim NAME=MIN..MAX`) and returns the options to import with: each ranged dim bound
/// to its max. `None` when there are none.
fn check_ranges(opts: &CompileOptions) -> Result<Option<CompileOptions>, CompileError> {
    if opts.ranges.is_empty() {
        return Ok(None);
    }
    if opts.kv_cache.is_some() {
        return Err(CompileError::Range(
            "NAME=MIN..MAX cannot be combined with --kv-cache (which binds the sequence dims itself)".into(),
        ));
    }
    let mut o = opts.clone();
    for (i, r) in opts.ranges.iter().enumerate() {
        if r.min == 0 || r.min > r.max {
            return Err(CompileError::Range(format!(
                "{}={}..{}: the range must satisfy 1 <= MIN <= MAX",
                r.name, r.min, r.max
            )));
        }
        if opts.dims.contains_key(&r.name) || opts.ranges[..i].iter().any(|p| p.name == r.name) {
            return Err(CompileError::Range(format!("{} is bound twice", r.name)));
        }
        o.dims.insert(r.name.clone(), r.max);
    }
    // A range of one value is a plain binding.
    o.ranges.retain(|r| r.min < r.max);
    Ok(Some(o))
}

/// Compiles a model into an artifact directory: every stage (every kernel naga-validated and checked against the
/// limits), then plan.json, kernels/, weights.safetensors and report.json. `out_dir` must not exist, be empty or
/// hold a previous artifact, which is replaced (files of the user's in it are never touched); see `out_dir.rs`.
pub fn compile(model: &Path, out_dir: &Path, opts: &CompileOptions) -> Result<Summary, CompileError> {
    let target = out_dir::check(out_dir, opts.force)?;
    let Compiled { graph: g, decoder, ranged, schedule, memory, kernels } = run(model, opts, None)?;
    let (sched, mem, kernels) = (schedule.expect("scheduled"), memory.expect("planned"), kernels.expect("emitted"));
    let source_nodes = count_source_nodes(model).unwrap_or_else(|| g.num_nodes());
    // Written beside the target first: a failure leaves the target as it was (see out_dir.rs).
    opts.progress.stage("write");
    let staged = target.staging()?;
    let written = (|| {
        let mut plan = wgslc_emit::write_artifact(&staged, &g, &mem, &kernels)?;
        if decoder.is_some() || ranged.is_some() {
            if let Some(layout) = &decoder {
                plan.decoder = Some(decoder::section(&g, &plan, &kernels, &mem, layout)?);
                plan.check().map_err(|e| CompileError::Decoder(format!("the decoder section is invalid: {e}")))?;
            }
            if let Some(r) = &ranged {
                ranges_section(&mut plan, r)?;
            }
            let ppath = staged.join("plan.json");
            std::fs::write(&ppath, plan.to_json())
                .map_err(|source| wgslc_emit::EmitError::Io { path: ppath.display().to_string(), source })?;
        }
        let report = wgslc_emit::report::build(&g, &sched, &mem, &kernels, &plan, source_nodes);
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

/// The ranges section of plan.json: the dims' values move from the graph inputs to [`wgslc_artifact::Ranges`],
/// and each input and output names its ranged axes.
fn ranges_section(plan: &mut wgslc_artifact::Plan, rc: &RangedCompile) -> Result<(), CompileError> {
    let r = &rc.ranged;
    for (k, s) in plan.kernels.iter_mut().zip(&rc.scales) {
        k.scale = *s;
    }
    let at = plan.inputs.iter().position(|t| t.name == wgslc_passes::DIMS_INPUT);
    let buffer = at.map(|i| plan.inputs.remove(i).buffer).ok_or_else(|| {
        CompileError::Range(format!("the compiled graph lost its '{}' input", wgslc_passes::DIMS_INPUT))
    })?;
    for t in plan.inputs.iter_mut().chain(plan.outputs.iter_mut()) {
        t.ranged =
            r.io.get(&t.name)
                .into_iter()
                .flatten()
                .map(|a| wgslc_artifact::RangedAxis { axis: a.axis, dim: a.dim, factor: a.factor })
                .collect();
    }
    let dims =
        r.dims.iter().map(|d| wgslc_artifact::DimRange { name: d.name.clone(), min: d.min, max: d.max }).collect();
    plan.ranges = Some(wgslc_artifact::Ranges { dims, buffer });
    plan.check().map_err(|e| CompileError::Range(format!("the ranges section is invalid: {e}")))
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
