//! Scheduling and fusion: which nodes become which kernel, in dispatch order, and why each remaining kernel
//! boundary exists.
//!
//! A kernel group is an optional *anchor* (a node with its own kernel: MatMul, Gemm, Conv, Softmax, …) followed by
//! elementwise nodes, or elementwise nodes alone. The rules:
//! - An elementwise node joins the group that produces one of its inputs when that value has this node as its
//!   only reader, is not a graph output, has the node's output shape, and the group's anchor (if any) takes an
//!   epilogue (MatMul, Gemm, Conv). A value with several readers is materialized rather than recomputed: every
//!   reader would redo the producer's loads and arithmetic, which costs more than one write and re-read
//!   whenever the producer is not a pure view.
//! - Layout copies (`StridedCopy`: Transpose, Slice, Expand, Split parts) are folded into every reader's index math
//!   when each reader is elementwise or a MatMul/Gemm operand and the composed view is affine; then the copy has no
//!   kernel at all.
//! - A group stops growing before it would bind more storage buffers than the limit.
//! - Attention (MatMul(Q, Kᵀ) → Softmax → MatMul(·, V)) becomes one group (`fuse_attention`).
//! - An RMSNormalization over K read only by a MatMul's A operand joins the MatMul (`rms_prologue`): the product
//!   scales B's rows by the norm's weights, gathers each row's sum of squares from its A tiles, and divides by the
//!   row's RMS before the epilogue.
//! - A lone ungrouped Conv whose output only an Add reads, where that Add is the first epilogue node of another
//!   ungrouped Conv with the same output shape (a ResNet shortcut projection), joins that Conv's group as its
//!   `conv_sum`: one implicit-GEMM product over both K ranges (`fuse_conv_sums`).
//! - A depthwise Conv (with scalar pointwise nodes after it) read only by a pointwise Conv of at most
//!   [`DEPTHWISE_MAX_CHANNELS`] output channels is computed in that Conv's operand loads (`fuse_depthwise`).
//! - Unless `FuseOptions::inverted_residual` says otherwise, a pointwise Conv read only by a depthwise Conv is computed in that
//!   Conv's kernel over each output tile's window (`fuse_expand`), and then a projection of at most
//!   [`PROJECT_MAX_CHANNELS`] takes the pair into its kernel too: a whole inverted-residual block, one kernel.
//! - A Transpose (permuting StridedCopy) that is the only reader of an elementwise, MatMul/Gemm/Conv or attention
//!   kernel's result becomes that kernel's `store_copy`: the kernel writes each element at its transposed place
//!   (`fold_output_permutes`), as attention's [b, h, t, d] → [b, t, h, d] before the output projection.

use crate::lower::storage_root;
use crate::view::{compose, View};
use crate::PassError;
use std::collections::{HashMap, HashSet};
use wgslc_ir::{broadcast_strides, contiguous_strides, DType, Graph, NodeId, Op, ValueId};

/// Nodes emitted as one WGSL module and dispatched together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelGroup {
    /// Pointwise nodes with only scalar-constant operands applied to a MatMul operand as it is loaded
    /// (`(slot, node)`: the operand slot they feed).
    pub prologue: Vec<(usize, NodeId)>,
    /// The node with its own kernel shape, or `None` for a purely elementwise group.
    pub anchor: Option<NodeId>,
    /// Elementwise nodes applied after the anchor (its epilogue) or forming the whole kernel, in data order.
    pub elementwise: Vec<NodeId>,
    /// A second convolution summed into the anchor's (a ResNet shortcut projection): `(conv, add)`, where `add`
    /// is the first epilogue node and adds that convolution's output to the anchor's. Both are ungrouped with
    /// the same output shape, so the kernel computes them as one product over their concatenated K and `add`
    /// costs nothing.
    pub conv_sum: Option<(NodeId, NodeId)>,
    /// An RMSNormalization over the last axis whose output only this MatMul reads as its A operand: the product
    /// normalizes instead (B's rows scaled by the norm's weights as loaded, each row's sum of squares gathered
    /// from the A tiles, the result divided by the row's RMS before the epilogue).
    pub rms_prologue: Option<NodeId>,
    /// A depthwise convolution (with its scalar epilogue, e.g. ReLU6) whose output only this pointwise (1x1) Conv
    /// reads: the product computes each element of its B operand from the depthwise input's window as it loads
    /// it, so the depthwise output never reaches memory (MobileNet's depthwise → projection).
    pub depthwise: Option<FoldedConv>,
    /// A pointwise (1x1) ungrouped Conv (with its scalar epilogue, e.g. ReLU6) whose output only this group's
    /// depthwise Conv reads (the anchor, or `depthwise` when that is folded into a projection): each workgroup
    /// computes the expanded channels over its output tile's input window into workgroup memory, so the
    /// expansion's output never reaches memory (MobileNet's expansion → depthwise, and with `depthwise` the whole
    /// inverted-residual block). See [`expand_tile`].
    pub expand: Option<FoldedConv>,
    /// Attention: the anchor is the score product Q·Kᵀ (with its prologue and epilogue: scale, mask), and the
    /// softmax over its last axis and the product with V run in the same kernel with an online softmax.
    pub attention: Option<AttentionTail>,
    /// A permuting StridedCopy (a Transpose) that is the result's only reader: the kernel stores each element
    /// straight at its place in the copy's output (`store_permutation`), and the result is never written as is.
    pub store_copy: Option<NodeId>,
}

/// A convolution folded into its reader's kernel (`KernelGroup::depthwise`, `KernelGroup::expand`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoldedConv {
    pub conv: NodeId,
    /// Pointwise nodes after it whose other operands are scalar constants (`scalar_op_data_slot`), in data order.
    pub then: Vec<NodeId>,
}

/// The rest of an attention kernel after its score product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionTail {
    pub softmax: NodeId,
    /// `Where(IsNaN(p), 0, p)` after the softmax (PyTorch's SDPA export: a fully masked row gives zeros, not NaN),
    /// as (IsNaN, Where); the kernel writes zeros for rows whose scores are all -inf.
    pub nan_to_zero: Option<(NodeId, NodeId)>,
    /// The MatMul of the probabilities with V; the kernel writes its output.
    pub pv: NodeId,
}

/// The widest Q/K rows the attention kernel takes (it streams them in 16-column slices; the bound keeps the score
/// loop's trip count sane), and the widest value rows (16 accumulators per thread).
pub const ATTENTION_MAX_DK: usize = 1024;
pub const ATTENTION_MAX_DV: usize = 256;

impl KernelGroup {
    /// Every node of the group, anchor first.
    pub fn nodes(&self) -> Vec<NodeId> {
        let tail = self.attention.iter().flat_map(|t| {
            let nz = t.nan_to_zero.map(|(i, w)| vec![i, w]).unwrap_or_default();
            std::iter::once(t.softmax).chain(nz).chain([t.pv])
        });
        let folded = |f: &Option<FoldedConv>| {
            f.iter().flat_map(|d| std::iter::once(d.conv).chain(d.then.iter().copied())).collect::<Vec<_>>()
        };
        self.prologue
            .iter()
            .map(|&(_, p)| p)
            .chain(folded(&self.expand))
            .chain(folded(&self.depthwise))
            .chain(self.rms_prologue)
            .chain(self.anchor)
            .chain(self.conv_sum.map(|(c, _)| c))
            .chain(self.elementwise.iter().copied())
            .chain(tail)
            .chain(self.store_copy)
            .collect()
    }

    /// Members applied to a value as it is loaded or computed inside another member's loop, whose scalar-constant
    /// operands are literals in the kernel rather than bindings.
    pub fn inlined(&self) -> HashSet<NodeId> {
        let then = |f: &Option<FoldedConv>| f.iter().flat_map(|d| d.then.clone()).collect::<Vec<_>>();
        self.prologue.iter().map(|&(_, p)| p).chain(then(&self.depthwise)).chain(then(&self.expand)).collect()
    }

    /// The node whose output the kernel writes.
    pub fn last(&self) -> NodeId {
        self.store_copy.unwrap_or_else(|| self.result())
    }

    /// The node whose value the kernel computes last: what it writes, or what it writes through `store_copy`.
    pub fn result(&self) -> NodeId {
        if let Some(t) = self.attention {
            return t.pv;
        }
        *self.elementwise.last().or(self.anchor.as_ref()).expect("non-empty group")
    }

    /// A group of one node's kernel.
    pub fn single(n: NodeId, pointwise: bool) -> KernelGroup {
        let (anchor, elementwise) = if pointwise { (None, vec![n]) } else { (Some(n), vec![]) };
        KernelGroup {
            prologue: vec![],
            rms_prologue: None,
            depthwise: None,
            expand: None,
            anchor,
            elementwise,
            conv_sum: None,
            attention: None,
            store_copy: None,
        }
    }
}

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
    pub boundaries: Vec<Boundary>,
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
}

impl Default for FuseOptions {
    fn default() -> Self {
        FuseOptions {
            fuse: true,
            clusters: true,
            max_storage_buffers: 8,
            attention: AttentionMode::Fused,
            inverted_residual: InvertedResidualMode::Fused,
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

/// Ops computed one output element at a time from inputs at the same coordinates.
pub fn is_pointwise(op: &Op) -> bool {
    matches!(op, Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast(_) | Op::Trilu { .. })
}

/// Anchors whose kernels apply an elementwise epilogue before storing.
pub fn takes_epilogue(op: &Op) -> bool {
    matches!(op, Op::MatMul | Op::Gemm { .. } | Op::Conv { .. } | Op::Softmax { .. } | Op::Gather { .. })
}

/// For a pointwise node whose inputs other than one are scalar constants, that one input's slot: such a node can
/// be applied to a value as it is loaded, with the constants inlined.
pub fn scalar_op_data_slot(g: &Graph, n: NodeId) -> Option<usize> {
    let node = g.node(n);
    if !matches!(node.op, Op::Unary(_) | Op::Binary(_)) || g.ty(node.outputs[0]).dtype != wgslc_ir::DType::F32 {
        return None;
    }
    let mut data = None;
    for (slot, v) in node.inputs.iter().enumerate() {
        let v = (*v)?;
        match g.const_data(v) {
            Some(t) if t.numel() == 1 => {}
            _ if data.is_none() => data = Some(slot),
            _ => return None,
        }
    }
    data
}

/// How a node reads input `slot`, as (offset, strides, extents) over its own coordinates, when the read can go
/// through a view; `None` when the node needs the value materialized.
pub fn read_spec(g: &Graph, n: NodeId, slot: usize) -> Option<(i64, Vec<i64>, Vec<usize>)> {
    let node = g.node(n);
    let v = node.inputs.get(slot).copied().flatten()?;
    let vs = &g.ty(v).shape;
    match &node.op {
        op if is_pointwise(op) => {
            let os = g.ty(node.outputs[0]).shape.clone();
            Some((0, broadcast_strides(vs, &os), os))
        }
        Op::StridedCopy { offset, strides } => Some((*offset, strides.clone(), g.ty(node.outputs[0]).shape.clone())),
        // Read at a rotated last coordinate, which stays inside the same extent: the view of the plain read holds.
        Op::RotateHalf => Some((0, contiguous_strides(vs).into_iter().map(|s| s as i64).collect(), vs.clone())),
        Op::MatMul | Op::Gemm { .. } if slot < 2 => match mm_batch_refinement(g, n) {
            Some(fine) => {
                let extents = fine.iter().chain(&vs[vs.len() - 2..]).copied().collect();
                Some((0, refined_strides(vs, &fine), extents))
            }
            None => Some((0, contiguous_strides(vs).into_iter().map(|s| s as i64).collect(), vs.clone())),
        },
        _ => None,
    }
}

/// A finer batch shape for a batched MatMul whose operands both have the output's batch shape: the batch shape of
/// a value on an operand's producer chain (through Alias and StridedCopy nodes) that splits each output batch
/// dimension into consecutive factors, as a GQA export's Expand([b, kv, 1, n, d] → [b, kv, g, n, d]) → Reshape
/// ([b, kv·g, n, d]) does. Over the finer coordinates the read of the merged dimension stays affine through the
/// Expand (stride 0 on the repeated factor), so the copy folds into the MatMul's batch strides instead of being
/// materialized. `None` when no such value exists or the operands broadcast.
pub fn mm_batch_refinement(g: &Graph, n: NodeId) -> Option<Vec<usize>> {
    let node = g.node(n);
    if node.op != Op::MatMul {
        return None;
    }
    let (a, b) = (node.inputs.first().copied().flatten()?, node.inputs.get(1).copied().flatten()?);
    let (at, bt) = (&g.ty(a).shape, &g.ty(b).shape);
    if at.len() < 3 || at.len() != bt.len() || at[..at.len() - 2] != bt[..bt.len() - 2] {
        return None;
    }
    let batch = &at[..at.len() - 2];
    for v in [b, a] {
        let mut u = v;
        for _ in 0..8 {
            let Some(p) = g.value(u).producer else { break };
            if !matches!(g.node(p).op, Op::Alias | Op::StridedCopy { .. }) {
                break;
            }
            u = g.node(p).inputs.first().copied().flatten()?;
            let us = &g.ty(u).shape;
            if us.len() > batch.len() + 2 && refines(&us[..us.len() - 2], batch) {
                return Some(us[..us.len() - 2].to_vec());
            }
        }
    }
    None
}

/// Whether `fine` splits each dimension of `coarse` into consecutive factors (dimensions of 1 anywhere).
fn refines(fine: &[usize], coarse: &[usize]) -> bool {
    let mut i = 0;
    for &c in coarse {
        let mut p = 1;
        while p < c {
            let Some(&f) = fine.get(i) else { return false };
            p *= f;
            i += 1;
        }
        if p != c {
            return false;
        }
    }
    fine[i..].iter().all(|&f| f == 1)
}

/// Strides of a contiguous `shape` read over coordinates whose leading (batch) dimensions are `fine`, a refinement of
/// `shape`'s batch dimensions (see [`mm_batch_refinement`]), followed by its last two.
pub fn refined_strides(shape: &[usize], fine: &[usize]) -> Vec<i64> {
    let r = shape.len();
    let cs = contiguous_strides(shape);
    // The batch dimensions of a contiguous shape are row-major among themselves, m·k apart.
    let unit = cs[r - 3] as i64;
    let fcs = contiguous_strides(fine);
    fcs.iter().map(|&s| s as i64 * unit).chain([cs[r - 2] as i64, cs[r - 1] as i64]).collect()
}

/// The view through which node `n` reads input `slot` under `folded` (Alias producers are always passed).
pub fn input_view(g: &Graph, folded: &HashSet<NodeId>, n: NodeId, slot: usize) -> View {
    let v = g.node(n).inputs[slot].expect("present input");
    match read_spec(g, n, slot) {
        Some((o, s, e)) => compose(g, v, o, &s, &e, folded),
        None => {
            let s: Vec<i64> = contiguous_strides(&g.ty(v).shape).into_iter().map(|s| s as i64).collect();
            compose(g, v, 0, &s, &g.ty(v).shape.clone(), &HashSet::new())
        }
    }
}

/// Nodes that read `v` or a value reached from it through Alias and `folded` copies, with the slot they read.
fn final_readers(
    g: &Graph,
    v: ValueId,
    folded: &HashSet<NodeId>,
    readers: &HashMap<ValueId, Vec<(NodeId, usize)>>,
) -> Option<Vec<(NodeId, usize)>> {
    let mut out = Vec::new();
    let mut stack = vec![v];
    while let Some(u) = stack.pop() {
        if g.outputs.contains(&u) {
            return None;
        }
        for &(r, slot) in readers.get(&u).map(Vec::as_slice).unwrap_or(&[]) {
            let op = &g.node(r).op;
            if *op == Op::Alias || folded.contains(&r) {
                stack.push(g.node(r).outputs[0]);
            } else {
                out.push((r, slot));
            }
        }
    }
    Some(out)
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
    let mut sched = Schedule::default();

    // 1. Fold layout copies, latest first, so chains of copies compose end to end.
    if opts.fuse {
        for &p in order.iter().rev() {
            if !matches!(g.node(p).op, Op::StridedCopy { .. }) {
                continue;
            }
            let mut trial = sched.folded.clone();
            trial.insert(p);
            let ok = final_readers(g, g.node(p).outputs[0], &trial, &readers).is_some_and(|rs| {
                !rs.is_empty()
                    && rs.iter().all(|&(r, slot)| {
                        read_spec(g, r, slot).is_some() && {
                            let view = input_view(g, &trial, r, slot);
                            g.value(view.root).producer.is_none_or(|q| !trial.contains(&q))
                        }
                    })
            });
            if ok {
                sched.folded = trial;
            }
        }
    }

    // 2. Form groups in data order.
    let eff = |u: ValueId| effective_readers(g, u, &readers);
    let mut group_of: HashMap<NodeId, usize> = HashMap::new();
    let mut reasons: HashMap<(NodeId, NodeId), String> = HashMap::new();
    // Values with several readers that stay inside one kernel because all their readers join it.
    let mut internal: HashSet<ValueId> = HashSet::new();
    for &n in &order {
        let node = g.node(n);
        if node.op == Op::Alias || sched.folded.contains(&n) {
            continue;
        }
        let out = node.outputs[0];
        let mut joined = None;
        if opts.fuse && is_pointwise(&node.op) {
            for v in node.inputs.iter() {
                let Some(v) = *v else { continue };
                // Reshapes keep the flat order, so a producer seen through them can still take this node.
                let u = storage_root(g, v);
                let through_alias = u != v;
                let Some(q) = g.value(u).producer else { continue };
                let Some(&gi) = group_of.get(&q) else { continue };
                let group = &sched.kernels[gi];
                let group_out = g.node(group.last()).outputs[0];
                let n_readers = eff(u).len();
                if opts.clusters && n_readers > 1 && !internal.contains(&u) && group.last() == q {
                    if let Some(vals) = closed_cluster(g, u, &readers) {
                        internal.extend(vals);
                    }
                }
                let why = if group.last() != q && !internal.contains(&u) {
                    Some("the producer's kernel already ends elsewhere".to_string())
                } else if is_output(g, u, &readers) {
                    Some("graph output: materialized for the caller".to_string())
                } else if n_readers > 1 && !internal.contains(&u) {
                    Some(format!("{n_readers} consumers: recompute costs more than materializing"))
                } else if g.ty(out).numel() != g.ty(group_out).numel()
                    || (!through_alias && g.ty(v).shape != g.ty(out).shape)
                {
                    Some(format!("shapes differ: broadcast {:?} → {:?}", g.ty(v).shape, g.ty(out).shape))
                } else if group.anchor.is_some_and(|a| g.ty(g.node(a).outputs[0]).dtype != wgslc_ir::DType::F32) {
                    Some("epilogues take float32 only".to_string())
                } else if let Some(a) = group.anchor.filter(|&a| !takes_epilogue(&g.node(a).op)) {
                    Some(format!("{} has no epilogue", g.node(a).op.name()))
                } else {
                    let mut members = group.nodes();
                    members.push(n);
                    let b = member_bindings(g, &sched.folded, &members, &group.inlined());
                    (b > opts.max_storage_buffers)
                        .then(|| format!("would exceed {} storage bindings", opts.max_storage_buffers))
                };
                match why {
                    None => {
                        joined = Some(gi);
                        break;
                    }
                    Some(r) => {
                        reasons.insert((q, n), r);
                    }
                }
            }
        }
        match joined {
            Some(gi) => {
                // The node may read values of kernels formed after this group; an open group's values are read
                // only inside it, so it can move to the end of the order, after everything it now depends on.
                let mut group = sched.kernels.remove(gi);
                group.elementwise.push(n);
                sched.kernels.push(group);
                for v in group_of.values_mut() {
                    if *v > gi {
                        *v -= 1;
                    }
                }
                let last = sched.kernels.len() - 1;
                for &m in &sched.kernels[last].nodes() {
                    group_of.insert(m, last);
                }
                absorb_sibling_groups(g, &mut sched, &mut group_of, &readers, n, opts.max_storage_buffers);
            }
            None => {
                let mut group = KernelGroup::single(
                    n,
                    is_pointwise(&node.op) || matches!(node.op, Op::StridedCopy { .. } | Op::TileCopy | Op::RotateHalf),
                );
                // A MatMul operand computed by a lone scalar op (Q · scale, K · scale) is scaled as it is loaded.
                if opts.fuse && matches!(node.op, Op::MatMul) {
                    for slot in 0..2 {
                        let Some(v) = node.inputs[slot] else { continue };
                        let Some(p) = g.value(v).producer else { continue };
                        let Some(&gp) = group_of.get(&p) else { continue };
                        let lone = sched.kernels[gp].nodes() == [p];
                        if lone && scalar_op_data_slot(g, p).is_some() && eff(v) == [n] && !is_output(g, v, &readers) {
                            sched.kernels.remove(gp);
                            for x in group_of.values_mut() {
                                if *x > gp {
                                    *x -= 1;
                                }
                            }
                            group_of.remove(&p);
                            group.prologue.push((slot, p));
                        }
                    }
                }
                // A MatMul whose A operand is a lone RMSNormalization over K (Llama's norm → projection)
                // normalizes in the product.
                if opts.fuse && matches!(node.op, Op::MatMul) && group.prologue.is_empty() {
                    if let Some(p) = rms_prologue_of(g, n, &group_of, &sched, &readers) {
                        let mut trial = group.clone();
                        trial.rms_prologue = Some(p);
                        if bindings(g, &sched.folded, &trial) <= opts.max_storage_buffers {
                            let gp = group_of[&p];
                            sched.kernels.remove(gp);
                            for x in group_of.values_mut() {
                                if *x > gp {
                                    *x -= 1;
                                }
                            }
                            group = trial;
                        }
                    }
                }
                for &p in group.prologue.iter().map(|(_, p)| p).chain(&group.rms_prologue) {
                    group_of.insert(p, sched.kernels.len());
                }
                sched.kernels.push(group);
                group_of.insert(n, sched.kernels.len() - 1);
            }
        }
    }

    // 2b. Attention: score product → softmax over its last axis → product with V, as one kernel.
    if opts.fuse && opts.attention == AttentionMode::Fused {
        fuse_attention(g, &mut sched, &mut group_of, &readers, opts.max_storage_buffers);
    }

    // 2c. A convolution added to another's output (a shortcut projection) joins that convolution's kernel.
    if opts.fuse {
        fuse_conv_sums(g, &mut sched, &mut group_of, &readers, opts.max_storage_buffers);
    }

    // 2d. A pointwise convolution read only by a depthwise one is computed in that one's kernel (`fuse_expand`);
    // a depthwise convolution read only by a pointwise one is computed in that one's kernel too.
    if opts.fuse && opts.inverted_residual == InvertedResidualMode::Fused {
        fuse_expand(g, &mut sched, &mut group_of, &readers, &mut reasons, opts.max_storage_buffers);
    }
    if opts.fuse {
        fuse_depthwise(g, &mut sched, &mut group_of, &readers, &mut reasons, opts.max_storage_buffers);
    }

    // 2e. A Transpose that is a kernel's result's only reader is written by that kernel directly.
    if opts.fuse {
        fold_output_permutes(g, &mut sched, &mut group_of, &readers);
    }

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
            } else if via.is_some_and(|a| g.node(a).op == Op::Alias) && is_pointwise(&g.node(n).op) {
                "reshaped between producer and consumer".to_string()
            } else if let Some(c) =
                via.filter(|&c| matches!(g.node(c).op, Op::StridedCopy { .. }) && is_pointwise(&g.node(n).op))
            {
                let (po, co) = (g.node(q).op.name(), g.node(n).op.name());
                format!("{co} reads {po}'s result through a folded layout copy ('{}'): an epilogue works in its producer's layout", g.node(c).name)
            } else {
                // A group stored through its Transpose produces what its result's op computed.
                let shown = sched.kernels[gq].store_copy.filter(|&t| t == q).map(|_| sched.kernels[gq].result());
                let (po, co) = (g.node(shown.unwrap_or(q)).op.name(), g.node(n).op.name());
                match &g.node(n).op {
                    op if takes_epilogue(op) => format!("{po} → {co}: both need their own kernel"),
                    Op::Softmax { .. } | Op::LayerNorm { .. } | Op::Reduce { .. } | Op::ArgReduce { .. } => {
                        format!("consumer {co} reduces over another axis than its producer computes")
                    }
                    Op::StridedCopy { .. } | Op::TileCopy | Op::RotateHalf => {
                        format!("{co} reads its input at other coordinates")
                    }
                    op if is_pointwise(op) && sched.kernels[gn].nodes().first() != Some(&n) => {
                        let joined = g.node(sched.kernels[gn].nodes()[0]).op.name();
                        format!("{co} joined the {joined} kernel of another operand; this one is loaded from memory")
                    }
                    op if is_pointwise(op) => format!("{po} has no epilogue"),
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
                    let leaks = is_output(g, o, &readers) || eff(o).iter().any(|r| !members.contains(r));
                    if leaks {
                        return schedule(g, &FuseOptions { clusters: false, ..opts.clone() });
                    }
                }
            }
        }
    }
    verify_schedule(g, &sched)?;
    Ok(sched)
}

/// Whether `v`, or a value that aliases it, is a graph output (so it must be materialized).
/// Merges each MatMul(Q, Kᵀ) [scale, mask] → Softmax(last axis) → MatMul(·, V) chain whose intermediate values
/// nothing else reads into one attention group, placed where the V product was (everything it reads is written
/// by then). Shapes the kernel cannot hold (query rows wider than [`ATTENTION_MAX_DK`], value rows wider than
/// [`ATTENTION_MAX_DV`]) and groups that would pass the binding limit stay three kernels.
fn fuse_attention(
    g: &Graph,
    sched: &mut Schedule,
    group_of: &mut HashMap<NodeId, usize>,
    readers: &HashMap<ValueId, Vec<(NodeId, usize)>>,
    max_bindings: usize,
) {
    let mut ci = 0;
    while ci < sched.kernels.len() {
        let merged = (|| {
            let c = &sched.kernels[ci];
            let pv = c.anchor.filter(|&a| g.node(a).op == Op::MatMul)?;
            if !c.elementwise.is_empty() || !c.prologue.is_empty() || c.attention.is_some() {
                return None;
            }
            // The probabilities, through reshapes that only regroup batch dimensions.
            let mut probs = g.node(pv).inputs[0]?;
            let mut reshapes = Vec::new();
            while let Some(r) = g.value(probs).producer.filter(|&r| g.node(r).op == Op::Alias) {
                let src = g.node(r).inputs[0]?;
                let (i, o) = (&g.ty(src).shape, &g.ty(probs).shape);
                if i.len() < 2 || o.len() < 2 || i[i.len() - 2..] != o[o.len() - 2..] {
                    return None;
                }
                reshapes.push((r, probs));
                probs = src;
            }
            let bi = *group_of.get(&g.value(probs).producer?)?;
            let b = &sched.kernels[bi];
            let sm = b.anchor?;
            let Op::Softmax { axis, log: false, .. } = g.node(sm).op else { return None };
            let scores = g.node(sm).inputs[0]?;
            let st = g.ty(scores);
            if axis as usize + 1 != st.rank() || st.rank() < 2 || !b.prologue.is_empty() {
                return None;
            }
            let soft = g.node(sm).outputs[0];
            let nan_to_zero = match b.elementwise[..] {
                [] => None,
                [i, w] => {
                    let (ni, nw) = (g.node(i), g.node(w));
                    let zero = nw.inputs.get(1).copied().flatten().and_then(|z| g.const_data(z));
                    let ok = ni.op == Op::Unary(wgslc_ir::UnaryOp::IsNaN)
                        && ni.inputs[0] == Some(soft)
                        && nw.op == Op::Where
                        && nw.inputs[0] == Some(ni.outputs[0])
                        && nw.inputs[2] == Some(soft)
                        && zero.is_some_and(|z| z.to_f64().iter().all(|&x| x == 0.0))
                        && nw.outputs[0] == probs;
                    let inside = |v: ValueId, rs: &[NodeId]| {
                        !is_output(g, v, readers)
                            && readers.get(&v).is_some_and(|r| r.iter().all(|(n, _)| rs.contains(n)))
                    };
                    if !ok || !inside(soft, &[i, w]) || !inside(ni.outputs[0], &[w]) {
                        return None;
                    }
                    Some((i, w))
                }
                _ => return None,
            };
            let qk_last = g.value(scores).producer?;
            let ai = *group_of.get(&qk_last)?;
            let a = &sched.kernels[ai];
            let qk = a.anchor.filter(|&q| g.node(q).op == Op::MatMul && a.last() == qk_last)?;
            if a.attention.is_some() || a.rms_prologue.is_some() || ai >= bi || bi >= ci {
                return None;
            }
            // The intermediates stay inside: read by the next step only, not graph outputs, read as they are.
            let only = |v: ValueId, r: NodeId| {
                !is_output(g, v, readers) && readers.get(&v).is_some_and(|rs| rs.iter().all(|&(n, _)| n == r))
            };
            let mut next = pv;
            for &(r, out) in &reshapes {
                if !only(out, next) {
                    return None;
                }
                next = r;
            }
            if !only(scores, sm) || !only(probs, next) {
                return None;
            }
            let pt = g.ty(g.node(pv).inputs[0]?);
            let (ot, qt) = (g.ty(g.node(pv).outputs[0]), g.ty(g.node(qk).inputs[0]?));
            let dk = qt.shape[qt.rank() - 1];
            let dv = ot.shape[ot.rank() - 1];
            if ot.rank() != pt.rank() || ot.shape[..ot.rank() - 1] != pt.shape[..pt.rank() - 1] {
                return None;
            }
            if dk > ATTENTION_MAX_DK || dv > ATTENTION_MAX_DV || qt.rank() < 2 {
                return None;
            }
            // The kernel walks one set of batch coordinates for both products.
            if mm_batch_refinement(g, qk) != mm_batch_refinement(g, pv) {
                return None;
            }
            let mut merged = a.clone();
            merged.attention = Some(AttentionTail { softmax: sm, nan_to_zero, pv });
            if bindings(g, &sched.folded, &merged) > max_bindings {
                return None;
            }
            Some((ai, bi, merged))
        })();
        if let Some((ai, bi, merged)) = merged {
            // Remove the score and softmax groups; the merged group takes the V product's place.
            sched.kernels[ci] = merged;
            sched.kernels.remove(bi);
            sched.kernels.remove(ai);
            ci -= 2;
            reindex(sched, group_of);
        }
        ci += 1;
    }
}

/// Merges each lone ungrouped Conv whose output only an `Add` reads, where that Add is the first epilogue node of
/// another ungrouped Conv's group and adds the two convolutions' outputs (same shape), into that group as its
/// `conv_sum`: one product over both convolutions' K instead of a kernel, a store and a re-read. The merged group
/// keeps its place, after the lone Conv's (the Add already read its output there).
fn fuse_conv_sums(
    g: &Graph,
    sched: &mut Schedule,
    group_of: &mut HashMap<NodeId, usize>,
    readers: &HashMap<ValueId, Vec<(NodeId, usize)>>,
    max_bindings: usize,
) {
    let ungrouped_conv = |n: NodeId| matches!(g.node(n).op, Op::Conv { group: 1, .. });
    merge_into_later(sched, group_of, |sched, group_of, ci| {
        let c = &sched.kernels[ci];
        let c2 = c.anchor.filter(|&a| ungrouped_conv(a))?;
        if c.conv_sum.is_some() || c.attention.is_some() || !c.prologue.is_empty() {
            return None;
        }
        let add = *c.elementwise.first()?;
        let an = g.node(add);
        let out2 = g.node(c2).outputs[0];
        if an.op != Op::Binary(wgslc_ir::BinaryOp::Add) || an.inputs.len() != 2 {
            return None;
        }
        let other = match (an.inputs[0]?, an.inputs[1]?) {
            (a, b) if a == out2 && b != out2 => b,
            (a, b) if b == out2 && a != out2 => a,
            _ => return None,
        };
        let c1 = g.value(other).producer?;
        let gi = *group_of.get(&c1)?;
        let lone = &sched.kernels[gi];
        if gi >= ci || lone.nodes() != [c1] || !ungrouped_conv(c1) {
            return None;
        }
        let only_add = readers.get(&other).is_some_and(|rs| rs.iter().all(|&(n, _)| n == add));
        let (x1, x2) = (g.node(c1).inputs[0]?, g.node(c2).inputs[0]?);
        if !only_add || is_output(g, other, readers) || g.ty(other) != g.ty(out2) || g.ty(x1).rank() != g.ty(x2).rank()
        {
            return None;
        }
        let mut merged = c.clone();
        merged.conv_sum = Some((c1, add));
        (bindings(g, &sched.folded, &merged) <= max_bindings).then_some((gi, merged))
    });
}

/// Runs `merge` on each group in order; where it returns `(i, merged)`, that group becomes `merged` and group `i`
/// (earlier in the order, now part of it) is removed.
fn merge_into_later(
    sched: &mut Schedule,
    group_of: &mut HashMap<NodeId, usize>,
    mut merge: impl FnMut(&Schedule, &HashMap<NodeId, usize>, usize) -> Option<(usize, KernelGroup)>,
) {
    let mut ci = 0;
    while ci < sched.kernels.len() {
        if let Some((i, merged)) = merge(sched, group_of, ci) {
            debug_assert!(i < ci, "a group merges into a later one");
            sched.kernels[ci] = merged;
            sched.kernels.remove(i);
            ci -= 1;
            reindex(sched, group_of);
        }
        ci += 1;
    }
}

/// The most output channels a pointwise Conv may have to take a depthwise Conv into its loads (`fuse_depthwise`).
/// Measured on MobileNetV2 (H100, median of five interleaved runs; lavapipe, two): no fold 0.716 ms / 713–732 ms,
/// up to 16 channels (1 fold) 0.732, up to 32 (6 folds) 0.738 / 747–754 ms, up to 64 (10) 0.846, all 17 folds
/// 1.231 / 858–869 ms. Beyond one or two tiles of channels, every tile recomputes the window sums inside a
/// product that is already load-bound, and the late 7x7 projections (K = 960) went from about 25 to 107 µs each.
/// Up to 32 the GPU time is within noise of the unfused kernels and each fold removes a dispatch, a write and a
/// re-read of the depthwise output, which is what a browser's per-dispatch cost pays for.
pub const DEPTHWISE_MAX_CHANNELS: usize = 32;

/// Merges each depthwise Conv group (the Conv, then only scalar pointwise nodes) whose result only a pointwise
/// (1x1, unit stride) ungrouped Conv reads into that Conv's group as its `depthwise`: the depthwise output is
/// neither written nor re-read. Two kernels do it:
/// - A plain depthwise group becomes the product's B loads. The product computes a depthwise element (kh·kw
///   multiply-adds) once for every tile of output channels that loads it, at worst ⌈M/16⌉ tiles for M output
///   channels; the fold needs M ≤ [`DEPTHWISE_MAX_CHANNELS`] and that recomputation to stay within the M
///   multiply-adds the product itself spends on the element (kh·kw·(⌈M/16⌉ − 1) ≤ M): a 3x3 window always
///   passes, a 5x5 one up to 32 channels.
/// - A depthwise group that computes its own input (`expand`, from `fuse_expand`) becomes a whole inverted-residual
///   block in one kernel: each workgroup sums the projection of its tile over all expanded channels in registers
///   ([`expand_tile`]), which needs M ≤ [`PROJECT_MAX_CHANNELS`] (a wider projection would leave too few
///   workgroups or recompute the expansion for each slice of channels).
///
/// The merged group keeps the pointwise Conv's place.
fn fuse_depthwise(
    g: &Graph,
    sched: &mut Schedule,
    group_of: &mut HashMap<NodeId, usize>,
    readers: &HashMap<ValueId, Vec<(NodeId, usize)>>,
    reasons: &mut HashMap<(NodeId, NodeId), String>,
    max_bindings: usize,
) {
    merge_into_later(sched, group_of, |sched, group_of, ci| {
        let c = &sched.kernels[ci];
        let pw = c.anchor.filter(|&a| is_pointwise_conv(g, a))?;
        if c.conv_sum.is_some() || c.depthwise.is_some() || !c.prologue.is_empty() || c.rms_prologue.is_some() {
            return None;
        }
        let x = g.node(pw).inputs[0]?;
        let (di, dw) = lone_conv_chain(g, sched, group_of, readers, x, pw)?;
        if di >= ci || !is_depthwise_conv(g, dw) {
            return None;
        }
        let Op::Conv { window: dwin, .. } = &g.node(dw).op else { return None };
        let khw: usize = dwin.kernel.iter().product();
        let os = &g.ty(g.node(pw).outputs[0]).shape;
        let m = os[1];
        let q = g.value(x).producer?;
        let d = &sched.kernels[di];
        if let Some(ex) = &d.expand {
            let e = g.ty(x).shape[1];
            let w = dwin;
            let tile = expand_tile(
                os[0],
                (os[2], os[3]),
                (w.kernel[0], w.kernel[1]),
                (w.strides[0], w.strides[1]),
                (w.dilations[0], w.dilations[1]),
                g.ty(g.node(ex.conv).inputs[0]?).shape[1],
                e,
                Some(m),
            );
            if m > PROJECT_MAX_CHANNELS || tile.is_none() {
                let why = format!(
                    "expansion → depthwise Conv → projection: {m} output channels are more than one workgroup \
                         sums over all {e} expanded channels (at most {PROJECT_MAX_CHANNELS})"
                );
                reasons.insert((q, pw), why);
                return None;
            }
        } else if m > DEPTHWISE_MAX_CHANNELS || khw * (m.div_ceil(16) - 1) > m {
            let why = format!(
                "depthwise Conv → pointwise Conv: recomputing the {khw}-tap window for each of up to {} tiles of \
                     {m} output channels costs more than materializing",
                m.div_ceil(16)
            );
            reasons.insert((q, pw), why);
            return None;
        }
        let mut merged = c.clone();
        merged.depthwise = Some(FoldedConv { conv: dw, then: d.elementwise.clone() });
        merged.expand = d.expand.clone();
        (bindings(g, &sched.folded, &merged) <= max_bindings).then_some((di, merged))
    });
}

/// How a kernel with a folded expansion (`KernelGroup::expand`) tiles its work: each workgroup of 256 threads
/// takes `ty`x`tx` output positions of one image, computes the expanded channels over their `hy`x`hx` input window
/// into workgroup memory `ec` channels at a time, and the depthwise outputs from there. With a projection, each
/// position has `lanes` threads holding `per_lane` output channels each, summed over all expanded channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpandTile {
    pub ty: usize,
    pub tx: usize,
    pub hy: usize,
    pub hx: usize,
    pub ec: usize,
    pub lanes: usize,
    pub per_lane: usize,
    /// Channels of the input window held in workgroup memory at a time: all `cin` (loaded once), or a slice that
    /// the expansion sums over before loading the next.
    pub x_chunk: usize,
}

/// Floats of workgroup memory (16 KiB, WebGPU's default limit).
pub const WORKGROUP_FLOATS: usize = 16384 / 4;
/// The most output channels one thread of a fused inverted-residual block accumulates (registers).
pub const PROJECT_MAX_PER_THREAD: usize = 16;
/// The most output channels a projection may have to take an expansion → depthwise pair into its kernel
/// (`fuse_depthwise`).
pub const PROJECT_MAX_CHANNELS: usize = 64;

/// The tiling for a depthwise convolution over an `oh`x`ow` output (per image, `batch` images) whose input is an
/// expansion from `cin` to `e` channels computed in the kernel, projected to `project` output channels when set.
/// Tiles are 8x8, 4x4 or 2x2 positions whose window recomputes the expansion at most [`EXPAND_MAX_RECOMPUTE`]
/// times ((hy·hx)/(ty·tx·sy·sx): neighbouring windows overlap). The expansion reads its input window from
/// workgroup memory: all channels loaded once where that leaves room for as many expanded channels per step,
/// else 16 channels at a time.
/// - Without a projection, each step of at most 32 channels is a workgroup of its own: the largest tile that
///   still gives 32 workgroups, or else the smallest.
/// - With one, a workgroup walks all `e` channels in steps, one after another, each ending in barriers: the tile
///   with the fewest steps (on the H100 a step costs microseconds however little it computes), then the most
///   workgroups up to 128, then the least recomputation.
///
/// `None` when no tile passes, fits 16 KiB of workgroup memory and keeps a thread's accumulators within
/// [`PROJECT_MAX_PER_THREAD`].
#[allow(clippy::too_many_arguments)]
pub fn expand_tile(
    batch: usize,
    (oh, ow): (usize, usize),
    (kh, kw): (usize, usize),
    (sy, sx): (usize, usize),
    (dy, dx): (usize, usize),
    cin: usize,
    e: usize,
    project: Option<usize>,
) -> Option<ExpandTile> {
    // `x_chunk`: the whole window, or slices of 16 channels.
    let fit = |t: usize, whole: bool| {
        let (ty, tx) = (t.min(oh.max(1)), t.min(ow.max(1)));
        let (hy, hx) = ((ty - 1) * sy + (kh - 1) * dy + 1, (tx - 1) * sx + (kw - 1) * dx + 1);
        let recompute = (hy * hx) as f64 / (ty * tx * sy * sx) as f64;
        let x_chunk = if whole { cin } else { cin.min(16) };
        // Per expanded channel of a step: its window, and with a projection its depthwise outputs.
        let per_channel = hy * hx + project.map_or(0, |_| ty * tx);
        let room = WORKGROUP_FLOATS.checked_sub(x_chunk * hy * hx)?;
        let mut ec = (room / per_channel).min(e).min(if project.is_some() { e } else { EXPAND_STEP_CHANNELS });
        // With a projection, steps of equal size (no short last step), a multiple of 4 channels: the projection
        // reads its weights four expanded channels at a time.
        if project.is_some() && ec < e && ec >= 4 {
            let even = e.div_ceil(e.div_ceil(ec));
            ec = (even.div_ceil(4) * 4).min(ec - ec % 4);
        }
        let lanes = 256 / (ty * tx);
        let per_lane = project.map_or(0, |m| m.div_ceil(lanes));
        let tile = ExpandTile { ty, tx, hy, hx, ec, lanes, per_lane, x_chunk };
        let ok =
            ec > 0 && per_lane <= PROJECT_MAX_PER_THREAD && 256 % (ty * tx) == 0 && recompute <= EXPAND_MAX_RECOMPUTE;
        ok.then_some(tile)
    };
    let tiles = |t: &ExpandTile| batch * oh.div_ceil(t.ty) * ow.div_ceil(t.tx);
    let steps = |t: &ExpandTile| e.div_ceil(t.ec);
    // The whole window where that costs no steps.
    let fits: Vec<ExpandTile> = [8, 4, 2]
        .into_iter()
        .filter_map(|t| match (fit(t, true), fit(t, false)) {
            (Some(a), Some(b)) => Some(if steps(&a) <= steps(&b) { a } else { b }),
            (a, b) => a.or(b),
        })
        .collect();
    if project.is_none() {
        return fits.iter().find(|t| tiles(t) * steps(t) >= 32).or(fits.last()).copied();
    }
    fits.into_iter().min_by_key(|t| (steps(t), std::cmp::Reverse(tiles(t).min(128)), std::cmp::Reverse(t.ty * t.tx)))
}

/// A pointwise (1x1, unit stride, no padding) ungrouped 2-D Conv.
fn is_pointwise_conv(g: &Graph, n: NodeId) -> bool {
    let Op::Conv { window, group: 1 } = &g.node(n).op else { return false };
    window.kernel.len() == 2
        && window.kernel.iter().all(|&k| k == 1)
        && window.strides.iter().all(|&s| s == 1)
        && window.pads.iter().all(|&p| p == 0)
}

/// A depthwise 2-D Conv (one input channel per group, as many groups as channels).
fn is_depthwise_conv(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    let Op::Conv { window, group } = &node.op else { return false };
    let (Some(x), Some(w)) = (node.inputs[0], node.inputs.get(1).copied().flatten()) else { return false };
    let ws = &g.ty(w).shape;
    window.kernel.len() == 2 && *group > 1 && ws[0] == *group && ws[1] == 1 && g.ty(x).shape[1] == *group
}

/// The group `d` that computes value `x` as a Conv followed only by scalar pointwise nodes, each on the previous
/// one's output, with `x` read only by `(reader, 0)` and not a graph output: `(group index, conv)`.
fn lone_conv_chain(
    g: &Graph,
    sched: &Schedule,
    group_of: &HashMap<NodeId, usize>,
    readers: &HashMap<ValueId, Vec<(NodeId, usize)>>,
    x: ValueId,
    reader: NodeId,
) -> Option<(usize, NodeId)> {
    let q = g.value(x).producer?;
    let di = *group_of.get(&q)?;
    let d = &sched.kernels[di];
    let conv = d.anchor?;
    if d.last() != q
        || d.store_copy.is_some()
        || d.conv_sum.is_some()
        || !d.prologue.is_empty()
        || !matches!(g.node(conv).op, Op::Conv { .. })
    {
        return None;
    }
    let mut cur = g.node(conv).outputs[0];
    for &e in &d.elementwise {
        let slot = scalar_op_data_slot(g, e)?;
        if g.node(e).inputs[slot] != Some(cur) {
            return None;
        }
        cur = g.node(e).outputs[0];
    }
    let only = readers.get(&x).is_some_and(|rs| rs.as_slice() == [(reader, 0)]);
    (cur == x && only && !is_output(g, x, readers)).then_some((di, conv))
}

/// Merges each pointwise Conv group (the Conv, then only scalar pointwise nodes) whose result only a depthwise
/// Conv reads into that Conv's group as its `expand`: the depthwise kernel computes the expanded channels over each
/// output tile's input window in workgroup memory ([`expand_tile`]), so the expansion (6x the block's channels in
/// MobileNetV2) is never written or re-read. Windows overlap between tiles, so the expansion is recomputed at the
/// tile borders: (hy·hx)/(ty·tx·sy·sx) times, 1.6x for 3x3 over 8x8 tiles, 2.3x over 4x4 tiles; the fold is
/// taken when a tile keeps that within [`EXPAND_MAX_RECOMPUTE`]. The merged group keeps the depthwise Conv's place.
fn fuse_expand(
    g: &Graph,
    sched: &mut Schedule,
    group_of: &mut HashMap<NodeId, usize>,
    readers: &HashMap<ValueId, Vec<(NodeId, usize)>>,
    reasons: &mut HashMap<(NodeId, NodeId), String>,
    max_bindings: usize,
) {
    merge_into_later(sched, group_of, |sched, group_of, ci| {
        let c = &sched.kernels[ci];
        let dw = c.anchor.filter(|&a| is_depthwise_conv(g, a))?;
        if c.expand.is_some() || c.depthwise.is_some() || c.conv_sum.is_some() || !c.prologue.is_empty() {
            return None;
        }
        let x = g.node(dw).inputs[0]?;
        let (di, ex) = lone_conv_chain(g, sched, group_of, readers, x, dw)?;
        let ex_in = g.node(ex).inputs[0]?;
        let f32 = g.ty(x).dtype == DType::F32 && g.ty(ex_in).dtype == DType::F32;
        if di >= ci || !is_pointwise_conv(g, ex) || g.ty(ex_in).rank() != 4 || !f32 {
            return None;
        }
        let Op::Conv { window: w, .. } = &g.node(dw).op else { return None };
        let (os, e) = (&g.ty(g.node(dw).outputs[0]).shape, g.ty(x).shape[1]);
        let kernel = (w.kernel[0], w.kernel[1]);
        let strides = (w.strides[0], w.strides[1]);
        let cin = g.ty(ex_in).shape[1];
        let dil = (w.dilations[0], w.dilations[1]);
        if expand_tile(os[0], (os[2], os[3]), kernel, strides, dil, cin, e, None).is_none() {
            let why = format!(
                "Conv → depthwise Conv: no tile of the {}x{} output both fits the expansion's window in \
                     workgroup memory and recomputes it at most {EXPAND_MAX_RECOMPUTE}x",
                os[2], os[3]
            );
            reasons.insert((g.value(x).producer?, dw), why);
            return None;
        }
        let d = &sched.kernels[di];
        let mut merged = c.clone();
        merged.expand = Some(FoldedConv { conv: ex, then: d.elementwise.clone() });
        (bindings(g, &sched.folded, &merged) <= max_bindings).then_some((di, merged))
    });
}

/// The most an expansion folded into a depthwise kernel may be recomputed at tile borders (`fuse_expand`): 2x2
/// tiles of a 3x3 window (4x) pass. On the H100 the kernels are bound by how long each thread's chain of steps is,
/// not by arithmetic: allowing 2x2 tiles took MobileNetV2 with whole blocks fused from 1.53 to 1.30 ms.
pub const EXPAND_MAX_RECOMPUTE: f64 = 4.5;

/// Expanded channels per workgroup of an expansion → depthwise kernel without a projection. Measured on
/// MobileNetV2 (H100, 37 dispatches): 32 channels 1.13–1.16 ms, 16 0.98–1.06, 8 0.87–0.91, 4 1.02–1.04.
pub const EXPAND_STEP_CHANNELS: usize = 8;

/// The RMSNormalization that MatMul `n` can take as its `rms_prologue`: over the last axis, no bias, weights of K,
/// in a kernel of its own, read by nothing but `n`'s A operand (directly, no reshape between).
fn rms_prologue_of(
    g: &Graph,
    n: NodeId,
    group_of: &HashMap<NodeId, usize>,
    sched: &Schedule,
    readers: &HashMap<ValueId, Vec<(NodeId, usize)>>,
) -> Option<NodeId> {
    let v = g.node(n).inputs.first().copied().flatten()?;
    let p = g.value(v).producer?;
    let pn = g.node(p);
    let Op::LayerNorm { rms: true, axis, .. } = pn.op else { return None };
    let vt = g.ty(v);
    let k = *vt.shape.last()?;
    let scale = pn.inputs.get(1).copied().flatten()?;
    let ok = vt.rank() >= 2
        && vt.dtype == wgslc_ir::DType::F32
        && axis.rem_euclid(vt.rank() as i64) as usize == vt.rank() - 1
        && pn.inputs.get(2).copied().flatten().is_none()
        && g.ty(scale).shape == [k]
        && readers.get(&v).is_some_and(|rs| rs.as_slice() == [(n, 0)])
        && !is_output(g, v, readers)
        && group_of.get(&p).is_some_and(|&gp| sched.kernels[gp].nodes() == [p]);
    ok.then_some(p)
}

/// After the elementwise node `n` joined the last group (A), merges into A each purely elementwise group B whose
/// result only `n` reads, computed over `n`'s shape from values written before A (none of A's own): n's other
/// operand then never leaves the kernel (rotary's `x·cos + rotate_half(x)·sin` is one kernel, not two).
fn absorb_sibling_groups(
    g: &Graph,
    sched: &mut Schedule,
    group_of: &mut HashMap<NodeId, usize>,
    readers: &HashMap<ValueId, Vec<(NodeId, usize)>>,
    n: NodeId,
    max_bindings: usize,
) {
    let out_shape = &g.ty(g.node(n).outputs[0]).shape;
    for v in g.node(n).inputs.iter().flatten().copied() {
        let ai = sched.kernels.len() - 1;
        let Some(q) = g.value(v).producer else { continue };
        let Some(&bi) = group_of.get(&q) else { continue };
        let (a, b) = (&sched.kernels[ai], &sched.kernels[bi]);
        let a_nodes: HashSet<NodeId> = a.nodes().into_iter().collect();
        let plain = b.anchor.is_none() && b.prologue.is_empty() && b.attention.is_none() && b.store_copy.is_none();
        let ok = bi != ai
            && plain
            && b.last() == q
            && &g.ty(v).shape == out_shape
            && effective_readers(g, v, readers) == [n]
            && !is_output(g, v, readers)
            && b.elementwise.iter().all(|&m| {
                g.ty(g.node(m).outputs[0]).numel() == g.ty(v).numel()
                    && g.node(m)
                        .inputs
                        .iter()
                        .flatten()
                        .all(|w| g.value(*w).producer.is_none_or(|p| !a_nodes.contains(&p)))
            });
        if !ok {
            continue;
        }
        let mut members = a.nodes();
        members.extend(b.nodes());
        if member_bindings(g, &sched.folded, &members, &a.inlined()) > max_bindings {
            continue;
        }
        let b = sched.kernels.remove(bi);
        let a = sched.kernels.last_mut().expect("A");
        let at = a.elementwise.len() - 1;
        a.elementwise.splice(at..at, b.elementwise);
        reindex(sched, group_of);
    }
}

/// For a StridedCopy `t` that permutes its input's dimensions (offset 0, each input dimension of extent > 1 read
/// with its contiguous stride by exactly one output dimension of the same extent), the store terms that place
/// input element `o` (flat, row-major) in the output: `Σ ((o / stride) % extent) · out_stride`.
pub fn store_permutation(g: &Graph, t: NodeId) -> Option<Vec<(usize, usize, usize)>> {
    let node = g.node(t);
    let Op::StridedCopy { offset: 0, strides } = &node.op else { return None };
    let v = node.inputs[0]?;
    let (vs, os) = (&g.ty(v).shape, &g.ty(node.outputs[0]).shape);
    if g.ty(v).numel() != g.ty(node.outputs[0]).numel() || g.ty(v).numel() == 0 {
        return None;
    }
    let (vcs, ocs) = (contiguous_strides(vs), contiguous_strides(os));
    let mut used = vec![false; os.len()];
    let mut terms = Vec::new();
    for d in (0..vs.len()).filter(|&d| vs[d] > 1) {
        let e = (0..os.len()).find(|&e| !used[e] && os[e] == vs[d] && strides[e] == vcs[d] as i64)?;
        used[e] = true;
        terms.push((vcs[d], vs[d], ocs[e]));
    }
    // Every output dimension of extent > 1 takes one input dimension.
    (0..os.len()).all(|e| used[e] || os[e] == 1).then_some(terms)
}

/// Gives each kernel whose result's only reader is an unfolded permuting StridedCopy in a kernel of its own that
/// copy as its `store_copy`, removing the copy's kernel: one write at the permuted place instead of a write, a
/// read and a write. Kernels whose emitters place stores through `store_permutation` take it: elementwise groups,
/// matrix products (and convolutions through them) and attention.
fn fold_output_permutes(
    g: &Graph,
    sched: &mut Schedule,
    group_of: &mut HashMap<NodeId, usize>,
    readers: &HashMap<ValueId, Vec<(NodeId, usize)>>,
) {
    let mut ci = 0;
    while ci < sched.kernels.len() {
        let merged = (|| {
            let k = &sched.kernels[ci];
            let stores = match k.anchor {
                _ if k.store_copy.is_some() => false,
                _ if k.attention.is_some() => true,
                None => true,
                Some(a) => matches!(g.node(a).op, Op::MatMul | Op::Gemm { .. } | Op::Conv { group: 1, .. }),
            };
            let v = g.node(k.result()).outputs[0];
            let rs = readers.get(&v)?;
            let &[(t, 0)] = rs.as_slice() else { return None };
            if !stores || is_output(g, v, readers) || sched.folded.contains(&t) {
                return None;
            }
            store_permutation(g, t)?;
            let ti = *group_of.get(&t)?;
            (ti > ci && sched.kernels[ti].nodes() == [t]).then_some(ti)
        })();
        if let Some(ti) = merged {
            let t = sched.kernels.remove(ti).nodes()[0];
            sched.kernels[ci].store_copy = Some(t);
            reindex(sched, group_of);
        }
        ci += 1;
    }
}

/// Rebuilds the node → group index after groups were merged or removed.
fn reindex(sched: &Schedule, group_of: &mut HashMap<NodeId, usize>) {
    group_of.clear();
    for (i, k) in sched.kernels.iter().enumerate() {
        for m in k.nodes() {
            group_of.insert(m, i);
        }
    }
}

fn is_output(g: &Graph, v: ValueId, readers: &HashMap<ValueId, Vec<(NodeId, usize)>>) -> bool {
    let mut stack = vec![v];
    while let Some(u) = stack.pop() {
        if g.outputs.contains(&u) {
            return true;
        }
        for &(r, _) in readers.get(&u).map(Vec::as_slice).unwrap_or(&[]) {
            if g.node(r).op == Op::Alias {
                stack.push(g.node(r).outputs[0]);
            }
        }
    }
    false
}

/// The non-Alias nodes that read `v`, directly or through Alias nodes.
fn effective_readers(g: &Graph, v: ValueId, readers: &HashMap<ValueId, Vec<(NodeId, usize)>>) -> Vec<NodeId> {
    let mut out = Vec::new();
    let mut stack = vec![v];
    while let Some(u) = stack.pop() {
        for &(r, _) in readers.get(&u).map(Vec::as_slice).unwrap_or(&[]) {
            if g.node(r).op == Op::Alias {
                stack.push(g.node(r).outputs[0]);
            } else if !out.contains(&r) {
                out.push(r);
            }
        }
    }
    out
}

/// If every reader of `v` is pointwise with `v`'s element count, and following their outputs the same way ends in
/// exactly one value read elsewhere (the cluster's exit), returns the values strictly inside: they need not be
/// materialized when the whole cluster joins one kernel.
fn closed_cluster(g: &Graph, v: ValueId, readers: &HashMap<ValueId, Vec<(NodeId, usize)>>) -> Option<Vec<ValueId>> {
    let numel = g.ty(v).numel();
    let mut inside = vec![];
    let mut exits = vec![];
    let mut seen_nodes: HashSet<NodeId> = HashSet::new();
    let mut stack = vec![v];
    let mut seen_vals: HashSet<ValueId> = HashSet::new();
    while let Some(u) = stack.pop() {
        if !seen_vals.insert(u) {
            continue;
        }
        let rs = effective_readers(g, u, readers);
        let pointwise = !rs.is_empty()
            && rs.iter().all(|&r| is_pointwise(&g.node(r).op) && g.ty(g.node(r).outputs[0]).numel() == numel);
        if pointwise && !is_output(g, u, readers) {
            inside.push(u);
            for r in rs {
                if seen_nodes.insert(r) {
                    stack.push(g.node(r).outputs[0]);
                }
            }
        } else if u == v {
            return None;
        } else {
            exits.push(u);
        }
        if seen_nodes.len() > 64 {
            return None;
        }
    }
    (exits.len() == 1).then_some(inside)
}

/// Checks the schedule's invariants: every kernel node is in exactly one group, and every value a group reads
/// is written by an earlier group (or is an input or weight).
pub fn verify_schedule(g: &Graph, sched: &Schedule) -> Result<(), PassError> {
    let mut written: HashSet<ValueId> = HashSet::new();
    let mut seen: HashSet<NodeId> = HashSet::new();
    for k in &sched.kernels {
        let (reads, writes) = group_io(g, sched, k);
        for r in reads {
            let root = storage_root(g, r);
            if g.value(root).producer.is_some() && !written.contains(&root) {
                let node = g.node(k.last());
                return Err(PassError::Node {
                    node: node.name.clone(),
                    op: node.op.name().into(),
                    reason: format!("scheduled before '{}' is written (a scheduler bug)", g.value(root).name),
                });
            }
        }
        for m in k.nodes() {
            if !seen.insert(m) {
                return Err(PassError::Node {
                    node: g.node(m).name.clone(),
                    op: g.node(m).op.name().into(),
                    reason: "in two kernel groups (a scheduler bug)".into(),
                });
            }
        }
        written.extend(writes);
    }
    Ok(())
}

/// What a group's kernel binds: the values its reads resolve to (through aliases and folded copies), in first-use
/// order, and the values it writes.
pub fn group_io(g: &Graph, sched: &Schedule, k: &KernelGroup) -> (Vec<ValueId>, Vec<ValueId>) {
    let members = k.nodes();
    let inside: HashSet<ValueId> = members.iter().flat_map(|&m| g.node(m).outputs.clone()).collect();
    let mut reads = Vec::new();
    let prologue = k.inlined();
    for &m in &members {
        for (slot, v) in g.node(m).inputs.iter().enumerate() {
            if prologue.contains(&m) && scalar_op_data_slot(g, m) != Some(slot) {
                continue; // inlined scalar constant
            }
            if let Some(v) = v {
                if !inside.contains(&storage_root(g, *v)) {
                    let r = input_view(g, &sched.folded, m, slot).root;
                    if !reads.contains(&r) {
                        reads.push(r);
                    }
                }
            }
        }
    }
    (reads, g.node(k.last()).outputs.clone())
}

/// Storage roots a purely elementwise group reads only at exactly the element it writes (same element count, every
/// read contiguous and unbroadcast, same storage type), so its output may take their memory if they die there:
/// each invocation reads its element before writing it, and no invocation reads another's.
pub fn in_place_candidates(g: &Graph, sched: &Schedule, k: &KernelGroup) -> Vec<ValueId> {
    if k.anchor.is_some() || !k.prologue.is_empty() || k.store_copy.is_some() {
        return vec![];
    }
    let out = g.node(k.last()).outputs[0];
    let out_ty = g.ty(out);
    let inside: HashSet<ValueId> = k.elementwise.iter().flat_map(|&m| g.node(m).outputs.clone()).collect();
    let mut ok: Vec<ValueId> = Vec::new();
    let mut bad: HashSet<ValueId> = HashSet::new();
    for &m in &k.elementwise {
        for (slot, v) in g.node(m).inputs.iter().enumerate() {
            let Some(v) = *v else { continue };
            if inside.contains(&storage_root(g, v)) {
                continue;
            }
            let view = input_view(g, &sched.folded, m, slot);
            let vt = g.ty(v);
            let contiguous: Vec<i64> = contiguous_strides(&vt.shape).into_iter().map(|s| s as i64).collect();
            let unit_strides = view.strides.len() == contiguous.len()
                && (0..contiguous.len()).all(|d| vt.shape[d] == 1 || view.strides[d] == contiguous[d]);
            let identity = is_pointwise(&g.node(m).op)
                && vt.shape == out_ty.shape
                && g.ty(g.node(m).outputs[0]).shape == out_ty.shape
                && view.offset == 0
                && unit_strides
                && g.ty(view.root).numel() == out_ty.numel()
                && crate::lower::storage_of(g.ty(view.root).dtype) == crate::lower::storage_of(out_ty.dtype);
            if identity {
                if !ok.contains(&view.root) {
                    ok.push(view.root);
                }
            } else {
                bad.insert(view.root);
            }
        }
    }
    ok.retain(|r| !bad.contains(r));
    ok
}

/// Storage buffers a group would bind: the distinct buffers its reads resolve to, plus its output.
fn bindings(g: &Graph, folded: &HashSet<NodeId>, k: &KernelGroup) -> usize {
    member_bindings(g, folded, &k.nodes(), &k.inlined())
}

/// Storage buffers a kernel of `members` would bind, where the scalar constants of `inlined` nodes are literals.
fn member_bindings(g: &Graph, folded: &HashSet<NodeId>, members: &[NodeId], inlined: &HashSet<NodeId>) -> usize {
    let inside: HashSet<ValueId> = members.iter().flat_map(|&m| g.node(m).outputs.clone()).collect();
    let mut roots = HashSet::new();
    for &m in members {
        for (slot, v) in g.node(m).inputs.iter().enumerate() {
            if inlined.contains(&m) && scalar_op_data_slot(g, m) != Some(slot) {
                continue;
            }
            if let Some(v) = v {
                if !inside.contains(&storage_root(g, *v)) {
                    roots.insert(storage_root(g, input_view(g, folded, m, slot).root));
                }
            }
        }
    }
    roots.len() + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_refinements() {
        assert!(refines(&[1, 2, 2], &[1, 4]));
        assert!(refines(&[2, 3, 1], &[6]));
        assert!(!refines(&[3, 2], &[2, 3]));
        assert!(!refines(&[4], &[2, 2]));
        assert!(!refines(&[2, 2], &[8]));
        // [2, 4, m=3, k=5] read over batch coordinates [2, 2, 2]: the split dimension keeps its row-major steps.
        assert_eq!(refined_strides(&[2, 4, 3, 5], &[2, 2, 2]), vec![60, 30, 15, 5, 1]);
    }
}
