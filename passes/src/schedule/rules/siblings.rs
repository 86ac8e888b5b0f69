//! Elementwise groups that only feed the node that just joined a kernel, absorbed into that kernel.

use super::Fuse;
use crate::schedule::reads::member_bindings;
use std::collections::HashSet;
use wgslc_ir::NodeId;

/// After the elementwise node `n` joined the last group (A), merges into A each purely elementwise group B whose
/// result only `n` reads, computed over `n`'s shape from values written before A (none of A's own): n's other
/// operand then never leaves the kernel (rotary's `x·cos + rotate_half(x)·sin` is one kernel, not two).
pub(in crate::schedule) fn absorb(f: &mut Fuse, n: NodeId) {
    let g = f.g;
    let out_shape = &g.ty(g.node(n).outputs[0]).shape;
    for v in g.node(n).inputs.iter().flatten().copied() {
        let ai = f.sched.kernels.len() - 1;
        let Some(q) = g.value(v).producer else { continue };
        let Some(&bi) = f.group_of.get(&q) else { continue };
        let (a, b) = (&f.sched.kernels[ai], &f.sched.kernels[bi]);
        let a_nodes: HashSet<NodeId> = a.nodes().into_iter().collect();
        let plain = b.anchor.is_none() && b.folds.is_empty();
        let ok = bi != ai
            && plain
            && b.last() == q
            && &g.ty(v).shape == out_shape
            && f.effective_readers(v) == [n]
            && !f.is_output(v)
            && b.elementwise.iter().all(|&m| {
                g.ty(g.node(m).outputs[0]).numel() == g.ty(v).numel()
                    && g.node(m)
                        .inputs
                        .iter()
                        .flatten()
                        .all(|w| g.value(*w).producer.is_none_or(|p| !a_nodes.contains(&p)))
            });
        if !ok {
            continue;
        }
        let mut members = a.nodes();
        members.extend(b.nodes());
        if member_bindings(g, &f.sched.folded, &members, &a.inlined()) > f.opts.max_storage_buffers {
            continue;
        }
        let b = f.sched.kernels.remove(bi);
        let a = f.sched.kernels.last_mut().expect("A");
        let at = a.elementwise.len() - 1;
        a.elementwise.splice(at..at, b.elementwise);
        f.reindex();
    }
}
