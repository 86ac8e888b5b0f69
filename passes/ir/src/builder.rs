//! [`Builder`]: how frontends and passes add nodes, so every new node and value is named one way.

use crate::{BinaryOp, DType, Graph, GraphError, NodeId, Op, Tensor, TensorType, ValueId};

/// Adds nodes on behalf of one source node (`base`): node `base/part` writes a fresh value `base.part`, and
/// constants are `base.what`. Frontends name each part (`op_named`); passes that expand one node into several let
/// the builder number them (`op`: `base/OpName{k}` writing `base.{k}`).
pub struct Builder<'g> {
    pub g: &'g mut Graph,
    base: String,
    /// The nodes added, in order.
    pub nodes: Vec<NodeId>,
}

impl<'g> Builder<'g> {
    pub fn new(g: &'g mut Graph, base: impl Into<String>) -> Builder<'g> {
        Builder { g, base: base.into(), nodes: vec![] }
    }

    /// A node named by its op and position, writing a fresh value.
    pub fn op(&mut self, op: Op, inputs: &[Option<ValueId>]) -> Result<ValueId, GraphError> {
        let k = self.nodes.len();
        let out = self.g.add_value(self.g.fresh_name(&format!("{}.{k}", self.base)), None);
        let n = self.g.add_node(format!("{}/{}{k}", self.base, op.name()), op, inputs.to_vec(), vec![out])?;
        self.nodes.push(n);
        Ok(out)
    }

    /// Node `base/part`, writing a fresh value `base.part`.
    pub fn op_named(&mut self, part: &str, op: Op, inputs: &[Option<ValueId>]) -> Result<ValueId, GraphError> {
        let out = self.g.add_value(self.g.fresh_name(&format!("{}.{part}", self.base)), None);
        self.op_into(part, op, inputs, vec![out])?;
        Ok(out)
    }

    /// A fresh value `base.part`, typed when the caller already knows its type (passes after inference).
    pub fn value(&mut self, part: &str, ty: Option<TensorType>) -> ValueId {
        self.g.add_value(self.g.fresh_name(&format!("{}.{part}", self.base)), ty)
    }

    /// Node `base/part` writing a fresh value `base.part` of type `ty`.
    pub fn op_typed(
        &mut self,
        part: &str,
        op: Op,
        inputs: &[Option<ValueId>],
        ty: TensorType,
    ) -> Result<ValueId, GraphError> {
        let out = self.value(part, Some(ty));
        self.op_into(part, op, inputs, vec![out])?;
        Ok(out)
    }

    /// Node `base/part` (or `base` itself for an empty part) writing values that already exist (a source node's
    /// declared outputs).
    pub fn op_into(
        &mut self,
        part: &str,
        op: Op,
        inputs: &[Option<ValueId>],
        outputs: Vec<ValueId>,
    ) -> Result<NodeId, GraphError> {
        let name = if part.is_empty() { self.base.clone() } else { format!("{}/{part}", self.base) };
        let n = self.g.add_node(name, op, inputs.to_vec(), outputs)?;
        self.nodes.push(n);
        Ok(n)
    }

    pub fn un(&mut self, op: Op, x: ValueId) -> Result<ValueId, GraphError> {
        self.op(op, &[Some(x)])
    }

    pub fn bin(&mut self, b: BinaryOp, x: ValueId, y: ValueId) -> Result<ValueId, GraphError> {
        self.op(Op::Binary(b), &[Some(x), Some(y)])
    }

    /// A constant named by its position.
    pub fn konst(&mut self, t: Tensor) -> ValueId {
        let k = self.nodes.len();
        self.g.add_const(self.g.fresh_name(&format!("{}.c{k}", self.base)), t)
    }

    /// Constant `base.what`.
    pub fn const_named(&mut self, what: &str, t: Tensor) -> ValueId {
        self.g.add_const(self.g.fresh_name(&format!("{}.{what}", self.base)), t)
    }

    pub fn ints(&mut self, v: &[i64]) -> ValueId {
        self.konst(Tensor::i64(vec![v.len()], v.to_vec()))
    }

    pub fn scalar(&mut self, dtype: DType, x: f64) -> ValueId {
        self.konst(Tensor::from_f64(dtype, vec![], vec![x]))
    }

    pub fn reshape(&mut self, x: ValueId, shape: &[usize]) -> Result<ValueId, GraphError> {
        let s = self.ints(&shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
        self.op(Op::Reshape { allowzero: true }, &[Some(x), Some(s)])
    }

    pub fn transpose(&mut self, x: ValueId, perm: &[usize]) -> Result<ValueId, GraphError> {
        self.un(Op::Transpose { perm: Some(perm.to_vec()) }, x)
    }
}
