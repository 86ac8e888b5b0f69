//! wgslc's intermediate representation: one graph type of typed tensor ops with static shapes.
//!
//! # Vocabulary
//! - A **value** ([`Value`], named by [`ValueId`]) is a tensor: a graph input, a weight (a value that carries
//!   constant data), or the output of a node. Once shape inference has run, every value has a [`TensorType`]:
//!   a logical [`DType`] and a static shape.
//! - A **node** ([`Node`], named by [`NodeId`]) applies one [`Op`] to input values and defines output values.
//!   Inputs are positional and may be absent (`None`), as ONNX allows for optional inputs.
//! - A **kernel group** is a set of nodes that the scheduler emits as one WGSL module; a **dispatch** is one
//!   execution of a kernel in the replayed schedule. Both live in `wgslc-passes`' `Schedule`, not here.
//!
//! # Invariants
//! Every value has at most one producer; the node edges in the underlying petgraph mirror the producer → consumer
//! relation of values, so [`Graph::topo_order`] is the order of data dependencies. petgraph's indices never leave
//! this module: callers see [`NodeId`] and [`ValueId`] only.
//!
//! Parameters that ONNX passes either as attributes or as inputs (axes, shapes, pads, starts, …) are normalised
//! by the frontend into inputs, so each op has one form here; shape inference requires such inputs to be
//! constants and resolves them.

mod attrs;
mod builder;
mod dtype;
mod frontend;
mod narrow;
mod ops;
mod print;
mod props;
mod tensor;

pub use attrs::*;
pub use builder::Builder;
pub use dtype::*;
pub use frontend::*;
pub use narrow::*;
pub use ops::*;
pub use print::print;
pub use props::*;
pub use tensor::*;

use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::Direction;
use std::fmt;

/// A dtype and a static shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl TensorType {
    pub fn new(dtype: DType, shape: Vec<usize>) -> Self {
        TensorType { dtype, shape }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?}", self.dtype, self.shape)
    }
}

/// Names a value of one [`Graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(u32);

impl ValueId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Names a node of one [`Graph`]. Stable across node removal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(NodeIndex<u32>);

impl NodeId {
    pub fn index(self) -> usize {
        self.0.index()
    }
}

/// A tensor in the graph.
#[derive(Clone, Debug)]
pub struct Value {
    /// The ONNX name (unique in a graph).
    pub name: String,
    /// Known once the producer's shape inference has run (graph inputs and weights have it from the start).
    pub ty: Option<TensorType>,
    /// The node that defines this value; `None` for graph inputs and weights.
    pub producer: Option<NodeId>,
    /// Constant data: weights, folded constants. A value with data is never a graph input.
    pub data: Option<std::sync::Arc<Tensor>>,
}

/// An op applied to values.
#[derive(Clone, Debug)]
pub struct Node {
    /// The ONNX node name, or a generated one (`{op}_{index}`) where the model has none; used in every error.
    pub name: String,
    pub op: Op,
    pub inputs: Vec<Option<ValueId>>,
    pub outputs: Vec<ValueId>,
}

/// Errors that break the graph's structural invariants.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GraphError {
    #[error("the graph has a cycle through node '{0}'")]
    Cycle(String),
    #[error("value '{0}' is produced by more than one node")]
    DuplicateProducer(String),
}

/// The graph: values in an arena, nodes in a petgraph whose edges follow data flow.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    values: Vec<Value>,
    nodes: StableDiGraph<Node, ()>,
    /// Runtime inputs, in model order (weights excluded).
    pub inputs: Vec<ValueId>,
    /// Graph outputs, in model order.
    pub outputs: Vec<ValueId>,
}

impl Graph {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a value with no producer.
    pub fn add_value(&mut self, name: impl Into<String>, ty: Option<TensorType>) -> ValueId {
        let id = ValueId(self.values.len() as u32);
        self.values.push(Value { name: name.into(), ty, producer: None, data: None });
        id
    }

    /// Adds a constant value (a weight or a folded constant).
    pub fn add_const(&mut self, name: impl Into<String>, tensor: Tensor) -> ValueId {
        let id = self.add_value(name, Some(tensor.ty()));
        self.values[id.index()].data = Some(std::sync::Arc::new(tensor));
        id
    }

    /// Adds a node; its outputs must be values without a producer.
    pub fn add_node(
        &mut self,
        name: impl Into<String>,
        op: Op,
        inputs: Vec<Option<ValueId>>,
        outputs: Vec<ValueId>,
    ) -> Result<NodeId, GraphError> {
        for &o in &outputs {
            if self.values[o.index()].producer.is_some() {
                return Err(GraphError::DuplicateProducer(self.values[o.index()].name.clone()));
            }
        }
        let idx = self.nodes.add_node(Node { name: name.into(), op, inputs: inputs.clone(), outputs: outputs.clone() });
        let outputs = &self.nodes[idx].outputs.clone();
        let id = NodeId(idx);
        for &o in outputs {
            self.values[o.index()].producer = Some(id);
        }
        for i in inputs.into_iter().flatten() {
            if let Some(p) = self.values[i.index()].producer {
                self.nodes.update_edge(p.0, idx, ());
            }
        }
        // Rewrites may give an existing value a new producer: its readers now depend on this node.
        let readers: Vec<NodeIndex<u32>> = self
            .nodes
            .node_indices()
            .filter(|&n| n != idx && self.nodes[n].inputs.iter().flatten().any(|v| outputs.contains(v)))
            .collect();
        for r in readers {
            self.nodes.update_edge(idx, r, ());
        }
        Ok(id)
    }

    pub fn value(&self, v: ValueId) -> &Value {
        &self.values[v.index()]
    }

    pub fn value_mut(&mut self, v: ValueId) -> &mut Value {
        &mut self.values[v.index()]
    }

    pub fn value_ids(&self) -> impl Iterator<Item = ValueId> {
        (0..self.values.len() as u32).map(ValueId)
    }

    pub fn num_values(&self) -> usize {
        self.values.len()
    }

    /// The type of a value; panics if shape inference has not reached it (a pass-ordering bug, not bad input).
    pub fn ty(&self, v: ValueId) -> &TensorType {
        self.values[v.index()]
            .ty
            .as_ref()
            .unwrap_or_else(|| panic!("value '{}' has no type yet", self.values[v.index()].name))
    }

    pub fn const_data(&self, v: ValueId) -> Option<&Tensor> {
        self.values[v.index()].data.as_deref()
    }

    pub fn node(&self, n: NodeId) -> &Node {
        &self.nodes[n.0]
    }

    /// Whether `n` is still in the graph (node ids stay valid after removals, but removed ones are gone).
    pub fn has_node(&self, n: NodeId) -> bool {
        self.nodes.contains_node(n.0)
    }

    pub fn node_mut(&mut self, n: NodeId) -> &mut Node {
        &mut self.nodes[n.0]
    }

    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes.node_indices().map(NodeId)
    }

    pub fn num_nodes(&self) -> usize {
        self.nodes.node_count()
    }

    /// Nodes in an order where every producer comes before its consumers; ties keep insertion order, so the
    /// order (and everything derived from it) is deterministic.
    pub fn topo_order(&self) -> Result<Vec<NodeId>, GraphError> {
        let mut indeg: std::collections::HashMap<NodeIndex<u32>, usize> = self
            .nodes
            .node_indices()
            .map(|n| (n, self.nodes.neighbors_directed(n, Direction::Incoming).count()))
            .collect();
        let mut ready: std::collections::BTreeSet<NodeIndex<u32>> =
            indeg.iter().filter(|(_, &d)| d == 0).map(|(&n, _)| n).collect();
        let mut order = Vec::with_capacity(self.nodes.node_count());
        while let Some(n) = ready.pop_first() {
            order.push(NodeId(n));
            for m in self.nodes.neighbors_directed(n, Direction::Outgoing) {
                let d = indeg.get_mut(&m).expect("edge to a live node");
                *d -= 1;
                if *d == 0 {
                    ready.insert(m);
                }
            }
        }
        if order.len() != self.nodes.node_count() {
            let stuck = self.nodes.node_indices().find(|n| indeg[n] > 0).expect("a node on the cycle");
            return Err(GraphError::Cycle(self.nodes[stuck].name.clone()));
        }
        Ok(order)
    }

    /// Nodes that read `v`, in insertion order.
    pub fn consumers(&self, v: ValueId) -> Vec<NodeId> {
        let mut out: Vec<NodeId> =
            self.nodes.node_indices().filter(|&n| self.nodes[n].inputs.contains(&Some(v))).map(NodeId).collect();
        out.sort();
        out
    }

    /// Makes every reader of `old` (nodes and graph outputs) read `new` instead.
    pub fn replace_uses(&mut self, old: ValueId, new: ValueId) {
        let readers: Vec<NodeIndex<u32>> =
            self.nodes.node_indices().filter(|&n| self.nodes[n].inputs.contains(&Some(old))).collect();
        for n in readers {
            for i in self.nodes[n].inputs.iter_mut() {
                if *i == Some(old) {
                    *i = Some(new);
                }
            }
            self.rebuild_in_edges(n);
        }
        for o in self.outputs.iter_mut() {
            if *o == old {
                *o = new;
            }
        }
    }

    /// Replaces the inputs of a node, keeping edges in step.
    pub fn set_inputs(&mut self, n: NodeId, inputs: Vec<Option<ValueId>>) {
        self.nodes[n.0].inputs = inputs;
        self.rebuild_in_edges(n.0);
    }

    fn rebuild_in_edges(&mut self, n: NodeIndex<u32>) {
        let old: Vec<_> =
            self.nodes.edges_directed(n, Direction::Incoming).map(|e| petgraph::visit::EdgeRef::id(&e)).collect();
        for e in old {
            self.nodes.remove_edge(e);
        }
        let inputs = self.nodes[n].inputs.clone();
        for i in inputs.into_iter().flatten() {
            if let Some(p) = self.values[i.index()].producer {
                self.nodes.update_edge(p.0, n, ());
            }
        }
    }

    /// Removes a node; its outputs become values without a producer (callers replace their uses first).
    pub fn remove_node(&mut self, n: NodeId) -> Node {
        let node = self.nodes.remove_node(n.0).expect("live node");
        for &o in &node.outputs {
            self.values[o.index()].producer = None;
        }
        node
    }

    /// Replaces a node by constants: each of its outputs takes the matching tensor and the node is removed.
    pub fn fold_node(&mut self, n: NodeId, tensors: Vec<Tensor>) {
        let node = self.remove_node(n);
        debug_assert_eq!(node.outputs.len(), tensors.len());
        for (&v, t) in node.outputs.iter().zip(tensors) {
            self.values[v.index()].ty = Some(t.ty());
            self.values[v.index()].data = Some(std::sync::Arc::new(t));
        }
    }

    /// A fresh value name derived from `base`, unique in this graph.
    pub fn fresh_name(&self, base: &str) -> String {
        let mut i = self.values.len();
        loop {
            let cand = format!("{base}__{i}");
            if !self.values.iter().any(|v| v.name == cand) {
                return cand;
            }
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topo_order_detects_cycles_and_is_deterministic() {
        let mut g = Graph::new();
        let x = g.add_value("x", Some(TensorType::new(DType::F32, vec![2])));
        let a = g.add_value("a", None);
        let b = g.add_value("b", None);
        g.add_node("n0", Op::Unary(UnaryOp::Relu), vec![Some(x)], vec![a]).unwrap();
        g.add_node("n1", Op::Unary(UnaryOp::Neg), vec![Some(a)], vec![b]).unwrap();
        let order = g.topo_order().unwrap();
        assert_eq!(order.iter().map(|&n| g.node(n).name.as_str()).collect::<Vec<_>>(), ["n0", "n1"]);

        // Feed n1's output back into n0: a cycle.
        let n0 = order[0];
        g.set_inputs(n0, vec![Some(b)]);
        assert!(matches!(g.topo_order(), Err(GraphError::Cycle(_))));
    }

    #[test]
    fn duplicate_producers_are_refused() {
        let mut g = Graph::new();
        let x = g.add_value("x", None);
        let y = g.add_value("y", None);
        g.add_node("a", Op::Unary(UnaryOp::Relu), vec![Some(x)], vec![y]).unwrap();
        let err = g.add_node("b", Op::Unary(UnaryOp::Relu), vec![Some(x)], vec![y]).unwrap_err();
        assert_eq!(err, GraphError::DuplicateProducer("y".into()));
    }
}
