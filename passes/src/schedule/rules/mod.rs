//! The fusion rules. Each rule is one function over the shared [`Fuse`] context, in a file of its own, registered
//! in [`RULES`] (rules that merge whole groups, run in order after the groups are formed) or called where a group
//! is created ([`operand`]) or grows ([`siblings`]). A rule adds a [`Fold`](super::Fold) to a group or merges
//! groups; it checks its own pattern and the binding limit, and [`super::verify_schedule`] checks that the folds
//! it made may stand together.
//!
//! Adding a rule: see docs/contributing.md, "Adding a fusion rule".

pub(super) mod attention;
pub(super) mod blocks;
pub(super) mod cache_pair;
pub(super) mod cache_rows;
pub(super) mod concat;
pub(super) mod concat_read;
pub(super) mod conv_sum;
pub(super) mod depthwise;
pub(super) mod expand;
pub(super) mod operand;
pub(super) mod siblings;
pub(super) mod store_copy;

use super::reads::{bindings, effective_readers, is_output, scalar_op_data_slot, Readers};
use super::{FoldKind, FuseOptions, KernelGroup, Schedule};
use std::collections::HashMap;
use wgslc_ir::{Graph, NodeId, Op, ValueId};

/// What every rule reads and changes: the graph, the options, the readers of each value, the schedule being
/// built, the node → group index, and the reasons recorded for edges a rule declined to fuse.
pub(super) struct Fuse<'a> {
    pub g: &'a Graph,
    pub opts: &'a FuseOptions,
    pub readers: &'a Readers,
    pub sched: Schedule,
    pub group_of: HashMap<NodeId, usize>,
    pub reasons: HashMap<(NodeId, NodeId), String>,
}

/// A rule that merges groups once they are formed.
pub(super) struct Rule {
    /// Its module's name (docs/design/crates.md lists them in this order).
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the test that checks the docs"))]
    pub name: &'static str,
    /// Whether the options let it run (every rule needs `fuse`).
    pub enabled: fn(&FuseOptions) -> bool,
    pub run: fn(&mut Fuse),
}

/// The group-merging rules, in the order they run: attention first (it needs the score product's group as
/// formed), then the convolution folds (a summed shortcut before the MobileNet folds, which exclude it), then the
/// store copies (any kernel kind may take one), the blocks of a split weight in one kernel (before their Concat
/// could be written in place), the Concats written in place (their producers final), the cache writes paired
/// (their row operands taken when their groups were made), and last the paired writes taken into the one-row
/// attention that reads them.
pub(super) const RULES: &[Rule] = &[
    Rule { name: "attention", enabled: |o| o.attention == super::AttentionMode::Fused, run: attention::fuse },
    Rule { name: "conv_sum", enabled: |_| true, run: conv_sum::fuse },
    Rule { name: "expand", enabled: |o| o.inverted_residual == super::InvertedResidualMode::Fused, run: expand::fuse },
    Rule { name: "depthwise", enabled: |_| true, run: depthwise::fuse },
    Rule { name: "store_copy", enabled: |_| true, run: store_copy::fuse },
    Rule { name: "blocks", enabled: |_| true, run: blocks::fuse },
    Rule { name: "concat", enabled: |_| true, run: concat::fuse },
    Rule { name: "concat_read", enabled: |o| o.attention == super::AttentionMode::Fused, run: concat_read::fuse },
    Rule { name: "cache_pair", enabled: |_| true, run: cache_pair::fuse },
    Rule { name: "cache_rows", enabled: |o| o.attention == super::AttentionMode::Fused, run: cache_rows::fuse },
];

impl Fuse<'_> {
    /// Whether group `k` runs in the same decoder step as node `n` (a two-step decoder graph: the prefill step's
    /// nodes are named under [`crate::PREFILL`]). Each step replays only the dispatches its outputs need, so a
    /// group of the other step between two of this step's never runs between them.
    pub fn same_step(&self, n: NodeId, k: &KernelGroup) -> bool {
        let prefill = |n: NodeId| self.g.node(n).name.starts_with(crate::PREFILL);
        let step = prefill(n);
        k.nodes().into_iter().any(|m| prefill(m) == step)
    }

    pub fn bindings(&self, k: &KernelGroup) -> usize {
        bindings(self.g, &self.sched.folded, k)
    }

    pub fn fits(&self, k: &KernelGroup) -> bool {
        self.bindings(k) <= self.opts.max_storage_buffers
    }

    pub fn is_output(&self, v: ValueId) -> bool {
        is_output(self.g, v, self.readers)
    }

    pub fn effective_readers(&self, v: ValueId) -> Vec<NodeId> {
        effective_readers(self.g, v, self.readers)
    }

    /// Whether `v` is read by `reader` alone (every read, any slot) and is not a graph output.
    pub fn only_reader(&self, v: ValueId, reader: NodeId) -> bool {
        !self.is_output(v) && self.readers.get(&v).is_some_and(|rs| rs.iter().all(|&(n, _)| n == reader))
    }

    /// Removes group `gi` while groups are being formed, keeping the index of the others.
    pub fn remove_group(&mut self, gi: usize) -> KernelGroup {
        let k = self.sched.kernels.remove(gi);
        self.group_of.retain(|_, x| *x != gi);
        for x in self.group_of.values_mut() {
            if *x > gi {
                *x -= 1;
            }
        }
        k
    }

    /// Rebuilds the node → group index after groups were merged or removed.
    pub fn reindex(&mut self) {
        self.group_of.clear();
        for (i, k) in self.sched.kernels.iter().enumerate() {
            for m in k.nodes() {
                self.group_of.insert(m, i);
            }
        }
    }

    /// Runs `merge` on each group in order; where it returns `(i, merged)`, that group becomes `merged` and group
    /// `i` (earlier in the order, now part of it) is removed.
    pub fn merge_into_later(&mut self, mut merge: impl FnMut(&mut Fuse, usize) -> Option<(usize, KernelGroup)>) {
        let mut ci = 0;
        while ci < self.sched.kernels.len() {
            if let Some((i, merged)) = merge(self, ci) {
                debug_assert!(i < ci, "a group merges into a later one");
                self.sched.kernels[ci] = merged;
                self.sched.kernels.remove(i);
                ci -= 1;
                self.reindex();
            }
            ci += 1;
        }
    }
}

/// A pointwise (1x1, unit stride, no padding) ungrouped 2-D Conv.
pub(crate) fn is_pointwise_conv(g: &Graph, n: NodeId) -> bool {
    let Op::Conv { window, group: 1 } = &g.node(n).op else { return false };
    window.kernel.len() == 2
        && window.kernel.iter().all(|&k| k == 1)
        && window.strides.iter().all(|&s| s == 1)
        && window.pads.iter().all(|&p| p == 0)
}

/// A depthwise 2-D Conv (one input channel per group, as many groups as channels).
pub(crate) fn is_depthwise_conv(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    let Op::Conv { window, group } = &node.op else { return false };
    let (Some(x), Some(w)) = (node.inputs[0], node.inputs.get(1).copied().flatten()) else { return false };
    let ws = &g.ty(w).shape;
    window.kernel.len() == 2 && *group > 1 && ws[0] == *group && ws[1] == 1 && g.ty(x).shape[1] == *group
}

/// The group `d` that computes value `x` as a Conv followed only by scalar pointwise nodes, each on the previous
/// one's output, with `x` read only by `(reader, 0)` and not a graph output: `(group index, conv)`.
pub(super) fn lone_conv_chain(f: &Fuse, x: ValueId, reader: NodeId) -> Option<(usize, NodeId)> {
    let g = f.g;
    let q = g.value(x).producer?;
    let di = *f.group_of.get(&q)?;
    let d = &f.sched.kernels[di];
    let conv = d.anchor?;
    // A folded expansion may come along (a whole inverted-residual block); other folds keep their kernel.
    let other_folds = [FoldKind::StoreCopy, FoldKind::ConvSum, FoldKind::Operand].iter().any(|&k| d.has(k));
    if d.last() != q || other_folds || !matches!(g.node(conv).op, Op::Conv { .. }) {
        return None;
    }
    let mut cur = g.node(conv).outputs[0];
    for &e in &d.elementwise {
        let slot = scalar_op_data_slot(g, e)?;
        if g.node(e).inputs[slot] != Some(cur) {
            return None;
        }
        cur = g.node(e).outputs[0];
    }
    let only = f.readers.get(&x).is_some_and(|rs| rs.as_slice() == [(reader, 0)]);
    (cur == x && only && !f.is_output(x)).then_some((di, conv))
}

#[cfg(test)]
mod tests {
    /// docs/design/crates.md names the registered rules, in order ("The rules").
    #[test]
    fn rules_doc_lists_every_registered_rule() {
        let doc = include_str!("../../../../docs/design/crates.md").replace('\n', " ");
        let names: Vec<String> = super::RULES.iter().map(|r| format!("`{}`", r.name)).collect();
        let listed = format!("in `rules::RULES`: {}", names.join(", "));
        assert!(doc.contains(&listed), "docs/design/crates.md should say: {listed}");
    }
}
