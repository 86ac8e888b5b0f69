//! Strided views: how a kernel reads a value through the layout ops that produced it, without materializing them.
//!
//! A read is a flat index into a buffer written as `offset + Σ c_d · strides[d]` over the reading kernel's
//! coordinates `c`. Alias producers (Reshape and friends) keep the flat layout, so a read passes through them
//! unchanged. A folded StridedCopy producer is composed: the flat index into its output is split into the output's
//! coordinates, which is affine exactly when no term carries into a neighbouring coordinate; then its own
//! offset and strides map those coordinates into its input's buffer.

use std::collections::HashSet;
use wgslc_ir::{contiguous_strides, Graph, NodeId, Op, ValueId};

/// A read of `root`'s buffer: `offset + Σ c_d · strides[d]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct View {
    pub root: ValueId,
    pub offset: i64,
    pub strides: Vec<i64>,
}

/// Composes a read of `v` (flat `offset + Σ c_d · strides[d]` into `v`'s elements, coordinates of extents
/// `extents`) back through Alias producers and through the StridedCopy producers in `folded`.
pub fn compose(
    g: &Graph,
    v: ValueId,
    offset: i64,
    strides: &[i64],
    extents: &[usize],
    folded: &HashSet<NodeId>,
) -> View {
    let mut view = View { root: v, offset, strides: strides.to_vec() };
    loop {
        let Some(p) = g.value(view.root).producer else { return view };
        let node = g.node(p);
        match &node.op {
            Op::Alias => view.root = node.inputs[0].expect("alias input"),
            Op::StridedCopy { offset, strides } if folded.contains(&p) => {
                match through_copy(&g.ty(view.root).shape, *offset, strides, &view, extents) {
                    Some((o, s)) => {
                        view = View { root: node.inputs[0].expect("copy input"), offset: o, strides: s };
                    }
                    None => return view,
                }
            }
            _ => return view,
        }
    }
}

/// Whether a read of `v` composes through the StridedCopy `p` that produces `v` (directly or through aliases):
/// composition stops at `p`'s output exactly when it cannot pass through it.
pub fn composes_through(g: &Graph, p: NodeId, v: ValueId, strides: &[i64], extents: &[usize]) -> bool {
    let folded: HashSet<NodeId> = [p].into();
    compose(g, v, 0, strides, extents, &folded).root != g.node(p).outputs[0]
}

/// Maps a flat read of a StridedCopy's output (shape `out_shape`) into its input, or `None` if a term would carry
/// between output coordinates.
fn through_copy(
    out_shape: &[usize],
    copy_offset: i64,
    copy_strides: &[i64],
    read: &View,
    extents: &[usize],
) -> Option<(i64, Vec<i64>)> {
    // An empty copy has nothing to read (and zero strides to divide by): it is never composed.
    if out_shape.contains(&0) {
        return None;
    }
    let cs: Vec<i64> = contiguous_strides(out_shape).into_iter().map(|s| s as i64).collect();
    let r = out_shape.len();
    // The offset splits into output coordinates.
    let mut base = vec![0i64; r];
    let mut rem = read.offset;
    if rem < 0 {
        return None;
    }
    for e in 0..r {
        base[e] = rem / cs[e];
        rem %= cs[e];
    }
    // Each term must land on a single output coordinate: stride = k · cs[e] with the term's whole range inside
    // that coordinate's extent (together with the offset and other terms on the same coordinate).
    let mut reach = base.clone();
    let mut new_strides = vec![0i64; read.strides.len()];
    for (d, &s) in read.strides.iter().enumerate() {
        let n = extents[d] as i64;
        if s == 0 || n <= 1 {
            continue;
        }
        if s < 0 {
            return None;
        }
        let e = (0..r).find(|&e| s % cs[e] == 0 && (s / cs[e]) * (n - 1) < out_shape[e] as i64)?;
        let k = s / cs[e];
        reach[e] += k * (n - 1);
        new_strides[d] = k * copy_strides[e];
    }
    if (0..r).any(|e| reach[e] >= out_shape[e].max(1) as i64) {
        return None;
    }
    let offset = copy_offset + (0..r).map(|e| base[e] * copy_strides[e]).sum::<i64>();
    Some((offset, new_strides))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wgslc_ir::{DType, TensorType};

    #[test]
    fn transpose_then_reshape_split_composes() {
        // x: [2, 6] → StridedCopy transposing to [6, 2] → a contiguous read of it composes into x's strides.
        let mut g = Graph::new();
        let x = g.add_value("x", Some(TensorType::new(DType::F32, vec![2, 6])));
        g.inputs.push(x);
        let t = g.add_value("t", Some(TensorType::new(DType::F32, vec![6, 2])));
        let p = g.add_node("t", Op::StridedCopy { offset: 0, strides: vec![1, 6] }, vec![Some(x)], vec![t]).unwrap();
        let folded: HashSet<NodeId> = [p].into();
        let v = compose(&g, t, 0, &[2, 1], &[6, 2], &folded);
        assert_eq!(v, View { root: x, offset: 0, strides: vec![1, 6] });
        // A read that merges the two dims of t (flat over 12) cannot be expressed in x's strides.
        let w = compose(&g, t, 0, &[1], &[12], &folded);
        assert_eq!(w.root, t);
    }

    #[test]
    fn an_empty_copy_is_not_composed() {
        // A fuzz-found division by zero: a copy with an empty dimension has zero contiguous strides.
        let mut g = Graph::new();
        let x = g.add_value("x", Some(TensorType::new(DType::F32, vec![2, 0])));
        g.inputs.push(x);
        let t = g.add_value("t", Some(TensorType::new(DType::F32, vec![0, 2])));
        let p = g.add_node("t", Op::StridedCopy { offset: 0, strides: vec![1, 0] }, vec![Some(x)], vec![t]).unwrap();
        let folded: HashSet<NodeId> = [p].into();
        assert_eq!(compose(&g, t, 0, &[0, 1], &[0, 2], &folded).root, t);
    }
}
