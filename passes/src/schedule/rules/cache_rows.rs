//! A decode step's cache writes done by its one-row attention kernel.

use super::Fuse;
use crate::lower::storage_root;
use crate::schedule::reads::{final_readers, group_io, input_view, mm_batch_refinement, refined_strides};
use crate::schedule::{Fold, FoldKind, KernelGroup};
use crate::view::{compose, View};
use wgslc_ir::{contiguous_strides, Graph, NodeId, Op};

/// Merges each cache-write group (a `CacheWrite` of one new row, its new rows computed in it or read, with a
/// second write at the same row) into the one-row attention group that reads both caches
/// ([`Fold::CacheRows`]): the attention kernel writes the rows and reads each head's new key and value from
/// workgroup memory. Taken when the attention reads every key of each cache at its row (the product's key
/// axis is the cache's axis, its other coordinates stay within a row or step over whole caches), the writes'
/// outputs are read by the attention alone, nothing of the same step between the two groups reads either cache, and the merged
/// kernel fits the binding limit. The attention group stays where it was (after everything the writes read).
pub(in crate::schedule) fn fuse(f: &mut Fuse) {
    f.merge_into_later(|f, ci| {
        let g = f.g;
        let ks = &f.sched.kernels;
        let att = &ks[ci];
        let tail = att.attention()?;
        let qk = att.anchor?;
        if att.has(FoldKind::Operand) || att.has(FoldKind::CacheRows) {
            return None;
        }
        let q = g.node(qk).inputs[0]?;
        let qs = &g.ty(q).shape;
        if qs.len() < 2 || qs[qs.len() - 2] != 1 {
            return None;
        }
        let fine = mm_batch_refinement(g, qk);
        let k_view = operand_view(f, qk, fine.as_deref())?;
        let v_view = operand_view(f, tail.pv, fine.as_deref())?;
        let wk = g.value(k_view.0.root).producer.filter(|&w| matches!(g.node(w).op, Op::CacheWrite { .. }))?;
        let wv = g.value(v_view.0.root).producer.filter(|&w| matches!(g.node(w).op, Op::CacheWrite { .. }))?;
        let wi = *f.group_of.get(&wk)?;
        let w = &ks[wi];
        let second = w.second_cache_write()?;
        let anchor = w.anchor?;
        if wi >= ci || !w.elementwise.is_empty() || !(anchor == wk && second == wv || anchor == wv && second == wk) {
            return None;
        }
        if w.folds.iter().any(|x| !matches!(x.kind(), FoldKind::RowOperand | FoldKind::CacheWrite)) {
            return None;
        }
        // Each key at its row: the product's key coordinate (Kᵀ's last, V's second to last) is the cache axis,
        // stepping one row.
        let (bk, bv) = (k_view.1.len(), v_view.1.len());
        if bk < 2 || bv < 2 || !keys_at_rows(g, wk, &k_view, bk - 1) || !keys_at_rows(g, wv, &v_view, bv - 2) {
            return None;
        }
        // The caches as written are read by this kernel alone (directly or through views it reads them by).
        let members = att.nodes();
        let only_here = |x: NodeId| {
            final_readers(g, g.node(x).outputs[0], &f.sched.folded, f.readers)
                .is_some_and(|rs| rs.iter().all(|(r, _)| members.contains(r)))
        };
        if !only_here(wk) || !only_here(wv) {
            return None;
        }
        // Nothing of this step between the two reads either cache (the writes move to the later kernel; a group
        // of the other step never runs between them).
        let caches = [storage_root(g, g.node(wk).outputs[0]), storage_root(g, g.node(wv).outputs[0])];
        let sched = &f.sched;
        let reads_cache =
            |k: &KernelGroup| group_io(g, sched, k).0.iter().any(|&r| caches.contains(&storage_root(g, r)));
        if ks[wi + 1..ci].iter().any(|k| f.same_step(qk, k) && reads_cache(k)) {
            return None;
        }
        let operand = w.row_operand().map(<[NodeId]>::to_vec).unwrap_or_default();
        let merged = att.with(Fold::CacheRows { operand, writes: vec![anchor, second] });
        f.fits(&merged).then_some((wi, merged))
    });
}

/// The view through which MatMul `n` reads its B operand, over the batch coordinates it is computed with, and
/// those coordinates' extents.
fn operand_view(f: &Fuse, n: NodeId, fine: Option<&[usize]>) -> Option<(View, Vec<usize>)> {
    let g = f.g;
    let b = g.node(n).inputs[1]?;
    let shape = &g.ty(b).shape;
    match fine {
        Some(fine) if shape.len() >= 3 => {
            let extents: Vec<usize> = fine.iter().chain(&shape[shape.len() - 2..]).copied().collect();
            Some((compose(g, b, 0, &refined_strides(shape, fine), &extents, &f.sched.folded), extents))
        }
        _ => Some((input_view(g, &f.sched.folded, n, 1), shape.clone())),
    }
}

/// Whether `view` (of cache write `w`'s output, over coordinates of `extents` whose `key` one walks the keys)
/// reads key `j` from the cache's row `j`: the write adds one row, the key coordinate spans the cache's axis one
/// row a step, and every other coordinate (and the offset) either steps over whole caches or stays within a row.
fn keys_at_rows(g: &Graph, w: NodeId, (view, extents): &(View, Vec<usize>), key: usize) -> bool {
    let Op::CacheWrite { axis } = g.node(w).op else { return false };
    let Some(new) = g.node(w).inputs[1] else { return false };
    let (ns, cs) = (&g.ty(new).shape, &g.ty(g.node(w).outputs[0]).shape);
    let shaped = view.strides.len() == extents.len() && key < extents.len();
    if !shaped || axis >= cs.len() || ns.len() != cs.len() || ns[axis] != 1 || cs[axis] < 2 {
        return false;
    }
    let inner = contiguous_strides(cs)[axis] as i64;
    let span = inner * cs[axis] as i64;
    if view.strides[key] != inner || extents[key] != cs[axis] || view.offset < 0 {
        return false;
    }
    let mut within = view.offset % span;
    for (d, (&s, &e)) in view.strides.iter().zip(extents).enumerate() {
        if d == key || e <= 1 || s % span == 0 {
            continue;
        }
        if s < 0 {
            return false;
        }
        within += s * (e as i64 - 1);
    }
    within < inner
}
