//! A weight split into blocks of output columns, read by one-row products (an LLM head in a decode step): one
//! kernel over every block instead of a kernel per block.

use super::Fuse;
use crate::schedule::reads::input_view;
use crate::schedule::{Fold, FoldKind, KernelGroup};
use wgslc_ir::{NodeId, Op, ValueId};

/// Merges each Concat along the last axis whose every input is a one-row MatMul of the same A with a B of rank 2
/// (in a kernel of its own: no folds, no epilogue, read by the Concat alone) into one group: the first product
/// the anchor, the others and the Concat a [`Fold::Blocks`], placed where the Concat was (nothing else reads
/// the products). Every block but the last as wide as the first, all read at the same strides (a tied head's
/// transposed blocks; row-major blocks of columns only when all are as wide). Taken within the binding limit.
/// An RMSNormalization before them stays its own kernel: folded, every one of the ~19,000 workgroups of an LLM
/// head over 151,936 columns would reduce the whole row first (H100, Qwen2.5-0.5B: 306 µs for norm and head
/// against 257 µs as two kernels).
pub(in crate::schedule) fn fuse(f: &mut Fuse) {
    let g = f.g;
    let mut ci = 0;
    while ci < f.sched.kernels.len() {
        let found = (|| {
            let k = &f.sched.kernels[ci];
            let c = k.anchor?;
            let node = g.node(c);
            let Op::Concat { axis } = node.op else { return None };
            let out = g.ty(node.outputs[0]);
            if !k.folds.is_empty() || !k.elementwise.is_empty() || axis as usize + 1 != out.rank() {
                return None;
            }
            if node.inputs.len() < 2 {
                return None;
            }
            let mut products: Vec<(usize, NodeId)> = Vec::new();
            let mut a: Option<ValueId> = None;
            let width = |v: ValueId| g.ty(v).shape.last().copied().unwrap_or(0);
            let first = width(node.inputs[0]?);
            if first == 0 {
                return None;
            }
            for (slot, v) in node.inputs.iter().enumerate() {
                let v = (*v)?;
                let q = g.value(v).producer?;
                let qi = *f.group_of.get(&q)?;
                let qn = g.node(q);
                if qn.op != Op::MatMul {
                    return None;
                }
                let lone = f.sched.kernels[qi].nodes() == [q];
                let (x, w) = (qn.inputs[0]?, qn.inputs[1]?);
                let xt = g.ty(x);
                let one_row = xt.rank() >= 1 && xt.shape[..xt.rank() - 1].iter().all(|&d| d == 1);
                let last = slot + 1 == node.inputs.len();
                let wide_ok = if last { width(v) <= first } else { width(v) == first };
                if !lone
                    || !one_row
                    || g.ty(w).rank() != 2
                    || a.is_some_and(|a| a != x)
                    || !wide_ok
                    || !f.only_reader(v, c)
                    || qi >= ci
                {
                    return None;
                }
                a = Some(x);
                products.push((qi, q));
            }
            // Every block read at the first one's strides (a kernel walks them alike).
            let view = |q: NodeId| input_view(g, &f.sched.folded, q, 1);
            let v0 = view(products[0].1);
            if products.iter().any(|&(_, q)| {
                let v = view(q);
                v.offset != v0.offset || v.strides != v0.strides
            }) {
                return None;
            }
            let anchor = products[0].1;
            let mut merged = KernelGroup::single(anchor, false);
            merged.fold(Fold::Blocks { concat: c, products: products[1..].iter().map(|&(_, q)| q).collect() });
            f.fits(&merged).then_some((products, merged))
        })();
        let Some((products, merged)) = found else {
            ci += 1;
            continue;
        };
        debug_assert!(merged.has(FoldKind::Blocks));
        // The Concat's group becomes the merged one; the products' groups go.
        f.sched.kernels[ci] = merged;
        let mut gone: Vec<usize> = products.iter().map(|&(qi, _)| qi).collect();
        gone.sort_unstable();
        for &i in gone.iter().rev() {
            f.sched.kernels.remove(i);
        }
        f.reindex();
        ci = ci + 1 - gone.len();
    }
}
