//! Two cache writes at the same row (a decode step's K and V) in one dispatch.

use super::Fuse;
use crate::lower::storage_root;
use crate::schedule::reads::group_io;
use crate::schedule::{Fold, FoldKind, KernelGroup};
use wgslc_ir::{NodeId, Op};

/// Merges each group anchored on a `CacheWrite` with the closest earlier one that writes the same row
/// ([`Fold::CacheWrite`]): a lone cache write (no folds, no epilogue) joins the other's kernel, which then stands
/// where the later one was. Taken only when the two are independent (neither reads the other's cache) and no
/// group of their step between them reads the earlier one's cache, so moving it later changes no value any kernel
/// of the step reads (a decoder's two steps each replay only the dispatches their outputs need); and within the
/// binding limit.
pub(in crate::schedule) fn fuse(f: &mut Fuse) {
    f.merge_into_later(|f, ci| {
        let g = f.g;
        let ks = &f.sched.kernels;
        let later = &ks[ci];
        let row = cache_row(f, later)?;
        let i = (0..ci).rev().find(|&i| cache_row(f, &ks[i]) == Some(row))?;
        let earlier = &ks[i];
        let lone = |k: &KernelGroup| k.folds.is_empty() && k.elementwise.is_empty();
        let (host, guest) = match (lone(earlier), lone(later)) {
            (_, true) if !earlier.has(FoldKind::CacheWrite) => (earlier, later),
            (true, false) if !later.has(FoldKind::CacheWrite) => (later, earlier),
            _ => return None,
        };
        let sched = &f.sched;
        let cache_of = |k: &KernelGroup| storage_root(g, g.node(k.anchor.expect("anchored")).outputs[0]);
        let (early_cache, late_cache) = (cache_of(earlier), cache_of(later));
        // Independent: the later one does not read the earlier one's cache (nor the reverse: the earlier one
        // runs first), and nothing between them reads the earlier one's cache.
        let reads_cache = |k: &KernelGroup, c| group_io(g, sched, k).0.iter().any(|&r| storage_root(g, r) == c);
        if reads_cache(later, early_cache) || reads_cache(earlier, late_cache) {
            return None;
        }
        // A group of the other step (a decoder's prefill between two decode writes) never runs between these.
        let anchor = earlier.anchor.expect("anchored");
        if ks[i + 1..ci].iter().any(|k| f.same_step(anchor, k) && reads_cache(k, early_cache)) {
            return None;
        }
        let merged = host.with(Fold::CacheWrite(guest.anchor.expect("anchored")));
        f.fits(&merged).then_some((i, merged))
    });
}

/// The row a group anchored on a lone or host `CacheWrite` writes at (without a second cache write yet).
fn cache_row(f: &Fuse, k: &KernelGroup) -> Option<wgslc_ir::ValueId> {
    let a: NodeId = k.anchor?;
    let node = f.g.node(a);
    (matches!(node.op, Op::CacheWrite { .. }) && !k.has(FoldKind::CacheWrite)).then(|| node.inputs[2]).flatten()
}
