//! The schedule's invariants, checked after every schedule in every build.

use super::group::{AnchorKind, Fold, FoldKind, KernelGroup};
use super::reads::group_io;
use super::recipe::anchor_kind;
use super::Schedule;
use crate::lower::storage_root;
use crate::PassError;
use std::collections::{HashMap, HashSet};
use wgslc_ir::{Graph, NodeId, ValueId};

/// Checks the schedule's invariants: every kernel node is in exactly one group; every value a group reads is
/// written by an earlier group (or is an input or weight); each group's folds sit over an anchor that takes them
/// and may stand together ([`check_folds`]); the recipe holds what the folds need.
pub fn verify_schedule(g: &Graph, sched: &Schedule) -> Result<(), PassError> {
    let mut written: HashSet<ValueId> = HashSet::new();
    let mut seen: HashSet<NodeId> = HashSet::new();
    // A Concat written in place is written once all its slots are, each by exactly one kernel.
    let mut slots_left: HashMap<NodeId, Vec<usize>> =
        sched.concats.iter().map(|&c| (c, (0..g.node(c).inputs.len()).collect())).collect();
    let bug = |n: NodeId, reason: String| {
        let node = g.node(n);
        PassError::Node {
            node: node.name.clone(),
            op: node.op.name().into(),
            reason: format!("{reason} (a scheduler bug)"),
        }
    };
    for k in &sched.kernels {
        if let Err(reason) = check_folds(g, k) {
            let node = g.node(k.anchor.unwrap_or_else(|| k.last()));
            return Err(PassError::Node {
                node: node.name.clone(),
                op: node.op.name().into(),
                reason: format!("{reason} (a scheduler bug)"),
            });
        }
        let (reads, writes) = group_io(g, sched, k);
        for r in reads {
            let root = storage_root(g, r);
            if g.value(root).producer.is_some() && !written.contains(&root) {
                let node = g.node(k.last());
                return Err(PassError::Node {
                    node: node.name.clone(),
                    op: node.op.name().into(),
                    reason: format!("scheduled before '{}' is written (a scheduler bug)", g.value(root).name),
                });
            }
        }
        for m in k.nodes() {
            if !seen.insert(m) {
                return Err(PassError::Node {
                    node: g.node(m).name.clone(),
                    op: g.node(m).op.name().into(),
                    reason: "in two kernel groups (a scheduler bug)".into(),
                });
            }
        }
        match k.write_into() {
            Some((c, slot)) => {
                let left = slots_left.get_mut(&c).ok_or_else(|| bug(c, "written in place but not listed".into()))?;
                let at = left.iter().position(|&s| s == slot);
                left.remove(at.ok_or_else(|| bug(c, format!("slot {slot} written twice")))?);
                if left.is_empty() {
                    written.extend(writes);
                }
            }
            None => written.extend(writes),
        }
    }
    if let Some((&c, left)) = slots_left.iter().find(|(_, l)| !l.is_empty()) {
        return Err(bug(c, format!("slots {left:?} of a Concat written in place have no kernel")));
    }
    Ok(())
}

/// Whether a group's folds may stand together over its anchor: each allowed over the anchor's kind
/// ([`Fold::allowed_over`]), each pair allowed together ([`Fold::combines_with`]), one operand fold per slot, an
/// expansion over a pointwise Conv only with the depthwise Conv between them, folds in rank order, and the recipe
/// entries the emitter will read present.
pub fn check_folds(g: &Graph, k: &KernelGroup) -> Result<(), String> {
    let anchor = anchor_kind(g, k);
    for (i, f) in k.folds.iter().enumerate() {
        if !f.allowed_over(anchor) {
            return Err(format!("a {:?} fold over a {anchor:?} anchor", f.kind()));
        }
        for h in &k.folds[i + 1..] {
            if h.rank() < f.rank() {
                return Err("folds out of order".into());
            }
            if !Fold::combines_with(f.kind(), h.kind()) {
                return Err(format!("{:?} and {:?} folds in one kernel", f.kind(), h.kind()));
            }
            if let (Fold::Operand { slot: a, .. }, Fold::Operand { slot: b, .. }) = (f, h) {
                if a == b {
                    return Err(format!("two operand folds on slot {a}"));
                }
            }
            if let (Fold::Operand { slot: 0, .. }, Fold::RowOperand(_)) = (f, h) {
                return Err("an operand fold on slot 0 next to A computed in the kernel".into());
            }
        }
    }
    if anchor == AnchorKind::PointwiseConv && k.has(FoldKind::Expand) && !k.has(FoldKind::Depthwise) {
        return Err("an expansion folded into a pointwise Conv without the depthwise Conv between them".into());
    }
    if k.has(FoldKind::ReadConcat) && !k.has(FoldKind::Attention) {
        return Err("a Concat read in place outside an attention kernel".into());
    }
    let stores = k.has(FoldKind::StoreCopy) || k.has(FoldKind::WriteInto);
    let recipe = &k.recipe;
    if k.has(FoldKind::Expand) != recipe.expand.is_some()
        || stores != recipe.store.is_some()
        || k.has(FoldKind::Attention) != recipe.attention.is_some()
        || (k.has(FoldKind::RowOperand) && anchor == AnchorKind::MatMul && !recipe.one_row)
    {
        return Err("the recipe does not match the folds".into());
    }
    Ok(())
}
