//! Folds taken when a MatMul's group is created: a lone scalar op on an operand (Q · scale, K · scale) applied
//! as the operand is loaded, or else an RMSNormalization over K on operand A (Llama's norm → projection)
//! computed in the product.

use super::Fuse;
use crate::schedule::reads::scalar_op_data_slot;
use crate::schedule::{Fold, KernelGroup};
use wgslc_ir::{NodeId, Op};

/// Takes into `group`, the new group of MatMul `n`, the operand folds its inputs allow, removing the groups they
/// had. The group is not in the schedule yet; it will be pushed last.
pub(in crate::schedule) fn fold_into(f: &mut Fuse, group: &mut KernelGroup, n: NodeId) {
    let g = f.g;
    let node = g.node(n);
    if matches!(node.op, Op::CacheWrite { .. }) {
        if let Some(gp) = whole_elementwise_result(f, n, 1) {
            let trial = group.with(Fold::RowOperand(f.sched.kernels[gp].elementwise.clone()));
            if f.fits(&trial) {
                f.remove_group(gp);
                *group = trial;
            }
        }
        return;
    }
    if node.op != Op::MatMul {
        return;
    }
    for slot in 0..2 {
        let Some(v) = node.inputs[slot] else { continue };
        let Some(p) = g.value(v).producer else { continue };
        let Some(&gp) = f.group_of.get(&p) else { continue };
        let lone = f.sched.kernels[gp].nodes() == [p];
        if lone && scalar_op_data_slot(g, p).is_some() && f.effective_readers(v) == [n] && !f.is_output(v) {
            f.remove_group(gp);
            group.fold(Fold::Operand { slot, node: p });
        }
    }
    if group.folds.is_empty() {
        if let Some(p) = rms_norm_of(f, n) {
            let trial = group.with(Fold::RmsNorm(p));
            if f.fits(&trial) {
                f.remove_group(f.group_of[&p]);
                *group = trial;
            }
        }
    }
    if !group.prologue().any(|(slot, _)| slot == 0) {
        if let Some(gp) = row_operand_of(f, n, group.rms_norm()) {
            let trial = group.with(Fold::RowOperand(f.sched.kernels[gp].elementwise.clone()));
            if f.fits(&trial) {
                f.remove_group(gp);
                *group = trial;
            }
        }
    }
}

/// The elementwise kernel that MatMul `n` can take as a [`Fold::RowOperand`]: `n` multiplies one row of A per
/// product (A is `[…, 1, K]` or `[K]`; batch axes may be any size, as a decode step's per-head queries) by a matrix
/// of K rows, A is that kernel's result read directly (no view between) by `n` alone, and the kernel is nothing
/// but elementwise nodes. With the RMSNormalization `norm` folded into `n`, the kernel is the one whose result
/// the norm alone reads: the product computes the norm's input as it stages it and normalizes that. Each
/// workgroup of the product recomputes its row, so the kernel's loads are repeated once per workgroup: only worth
/// it for rows of K values next to matrices of K rows (rotary on a decode step's queries before their scores,
/// SwiGLU before the down projection, a residual sum before a norm).
fn row_operand_of(f: &Fuse, n: NodeId, norm: Option<NodeId>) -> Option<usize> {
    let g = f.g;
    let node = g.node(n);
    let a = node.inputs[0]?;
    let (at, bt) = (g.ty(a), g.ty(node.inputs[1]?));
    let one_row = match at.rank() {
        0 => false,
        1 => true,
        r => at.shape[r - 2] == 1,
    };
    if bt.rank() < 2 || !one_row {
        return None;
    }
    whole_elementwise_result(f, norm.unwrap_or(n), 0)
}

/// The group of the elementwise kernel whose result node `n` reads as input `slot` directly (no view between but
/// Aliases of the same shape),
/// when that kernel is nothing but elementwise nodes and `n` its only reader: a kernel `n`'s own kernel can
/// compute as it loads the value ([`Fold::RowOperand`]). A cache write takes the one that computes its new rows
/// (rotary on K: the rotated rows go straight into the cache).
fn whole_elementwise_result(f: &Fuse, n: NodeId, slot: usize) -> Option<usize> {
    let g = f.g;
    let mut a = g.node(n).inputs.get(slot).copied().flatten()?;
    // Through Aliases that change nothing (an expansion's output binding: RotaryEmbedding's rotated rows).
    while let Some(al) = g.value(a).producer.filter(|&al| g.node(al).op == Op::Alias) {
        let src = g.node(al).inputs[0]?;
        if g.ty(src).shape != g.ty(a).shape || f.is_output(a) {
            break;
        }
        a = src;
    }
    let p = g.value(a).producer?;
    let gp = *f.group_of.get(&p)?;
    let k = &f.sched.kernels[gp];
    let whole = k.anchor.is_none() && k.folds.is_empty() && k.result() == p && g.node(p).outputs[0] == a;
    (whole && f.effective_readers(a) == [n] && !f.is_output(a)).then_some(gp)
}

/// The RMSNormalization that MatMul `n` can take as a [`Fold::RmsNorm`]: over the last axis, no bias, weights of K,
/// in a kernel of its own, read by nothing but `n`'s A operand (directly, no reshape between).
fn rms_norm_of(f: &Fuse, n: NodeId) -> Option<NodeId> {
    let g = f.g;
    let v = g.node(n).inputs.first().copied().flatten()?;
    let p = g.value(v).producer?;
    let pn = g.node(p);
    let Op::LayerNorm { rms: true, axis, .. } = pn.op else { return None };
    let vt = g.ty(v);
    let k = *vt.shape.last()?;
    let scale = pn.inputs.get(1).copied().flatten()?;
    let ok = vt.rank() >= 2
        && vt.dtype.is_float()
        && axis.rem_euclid(vt.rank() as i64) as usize == vt.rank() - 1
        && pn.inputs.get(2).copied().flatten().is_none()
        && g.ty(scale).shape == [k]
        && f.readers.get(&v).is_some_and(|rs| rs.as_slice() == [(n, 0)])
        && !f.is_output(v)
        && f.group_of.get(&p).is_some_and(|&gp| f.sched.kernels[gp].nodes() == [p]);
    ok.then_some(p)
}
