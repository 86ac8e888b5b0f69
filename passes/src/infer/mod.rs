//! Shape inference, op resolution and constant folding, in one walk over the graph in topological order.

mod layout;
mod resolve;

use crate::eval;
use crate::PassError;
use layout::expand_split;
use resolve::resolve;
use wgslc_ir::{Graph, NodeId, Op, Tensor, TensorType, ValueId};

/// Folding stops at this many output elements: larger all-constant results are computed on the GPU instead of
/// being written into the artifact (ops that can only run on the host fold at any size).
const FOLD_LIMIT: usize = 1 << 24;

/// Infers every value's type, resolves import-level ops and folds constants.
///
/// Requires: graph inputs and weights are typed; the graph is acyclic.
/// Establishes: every live value has a type; every remaining node holds a resolved op ([`Op::is_resolved`])
/// whose inputs are only tensors it reads at run time (parameter inputs were absorbed); no remaining node
/// has only constant inputs unless its op is GPU-only or its result exceeds the fold limit.
pub fn infer_shapes(g: &mut Graph) -> Result<(), PassError> {
    for n in g.topo_order()? {
        infer_node(g, n)?;
    }
    Ok(())
}

struct Ctx<'g> {
    g: &'g Graph,
    n: NodeId,
}

impl Ctx<'_> {
    fn err(&self, reason: impl Into<String>) -> PassError {
        let node = self.g.node(self.n);
        PassError::Node { node: node.name.clone(), op: node.op.name().into(), reason: reason.into() }
    }
    fn input(&self, i: usize) -> Result<ValueId, PassError> {
        self.g.node(self.n).inputs.get(i).copied().flatten().ok_or_else(|| self.err(format!("missing input {i}")))
    }
    fn opt_input(&self, i: usize) -> Option<ValueId> {
        self.g.node(self.n).inputs.get(i).copied().flatten()
    }
    fn ty(&self, i: usize) -> Result<&TensorType, PassError> {
        let v = self.input(i)?;
        self.g
            .value(v)
            .ty
            .as_ref()
            .ok_or_else(|| self.err(format!("input '{}' has no known type", self.g.value(v).name)))
    }
    /// A parameter input that must be known at compile time.
    fn const_input(&self, i: usize, what: &str) -> Result<Option<&Tensor>, PassError> {
        match self.opt_input(i) {
            None => Ok(None),
            Some(v) => self.g.const_data(v).map(Some).ok_or_else(|| {
                self.err(format!(
                    "the {what} input '{}' must be known at compile time (it is computed at run time)",
                    self.g.value(v).name
                ))
            }),
        }
    }
    /// A compile-time input that ONNX defines as a scalar (axis, k, K, a pad value, …): exactly one element.
    fn const_scalar(&self, i: usize, what: &str) -> Result<Option<&Tensor>, PassError> {
        match self.const_input(i, what)? {
            Some(t) if t.numel() != 1 => {
                Err(self.err(format!("the {what} input must hold one value, not {}", t.numel())))
            }
            other => Ok(other),
        }
    }
    fn axis(&self, axis: i64, rank: usize) -> Result<usize, PassError> {
        let r = rank as i64;
        let a = if axis < 0 { axis + r } else { axis };
        if (0..r).contains(&a) {
            Ok(a as usize)
        } else {
            Err(self.err(format!("axis {axis} is out of range for rank {rank}")))
        }
    }
    fn check_same_dtype(&self, a: &TensorType, b: &TensorType) -> Result<(), PassError> {
        if a.dtype != b.dtype {
            return Err(self.err(format!("input dtypes differ: {} and {}", a.dtype, b.dtype)));
        }
        Ok(())
    }
}

/// What inference decided for one node.
struct Resolved {
    op: Op,
    /// Inputs after absorbing parameters.
    inputs: Vec<Option<ValueId>>,
    outputs: Vec<TensorType>,
    /// Host-only ops (Shape, Range, …) give their value directly.
    folded: Option<Vec<Tensor>>,
}

fn infer_node(g: &mut Graph, n: NodeId) -> Result<(), PassError> {
    if g.node(n).op.is_composite() {
        for part in crate::expand::expand(g, n)? {
            infer_node(g, part)?;
        }
        return Ok(());
    }
    let cx = Ctx { g, n };
    let node = g.node(n);
    if node.outputs.is_empty() {
        return Err(cx.err("no outputs"));
    }
    let mut r = resolve(&cx)?;
    for t in &r.outputs {
        if t.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).is_none_or(|n| n > (1usize << 40)) {
            return Err(cx.err(format!("output shape {:?} is too large", t.shape)));
        }
    }

    let node_outputs = g.node(n).outputs.clone();
    // Split is the one op that becomes several nodes: one strided copy per output, each then inferred (and
    // folded) like any other node.
    if let Op::Split { axis } = r.op {
        for (&v, t) in node_outputs.iter().zip(r.outputs) {
            g.value_mut(v).ty = Some(t);
        }
        for part in expand_split(g, n, axis as usize)? {
            infer_node(g, part)?;
        }
        return Ok(());
    }

    if r.folded.is_none() {
        let all_const = r.inputs.iter().flatten().all(|&v| g.const_data(v).is_some());
        let small = r.outputs.iter().all(|t| t.numel() <= FOLD_LIMIT);
        // A block-quantized constant is decoded by the kernels that read it; on the host it only changes shape
        // (or is relabelled float32), so a layout op over it stays a view the scheduler folds into its readers.
        let keeps_blocks = matches!(r.op, Op::Alias | Op::Cast { to: wgslc_ir::DType::F32, .. });
        let decodes_blocks = !keeps_blocks
            && r.inputs.iter().flatten().any(|&v| g.const_data(v).is_some_and(|t| t.data.blocks().is_some()));
        if all_const && small && !r.inputs.is_empty() && !decodes_blocks {
            let ins: Vec<&Tensor> = r.inputs.iter().flatten().map(|&v| g.const_data(v).unwrap()).collect();
            r.folded = eval::eval(&r.op, &ins, &r.outputs);
        }
    }
    if let Some(ts) = r.folded {
        g.fold_node(n, ts);
        return Ok(());
    }
    for (&v, t) in node_outputs.iter().zip(r.outputs) {
        g.value_mut(v).ty = Some(t);
    }
    g.node_mut(n).op = r.op;
    g.set_inputs(n, r.inputs);
    Ok(())
}

fn keep(cx: &Ctx, op: Op, outputs: Vec<TensorType>) -> Resolved {
    Resolved { op, inputs: cx.g.node(cx.n).inputs.clone(), outputs, folded: None }
}

fn one_input(cx: &Ctx, op: Op, out: TensorType) -> Result<Resolved, PassError> {
    Ok(Resolved { op, inputs: vec![Some(cx.input(0)?)], outputs: vec![out], folded: None })
}

fn alias(cx: &Ctx, shape: Vec<usize>) -> Result<Resolved, PassError> {
    let t = cx.ty(0)?;
    if shape.iter().product::<usize>() != t.numel() {
        return Err(cx.err(format!("cannot reshape {:?} ({} elements) to {:?}", t.shape, t.numel(), shape)));
    }
    one_input(cx, Op::Alias, TensorType::new(t.dtype, shape))
}
