//! Functions of a bounded integer input, tabulated at compile time.

use crate::eval::eval;
use crate::PassError;
use std::collections::{HashMap, HashSet};
use wgslc_ir::{contiguous_strides, Builder, DType, Graph, NodeId, Op, Tensor, TensorType, ValueId};

/// Replaces what the graph computes from `input` alone with rows of a table: `input` holds one integer known to
/// lie in `0..bound` (a decode step's position, below its KV cache's capacity). The float32 values that nodes
/// compute from `input` and constants only, and that other nodes read, are evaluated on the host for each of the
/// `bound` values and laid side by side in one table `[bound, total]`; the graph reads them as views of one
/// Gather of the table's row `input`. A decode step's rotary tables (the position cast, times the inverse
/// frequencies, concatenated, then cos and sin: six dispatches a token) become one lookup, and they are computed
/// in double precision (the GPU's `cos` of a large argument is less exact). Taken when every node on the way is
/// host-evaluable and the table holds at most `max_bytes`; returns whether it was.
///
/// Requires: a resolved graph. Establishes: no node reads a float32 value computed from `input` and constants
/// alone but through the table.
pub fn tabulate_bounded_input(g: &mut Graph, input: ValueId, bound: usize, max_bytes: u64) -> Result<bool, PassError> {
    let it = g.ty(input).clone();
    if it.numel() != 1 || !it.dtype.is_int() || bound == 0 {
        return Ok(false);
    }
    // The nodes computing from `input` and constants only, in order.
    let order = g.topo_order()?;
    let mut known: HashSet<ValueId> = HashSet::from([input]);
    let mut nodes: Vec<NodeId> = Vec::new();
    for &n in &order {
        let node = g.node(n);
        let ins: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
        let from_input = ins.iter().any(|v| known.contains(v));
        if from_input && ins.iter().all(|v| known.contains(v) || g.const_data(*v).is_some()) {
            nodes.push(n);
            known.extend(node.outputs.iter().copied());
        }
    }
    let inside: HashSet<NodeId> = nodes.iter().copied().collect();
    // What other nodes (or the caller) read: float32 values with something computed on the way.
    let computes = nodes.iter().any(|&n| !matches!(g.node(n).op, Op::Alias));
    let mut read: Vec<ValueId> = Vec::new();
    for &n in &nodes {
        for &v in &g.node(n).outputs {
            let outside = g.consumers(v).iter().any(|c| !inside.contains(c)) || g.outputs.contains(&v);
            if outside && g.ty(v).dtype == DType::F32 {
                read.push(v);
            }
        }
    }
    let total: usize = read.iter().map(|&v| g.ty(v).numel()).sum();
    if !computes || total == 0 || (bound * total * 4) as u64 > max_bytes {
        return Ok(false);
    }
    // Each value of the input, through the nodes on the host.
    let mut table: Vec<f32> = Vec::with_capacity(bound * total);
    for p in 0..bound {
        let mut vals: HashMap<ValueId, Tensor> = HashMap::new();
        vals.insert(input, Tensor::from_f64(it.dtype, it.shape.clone(), vec![p as f64]));
        for &n in &nodes {
            let node = g.node(n);
            let ins: Vec<&Tensor> = node
                .inputs
                .iter()
                .flatten()
                .map(|v| vals.get(v).or_else(|| g.const_data(*v)).expect("known or constant"))
                .collect();
            let tys: Vec<TensorType> = node.outputs.iter().map(|&o| g.ty(o).clone()).collect();
            let Some(outs) = eval(&node.op, &ins, &tys) else { return Ok(false) };
            vals.extend(node.outputs.iter().copied().zip(outs));
        }
        for v in &read {
            table.extend(vals[v].to_f64().iter().map(|&x| x as f32));
        }
    }
    let name = g.value(read[0]).name.clone();
    let mut b = Builder::new(g, &name);
    let t = b.const_named("table", Tensor::f32(vec![bound, total], table));
    let row = b.op_typed("row", Op::Alias, &[Some(input)], TensorType::new(it.dtype, vec![1]))?;
    let ft = TensorType::new(DType::F32, vec![1, total]);
    let looked = b.op_typed("lookup", Op::Gather { axis: 0 }, &[Some(t), Some(row)], ft)?;
    let mut offset = 0i64;
    for &v in &read {
        let vt = g.ty(v).clone();
        let strides = contiguous_strides(&vt.shape).into_iter().map(|s| s as i64).collect();
        let numel = vt.numel() as i64;
        let view = Builder::new(g, &name).op_typed(
            &format!("part{offset}"),
            Op::StridedCopy { offset, strides },
            &[Some(looked)],
            vt,
        )?;
        g.replace_uses(v, view);
        offset += numel;
    }
    crate::eliminate_dead_code(g);
    Ok(true)
}
