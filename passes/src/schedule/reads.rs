//! How kernels read values: through views that fold layout copies into index math, which nodes read a value,
//! and what a group binds.

use super::group::KernelGroup;
use super::Schedule;
use crate::lower::storage_root;
use crate::view::{compose, View};
use std::collections::{HashMap, HashSet};
use wgslc_ir::{broadcast_strides, contiguous_strides, Graph, NodeId, Op, ValueId};

/// Who reads each value: `(node, input slot)`.
pub type Readers = HashMap<ValueId, Vec<(NodeId, usize)>>;

/// For a pointwise node whose inputs other than one are scalar constants, that one input's slot: such a node can
/// be applied to a value as it is loaded, with the constants inlined.
pub fn scalar_op_data_slot(g: &Graph, n: NodeId) -> Option<usize> {
    let node = g.node(n);
    if !matches!(node.op, Op::Unary(_) | Op::Binary(_)) || !g.ty(node.outputs[0]).dtype.is_float() {
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

/// The value of `v` when it is a one-element constant that fused elementwise bodies write as a literal instead of
/// reading from a binding (a divisor of the attention scores, an epsilon, a clamp bound): stored as f32 or i32,
/// not as packed blocks. [`member_bindings`] counts no binding for it where a pointwise node reads it, and the
/// emitter's fused body inlines it there, so the two agree on what a kernel binds.
pub fn scalar_literal(g: &Graph, v: ValueId) -> Option<f64> {
    let t = g.const_data(v)?;
    if t.numel() != 1 || matches!(t.data, wgslc_ir::Data::Blocks(_)) {
        return None;
    }
    match crate::lower::storage_of(g.ty(v).dtype) {
        Ok(crate::lower::Storage::F32 | crate::lower::Storage::I32) => t.to_f64().first().copied(),
        _ => None,
    }
}

/// How a node reads input `slot`, as (offset, strides, extents) over its own coordinates, when the read can go
/// through a view; `None` when the node needs the value materialized.
pub fn read_spec(g: &Graph, n: NodeId, slot: usize) -> Option<(i64, Vec<i64>, Vec<usize>)> {
    let node = g.node(n);
    let v = node.inputs.get(slot).copied().flatten()?;
    let vs = &g.ty(v).shape;
    match &node.op {
        op if op.is_pointwise() => {
            let os = g.ty(node.outputs[0]).shape.clone();
            Some((0, broadcast_strides(vs, &os), os))
        }
        Op::StridedCopy { offset, strides } => Some((*offset, strides.clone(), g.ty(node.outputs[0]).shape.clone())),
        // Read at a rotated last coordinate, which stays inside the same extent: the view of the plain read holds.
        Op::RotateHalf => Some((0, contiguous_strides(vs).into_iter().map(|s| s as i64).collect(), vs.clone())),
        // A Concat's copy of one input reads it one element per thread at its own coordinates (so a view of it
        // folds into the copy: a prefill step's window of the cache beside the chunk's rows).
        Op::Concat { .. } => Some((0, contiguous_strides(vs).into_iter().map(|s| s as i64).collect(), vs.clone())),
        // The new rows of a cache write are read one element per thread at their own coordinates.
        Op::CacheWrite { .. } if slot == 1 => {
            Some((0, contiguous_strides(vs).into_iter().map(|s| s as i64).collect(), vs.clone()))
        }
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
pub(super) fn refines(fine: &[usize], coarse: &[usize]) -> bool {
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
pub(super) fn final_readers(
    g: &Graph,
    v: ValueId,
    folded: &HashSet<NodeId>,
    readers: &Readers,
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

/// Whether `v`, or a value that aliases it, is a graph output (so it must be materialized).
pub(super) fn is_output(g: &Graph, v: ValueId, readers: &Readers) -> bool {
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
pub(super) fn effective_readers(g: &Graph, v: ValueId, readers: &Readers) -> Vec<NodeId> {
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
pub(super) fn closed_cluster(g: &Graph, v: ValueId, readers: &Readers) -> Option<Vec<ValueId>> {
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
            && rs.iter().all(|&r| g.node(r).op.is_pointwise() && g.ty(g.node(r).outputs[0]).numel() == numel);
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
                    // Through folded layout copies, which may view a value computed inside (a Concat an
                    // attention kernel reads in place, through GQA's expansion and a transpose).
                    let r = input_view(g, &sched.folded, m, slot).root;
                    if !reads.contains(&r) && !inside.contains(&r) {
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
    if k.anchor.is_some() || !k.folds.is_empty() {
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
            let identity = g.node(m).op.is_pointwise()
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
pub(super) fn bindings(g: &Graph, folded: &HashSet<NodeId>, k: &KernelGroup) -> usize {
    member_bindings(g, folded, &k.nodes(), &k.inlined())
}

/// Storage buffers a kernel of `members` would bind, where the scalar constants of `inlined` nodes are literals,
/// and so are the one-element constants pointwise members read ([`scalar_literal`]).
pub(super) fn member_bindings(
    g: &Graph,
    folded: &HashSet<NodeId>,
    members: &[NodeId],
    inlined: &HashSet<NodeId>,
) -> usize {
    let inside: HashSet<ValueId> = members.iter().flat_map(|&m| g.node(m).outputs.clone()).collect();
    let mut roots = HashSet::new();
    for &m in members {
        for (slot, v) in g.node(m).inputs.iter().enumerate() {
            if inlined.contains(&m) && scalar_op_data_slot(g, m) != Some(slot) {
                continue;
            }
            if let Some(v) = v {
                if !inside.contains(&storage_root(g, *v)) {
                    let root = input_view(g, folded, m, slot).root;
                    if g.node(m).op.is_pointwise() && scalar_literal(g, root).is_some() {
                        continue;
                    }
                    // A view (through folded layout copies) of a value computed inside binds nothing.
                    if !inside.contains(&storage_root(g, root)) {
                        roots.insert(storage_root(g, root));
                    }
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
