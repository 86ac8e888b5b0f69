//! Long ArgMax / ArgMin rows (an LLM's next token over its vocabulary) in two kernels instead of one: the row's
//! chunks reduced side by side by many workgroups (`ArgChunks`), then the best of the chunks (`ArgMerge`). One
//! workgroup reading a whole 151,936-element row is bound by what one SM can load (about 20 µs on an H100).

use crate::PassError;
use wgslc_ir::{Builder, DType, Graph, NodeId, Op, TensorType};

/// Rows at least this long are split.
pub const SPLIT_FROM: usize = 16384;
/// Elements a chunk holds, at least (more when the row would need more than [`MAX_CHUNKS`]).
const CHUNK: usize = 1024;
/// Chunks a row, at most: `ArgMerge` takes one per thread of a 256-thread workgroup.
pub const MAX_CHUNKS: usize = 256;
/// Rows, at most: the split pays where few rows leave the GPU idle.
const MAX_ROWS: usize = 16;

/// Rewrites every ArgMax / ArgMin over the last axis of a float tensor with at most [`MAX_ROWS`] rows of at least
/// [`SPLIT_FROM`] elements (a multiple of 4, below 2^24 so that an index is exact as f32) into `ArgChunks` →
/// `ArgMerge`, which give the same index: the chunks are contiguous and in order, each keeps its first best (its
/// last with `select_last`), and the merge keeps the first best chunk (the last).
///
/// Requires: an inferred graph. Establishes: the rewritten nodes' outputs are the originals' values.
pub fn split_arg_reduces(g: &mut Graph) -> Result<(), PassError> {
    let nodes: Vec<NodeId> = g.node_ids().filter(|&n| matches!(g.node(n).op, Op::ArgReduce { .. })).collect();
    for n in nodes {
        let node = g.node(n).clone();
        let Op::ArgReduce { max, axis, keepdims, select_last } = node.op else { continue };
        let Some(x) = node.inputs[0] else { continue };
        let xt = g.ty(x).clone();
        let Some(&len) = xt.shape.last() else { continue };
        let rows = xt.numel() / len.max(1);
        let splits = axis as usize + 1 == xt.rank()
            && xt.dtype.is_float()
            && len >= SPLIT_FROM
            && len % 4 == 0
            && len < 1 << 24
            && rows <= MAX_ROWS;
        if !splits {
            continue;
        }
        let chunk = CHUNK.max(len.div_ceil(MAX_CHUNKS).next_multiple_of(4));
        let mut pairs = xt.shape[..xt.rank() - 1].to_vec();
        pairs.extend([len.div_ceil(chunk), 2]);
        g.remove_node(n);
        let mut b = Builder::new(g, &node.name);
        let chunks = Op::ArgChunks { max, select_last, chunk };
        let p = b.op_typed("chunks", chunks, &[Some(x)], TensorType::new(DType::F32, pairs))?;
        b.op_into("merge", Op::ArgMerge { max, select_last, keepdims }, &[Some(p)], node.outputs.clone())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ArgMax over the last axis of `shape` (dtype `dt`), its graph and node.
    fn argmax(shape: &[usize], dt: DType) -> Graph {
        let mut g = Graph::new();
        let x = g.add_value("x", Some(TensorType::new(dt, shape.to_vec())));
        g.inputs.push(x);
        let rows = shape[..shape.len() - 1].to_vec();
        let y = g.add_value("y", Some(TensorType::new(DType::I64, rows)));
        let op = Op::ArgReduce { max: true, axis: shape.len() as i64 - 1, keepdims: false, select_last: false };
        g.add_node("am", op, vec![Some(x)], vec![y]).unwrap();
        g.outputs.push(y);
        g
    }

    fn ops(g: &Graph) -> Vec<Op> {
        g.topo_order().unwrap().into_iter().map(|n| g.node(n).op.clone()).collect()
    }

    #[test]
    fn long_float_rows_split_and_others_stay() {
        let mut g = argmax(&[2, 20000], DType::F32);
        split_arg_reduces(&mut g).unwrap();
        let split = ops(&g);
        assert_eq!(split.len(), 2);
        assert_eq!(split[0], Op::ArgChunks { max: true, select_last: false, chunk: 1024 });
        assert_eq!(split[1], Op::ArgMerge { max: true, select_last: false, keepdims: false });
        let n = g.topo_order().unwrap()[0];
        assert_eq!(g.ty(g.node(n).outputs[0]).shape, vec![2, 20, 2]);
        // A vocabulary past 256 chunks of 1,024 takes longer chunks.
        let mut g = argmax(&[1, 400_000], DType::F32);
        split_arg_reduces(&mut g).unwrap();
        assert_eq!(ops(&g)[0], Op::ArgChunks { max: true, select_last: false, chunk: 1564 });
        // Short rows, integer rows, rows not a multiple of 4, and many rows keep one kernel.
        for (shape, dt) in [(vec![2, 4096], DType::F32), (vec![1, 20000], DType::I64), (vec![1, 20001], DType::F32)] {
            let mut g = argmax(&shape, dt);
            split_arg_reduces(&mut g).unwrap();
            assert!(matches!(ops(&g)[..], [Op::ArgReduce { .. }]), "{shape:?} {dt:?}");
        }
        let mut g = argmax(&[64, 20000], DType::F32);
        split_arg_reduces(&mut g).unwrap();
        assert!(matches!(ops(&g)[..], [Op::ArgReduce { .. }]));
    }
}
