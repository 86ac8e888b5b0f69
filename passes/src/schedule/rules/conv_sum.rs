//! A shortcut projection summed into the block's last convolution: one product over both K ranges.

use super::Fuse;
use crate::schedule::Fold;
use wgslc_ir::{NodeId, Op};

/// Merges each lone ungrouped Conv whose output only an `Add` reads, where that Add is the first epilogue node of
/// another ungrouped Conv's group and adds the two convolutions' outputs (same shape), into that group as its
/// `conv_sum`: one product over both convolutions' K instead of a kernel, a store and a re-read. The merged group
/// keeps its place, after the lone Conv's (the Add already read its output there).
pub(in crate::schedule) fn fuse(f: &mut Fuse) {
    let g = f.g;
    let ungrouped_conv = |n: NodeId| matches!(g.node(n).op, Op::Conv { group: 1, .. });
    f.merge_into_later(|f, ci| {
        let c = &f.sched.kernels[ci];
        let c2 = c.anchor.filter(|&a| ungrouped_conv(a))?;
        if !c.folds.is_empty() {
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
        let gi = *f.group_of.get(&c1)?;
        let lone = &f.sched.kernels[gi];
        if gi >= ci || lone.nodes() != [c1] || !ungrouped_conv(c1) {
            return None;
        }
        let (x1, x2) = (g.node(c1).inputs[0]?, g.node(c2).inputs[0]?);
        if !f.only_reader(other, add) || g.ty(other) != g.ty(out2) || g.ty(x1).rank() != g.ty(x2).rank() {
            return None;
        }
        let merged = c.with(Fold::ConvSum { conv: c1, add });
        f.fits(&merged).then_some((gi, merged))
    });
}
