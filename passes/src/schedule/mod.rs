//! Scheduling and fusion: which nodes become which kernel, in dispatch order, and why each remaining kernel
//! boundary exists.
//!
//! A kernel is data ([`KernelGroup`]): an optional *anchor* (a node with its own kernel: MatMul, Gemm, Conv,
//! Softmax, …), the [`Fold`]s that compute other nodes inside the anchor's loops, the elementwise epilogue, and a
//! [`Recipe`] (tiling and layout decisions) that the emitter only reads. Scheduling runs in three steps:
//! 1. Layout copies (`StridedCopy`: Transpose, Slice, Expand, Split parts) are folded into every reader's index
//!    math when each reader is elementwise or a MatMul/Gemm operand and the composed view is affine; then the
//!    copy has no kernel at all.
//! 2. Groups form in data order. An elementwise node joins the group that produces one of its inputs when that
//!    value has this node as its only reader, is not a graph output, has the node's output shape, and the group's
//!    anchor (if any) takes an epilogue (MatMul, Gemm, Conv, Softmax, Gather). A value with several readers is
//!    materialized rather than recomputed: every reader would redo the producer's loads and arithmetic, which
//!    costs more than one write and re-read whenever the producer is not a pure view. A group stops growing
//!    before it would bind more storage buffers than the limit. Rules that apply as groups form:
//!    `rules::operand` (scalar ops and RMSNormalization on MatMul operands) and `rules::siblings`.
//! 3. The rules of [`rules::RULES`] merge formed groups, in order:
//!    - `attention`: MatMul(Q, Kᵀ) → Softmax → MatMul(·, V) becomes one kernel with an online softmax.
//!    - `conv_sum`: a lone ungrouped Conv whose output only an Add reads, where that Add is the first epilogue
//!      node of another ungrouped Conv with the same output shape (a ResNet shortcut projection): one
//!      implicit-GEMM product over both K ranges.
//!    - `expand`: unless `FuseOptions::inverted_residual` says otherwise, a pointwise Conv read only by a
//!      depthwise Conv is computed in that Conv's kernel over each output tile's window.
//!    - `depthwise`: a depthwise Conv (with scalar pointwise nodes after it) read only by a pointwise Conv of at
//!      most [`DEPTHWISE_MAX_CHANNELS`] output channels is computed in that Conv's operand loads; with an
//!      expansion folded in and a projection of at most [`PROJECT_MAX_CHANNELS`], a whole inverted-residual
//!      block is one kernel.
//!    - `store_copy`: a Transpose (permuting StridedCopy) that is the only reader of an elementwise,
//!      MatMul/Gemm/Conv or attention kernel's result is written by that kernel at its transposed places, as
//!      attention's [b, h, t, d] → [b, t, h, d] before the output projection.
//!    - `concat`: a Concat each of whose inputs is the result of such a kernel, read by the Concat alone: every
//!      producer stores its result straight into its block of the Concat's output, and the Concat has no
//!      kernel (SqueezeNet's fire modules, Inception's branches, U-Net's skip joins). A Concat that keeps its
//!      copy kernels reads through the layout copies only it reads (a prefill step's window of the cache).
//!
//! Then every remaining producer → consumer edge gets the reason it crosses a kernel boundary, each group its
//! recipe, and [`verify_schedule`] checks the result.

mod group;
mod reads;
mod recipe;
mod rules;
mod verify;

pub use group::{AnchorKind, AttentionTail, Fold, FoldKind, FoldedConv, KernelGroup};
pub use reads::{
    group_io, in_place_candidates, input_view, mm_batch_refinement, read_spec, refined_strides, scalar_literal,
    scalar_op_data_slot, Readers,
};
pub use recipe::{
    anchor_kind, attention_tiling, concat_placement, expand_tile, gemv_tiling, grouped_conv_as_product,
    packed_gemv_tiling, product_tiling, store_permutation, AttentionTiling, ExpandTile, GemvTiling, PackedGemvTiling,
    ProductTiling, Recipe, StorePlacement, Target, CPU_GEMV_MACS_PER_WORKGROUP, CPU_GEMV_WORKGROUPS,
    EXPAND_MAX_RECOMPUTE, EXPAND_STEP_CHANNELS, GEMV_WORKGROUPS, GROUPED_CONV_PRODUCT_MIN_ROWS, KSPLIT16_BELOW,
    MAX_LOADS_PER_STEP, PROJECT_MAX_PER_THREAD, WORKGROUP_FLOATS,
};
pub use rules::depthwise::{DEPTHWISE_MAX_CHANNELS, PROJECT_MAX_CHANNELS};
pub use verify::verify_schedule;

use crate::lower::storage_root;
use crate::PassError;
use reads::{closed_cluster, effective_readers, final_readers, is_output, member_bindings};
use recipe::recipe;
use rules::Fuse;
use std::collections::{HashMap, HashSet};
use wgslc_ir::{Graph, NodeId, Op, ValueId};

/// The widest Q/K rows the attention kernel takes (it streams them in 16-column slices; the bound keeps the score
/// loop's trip count sane), and the widest value rows (16 accumulators per thread).
pub const ATTENTION_MAX_DK: usize = 1024;
pub const ATTENTION_MAX_DV: usize = 256;
/// The most keys a one-query-row attention kernel takes (every score in workgroup memory: 8 KiB of the 16 KiB).
pub const ATTENTION_ROW_MAX_KEYS: usize = 2048;
/// The widest Q/K rows the one-row attention kernel takes (its query in workgroup memory).
pub const ATTENTION_ROW_MAX_DK: usize = 256;
/// The most tokens a self-attention (as many query rows as keys) runs as one tiled attention kernel; longer, it
/// is three kernels. The tiled kernel's workgroups (32 query rows of one head each) walk every key of their rows,
/// where the score and value products spread over hundreds of tiles: on an H200 (`scripts/bench_models.py
/// --tokens T --modes fused,attention_unfused`, 12 layers, one command; ms fused / three kernels) at 384 tokens
/// GPT-2-style 5.82 / 4.97, Llama-style 4.66 / 4.31, BERT-style 5.84 / 5.05; at 1024 tokens 12.22 / 10.78,
/// 10.54 / 10.19, 12.28 / 10.89; the BERT-base-shaped encoder of scripts/ranged_bench.py 5.95 / 5.11 at 384 and
/// 6.49 / 5.58 at 512, even at 96–256 (3.83 / 3.80 at 256) and faster fused below (1.88 / 2.02 at 48). A
/// prefill chunk's attention (fewer query rows than keys: the cache's window and the chunk, read in place) keeps
/// one kernel: not measured as three.
pub const ATTENTION_SELF_MAX_TOKENS: usize = 256;

/// A producer → consumer edge that crosses a kernel boundary, and why it was not fused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Boundary {
    pub producer: NodeId,
    pub consumer: NodeId,
    pub value: ValueId,
    pub reason: String,
}

/// The ordered kernels of a graph.
#[derive(Clone, Debug, Default)]
pub struct Schedule {
    pub kernels: Vec<KernelGroup>,
    /// Layout copies folded into their readers' index math (no kernel of their own).
    pub folded: HashSet<NodeId>,
    /// Concats whose inputs their producing kernels store straight into the output ([`Fold::WriteInto`]): no
    /// kernel of their own, in no group.
    pub concats: HashSet<NodeId>,
    pub boundaries: Vec<Boundary>,
    /// What the kernels are shaped for ([`FuseOptions::target`]); the emitter lays out their work for it.
    pub target: Target,
}

#[derive(Clone, Debug)]
pub struct FuseOptions {
    /// `false` is `--no-fuse`: one kernel per op.
    pub fuse: bool,
    /// Keep a value with several readers inside one kernel when all its readers join that kernel.
    pub clusters: bool,
    /// WebGPU's maxStorageBuffersPerShaderStage.
    pub max_storage_buffers: usize,
    /// When Q·Kᵀ → softmax → ·V becomes one attention kernel.
    pub attention: AttentionMode,
    /// Whether a 1x1 expansion is computed inside the depthwise convolution that reads it, and a whole expansion →
    /// depthwise → projection block in one kernel (`fuse_expand`).
    pub inverted_residual: InvertedResidualMode,
    /// What the kernels are shaped for (`--target`).
    pub target: Target,
}

impl Default for FuseOptions {
    fn default() -> Self {
        FuseOptions {
            fuse: true,
            clusters: true,
            max_storage_buffers: 8,
            attention: AttentionMode::Fused,
            inverted_residual: InvertedResidualMode::Fused,
            target: Target::Gpu,
        }
    }
}

/// Whether Q·Kᵀ → softmax → ·V is emitted as one attention kernel (the default) or as three (score product,
/// softmax, value product). Measured on an H100 for a 12-layer GPT-2, ms per inference, fused against three
/// kernels: 9.00 / 9.42 at 128 tokens, 14.5 / 15.1 at 256, 15.4 / 14.9 at 512, 28.5 / 29.4 at 1024 (run-to-run
/// spread about ±3 %), with 24 fewer dispatches and no scores in memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttentionMode {
    #[default]
    Fused,
    Unfused,
}

/// Whether MobileNet-style inverted-residual blocks are fused (the default: `fuse_expand`) or kept as one kernel
/// per convolution (with only the depthwise → projection fold). Measured on MobileNetV2 (H100, final binary of
/// the fifth session, six interleaved runs): 28 dispatches and 0.82–0.89 ms fused, 48 and 0.79–0.82 ms unfused,
/// with 0.854 against 0.839 ms of GPU kernel time: the fused kernels cost about what the ones they replace do,
/// and the 20 dispatches saved are what a browser's 24–36 µs per dispatch pays for. On lavapipe (a CPU) unfused
/// is 2.5x faster: there the expansion recomputed at tile borders costs its full price.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InvertedResidualMode {
    #[default]
    Fused,
    Unfused,
}

/// Groups nodes into kernels (see the module doc for the rules).
///
/// Requires: a legalized graph. Establishes: every node that is neither an Alias nor a folded copy is in exactly
/// one group; groups are in an order where every producer's group comes before its consumers'; every read of a
/// folded copy's output composes into a view of a materialized value.
pub fn schedule(g: &Graph, opts: &FuseOptions) -> Result<Schedule, PassError> {
    let order = g.topo_order()?;
    let mut readers: HashMap<ValueId, Vec<(NodeId, usize)>> = HashMap::new();
    for &n in &order {
        for (slot, v) in g.node(n).inputs.iter().enumerate() {
            if let Some(v) = v {
                readers.entry(*v).or_default().push((n, slot));
            }
        }
    }
    let mut f = Fuse {
        g,
        opts,
        readers: &readers,
        sched: Schedule { target: opts.target, ..Schedule::default() },
        group_of: HashMap::new(),
        reasons: HashMap::new(),
    };

    // 1. Fold layout copies, latest first, so chains of copies compose end to end.
    if opts.fuse {
        for &p in order.iter().rev() {
            if !matches!(g.node(p).op, Op::StridedCopy { .. }) {
                continue;
            }
            let mut trial = f.sched.folded.clone();
            trial.insert(p);
            let ok = final_readers(g, g.node(p).outputs[0], &trial, &readers).is_some_and(|rs| {
                !rs.is_empty()
                    && rs.iter().all(|&(r, slot)| {
                        // A Concat's copies read through views only once it keeps them (the `concat` rule).
                        !matches!(g.node(r).op, Op::Concat { .. }) && read_spec(g, r, slot).is_some() && {
                            let view = input_view(g, &trial, r, slot);
                            g.value(view.root).producer.is_none_or(|q| !trial.contains(&q))
                        }
                    })
            });
            if ok {
                f.sched.folded = trial;
            }
        }
    }

    // 2. Form groups in data order.
    // Values with several readers that stay inside one kernel because all their readers join it.
    let mut internal: HashSet<ValueId> = HashSet::new();
    for &n in &order {
        let node = g.node(n);
        if node.op == Op::Alias || f.sched.folded.contains(&n) {
            continue;
        }
        let out = node.outputs[0];
        let mut joined = None;
        if opts.fuse && node.op.is_pointwise() {
            for v in node.inputs.iter() {
                let Some(v) = *v else { continue };
                // Reshapes keep the flat order, so a producer seen through them can still take this node.
                let u = storage_root(g, v);
                let through_alias = u != v;
                let Some(q) = g.value(u).producer else { continue };
                let Some(&gi) = f.group_of.get(&q) else { continue };
                let group = &f.sched.kernels[gi];
                let group_out = g.node(group.last()).outputs[0];
                let n_readers = f.effective_readers(u).len();
                if opts.clusters && n_readers > 1 && !internal.contains(&u) && group.last() == q {
                    if let Some(vals) = closed_cluster(g, u, &readers) {
                        internal.extend(vals);
                    }
                }
                let why = if group.last() != q && !internal.contains(&u) {
                    Some("the producer's kernel already ends elsewhere".to_string())
                } else if f.is_output(u) {
                    Some("graph output: materialized for the caller".to_string())
                } else if n_readers > 1 && !internal.contains(&u) {
                    Some(format!("{n_readers} consumers: recompute costs more than materializing"))
                } else if g.ty(out).numel() != g.ty(group_out).numel()
                    || (!through_alias && g.ty(v).shape != g.ty(out).shape)
                {
                    Some(format!("shapes differ: broadcast {:?} → {:?}", g.ty(v).shape, g.ty(out).shape))
                } else if group.anchor.is_some_and(|a| !g.ty(g.node(a).outputs[0]).dtype.is_float()) {
                    Some("epilogues take float32 only".to_string())
                } else if let Some(a) = group.anchor.filter(|&a| !g.node(a).op.takes_epilogue()) {
                    Some(format!("{} has no epilogue", g.node(a).op.name()))
                } else {
                    let mut members = group.nodes();
                    members.push(n);
                    let b = member_bindings(g, &f.sched.folded, &members, &group.inlined());
                    (b > opts.max_storage_buffers)
                        .then(|| format!("would exceed {} storage bindings", opts.max_storage_buffers))
                };
                match why {
                    None => {
                        joined = Some(gi);
                        break;
                    }
                    Some(r) => {
                        f.reasons.insert((q, n), r);
                    }
                }
            }
        }
        match joined {
            Some(gi) => {
                // The node may read values of kernels formed after this group; an open group's values are read
                // only inside it, so it can move to the end of the order, after everything it now depends on.
                let mut group = f.remove_group(gi);
                group.elementwise.push(n);
                f.sched.kernels.push(group);
                let last = f.sched.kernels.len() - 1;
                for m in f.sched.kernels[last].nodes() {
                    f.group_of.insert(m, last);
                }
                rules::siblings::absorb(&mut f, n);
            }
            None => {
                let mut group = KernelGroup::single(n, node.op.in_elementwise_group());
                if opts.fuse {
                    rules::operand::fold_into(&mut f, &mut group, n);
                }
                let gi = f.sched.kernels.len();
                for m in group.nodes() {
                    f.group_of.insert(m, gi);
                }
                f.sched.kernels.push(group);
            }
        }
    }

    // 2b. The rules that merge formed groups, in order.
    if opts.fuse {
        for rule in rules::RULES.iter().filter(|r| (r.enabled)(opts)) {
            (rule.run)(&mut f);
        }
    }
    let Fuse { mut sched, group_of, reasons, .. } = f;

    // 3. Why every remaining edge crosses a kernel boundary.
    for &n in &order {
        let Some(&gn) = group_of.get(&n) else { continue };
        for v in g.node(n).inputs.iter().flatten() {
            // The kernel that materializes what n reads (through aliases and folded copies).
            let mut u = *v;
            let mut via = None;
            let producer = loop {
                match g.value(u).producer {
                    Some(q) if g.node(q).op == Op::Alias || sched.folded.contains(&q) => {
                        via.get_or_insert(q);
                        u = g.node(q).inputs[0].expect("input");
                    }
                    other => break other,
                }
            };
            let Some(q) = producer else { continue };
            let Some(&gq) = group_of.get(&q) else { continue };
            if gq == gn {
                continue;
            }
            let reason = if !opts.fuse {
                "--no-fuse".to_string()
            } else if let Some(r) = reasons.get(&(q, n)) {
                r.clone()
            } else if via.is_some_and(|a| g.node(a).op == Op::Alias) && g.node(n).op.is_pointwise() {
                "reshaped between producer and consumer".to_string()
            } else if let Some(c) =
                via.filter(|&c| matches!(g.node(c).op, Op::StridedCopy { .. }) && g.node(n).op.is_pointwise())
            {
                let (po, co) = (g.node(q).op.name(), g.node(n).op.name());
                format!("{co} reads {po}'s result through a folded layout copy ('{}'): an epilogue works in its producer's layout", g.node(c).name)
            } else {
                // A group stored through its Transpose produces what its result's op computed.
                let shown = sched.kernels[gq].store_copy().filter(|&t| t == q).map(|_| sched.kernels[gq].result());
                let (po, co) = (g.node(shown.unwrap_or(q)).op.name(), g.node(n).op.name());
                match &g.node(n).op {
                    op if op.takes_epilogue() => format!("{po} → {co}: both need their own kernel"),
                    Op::Softmax { .. } | Op::LayerNorm { .. } | Op::Reduce { .. } | Op::ArgReduce { .. } => {
                        format!("consumer {co} reduces over another axis than its producer computes")
                    }
                    Op::StridedCopy { .. } | Op::TileCopy | Op::RotateHalf => {
                        format!("{co} reads its input at other coordinates")
                    }
                    op if op.is_pointwise() && sched.kernels[gn].nodes().first() != Some(&n) => {
                        let joined = g.node(sched.kernels[gn].nodes()[0]).op.name();
                        format!("{co} joined the {joined} kernel of another operand; this one is loaded from memory")
                    }
                    op if op.is_pointwise() => format!("{po} has no epilogue"),
                    _ => format!("{co} takes a materialized input"),
                }
            };
            sched.boundaries.push(Boundary { producer: q, consumer: n, value: *v, reason });
        }
    }
    // Clusters are accepted optimistically: if any value meant to stay inside a kernel is read outside it, fall
    // back to the plain rule.
    if opts.clusters {
        for k in &sched.kernels {
            let members: HashSet<NodeId> = k.nodes().into_iter().collect();
            for &m in &k.nodes() {
                if m == k.last() {
                    continue;
                }
                for &o in &g.node(m).outputs {
                    let leaks = is_output(g, o, &readers)
                        || effective_readers(g, o, &readers).iter().any(|r| !members.contains(r));
                    if leaks {
                        return schedule(g, &FuseOptions { clusters: false, ..opts.clone() });
                    }
                }
            }
        }
    }
    for k in &mut sched.kernels {
        k.recipe = recipe(g, k).ok_or_else(|| {
            let node = g.node(k.last());
            PassError::Node {
                node: node.name.clone(),
                op: node.op.name().into(),
                reason: "a fold's tiling has no answer (a scheduler bug)".into(),
            }
        })?;
    }
    verify_schedule(g, &sched)?;
    Ok(sched)
}
