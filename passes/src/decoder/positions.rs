//! How a step's positions and cache reads are seen by the decoder pass: positions counted from the cache's length
//! taken from the step's cache row, and copies of a cache read as the cache itself.

use super::input;
use crate::PassError;
use std::collections::HashSet;
use wgslc_ir::{BinaryOp, DType, Graph, Op, ValueId};

/// With every key at its position, the tokens' positions counted from the cache's length become positions
/// counted from the step's cache row, which is the number of tokens before the step (the import's cache length is
/// a shape, fixed at compile time). `lengths`: the Shape values holding the cache's length, each with the element
/// that is the length and its element count. The positions are recognized as an exporter writes `arange(past, past + n)`:
/// `Add(Range(0, n, 1), past)` or `Range(past, limit, 1)`, `past` reached from the length through Squeeze,
/// Gather of that element, Unsqueeze, Reshape, Identity or a Cast to int64. Other uses of the length
/// (the number of keys) stay the compiled cache's. The layout proof checks the result like every other mask.
pub(super) fn positions_from_row(
    g: &mut Graph,
    lengths: &[(ValueId, usize, usize)],
    row: ValueId,
) -> Result<(), PassError> {
    let is_i64 = |g: &Graph, v: Option<ValueId>, want: Option<i64>| {
        v.and_then(|v| g.const_data(v))
            .is_some_and(|t| t.dtype == DType::I64 && t.numel() == 1 && want.is_none_or(|w| t.to_i64()[0] == w))
    };
    // The values that are the length alone: (value, the element of it that is the length, or None for one).
    let mut todo: Vec<(ValueId, Option<usize>)> =
        lengths.iter().map(|&(v, e, count)| (v, (count > 1).then_some(e))).collect();
    let mut past = Vec::new();
    let mut seen = HashSet::new();
    while let Some((v, element)) = todo.pop() {
        if !seen.insert(v) {
            continue;
        }
        let single = element.is_none();
        if single {
            past.push(v);
        }
        for n in g.consumers(v) {
            let node = g.node(n);
            if node.inputs.first() != Some(&Some(v)) || node.outputs.len() != 1 {
                continue;
            }
            let out = node.outputs[0];
            let next = match &node.op {
                Op::Squeeze | Op::Unsqueeze | Op::Reshape { .. } | Op::Identity if single => Some(None),
                Op::Cast { to: DType::I64, .. } if single => Some(None),
                Op::Gather { axis: 0 } => {
                    let want = element.map(|e| e as i64);
                    (want.is_some() && is_i64(g, node.inputs.get(1).copied().flatten(), want)).then_some(None)
                }
                _ => None,
            };
            if let Some(e) = next {
                todo.push((out, e));
            }
        }
    }
    for &s in &past {
        for n in g.consumers(s) {
            let node = g.node(n).clone();
            match node.op {
                // Add(Range(0, n, 1), past): the Add takes the row instead.
                Op::Binary(BinaryOp::Add) if node.inputs.len() == 2 => {
                    let other = node.inputs.iter().flatten().copied().find(|&i| i != s);
                    let from_zero = other.and_then(|o| g.value(o).producer).is_some_and(|r| {
                        let rn = g.node(r);
                        matches!(rn.op, Op::Range)
                            && is_i64(g, rn.inputs.first().copied().flatten(), Some(0))
                            && is_i64(g, rn.inputs.get(2).copied().flatten(), Some(1))
                    });
                    if from_zero {
                        let ins = node.inputs.iter().map(|&i| if i == Some(s) { Some(row) } else { i }).collect();
                        g.set_inputs(n, ins);
                    }
                }
                // Range(past, limit, 1): its values moved by row - past.
                Op::Range
                    if node.inputs.first() == Some(&Some(s))
                        && is_i64(g, node.inputs.get(2).copied().flatten(), Some(1)) =>
                {
                    let out = node.outputs[0];
                    let readers = g.consumers(out);
                    let shift = g.add_value(format!("{}/from_row/shift", node.name), None);
                    let moved = g.add_value(format!("{}/from_row", node.name), None);
                    let sub = Op::Binary(BinaryOp::Sub);
                    g.add_node(format!("{}/from_row/shift", node.name), sub, vec![Some(row), Some(s)], vec![shift])?;
                    let add = Op::Binary(BinaryOp::Add);
                    g.add_node(format!("{}/from_row", node.name), add, vec![Some(out), Some(shift)], vec![moved])?;
                    for r in readers {
                        let ins =
                            g.node(r).inputs.iter().map(|&i| if i == Some(out) { Some(moved) } else { i }).collect();
                        g.set_inputs(r, ins);
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Reads of a copy of the cache input `past` (an Identity, or a Concat of it alone, which TorchScript writes for
/// a cache that transformers' `DynamicCache.update` concatenates onto an empty one) read `past` itself, so that
/// the cache's Concat(past, new) is seen as the write it is.
pub(super) fn bypass_copies(g: &mut Graph, past: &str) {
    let Some(v) = input(g, past) else { return };
    for n in g.consumers(v) {
        let node = g.node(n);
        let copy = matches!(node.op, Op::Identity) || matches!(node.op, Op::Concat { .. }) && node.inputs.len() == 1;
        if !copy || node.outputs.len() != 1 || g.outputs.contains(&node.outputs[0]) {
            continue;
        }
        let out = node.outputs[0];
        for r in g.consumers(out) {
            let ins = g.node(r).inputs.iter().map(|&i| if i == Some(out) { Some(v) } else { i }).collect();
            g.set_inputs(r, ins);
        }
        g.remove_node(n);
    }
}
