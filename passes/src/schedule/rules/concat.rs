//! A Concat written in place: each producing kernel stores its result straight into its block of the Concat's
//! output, and the Concat has no kernel. SqueezeNet 1.1's fire modules (two expand convolutions joined along
//! channels) lose their two copy kernels each. A Concat that keeps its copy kernels reads the layout copies only
//! it reads through their views (a prefill step's window of the cache), so they have no kernels.

use super::Fuse;
use crate::schedule::recipe::{anchor_kind, concat_placement};
use crate::schedule::{Fold, FoldKind};
use wgslc_ir::Op;

/// Takes every Concat kernel whose inputs are all written by distinct kernels that can place their stores
/// ([`Fold::allowed_over`] for [`Fold::WriteInto`]) and nothing else reads: each of those kernels gets a
/// [`Fold::WriteInto`], the Concat's kernel is removed and the Concat listed in `Schedule::concats`. All or
/// nothing: a Concat with one input from elsewhere (a graph input, a weight, a value read twice) keeps its copy
/// kernels. Storage types must match (a float Concat of float results), and no input may be empty.
pub(in crate::schedule) fn fuse(f: &mut Fuse) {
    let g = f.g;
    let mut ci = 0;
    while ci < f.sched.kernels.len() {
        let writers = (|| {
            let k = &f.sched.kernels[ci];
            let c = k.anchor?;
            let node = g.node(c);
            if !matches!(node.op, Op::Concat { .. }) || !k.folds.is_empty() || !k.elementwise.is_empty() {
                return None;
            }
            let out_storage = crate::lower::storage_of(g.ty(node.outputs[0]).dtype).ok()?;
            let mut writers: Vec<(usize, usize)> = Vec::new();
            for (slot, v) in node.inputs.iter().enumerate() {
                let v = (*v)?;
                let q = g.value(v).producer?;
                let pi = *f.group_of.get(&q)?;
                let p = &f.sched.kernels[pi];
                let blocked = [FoldKind::StoreCopy, FoldKind::WriteInto].iter().any(|&x| p.has(x));
                let anchor_ok = Fold::WriteInto { concat: c, slot }.allowed_over(anchor_kind(g, p));
                let same_storage = crate::lower::storage_of(g.ty(v).dtype).ok()? == out_storage;
                if p.last() != q
                    || blocked
                    || !anchor_ok
                    || !same_storage
                    || g.ty(v).numel() == 0
                    || !f.only_reader(v, c)
                    || node.inputs.iter().filter(|&&u| u == Some(v)).count() > 1
                    || writers.iter().any(|&(w, _)| w == pi)
                    || pi >= ci
                {
                    return None;
                }
                writers.push((pi, slot));
            }
            Some((c, writers))
        })();
        // Each placement must exist before anything changes (the recipe recomputes it).
        match writers {
            Some((c, writers)) if writers.iter().all(|&(_, slot)| concat_placement(g, c, slot).is_some()) => {
                for &(pi, slot) in &writers {
                    f.sched.kernels[pi].fold(Fold::WriteInto { concat: c, slot });
                }
                f.sched.kernels.remove(ci);
                f.sched.concats.insert(c);
                f.reindex();
                continue;
            }
            // The Concat keeps its copy kernels: a layout copy that only it reads is read through by its copy.
            _ if fold_copies_into(f, ci) => continue,
            _ => {}
        }
        ci += 1;
    }
}

/// Folds into the copy kernels of the Concat anchoring kernel `ci` each input that is a lone layout copy (a
/// `StridedCopy` kernel of its own, read by this Concat alone, not an output) whose view of its source stays
/// affine: the copy kernel reads the source through it, and the layout copy's kernel is removed. Returns whether
/// any was (the kernels are then reindexed; `ci` may have moved).
fn fold_copies_into(f: &mut Fuse, ci: usize) -> bool {
    let g = f.g;
    let Some(c) = f.sched.kernels[ci].anchor.filter(|&c| matches!(g.node(c).op, Op::Concat { .. })) else {
        return false;
    };
    if !f.sched.kernels[ci].folds.is_empty() || !f.sched.kernels[ci].elementwise.is_empty() {
        return false;
    }
    let mut gone = Vec::new();
    for (slot, v) in g.node(c).inputs.iter().enumerate() {
        let Some(v) = *v else { continue };
        let Some(p) = g.value(v).producer.filter(|&p| matches!(g.node(p).op, Op::StridedCopy { .. })) else {
            continue;
        };
        let Some(&pi) = f.group_of.get(&p) else { continue };
        if f.sched.kernels[pi].nodes() != [p] || !f.only_reader(v, c) || f.is_output(v) {
            continue;
        }
        let mut trial = f.sched.folded.clone();
        trial.insert(p);
        let view = crate::schedule::input_view(g, &trial, c, slot);
        if g.value(view.root).producer.is_some_and(|q| trial.contains(&q)) {
            continue;
        }
        f.sched.folded = trial;
        gone.push(pi);
    }
    if gone.is_empty() {
        return false;
    }
    gone.sort_unstable();
    for pi in gone.into_iter().rev() {
        f.sched.kernels.remove(pi);
    }
    f.reindex();
    true
}
