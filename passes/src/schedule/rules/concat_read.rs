//! Attention that reads a Concat of its keys or values in place: a prefill chunk attends over
//! `Concat(window of the cache, the chunk's rows)`, and the Concat's copy kernels (two a cache, four a layer) go.

use super::Fuse;
use crate::schedule::reads::{final_readers, input_view};
use crate::schedule::Fold;
use wgslc_ir::{DType, NodeId, Op};

/// Gives each tiled attention kernel a [`Fold::ReadConcat`] for its K and its V where they are Concats
/// ([`concat_of`]) whose kernels are nothing but the Concat, within the binding limit.
pub(in crate::schedule) fn fuse(f: &mut Fuse) {
    while let Some((ai, ci, c)) = next_read(f) {
        f.sched.kernels[ai].fold(Fold::ReadConcat(c));
        f.sched.kernels.remove(ci);
        f.reindex();
    }
}

/// The next Concat an attention kernel can read in place: the attention's index, the Concat kernel's, the Concat.
fn next_read(f: &Fuse) -> Option<(usize, usize, NodeId)> {
    for (ai, k) in f.sched.kernels.iter().enumerate() {
        let (Some(qk), Some(tail)) = (k.anchor, k.attention()) else { continue };
        // Several query rows: the tiled kernel (a decode step's one-row kernel reads its caches as they are).
        let scores = &f.g.ty(f.g.node(qk).outputs[0]).shape;
        if scores.len() < 2 || scores[scores.len() - 2] < 2 {
            continue;
        }
        for (n, slot) in [(qk, 1), (tail.pv, 1)] {
            let Some(c) = concat_of(f, n, slot) else { continue };
            let Some(&ci) = f.group_of.get(&c) else { continue };
            if f.sched.kernels[ci].nodes() != [c] || k.folds.contains(&Fold::ReadConcat(c)) || ci >= ai {
                continue;
            }
            if f.fits(&k.with(Fold::ReadConcat(c))) {
                return Some((ai, ci, c));
            }
        }
    }
    None
}

/// The Concat that product `n` reads as input `slot` through views only, when nothing else reads it, it is no
/// graph output, and each of its float32 inputs is read through a view of non-negative strides of a value a
/// kernel or the caller writes (no other folded layout copy between, no narrow constant).
fn concat_of(f: &Fuse, n: NodeId, slot: usize) -> Option<NodeId> {
    let g = f.g;
    let root = input_view(g, &f.sched.folded, n, slot).root;
    let c = g.value(root).producer?;
    let node = g.node(c);
    if !matches!(node.op, Op::Concat { .. }) || f.is_output(root) || g.ty(root).dtype != DType::F32 {
        return None;
    }
    if final_readers(g, root, &f.sched.folded, f.readers)? != [(n, slot)] {
        return None;
    }
    for (s, v) in node.inputs.iter().enumerate() {
        let v = (*v)?;
        let view = input_view(g, &f.sched.folded, c, s);
        let ok = g.ty(v).dtype == DType::F32
            && g.ty(v).numel() > 0
            && view.offset >= 0
            && view.strides.iter().all(|&x| x >= 0)
            && g.value(view.root).producer.is_none_or(|q| !f.sched.folded.contains(&q))
            && !crate::narrow::views_narrow_constant(g, v);
        if !ok {
            return None;
        }
    }
    Some(c)
}
