//! A Concat written in place: each producing kernel stores its result straight into its block of the Concat's
//! output, and the Concat has no kernel. SqueezeNet 1.1's fire modules (two expand convolutions joined along
//! channels) lose their two copy kernels each.

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
        if let Some((c, writers)) = writers {
            // Each placement must exist before anything changes (the recipe recomputes it).
            if writers.iter().all(|&(_, slot)| concat_placement(g, c, slot).is_some()) {
                for &(pi, slot) in &writers {
                    f.sched.kernels[pi].fold(Fold::WriteInto { concat: c, slot });
                }
                f.sched.kernels.remove(ci);
                f.sched.concats.insert(c);
                f.reindex();
                continue;
            }
        }
        ci += 1;
    }
}
