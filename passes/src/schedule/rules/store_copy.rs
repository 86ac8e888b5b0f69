//! A Transpose that is a kernel's result's only reader, written by that kernel at the transposed places.

use super::Fuse;
use crate::schedule::recipe::store_permutation;
use crate::schedule::{Fold, FoldKind};
use wgslc_ir::Op;

/// Gives each kernel whose result's only reader is an unfolded permuting StridedCopy in a kernel of its own that
/// copy as its `store_copy`, removing the copy's kernel: one write at the permuted place instead of a write, a
/// read and a write. Kernels whose emitters place stores through `store_permutation` take it: elementwise groups,
/// matrix products (and convolutions through them) and attention.
pub(in crate::schedule) fn fuse(f: &mut Fuse) {
    let g = f.g;
    let mut ci = 0;
    while ci < f.sched.kernels.len() {
        let merged = (|| {
            let (sched, readers) = (&f.sched, f.readers);
            let k = &sched.kernels[ci];
            let stores = match k.anchor {
                _ if k.has(FoldKind::StoreCopy) => false,
                _ if k.has(FoldKind::Attention) => true,
                None => true,
                Some(a) => matches!(g.node(a).op, Op::MatMul | Op::Gemm { .. } | Op::Conv { group: 1, .. }),
            };
            let v = g.node(k.result()).outputs[0];
            let rs = readers.get(&v)?;
            let &[(t, 0)] = rs.as_slice() else { return None };
            if !stores || f.is_output(v) || sched.folded.contains(&t) {
                return None;
            }
            store_permutation(g, t)?;
            let ti = *f.group_of.get(&t)?;
            (ti > ci && sched.kernels[ti].nodes() == [t]).then_some(ti)
        })();
        if let Some(ti) = merged {
            let t = f.sched.kernels.remove(ti).nodes()[0];
            f.sched.kernels[ci].fold(Fold::StoreCopy(t));
            f.reindex();
        }
        ci += 1;
    }
}
