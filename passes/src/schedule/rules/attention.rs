//! Attention: the score product, the softmax over its last axis and the product with V as one kernel.

use super::Fuse;
use crate::schedule::reads::mm_batch_refinement;
use crate::schedule::{
    AttentionTail, Fold, FoldKind, ATTENTION_MAX_DK, ATTENTION_MAX_DV, ATTENTION_ROW_MAX_DK, ATTENTION_ROW_MAX_KEYS,
    ATTENTION_SELF_MAX_TOKENS,
};
use wgslc_ir::{NodeId, Op, ValueId};

/// Merges each MatMul(Q, Kᵀ) [scale, mask] → Softmax(last axis) → MatMul(·, V) chain whose intermediate values
/// nothing else reads into one attention group, placed where the V product was (everything it reads is written
/// by then). Shapes the kernel cannot hold (query rows wider than [`ATTENTION_MAX_DK`], value rows wider than
/// [`ATTENTION_MAX_DV`]; for a single query row, more than [`ATTENTION_ROW_MAX_KEYS`] keys, rows not a multiple
/// of 4 wide or queries wider than [`ATTENTION_ROW_MAX_DK`]), self-attention (as many query rows as keys) over more
/// than [`ATTENTION_SELF_MAX_TOKENS`] tokens, and groups that would pass the binding limit stay three kernels.
pub(in crate::schedule) fn fuse(f: &mut Fuse) {
    let g = f.g;
    let mut ci = 0;
    while ci < f.sched.kernels.len() {
        let merged = (|| {
            let (sched, group_of, readers) = (&f.sched, &f.group_of, f.readers);
            let c = &sched.kernels[ci];
            let pv = c.anchor.filter(|&a| g.node(a).op == Op::MatMul)?;
            if !c.elementwise.is_empty() || c.has(FoldKind::Operand) || c.has(FoldKind::Attention) {
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
            // SDPA's guard `Where(IsNaN(p), 0, p)` between the softmax and the V product, wherever grouping put it:
            // the softmax's epilogue, an elementwise kernel of its own, or the V product's row operand.
            let guard = g.value(probs).producer.and_then(|w| {
                let nw = g.node(w);
                let (cond, soft) = (nw.inputs.first().copied().flatten()?, nw.inputs.get(2).copied().flatten()?);
                let i = g.value(cond).producer?;
                let ni = g.node(i);
                let zero = nw.inputs.get(1).copied().flatten().and_then(|z| g.const_data(z));
                let ok = nw.op == Op::Where
                    && ni.op == Op::Unary(wgslc_ir::UnaryOp::IsNaN)
                    && ni.inputs[0] == Some(soft)
                    && zero.is_some_and(|z| z.to_f64().iter().all(|&x| x == 0.0));
                ok.then_some((i, w, soft))
            });
            let soft = guard.map_or(probs, |(_, _, s)| s);
            let bi = *group_of.get(&g.value(soft).producer?)?;
            let b = &sched.kernels[bi];
            let sm = b.anchor?;
            let Op::Softmax { axis, log: false, .. } = g.node(sm).op else { return None };
            let scores = g.node(sm).inputs[0]?;
            let st = g.ty(scores);
            if axis as usize + 1 != st.rank()
                || st.rank() < 2
                || b.has(FoldKind::Operand)
                || g.node(sm).outputs[0] != soft
            {
                return None;
            }
            // One query row (a decode step) runs as a kernel of its own shape (a workgroup per row, every score in
            // workgroup memory, each thread keeping a whole key's loads or several keys of V in flight): up to
            // ATTENTION_ROW_MAX_KEYS keys, rows a multiple of 4 wide. The tiled kernel would run a workgroup per
            // head waiting on one load at a time (H100, a Qwen2.5-0.5B-shaped step over 512 keys: 144 µs, against
            // about 30 µs per layer as three kernels); a first one-row kernel that loaded one element at a time
            // took 39 µs.
            let (rows, keys) = (st.shape[st.rank() - 2], st.shape[st.rank() - 1]);
            let one_row = rows == 1;
            if one_row && !(1..=ATTENTION_ROW_MAX_KEYS).contains(&keys) {
                return None;
            }
            // Self-attention over more tokens than ATTENTION_SELF_MAX_TOKENS stays three kernels (faster there).
            if rows == keys && rows > ATTENTION_SELF_MAX_TOKENS {
                return None;
            }
            // The guard's group: the softmax's (its whole epilogue), the V product's (its only fold), or its own.
            let mut guard_group = None;
            let nan_to_zero = match guard {
                None if b.elementwise.is_empty() && !c.has(FoldKind::RowOperand) => None,
                None => return None,
                Some((i, w, _)) => {
                    let inside = |v: ValueId, rs: &[NodeId]| {
                        !f.is_output(v) && readers.get(&v).is_some_and(|r| r.iter().all(|(n, _)| rs.contains(n)))
                    };
                    if !inside(soft, &[i, w]) || !inside(g.node(i).outputs[0], &[w]) {
                        return None;
                    }
                    let gi = *group_of.get(&i)?;
                    let k = &sched.kernels[gi];
                    let pair = [i, w];
                    let placed = if gi == bi {
                        b.elementwise[..] == pair
                    } else if gi == ci {
                        b.elementwise.is_empty() && matches!(&k.folds[..], [Fold::RowOperand(ns)] if ns[..] == pair)
                    } else {
                        guard_group = Some(gi);
                        b.elementwise.is_empty()
                            && k.anchor.is_none()
                            && k.folds.is_empty()
                            && k.elementwise[..] == pair
                            && bi < gi
                            && gi < ci
                    };
                    if !placed || (gi != ci && c.has(FoldKind::RowOperand)) {
                        return None;
                    }
                    Some((i, w))
                }
            };
            let qk_last = g.value(scores).producer?;
            let ai = *group_of.get(&qk_last)?;
            let a = &sched.kernels[ai];
            let qk = a.anchor.filter(|&q| g.node(q).op == Op::MatMul && a.last() == qk_last)?;
            if a.has(FoldKind::Attention) || a.has(FoldKind::RmsNorm) || ai >= bi || bi >= ci {
                return None;
            }
            // The intermediates stay inside: read by the next step only, not graph outputs, read as they are.
            let only = |v: ValueId, r: NodeId| f.only_reader(v, r);
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
            if one_row && (dk == 0 || dv == 0 || dk % 4 != 0 || dv % 4 != 0 || dk > ATTENTION_ROW_MAX_DK) {
                return None;
            }
            // A query computed as it is loaded (rotary on a decode step's Q) only in the one-row kernel.
            if a.has(FoldKind::RowOperand) && !one_row {
                return None;
            }
            // The kernel walks one set of batch coordinates for both products.
            if mm_batch_refinement(g, qk) != mm_batch_refinement(g, pv) {
                return None;
            }
            // Its templates read Q, K and V as f32 arrays: a narrow constant among them stays with the products,
            // which decode it.
            let operands = [g.node(qk).inputs[0]?, g.node(qk).inputs[1]?, g.node(pv).inputs[1]?];
            if operands.into_iter().any(|v| crate::narrow::views_narrow_constant(g, v)) {
                return None;
            }
            let merged = a.with(Fold::Attention(AttentionTail { softmax: sm, nan_to_zero, pv }));
            if !f.fits(&merged) {
                return None;
            }
            Some((ai, bi, guard_group, merged))
        })();
        if let Some((ai, bi, guard_group, merged)) = merged {
            // Remove the score, softmax (and guard) groups; the merged group takes the V product's place.
            f.sched.kernels[ci] = merged;
            if let Some(gi) = guard_group {
                f.sched.kernels.remove(gi);
                ci -= 1;
            }
            f.sched.kernels.remove(bi);
            f.sched.kernels.remove(ai);
            ci -= 2;
            f.reindex();
        }
        ci += 1;
    }
}
