//! The pipeline as one table of named stages: the import (with `--kv-cache`'s decoder rewrite), the proof of the
//! decoder's cache layout, every graph pass of `wgslc_passes` (each a stage of its own), the ranged dims'
//! masks, narrow weights, the decoder's position tables, the split of large weights, the products split along K,
//! and the schedule, memory plan and emission. `--dump-after` reaches every one of them; a compile runs them all, then (with ranged dims)
//! the probes' kernels, from which the workgroup counts that follow a dim are read.

use crate::ranged::{check_ranges, grid_scales, probe_dims, RangedCompile};
use crate::{import_model, CacheLayout, CompileError, CompileOptions, Compiled};
use std::path::Path;
use wgslc_ir::Graph;

/// The graph pass after which the ranged axes are found (a dump of an earlier stage shows the graph at each dim's
/// max).
const RANGES_AFTER: &str = "dce";

/// What a stage does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Reads the model into the IR (`--kv-cache`: rewritten into the decoder's two steps, the end-aligned window).
    Import,
    /// `--kv-cache`: proves the cache layout for this model's mask, or re-imports with every key at its position.
    Layout,
    /// One graph pass of `wgslc_passes`.
    Pass(&'static str),
    /// Ranged dims: the probes, the axes that follow each dim, and their masks.
    Ranges,
    /// `--weights`: weights stored narrower, before anything computes constants of its own.
    Weights,
    /// A decoder's position-only values looked up in tables over the cache's positions (when fusing).
    Tabulate,
    /// Weights larger than one binding, in blocks their readers address.
    Split,
    /// Products with a long K and few output tiles split across workgroups (when fusing, at fixed shapes).
    KSplit,
    Schedule,
    Memory,
    Emit,
}

/// The table: every stage's name and step, in order.
fn table() -> Vec<(&'static str, Step)> {
    let mut t = vec![("import", Step::Import), ("layout", Step::Layout)];
    for name in wgslc_passes::pass_names() {
        t.push((name, Step::Pass(name)));
        if name == RANGES_AFTER {
            t.push(("ranges", Step::Ranges));
        }
    }
    t.extend([
        ("weights", Step::Weights),
        ("tabulate", Step::Tabulate),
        ("split", Step::Split),
        ("ksplit", Step::KSplit),
        ("schedule", Step::Schedule),
        ("memory", Step::Memory),
        ("emit", Step::Emit),
    ]);
    t
}

/// Every stage name, in pipeline order.
pub fn stages() -> Vec<&'static str> {
    table().into_iter().map(|(name, _)| name).collect()
}

/// A run in progress: the graph and what the stages have produced so far.
struct Run<'a> {
    model: &'a Path,
    opts: &'a CompileOptions,
    g: Graph,
    c: Compiled,
    /// The last graph pass run (the next one runs after it).
    last_pass: Option<&'static str>,
    /// Ranged dims: the dims, their probes (imported and run to [`RANGES_AFTER`]) and the axes that follow them.
    probes: Option<(Vec<wgslc_passes::DimRange>, Vec<Graph>, wgslc_passes::RangedAxes)>,
    ranged: Option<wgslc_passes::Ranged>,
    /// Ranged dims: how many values the graph had when its ranged axes were found (later ones are not in them).
    known_values: usize,
    /// Ranged dims: the products split along K at the dims' max, which each probe splits the same way.
    splits: Vec<wgslc_passes::KSplit>,
    /// A probe's run: the graph at the max's splits, repeated here instead of the probe's own.
    forced_splits: Option<Vec<wgslc_passes::KSplit>>,
    /// What [`Extras`] asks.
    extras: &'a Extras,
}

/// What a compile inside the driver may ask beyond [`CompileOptions`].
#[derive(Clone, Debug, Default)]
pub(crate) struct Extras {
    /// Store K-major (the `kmajor` pass) only the constants of these names: a bucket stores its weights as the
    /// bucket compiled first does, so that they share them.
    pub kmajor_only: Option<std::collections::HashSet<String>>,
}

impl<'a> Run<'a> {
    fn new(
        model: &'a Path,
        opts: &'a CompileOptions,
        extras: &'a Extras,
        g: Graph,
        last_pass: Option<&'static str>,
    ) -> Self {
        let c = Compiled {
            graph: Graph::new(),
            decoder: None,
            ranged: None,
            schedule: None,
            memory: None,
            kernels: None,
            advance: Vec::new(),
            weights: Vec::new(),
        };
        Run {
            model,
            opts,
            g,
            c,
            last_pass,
            probes: None,
            ranged: None,
            known_values: 0,
            splits: Vec::new(),
            forced_splits: None,
            extras,
        }
    }

    /// Runs the stages after `start_after` (from the first when `None`) up to and including `stop_after`.
    fn stages(&mut self, start_after: Option<&str>, stop_after: Option<&str>) -> Result<(), CompileError> {
        let t = table();
        let first = start_after.map_or(0, |s| t.iter().position(|(n, _)| *n == s).map_or(0, |i| i + 1));
        for &(name, step) in &t[first..] {
            self.step(step)?;
            if stop_after == Some(name) {
                break;
            }
        }
        Ok(())
    }

    fn step(&mut self, step: Step) -> Result<(), CompileError> {
        let (opts, progress) = (self.opts, &self.opts.progress);
        match step {
            Step::Import => {
                progress.stage("import");
                (self.g, self.c.decoder) = import_model(self.model, opts, CacheLayout::Window)?;
            }
            Step::Layout => {
                if let Some(window) = &self.c.decoder {
                    progress.stage("cache layout");
                    if let Some((g, positions)) = prove_layout(self.model, opts, &self.g, window)? {
                        (self.g, self.c.decoder) = (g, Some(positions));
                    }
                }
            }
            Step::Pass(name) => {
                if self.last_pass.is_none() {
                    progress.stage("graph passes");
                }
                match &self.extras.kmajor_only {
                    Some(only) if name == "kmajor" => {
                        if !opts.no_fuse && opts.target == wgslc_passes::Target::Gpu {
                            wgslc_passes::kmajor_weights_among(&mut self.g, &|n| only.contains(n))?;
                            wgslc_passes::dedupe_constants(&mut self.g);
                            wgslc_passes::verify(&self.g, wgslc_passes::Stage::Legalized)?;
                        }
                    }
                    _ => wgslc_passes::run_passes(&mut self.g, self.last_pass, Some(name), &opts.fuse_options())?,
                }
                self.last_pass = Some(name);
            }
            Step::Ranges => {
                if !opts.ranges.is_empty() {
                    // The dims at their max, then each at its probe value: the ranged axes are where the graphs
                    // differ.
                    let (dims, probes) = probe_dims(self.model, opts, RANGES_AFTER)?;
                    let axes = wgslc_passes::find_ranged_axes(&self.g, &dims, &probes)?;
                    self.known_values = self.g.num_values();
                    self.ranged = Some(wgslc_passes::mask_ranges(&mut self.g, &dims, &axes)?);
                    wgslc_passes::verify(&self.g, wgslc_passes::Stage::Inferred)?;
                    self.probes = Some((dims, probes, axes));
                }
            }
            Step::Weights => {
                progress.stage("weights");
                let block = opts.weight_block.unwrap_or(32);
                if !(16..=256).contains(&block) || !block.is_power_of_two() {
                    return Err(CompileError::Block(block));
                }
                self.c.weights = wgslc_passes::narrow_weights(&mut self.g, opts.weights, block)?;
                wgslc_passes::verify(&self.g, wgslc_passes::Stage::Legalized)?;
            }
            Step::Tabulate => {
                if let (Some(layout), false) = (&self.c.decoder, opts.no_fuse) {
                    tabulate_positions(&mut self.g, layout)?;
                }
            }
            Step::Split => {
                progress.stage("split");
                let limits = &opts.limits;
                let bindings = limits.max_storage_buffers_per_shader_stage as usize;
                wgslc_passes::split_weights(&mut self.g, limits.max_storage_buffer_binding_size, bindings)?;
                wgslc_passes::verify(&self.g, wgslc_passes::Stage::Legalized)?;
            }
            Step::KSplit => {
                // A CPU runs a few workgroups at a time: the split only adds the parts' sums. A ranged dim's probes
                // must tile as the graph at its max: the max splits the products whose K and B follow no dim, and
                // each probe splits those same products into the same parts.
                if !opts.no_fuse && opts.target == wgslc_passes::Target::Gpu {
                    if let Some(splits) = &self.forced_splits {
                        wgslc_passes::split_k_as(&mut self.g, splits)?;
                    } else if let Some((_, _, axes)) = &self.probes {
                        let known = self.known_values;
                        let allow = |g: &Graph, n: wgslc_ir::NodeId| k_follows_no_dim(g, n, axes, known);
                        self.splits = wgslc_passes::split_k_ranged(&mut self.g, &allow)?;
                    } else if opts.ranges.is_empty() {
                        wgslc_passes::split_k(&mut self.g)?;
                    }
                    wgslc_passes::verify(&self.g, wgslc_passes::Stage::Legalized)?;
                }
            }
            Step::Schedule => {
                progress.stage("schedule");
                self.c.schedule = Some(wgslc_passes::schedule(&self.g, &opts.fuse_options())?);
            }
            Step::Memory => {
                progress.stage("memory");
                let sched = self.c.schedule.as_ref().expect("scheduled");
                self.c.memory = Some(wgslc_passes::plan_memory_with(&self.g, sched, &opts.memory_options())?);
            }
            Step::Emit => {
                progress.stage("emit");
                let (sched, mem) =
                    (self.c.schedule.as_ref().expect("scheduled"), self.c.memory.as_ref().expect("planned"));
                self.c.kernels = Some(wgslc_emit::emit(&self.g, sched, mem, &opts.limits)?);
                if let Some(layout) = &self.c.decoder {
                    self.c.advance = crate::decoder::advance_kernels(&self.g, mem, layout, &opts.limits)?;
                }
            }
        }
        Ok(())
    }

    /// Ranged dims, after a whole compile: each probe compiled to kernels the same way (its ranges masked, then
    /// every stage after `ranges`), and which workgroup counts follow which dim.
    fn scales(&mut self) -> Result<(), CompileError> {
        let (Some((dims, probes, axes)), Some(ranged)) = (self.probes.take(), self.ranged.take()) else {
            return Ok(());
        };
        let mut scales = Vec::new();
        if let Some(kernels) = &self.c.kernels {
            let probe_kernels: Vec<_> = probes
                .into_iter()
                .map(|mut pg| {
                    wgslc_passes::mask_ranges(&mut pg, &dims, &axes).ok()?;
                    let mut probe = Run::new(self.model, self.opts, self.extras, pg, Some(RANGES_AFTER));
                    probe.forced_splits = Some(self.splits.clone());
                    probe.stages(Some("ranges"), None).ok()?;
                    Some((probe.g, probe.c.kernels?))
                })
                .collect();
            scales = grid_scales(&self.g, kernels, &probe_kernels, &dims, &ranged.masked);
        }
        self.c.ranged = Some(RangedCompile { ranged, scales });
        Ok(())
    }
}

/// Whether a product of a ranged graph may be split along K: its operands were in the graph when its ranged axes
/// were found, A's K (its last axis) follows no dim and B follows none at all (so K and N are the same at every
/// value, and the probe splits it as the max does).
fn k_follows_no_dim(g: &Graph, n: wgslc_ir::NodeId, axes: &wgslc_passes::RangedAxes, known: usize) -> bool {
    let node = g.node(n);
    let (Some(Some(a)), Some(Some(b))) = (node.inputs.first(), node.inputs.get(1)) else { return false };
    let k_axis = g.ty(*a).rank().saturating_sub(1);
    let known_free = |v: wgslc_ir::ValueId, free: &dyn Fn(usize) -> bool| {
        v.index() < known && axes.get(&v).is_none_or(|ax| ax.iter().all(|x| free(x.axis)))
    };
    known_free(*a, &|axis| axis != k_axis) && known_free(*b, &|_| false)
}

/// With `--kv-cache`, the options with the inputs a decoder convention fixes bound as constants (optimum's
/// `use_cache_branch`, [`wgslc_passes::convention_constants`]) where the user has not bound them; `None` when
/// there are none.
fn decoder_conventions(model: &Path, opts: &CompileOptions) -> Result<Option<CompileOptions>, CompileError> {
    if opts.kv_cache.is_none() {
        return Ok(None);
    }
    let source = crate::source::Source::open(model)?;
    let bound = opts.constants.keys().cloned().collect();
    let fixed = wgslc_passes::convention_constants(&source.signature(&opts.dims)?, &bound);
    if fixed.is_empty() {
        return Ok(None);
    }
    let mut opts = opts.clone();
    opts.constants.extend(fixed);
    Ok(Some(opts))
}

/// Runs the pipeline on a model file up to and including stage `stop_after` (every stage when `None`).
pub fn run(model: &Path, opts: &CompileOptions, stop_after: Option<&str>) -> Result<Compiled, CompileError> {
    run_with(model, opts, stop_after, &Extras::default())
}

/// [`run`] with what the driver may ask beyond the options.
pub(crate) fn run_with(
    model: &Path,
    opts: &CompileOptions,
    stop_after: Option<&str>,
    extras: &Extras,
) -> Result<Compiled, CompileError> {
    if let Some(s) = stop_after.filter(|s| !stages().contains(s)) {
        return Err(CompileError::UnknownStage(s.into(), stages().join(", ")));
    }
    let ranged_opts = check_ranges(opts)?;
    let opts = ranged_opts.as_ref().unwrap_or(opts);
    let conventional = decoder_conventions(model, opts)?;
    let opts = conventional.as_ref().unwrap_or(opts);
    let mut r = Run::new(model, opts, extras, Graph::new(), None);
    r.stages(None, stop_after)?;
    if stop_after.is_none() {
        r.scales()?;
    }
    r.c.graph = r.g;
    Ok(r.c)
}

/// The `layout` stage: `None` when the end-aligned window is exact for the model's mask, else the model imported
/// with every key at its position, proven; refused when neither layout is.
fn prove_layout(
    model: &Path,
    opts: &CompileOptions,
    g: &Graph,
    window: &wgslc_passes::DecoderLayout,
) -> Result<Option<(Graph, wgslc_passes::DecoderLayout)>, CompileError> {
    match crate::layout::prove(model, opts, g, window) {
        Ok(()) => Ok(None),
        // A mask that does not move with the window's keys: every key at its position instead, where the model's
        // caches allow it.
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
            crate::layout::prove(model, opts, &pg, &positions).map_err(neither)?;
            Ok(Some((pg, positions)))
        }
        Err(e) => Err(e),
    }
}

/// What a decoder's decode step computes from its position alone (rotary tables), looked up in a table over every
/// position the cache holds (`tabulate_bounded_input`), when fusing: its position inputs (`position_ids`,
/// `cache_position`) lie below the capacity.
fn tabulate_positions(g: &mut Graph, layout: &wgslc_passes::DecoderLayout) -> Result<(), CompileError> {
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
