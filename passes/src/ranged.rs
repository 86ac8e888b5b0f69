//! Ranged dims (`--dim NAME=MIN..MAX`): one graph, compiled once, valid for every value of each ranged dim.
//!
//! The graph is compiled at every ranged dim's MAX, and once more per dim with that dim at a second value (the
//! *probe*, the others at MAX). Both go through the same passes, so they hold the same nodes and values (checked)
//! and differ only in extents and in constants computed from the dim. An axis whose extent is `k·MAX` in the graph
//! and `k·probe` in the probe is *ranged*: at run time, for the value `n` passed, its first `k·n` entries are the
//! tensor and the rest of the buffer (laid out as at MAX) is padding. Whatever reads only valid entries to write a
//! valid entry is then correct for every `n` without knowing it: elementwise ops, layout ops that keep a ranged
//! axis's origin, products whose K is not ranged, gathers at indices below MIN. What reads across a ranged axis
//! (a reduction, a product's K, a softmax) is given its input through `Where(index < n, x, identity)` — 0 for a
//! sum, the most negative value for a max or softmax — with `n` read from one small runtime input, `wgslc.dims`
//! (i32, one entry per ranged dim), so no kernel is compiled per shape; a mean is rescaled by `MAX / n`.
//!
//! What this pass refuses, naming the node or value: a graph whose structure depends on the dim, an extent not a
//! multiple of it (`NAME + 1`, a slice from the end), a constant computed from the dim's value (other than a prefix
//! such as `range(NAME)`), a Concat or unfused normalization along a ranged axis, an index or slice that may fall
//! past MIN, and any other op that reads across a ranged axis. Evidence is two points per dim: a constant equal at
//! both that would differ elsewhere is not detected.

use crate::PassError;
use std::collections::HashMap;
use wgslc_ir::{BinaryOp, Builder, DType, Graph, NodeId, Op, PoolKind, ReduceOp, Tensor, TensorType, ValueId};

/// A dim bound to a range of values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimRange {
    pub name: String,
    pub min: usize,
    pub max: usize,
}

/// An axis of a value whose extent is `factor · n` for the run's value `n` of dim `dim` (an index into the
/// ranges), `factor · max` in the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangedAxis {
    pub axis: usize,
    pub dim: usize,
    pub factor: usize,
}

/// What [`apply_ranges`] established.
#[derive(Clone, Debug)]
pub struct Ranged {
    pub dims: Vec<DimRange>,
    /// The ranged axes of the graph's inputs and outputs, by name.
    pub io: HashMap<String, Vec<RangedAxis>>,
    /// The masked values (`Where(index < n, x, fill)`) and the axes each is masked along: whatever writes one must
    /// write its padding along those axes too, since the reduction after it reads that padding as the fill.
    pub masked: HashMap<ValueId, Vec<usize>>,
}

/// The name of the input that carries the dims' values.
pub const DIMS_INPUT: &str = "wgslc.dims";

/// The second value a ranged dim is compiled at: about half its max (far enough that tiled workgroup counts
/// change, so the driver sees which follow the dim), inside the range and at least 2 where it can be (1 is where
/// exporters and passes special-case sizes).
pub fn probe_value(r: &DimRange) -> usize {
    let half = r.min.max(r.max.div_ceil(2));
    if half >= 2 && half < r.max {
        half
    } else if r.max >= 3 {
        r.max - 1
    } else {
        r.min
    }
}

/// The ranged axes of each value of a graph (those with none are absent).
pub type RangedAxes = HashMap<ValueId, Vec<RangedAxis>>;

/// Finds the ranged axes of every value of `g` (compiled with each dim at its max) against `probes` (the same
/// model compiled with dim `i` at [`probe_value`], in the order of `dims`), refuses what a range cannot compile,
/// and masks every read across a ranged axis with the run's value from a new input [`DIMS_INPUT`].
///
/// Requires: inferred graphs (after `dce`), one probe per dim. Establishes: every node reads, for each valid entry
/// it writes, only valid entries of its inputs or masked ones; the graph inputs end with [`DIMS_INPUT`].
pub fn apply_ranges(g: &mut Graph, dims: &[DimRange], probes: &[Graph]) -> Result<Ranged, PassError> {
    let axes = find_ranged_axes(g, dims, probes)?;
    mask_ranges(g, dims, &axes)
}

/// The first half of [`apply_ranges`]: the ranged axes, every refusal but the per-node ones.
pub fn find_ranged_axes(g: &Graph, dims: &[DimRange], probes: &[Graph]) -> Result<RangedAxes, PassError> {
    let mut axes: RangedAxes = HashMap::new();
    for (d, (r, p)) in dims.iter().zip(probes).enumerate() {
        same_structure(g, p, r)?;
        find_axes(g, p, d, r, &mut axes)?;
    }
    for (d, r) in dims.iter().enumerate() {
        if !g.inputs.iter().any(|v| axes.get(v).is_some_and(|a| a.iter().any(|x| x.dim == d))) {
            return Err(PassError::Value {
                value: r.name.clone(),
                reason: "no input's shape holds this dim (after the unused inputs are dropped), so a run could not \
                         tell its value: bind it to one value"
                    .into(),
            });
        }
    }
    Ok(axes)
}

/// The second half of [`apply_ranges`]: checks each node against `axes` and masks the reads across them. Applied
/// to a probe with the same `axes`, it makes the same nodes and values (the probe's kernels then tell how each
/// kernel's workgroups follow the dim).
pub fn mask_ranges(g: &mut Graph, dims: &[DimRange], axes: &RangedAxes) -> Result<Ranged, PassError> {
    let input = g.add_value(DIMS_INPUT, Some(TensorType::new(DType::I32, vec![dims.len()])));
    g.inputs.push(input);
    let mut m = Masker { dims, input, axes, scalars: HashMap::new(), compares: HashMap::new(), masked: HashMap::new() };
    for n in g.topo_order()? {
        m.node(g, n)?;
    }
    let io = g
        .inputs
        .iter()
        .chain(&g.outputs)
        .map(|&v| (g.value(v).name.clone(), axes.get(&v).cloned().unwrap_or_default()))
        .collect();
    let masked = m.masked.iter().map(|((_, axes, _), &v)| (v, axes.clone())).collect();
    Ok(Ranged { dims: dims.to_vec(), io, masked })
}

/// An op's axis counted from the front (inference has checked it lies in the rank).
fn resolved_axis(axis: i64, rank: usize) -> usize {
    if axis < 0 {
        (axis + rank as i64) as usize
    } else {
        axis as usize
    }
}

fn node_err(g: &Graph, n: NodeId, reason: String) -> PassError {
    PassError::Node { node: g.node(n).name.clone(), op: g.node(n).op.name().into(), reason }
}

/// The probe must be the same graph: same nodes reading and writing the same values, ops equal up to the layout
/// parameters that follow extents (checked per op in [`Masker`]).
fn same_structure(g: &Graph, p: &Graph, r: &DimRange) -> Result<(), PassError> {
    let at = format!("{}={} and {}={}", r.name, r.max, r.name, probe_value(r));
    let differs = |what: &str| {
        format!(
            "the graph differs between {at} ({what}): the dim changes what the model computes, not only its sizes; \
             compile for fixed values of it instead"
        )
    };
    if g.inputs != p.inputs || g.outputs != p.outputs || g.num_nodes() != p.num_nodes() {
        return Err(PassError::Value { value: r.name.clone(), reason: differs("its inputs, outputs or node count") });
    }
    for n in g.node_ids() {
        let (a, same) = (g.node(n), p.has_node(n).then(|| p.node(n)));
        let ok = same.is_some_and(|b| {
            let op_ok = match (&a.op, &b.op) {
                (Op::StridedCopy { .. }, Op::StridedCopy { .. }) | (Op::TileCopy, Op::TileCopy) => true,
                (x, y) => x == y,
            };
            op_ok && a.inputs == b.inputs && a.outputs == b.outputs
        });
        if !ok {
            return Err(node_err(g, n, differs("here")));
        }
    }
    Ok(())
}

/// Records the axes of `g`'s values that grow with dim `d` (extent `k·max` in `g`, `k·probe` in `p`), and checks
/// that constants agree on their common part.
fn find_axes(
    g: &Graph,
    p: &Graph,
    d: usize,
    r: &DimRange,
    axes: &mut HashMap<ValueId, Vec<RangedAxis>>,
) -> Result<(), PassError> {
    let b = probe_value(r);
    let mut live: Vec<ValueId> = g.inputs.iter().chain(&g.outputs).copied().collect();
    for n in g.node_ids() {
        live.extend(g.node(n).inputs.iter().flatten().chain(&g.node(n).outputs));
    }
    live.sort();
    live.dedup();
    for v in live {
        let (ta, tb) = (g.ty(v), p.ty(v));
        let verr = |reason: String| PassError::Value { value: g.value(v).name.clone(), reason };
        if ta.shape.len() != tb.shape.len() {
            return Err(verr(format!("its rank differs between {}={} and {b}", r.name, r.max)));
        }
        let mut ranged = Vec::new();
        for (i, (&ea, &eb)) in ta.shape.iter().zip(&tb.shape).enumerate() {
            if ea == eb {
                continue;
            }
            let k = ea / r.max;
            if ea % r.max != 0 || k * b != eb {
                return Err(verr(format!(
                    "its extent along axis {i} is {ea} at {}={} and {eb} at {}={b}: not a multiple of {} (an offset \
                     such as {} + 1, or a slice from the end), which a range cannot compile",
                    r.name, r.max, r.name, r.name, r.name
                )));
            }
            if axes.get(&v).is_some_and(|a| a.iter().any(|x| x.axis == i)) {
                return Err(verr(format!("its axis {i} grows with two ranged dims at once, which is not supported")));
            }
            ranged.push(RangedAxis { axis: i, dim: d, factor: k });
        }
        if let (Some(ca), Some(cb)) = (g.const_data(v), p.const_data(v)) {
            if !prefix_equal(ca, cb) {
                return Err(verr(format!(
                    "this constant is computed from {}'s value (it differs between {}={} and {b} beyond its size), \
                     which no kernel of a ranged artifact knows at compile time",
                    r.name, r.name, r.max
                )));
            }
        }
        if !ranged.is_empty() {
            axes.entry(v).or_default().extend(ranged);
        }
    }
    Ok(())
}

/// Whether the smaller constant `b` is `a`'s leading part along every axis.
fn prefix_equal(a: &Tensor, b: &Tensor) -> bool {
    if a.shape == b.shape {
        return a.data == b.data;
    }
    let (va, vb) = (a.to_f64(), b.to_f64());
    let sa = wgslc_ir::contiguous_strides(&a.shape);
    let sb = wgslc_ir::contiguous_strides(&b.shape);
    (0..vb.len()).all(|i| {
        let ia: usize = b.shape.iter().zip(&sb).zip(&sa).map(|((&e, &s), &t)| (i / s % e) * t).sum();
        va[ia].to_bits() == vb[i].to_bits() || (va[ia].is_nan() && vb[i].is_nan())
    })
}

/// Checks each node against the ranged axes of its values and masks what reads across them.
struct Masker<'a> {
    dims: &'a [DimRange],
    input: ValueId,
    axes: &'a RangedAxes,
    /// Dim `d`'s value as a scalar.
    scalars: HashMap<usize, ValueId>,
    /// `index / factor < n` along one axis of a given rank: (rank, axis, dim, factor) → bool value.
    compares: HashMap<(usize, usize, usize, usize), ValueId>,
    /// (value, axes, fill bits) → the masked value.
    masked: HashMap<(ValueId, Vec<usize>, u64), ValueId>,
}

/// The most keys (at the range's max) for which a ranged compile leaves attention one kernel ([`mask_ranges`]
/// masks its probabilities again beyond, so it is three). H200, the BERT-base-shaped encoder of
/// scripts/ranged_bench.py in buckets, ms: per-length artifact / bucket with attention fused / bucket as three
/// kernels (the last from the previous session's command): 5 tokens 1.41–1.46 / 1.55 / 1.48–1.67, 48 tokens
/// 1.88–2.01 / 2.03–2.13 / 2.13–2.15, 64 tokens 1.95–1.96 / 2.04–2.10 / 2.12–2.18; even at 96 and 128 (2.55–2.59
/// against 2.50–2.54, 2.55–2.69 against 2.59–2.74); behind from 192 tokens (4.01–4.03 against 3.43–3.51), 384
/// (7.38–7.57 against 5.40–5.49) and 512 (6.65–6.79 against 5.71–5.86): the fused kernel's workgroups each walk
/// every key of their rows, 144 of them over 384 keys, where three kernels spread the products over hundreds.
pub const RANGED_FUSED_ATTENTION_MAX_KEYS: usize = 64;

/// The fill that leaves a max (or softmax) unchanged: the most negative finite value of `dtype`.
fn lowest(dtype: DType) -> f64 {
    if dtype.is_float() {
        f32::MIN as f64
    } else {
        i32::MIN as f64
    }
}

impl Masker<'_> {
    fn ranged(&self, v: ValueId) -> &[RangedAxis] {
        self.axes.get(&v).map(Vec::as_slice).unwrap_or(&[])
    }

    fn ranged_at(&self, v: ValueId, axis: usize) -> Option<RangedAxis> {
        self.ranged(v).iter().copied().find(|a| a.axis == axis)
    }

    fn dim_name(&self, a: RangedAxis) -> &str {
        &self.dims[a.dim].name
    }

    fn node(&mut self, g: &mut Graph, n: NodeId) -> Result<(), PassError> {
        let node = g.node(n).clone();
        let ins: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
        if ins.iter().chain(&node.outputs).all(|&v| self.ranged(v).is_empty()) {
            return Ok(());
        }
        let x = node.inputs.first().copied().flatten();
        let rank = |g: &Graph, v: ValueId| g.ty(v).rank();
        let refuse = |g: &Graph, why: String| Err(node_err(g, n, why));
        match &node.op {
            Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast { .. } | Op::Trilu { .. } => Ok(()),
            Op::RotateHalf => match x.and_then(|x| self.ranged_at(x, rank(g, x) - 1)) {
                Some(a) => refuse(g, format!("rotates its last axis, which grows with {}", self.dim_name(a))),
                None => Ok(()),
            },
            Op::Alias => self.check_alias(g, n),
            Op::StridedCopy { offset, strides } => self.check_strided(g, n, *offset, strides),
            Op::TileCopy => {
                let (x, y) = (ins[0], node.outputs[0]);
                let tiled = self.ranged(y).iter().any(|a| self.ranged_at(x, a.axis) != Some(*a));
                if tiled {
                    return refuse(g, "tiles along a ranged axis".into());
                }
                Ok(())
            }
            Op::Concat { axis } => match self.ranged_at(node.outputs[0], *axis as usize) {
                Some(a) => refuse(
                    g,
                    format!(
                        "concatenates along an axis that grows with {}: where the second part starts depends on the \
                     run's value, which a ranged artifact does not support",
                        self.dim_name(a)
                    ),
                ),
                None => Ok(()),
            },
            Op::Gather { axis } => {
                let (data, idx) = (ins[0], ins[1]);
                let Some(a) = self.ranged_at(data, *axis as usize) else { return Ok(()) };
                let valid = a.factor * self.dims[a.dim].min;
                match g.const_data(idx) {
                    Some(t) if t.to_i64().iter().all(|&i| i >= 0 && (i as usize) < valid) => Ok(()),
                    _ => refuse(
                        g,
                        format!(
                            "gathers along an axis that grows with {} at indices not known to lie below its minimum \
                         ({valid} entries): a negative index or one computed from the length (the last token) moves \
                         with the run's value",
                            self.dim_name(a)
                        ),
                    ),
                }
            }
            Op::MatMul | Op::Gemm { .. } => {
                let (a, b) = (ins[0], ins[1]);
                let (ka, kb) = match node.op {
                    Op::Gemm { trans_a, trans_b, .. } => (usize::from(!trans_a), usize::from(trans_b)),
                    _ => (rank(g, a) - 1, rank(g, b).saturating_sub(2)),
                };
                if self.ranged_at(a, ka).is_some() || self.ranged_at(b, kb).is_some() {
                    // Attention's probabilities (A a softmax over K, its scores masked with the lowest value) hold
                    // no stale padding: each row's entries past the end are exp(lowest - max) / sum, finite unless
                    // the whole row is NaN, so against B's zeros they add nothing and A keeps its own value (the
                    // softmax → product chain then stays one attention kernel). Only up to
                    // [`RANGED_FUSED_ATTENTION_MAX_KEYS`] keys: beyond, the mask keeps it three kernels.
                    let softmax_over_k = g.value(a).producer.is_some_and(|p| match g.node(p).op {
                        Op::Softmax { axis, legacy, .. } => !legacy && resolved_axis(axis, rank(g, a)) == ka,
                        _ => false,
                    });
                    // Keys at the dim's max (not at this graph's extent: a probe decides as the graph does).
                    let keys = self.ranged_at(b, kb).map(|r| r.factor * self.dims[r.dim].max);
                    let as_is = softmax_over_k && keys.is_some_and(|k| k <= RANGED_FUSED_ATTENTION_MAX_KEYS);
                    let ma = if as_is { a } else { self.mask(g, a, &[ka], 0.0)? };
                    let mb = self.mask(g, b, &[kb], 0.0)?;
                    let mut inputs = node.inputs.clone();
                    inputs[0] = Some(ma);
                    inputs[1] = Some(mb);
                    g.set_inputs(n, inputs);
                }
                Ok(())
            }
            Op::Softmax { axis, legacy, .. } => {
                let x = ins[0];
                let r = rank(g, x);
                let ax = resolved_axis(*axis, r);
                let axes: Vec<usize> = if *legacy { (ax..r).collect() } else { vec![ax] };
                self.mask_input(g, n, &axes, lowest(g.ty(x).dtype))?;
                Ok(())
            }
            Op::LayerNorm { axis, .. } => {
                let x = ins[0];
                let r = rank(g, x);
                let ax = resolved_axis(*axis, r);
                match (ax..r).find_map(|i| self.ranged_at(x, i)) {
                    Some(a) => refuse(g, format!("normalizes over an axis that grows with {}", self.dim_name(a))),
                    None => Ok(()),
                }
            }
            Op::ArgReduce { max, axis, .. } => {
                let x = ins[0];
                let ax = resolved_axis(*axis, rank(g, x));
                let fill = if *max { lowest(g.ty(x).dtype) } else { -lowest(g.ty(x).dtype) };
                self.mask_input(g, n, &[ax], fill)?;
                Ok(())
            }
            Op::CumSum { axis, reverse, prod, .. } => {
                let x = ins[0];
                let ax = axis.map(|a| resolved_axis(a, rank(g, x)));
                if let (true, Some(ax)) = (*reverse, ax) {
                    self.mask_input(g, n, &[ax], if *prod { 1.0 } else { 0.0 })?;
                }
                Ok(())
            }
            Op::Reduce { op, axes: Some(raxes), .. } => {
                let x = ins[0];
                let across: Vec<RangedAxis> = raxes.iter().filter_map(|&i| self.ranged_at(x, i as usize)).collect();
                if across.is_empty() {
                    return Ok(());
                }
                let dt = g.ty(x).dtype;
                let fill = match op {
                    ReduceOp::Max | ReduceOp::LogSumExp => lowest(dt),
                    ReduceOp::Min => -lowest(dt),
                    ReduceOp::Prod => 1.0,
                    _ => 0.0,
                };
                let axes: Vec<usize> = across.iter().map(|a| a.axis).collect();
                self.mask_input(g, n, &axes, fill)?;
                if *op == ReduceOp::Mean {
                    self.rescale(g, n, &across)?;
                }
                Ok(())
            }
            Op::Conv { .. } | Op::Pool { kind: PoolKind::Max, .. } | Op::Pool { count_include_pad: true, .. } => {
                // Zero (or lowest, for a max) is what the window's padding holds past the end: masked, the
                // padding rows read as the padding the model was written for.
                let x = ins[0];
                let fill =
                    if matches!(node.op, Op::Pool { kind: PoolKind::Max, .. }) { lowest(g.ty(x).dtype) } else { 0.0 };
                self.mask_input(g, n, &(1..rank(g, x)).collect::<Vec<_>>(), fill)?;
                Ok(())
            }
            Op::GlobalPool(kind @ (PoolKind::Max | PoolKind::Avg)) => {
                let x = ins[0];
                let across: Vec<RangedAxis> = (2..rank(g, x)).filter_map(|i| self.ranged_at(x, i)).collect();
                if !across.is_empty() {
                    let max = *kind == PoolKind::Max;
                    let axes: Vec<usize> = across.iter().map(|a| a.axis).collect();
                    self.mask_input(g, n, &axes, if max { lowest(g.ty(x).dtype) } else { 0.0 })?;
                    if !max {
                        self.rescale(g, n, &across)?;
                    }
                }
                Ok(())
            }
            Op::Pad { pads: Some(p), .. } => {
                let r = p.len() / 2;
                match (0..r)
                    .find(|&i| (p[i] != 0 || p[i + r] != 0) && x.is_some_and(|x| self.ranged_at(x, i).is_some()))
                {
                    Some(i) => refuse(g, format!("pads axis {i}, which grows with a ranged dim")),
                    None => Ok(()),
                }
            }
            Op::TopK { axis, .. } => {
                let x = ins[0];
                let ax = resolved_axis(*axis, rank(g, x));
                match self.ranged_at(x, ax) {
                    Some(a) => refuse(g, format!("selects along an axis that grows with {}", self.dim_name(a))),
                    None => Ok(()),
                }
            }
            _ => {
                let a = ins.iter().chain(&node.outputs).find_map(|&v| self.ranged(v).first().copied());
                let name = a.map(|a| self.dim_name(a).to_string()).unwrap_or_default();
                refuse(
                    g,
                    format!(
                        "reads a value whose shape grows with {name}, which this op does not support in a ranged \
                     artifact: compile for fixed values of {name}"
                    ),
                )
            }
        }
    }

    /// A reshape keeps every valid entry at its offset when each ranged axis has the same extent before it (the
    /// product of the axes in front) on both sides and the same number of entries per step of the dim.
    fn check_alias(&self, g: &Graph, n: NodeId) -> Result<(), PassError> {
        let (x, y) = (g.node(n).inputs[0].expect("alias input"), g.node(n).outputs[0]);
        let (ax, ay) = (self.ranged(x), self.ranged(y));
        let (sx, sy) = (&g.ty(x).shape, &g.ty(y).shape);
        let mut px: Vec<RangedAxis> = ax.to_vec();
        let mut py: Vec<RangedAxis> = ay.to_vec();
        px.sort_by_key(|a| a.axis);
        py.sort_by_key(|a| a.axis);
        let consistent = px.len() == py.len()
            && px.iter().zip(&py).all(|(a, b)| {
                let front = |s: &[usize], i: usize| s[..i].iter().product::<usize>();
                let back = |s: &[usize], i: usize| s[i + 1..].iter().product::<usize>();
                a.dim == b.dim
                    && front(sx, a.axis) == front(sy, b.axis)
                    && a.factor * back(sx, a.axis) == b.factor * back(sy, b.axis)
            });
        if consistent {
            return Ok(());
        }
        Err(node_err(
            g,
            n,
            format!(
                "reshapes {sx:?} to {sy:?} across a ranged axis (an axis in front of it merges with it, or it splits \
                 so that the valid entries are no longer the leading ones): not supported in a ranged artifact"
            ),
        ))
    }

    /// A strided copy keeps a ranged axis when it reads it from its start with stride 1 into a ranged axis of the
    /// same factor; it may also read a fixed part of a ranged axis that lies below its minimum (`x[:, 0]`).
    fn check_strided(&self, g: &Graph, n: NodeId, offset: i64, strides: &[i64]) -> Result<(), PassError> {
        let (x, y) = (g.node(n).inputs[0].expect("copy input"), g.node(n).outputs[0]);
        let (sx, sy) = (g.ty(x).shape.clone(), g.ty(y).shape.clone());
        let st: Vec<i64> = wgslc_ir::contiguous_strides(&sx).iter().map(|&s| s as i64).collect();
        let err = |why: String| Err(node_err(g, n, why));
        // The input coordinate the offset starts at (a slice from the end, or a reversed read, starts past 0).
        let mut start = vec![0i64; sx.len()];
        let mut rest = offset;
        for (i, s) in st.iter().enumerate() {
            if *s > 0 {
                start[i] = rest / s;
                rest %= s;
            }
        }
        // Which input axis each output axis walks (by its stride), and how far.
        let walks = |j: usize| -> Option<usize> {
            let s = strides[j];
            (s != 0).then(|| st.iter().zip(&sx).position(|(&t, &e)| t == s.abs() && e > 1)).flatten()
        };
        for a in self.ranged(y) {
            match walks(a.axis).and_then(|i| self.ranged_at(x, i).map(|b| (i, b))) {
                Some((i, b)) if strides[a.axis] > 0 && start[i] == 0 && b.factor == a.factor && b.dim == a.dim => {}
                _ if strides[a.axis] == 0 => {}
                _ => {
                    return err(format!(
                        "copies along an axis that grows with {} other than from its start in order (a slice from \
                         the end or a reversed one): not supported in a ranged artifact",
                        self.dim_name(*a)
                    ))
                }
            }
        }
        for b in self.ranged(x) {
            let mapped = (0..sy.len()).any(|j| walks(j) == Some(b.axis) && self.ranged_at(y, j).is_some());
            if mapped {
                continue;
            }
            // A fixed part of the ranged axis: every coordinate read must lie below k·MIN.
            let mut hi = start[b.axis];
            let mut lo = start[b.axis];
            for j in 0..sy.len() {
                if walks(j) == Some(b.axis) {
                    let step = strides[j] / st[b.axis];
                    let reach = step * (sy[j] as i64 - 1);
                    hi = hi.max(start[b.axis] + reach);
                    lo = lo.min(start[b.axis] + reach);
                }
            }
            let valid = (b.factor * self.dims[b.dim].min) as i64;
            if lo < 0 || hi >= valid {
                return err(format!(
                    "reads entries {lo}..={hi} of an axis that grows with {}, which holds only {valid} at its \
                     minimum: the entries move with the run's value (the last token?)",
                    self.dim_name(*b)
                ));
            }
        }
        Ok(())
    }

    /// Dim `d`'s run-time value, an i32 scalar.
    fn scalar(&mut self, g: &mut Graph, d: usize) -> Result<ValueId, PassError> {
        if let Some(&v) = self.scalars.get(&d) {
            return Ok(v);
        }
        let mut b = Builder::new(g, format!("{DIMS_INPUT}/{}", self.dims[d].name));
        let v = b.op_typed(
            "value",
            Op::StridedCopy { offset: d as i64, strides: vec![] },
            &[Some(self.input)],
            TensorType::new(DType::I32, vec![]),
        )?;
        self.scalars.insert(d, v);
        Ok(v)
    }

    /// `Where(index < n, x, fill)` over the ranged ones of `axes` of `x` (only what a reduction reads across needs
    /// it: padding elsewhere reaches only padding).
    fn mask(&mut self, g: &mut Graph, x: ValueId, axes: &[usize], fill: f64) -> Result<ValueId, PassError> {
        let key = (x, axes.to_vec(), fill.to_bits());
        if let Some(&m) = self.masked.get(&key) {
            return Ok(m);
        }
        let ranged: Vec<RangedAxis> = self.ranged(x).iter().filter(|a| axes.contains(&a.axis)).copied().collect();
        if ranged.is_empty() {
            return Ok(x);
        }
        let ty = g.ty(x).clone();
        let rank = ty.rank();
        let mut cond: Option<ValueId> = None;
        for a in &ranged {
            let c = self.compare(g, rank, *a, ty.shape[a.axis])?;
            cond = Some(match cond {
                None => c,
                Some(prev) => {
                    let shape = wgslc_ir::broadcast_shapes(&g.ty(prev).shape, &g.ty(c).shape).expect("broadcast");
                    Builder::new(g, format!("{}/mask", g.value(x).name)).op_typed(
                        "and",
                        Op::Binary(BinaryOp::And),
                        &[Some(prev), Some(c)],
                        TensorType::new(DType::Bool, shape),
                    )?
                }
            });
        }
        let mut b = Builder::new(g, format!("{}/mask", g.value(x).name));
        let f = b.const_named("fill", Tensor::from_f64(ty.dtype, vec![], vec![fill]));
        let m = b.op_typed("where", Op::Where, &[cond, Some(x), Some(f)], ty)?;
        self.masked.insert(key, m);
        Ok(m)
    }

    /// `index / factor < n` along `a.axis` of a rank-`rank` value (shape 1 elsewhere).
    fn compare(&mut self, g: &mut Graph, rank: usize, a: RangedAxis, extent: usize) -> Result<ValueId, PassError> {
        let key = (rank, a.axis, a.dim, a.factor);
        if let Some(&c) = self.compares.get(&key) {
            return Ok(c);
        }
        let n = self.scalar(g, a.dim)?;
        let mut shape = vec![1; rank];
        shape[a.axis] = extent;
        let index: Vec<f64> = (0..extent).map(|i| (i / a.factor) as f64).collect();
        let mut b = Builder::new(g, format!("{DIMS_INPUT}/{}/axis{}of{rank}", self.dims[a.dim].name, a.axis));
        let iota = b.const_named("index", Tensor::from_f64(DType::I32, shape.clone(), index));
        let c = b.op_typed(
            "valid",
            Op::Binary(BinaryOp::Less),
            &[Some(iota), Some(n)],
            TensorType::new(DType::Bool, shape),
        )?;
        self.compares.insert(key, c);
        Ok(c)
    }

    fn mask_input(&mut self, g: &mut Graph, n: NodeId, axes: &[usize], fill: f64) -> Result<(), PassError> {
        let slot = 0;
        let x = g.node(n).inputs[slot].expect("masked input");
        let m = self.mask(g, x, axes, fill)?;
        let mut inputs = g.node(n).inputs.clone();
        inputs[slot] = Some(m);
        g.set_inputs(n, inputs);
        Ok(())
    }

    /// A mean over ranged axes summed `n` valid entries but divided by MAX: its output times `MAX / n` per axis.
    fn rescale(&mut self, g: &mut Graph, n: NodeId, across: &[RangedAxis]) -> Result<(), PassError> {
        let y = g.node(n).outputs[0];
        let ty = g.ty(y).clone();
        if ty.dtype != DType::F32 {
            return Err(node_err(g, n, "averages a non-float32 value across a ranged axis".into()));
        }
        let name = g.node(n).name.clone();
        let node = g.remove_node(n);
        let mut b = Builder::new(g, &name);
        let raw = b.value("sum", Some(ty.clone()));
        b.op_into("", node.op, &node.inputs, vec![raw])?;
        let mut acc = raw;
        for a in across {
            let nv = self.scalar(b.g, a.dim)?;
            let scalar = TensorType::new(DType::F32, vec![]);
            let nf = b.op_typed(
                &format!("n{}", a.axis),
                Op::Cast { to: DType::F32, saturate: true },
                &[Some(nv)],
                scalar.clone(),
            )?;
            let max = b.const_named("max", Tensor::f32(vec![], vec![self.dims[a.dim].max as f32]));
            let s =
                b.op_typed(&format!("scale{}", a.axis), Op::Binary(BinaryOp::Div), &[Some(max), Some(nf)], scalar)?;
            acc = b.op_typed(
                &format!("rescale{}", a.axis),
                Op::Binary(BinaryOp::Mul),
                &[Some(acc), Some(s)],
                ty.clone(),
            )?;
        }
        // The last product writes the original output value, so readers and graph outputs stay as they were.
        let last = g.value(acc).producer.expect("rescale node");
        let node = g.remove_node(last);
        g.add_node(node.name, node.op, node.inputs, vec![y])?;
        Ok(())
    }
}
