//! What a graph computes from some of its inputs alone, evaluated on the host: a decoder's masks, attention biases
//! and positions, from the loop's inputs (`attention_mask`, `position_ids`, `cache_position`), for the proof that a
//! compiled cache layout feeds every attention the keys the model's own concatenation would (the driver's
//! `layout` module). Nothing here changes the graph.

use crate::eval::eval;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use wgslc_ir::{Graph, NodeId, Op, ReduceOp, Tensor, ValueId};

/// The input of one Softmax with every product that computes its scores from data taken as zero: what the model
/// adds to (or selects over) its attention scores, per query and key.
#[derive(Clone, Debug)]
pub struct SoftmaxBias {
    /// The Softmax node.
    pub softmax: String,
    /// The node of its score chain that reads a value computed from the given inputs (the mask's Add or Where),
    /// where there is one.
    pub mask_node: Option<String>,
    /// The Softmax's axis, counted from the front.
    pub axis: usize,
    pub bias: Arc<Tensor>,
}

/// What [`probe`] finds.
#[derive(Clone, Debug, Default)]
pub struct Probed {
    /// Every Softmax that `within` accepts, in graph order.
    pub softmaxes: Vec<SoftmaxBias>,
    /// Values computed from the given inputs, and float constants, that a node computing from other data reads
    /// outside the Softmax score chains (positions, rotary tables, masks used elsewhere), by value name.
    pub frontier: Vec<(String, Arc<Tensor>)>,
}

/// Why a graph could not be probed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("node '{node}' ({op}) between the Softmax '{softmax}' and its score product: {reason}")]
    Chain { softmax: String, node: String, op: String, reason: String },
    #[error(transparent)]
    Graph(#[from] wgslc_ir::GraphError),
}

/// Evaluates what `g` computes from the `given` inputs and its constants, then the input of every Softmax whose
/// node name `within` accepts, with the products that read other data (the score products Q·Kᵀ) replaced by
/// zeros. The graph must have been through shape inference.
pub fn probe(g: &Graph, given: &[(ValueId, Tensor)], within: impl Fn(&str) -> bool) -> Result<Probed, ProbeError> {
    let mut known: HashMap<ValueId, Arc<Tensor>> = HashMap::new();
    for v in g.value_ids() {
        if let Some(d) = &g.value(v).data {
            known.insert(v, d.clone());
        }
    }
    // Values computed from at least one given input (not constants alone).
    let mut derived: HashSet<ValueId> = HashSet::new();
    for (v, t) in given {
        known.insert(*v, Arc::new(t.clone()));
        derived.insert(*v);
    }
    // Constants computed here from constants alone.
    let mut computed: HashSet<ValueId> = HashSet::new();
    let order = g.topo_order()?;
    for &n in &order {
        let node = g.node(n);
        let ins: Option<Vec<&Tensor>> = node.inputs.iter().flatten().map(|v| known.get(v).map(|t| &**t)).collect();
        let Some(ins) = ins else { continue };
        let types: Vec<_> = node.outputs.iter().map(|&o| g.ty(o).clone()).collect();
        if !node.inputs.iter().flatten().any(|v| derived.contains(v)) {
            // Constants alone: shape inference folded what `eval` computes, but not the ops it leaves to kernels
            // (a Trilu over a constant causal mask): those are computed here, and what reads them, as constants.
            let after_extra = node.inputs.iter().flatten().any(|v| computed.contains(v));
            let outs = eval_extra(&node.op, &ins, &types)
                .or_else(|| after_extra.then(|| eval(&node.op, &ins, &types)).flatten());
            for (&o, t) in node.outputs.iter().zip(outs.into_iter().flatten()) {
                known.insert(o, Arc::new(t));
                computed.insert(o);
            }
            continue;
        }
        let Some(outs) = eval(&node.op, &ins, &types).or_else(|| eval_extra(&node.op, &ins, &types)) else { continue };
        for (&o, t) in node.outputs.iter().zip(outs) {
            known.insert(o, Arc::new(t));
            derived.insert(o);
        }
    }

    let mut probed = Probed::default();
    let mut chains: HashSet<NodeId> = HashSet::new();
    for &n in &order {
        let node = g.node(n);
        let Op::Softmax { axis, .. } = node.op else { continue };
        if !within(&node.name) {
            continue;
        }
        let Some(input) = node.inputs.first().copied().flatten() else { continue };
        let mut c = Chain { g, known: &known, derived: &derived, memo: HashMap::new(), mask_node: None, softmax: n };
        let bias = c.value(input)?;
        chains.extend(c.memo.keys().filter_map(|&v| g.value(v).producer));
        let rank = g.ty(input).shape.len() as i64;
        probed.softmaxes.push(SoftmaxBias {
            softmax: node.name.clone(),
            mask_node: c.mask_node.map(|m| g.node(m).name.clone()),
            axis: (if axis < 0 { axis + rank } else { axis }) as usize,
            bias,
        });
    }
    let mut seen = HashSet::new();
    for &n in &order {
        let node = g.node(n);
        if chains.contains(&n) || !within(&node.name) || node.outputs.iter().all(|o| known.contains_key(o)) {
            continue;
        }
        for v in node.inputs.iter().flatten() {
            // Float constants too: a model may compute its positions, and so its rotary tables, from the cache's
            // length (a Shape of the past), which the compiled steps fix; those fold into constants that differ.
            let float_constant = known.contains_key(v) && g.ty(*v).dtype.is_float();
            if (derived.contains(v) || float_constant) && seen.insert(*v) {
                probed.frontier.push((g.value(*v).name.clone(), known[v].clone()));
            }
        }
    }
    Ok(probed)
}

/// Ops the constant folder leaves to kernels that a mask may still be built with.
fn eval_extra(op: &Op, ins: &[&Tensor], types: &[wgslc_ir::TensorType]) -> Option<Vec<Tensor>> {
    match op {
        Op::Trilu { upper, k } => {
            let (x, k) = (ins[0], k.unwrap_or(0));
            let r = x.shape.len();
            if r < 2 {
                return None;
            }
            let (rows, cols) = (x.shape[r - 2], x.shape[r - 1]);
            let keep: Vec<usize> = (0..x.numel())
                .filter(|&i| {
                    let (row, col) = (((i / cols) % rows) as i64, (i % cols) as i64);
                    if *upper {
                        col - row >= k
                    } else {
                        col - row <= k
                    }
                })
                .collect();
            let vals = x.to_f64();
            let mut out = vec![0.0; vals.len()];
            for i in keep {
                out[i] = vals[i];
            }
            Some(vec![Tensor::from_f64(types[0].dtype, types[0].shape.clone(), out)])
        }
        // Sums, maxima and minima over resolved axes (a mask's count of real tokens, the lengths it implies).
        Op::Reduce { op: op @ (ReduceOp::Sum | ReduceOp::Max | ReduceOp::Min), axes: Some(axes), .. } => {
            let x = ins[0];
            let vals = x.to_f64();
            let out = &types[0];
            let reduced = |d: usize| axes.contains(&(d as i64));
            // The output index of each input element: its coordinates with the reduced axes dropped.
            let strides = wgslc_ir::contiguous_strides(&x.shape);
            let kept: Vec<usize> = (0..x.shape.len()).filter(|&d| !reduced(d)).collect();
            let kept_shape: Vec<usize> = kept.iter().map(|&d| x.shape[d]).collect();
            let kept_strides = wgslc_ir::contiguous_strides(&kept_shape);
            let init = match op {
                ReduceOp::Sum => 0.0,
                ReduceOp::Max => f64::NEG_INFINITY,
                _ => f64::INFINITY,
            };
            let mut acc = vec![init; out.numel()];
            for (i, &v) in vals.iter().enumerate() {
                let o: usize = kept.iter().zip(&kept_strides).map(|(&d, &st)| (i / strides[d]) % x.shape[d] * st).sum();
                acc[o] = match op {
                    ReduceOp::Sum => acc[o] + v,
                    ReduceOp::Max => acc[o].max(v),
                    _ => acc[o].min(v),
                };
            }
            Some(vec![Tensor::from_f64(out.dtype, out.shape.clone(), acc)])
        }
        _ => None,
    }
}

/// The backward walk from a Softmax's input to its score products, through elementwise and layout ops.
struct Chain<'a> {
    g: &'a Graph,
    known: &'a HashMap<ValueId, Arc<Tensor>>,
    derived: &'a HashSet<ValueId>,
    memo: HashMap<ValueId, Arc<Tensor>>,
    mask_node: Option<NodeId>,
    softmax: NodeId,
}

impl Chain<'_> {
    fn value(&mut self, v: ValueId) -> Result<Arc<Tensor>, ProbeError> {
        if let Some(t) = self.known.get(&v) {
            return Ok(t.clone());
        }
        if let Some(t) = self.memo.get(&v) {
            return Ok(t.clone());
        }
        let g = self.g;
        let softmax = g.node(self.softmax).name.clone();
        let fail = move |node: String, op: String, reason: &str| ProbeError::Chain {
            softmax: softmax.clone(),
            node,
            op,
            reason: reason.into(),
        };
        let Some(p) = g.value(v).producer else {
            return Err(fail(g.value(v).name.clone(), "input".into(), "the scores read data other than a product"));
        };
        let node = g.node(p);
        let types: Vec<_> = node.outputs.iter().map(|&o| g.ty(o).clone()).collect();
        let t = match &node.op {
            // A product of data: a score product, taken as zero.
            Op::MatMul | Op::Gemm { .. } => {
                let ty = &types[0];
                Tensor::from_f64(ty.dtype, ty.shape.clone(), vec![0.0; ty.numel()])
            }
            Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast { .. } | Op::Alias | Op::StridedCopy { .. } => {
                let mut ins = Vec::new();
                for i in node.inputs.iter().flatten() {
                    if self.derived.contains(i) && self.mask_node.is_none() {
                        self.mask_node = Some(p);
                    }
                    ins.push(self.value(*i)?);
                }
                let refs: Vec<&Tensor> = ins.iter().map(|t| &**t).collect();
                let outs = eval(&node.op, &refs, &types)
                    .ok_or_else(|| fail(node.name.clone(), node.op.name().into(), "not evaluable on the host"))?;
                outs.into_iter().next().expect("one output")
            }
            other => return Err(fail(node.name.clone(), other.name().into(), "not an elementwise or layout op")),
        };
        let t = Arc::new(t);
        self.memo.insert(v, t.clone());
        Ok(t)
    }
}
