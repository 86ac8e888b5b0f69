//! What every frontend shares: the user's bindings for what a model leaves open, and the two messages that
//! must read the same whichever format a model came in (bindings that do not fit, unsupported ops).

use crate::Tensor;
use std::collections::{BTreeSet, HashMap};

/// User bindings for what a model leaves open, as every frontend takes them.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// `--dim NAME=VALUE`: values for named symbolic dims.
    pub dims: HashMap<String, usize>,
    /// `--shape INPUT=AxBxC`: overrides of whole input shapes.
    pub shapes: HashMap<String, Vec<usize>>,
    /// `--const INPUT=FILE.npy`: inputs specialized to a value at compile time (they stop being run-time
    /// inputs). This is how a static compiler takes shape-like parameters that a model leaves as inputs.
    pub constants: HashMap<String, Tensor>,
}

/// Why the bindings do not fit a model.
#[derive(Debug, PartialEq, Eq)]
pub enum BindingMismatch {
    /// Dims still open, listed (and the bindings that matched nothing, often why: a misspelled name).
    Unbound(String),
    /// A binding (the first, by name) that matches nothing in the model.
    Unused(String),
}

impl ImportOptions {
    /// Checks the bindings once the frontend has bound what it could: `used` holds the bindings it took,
    /// `unbound` describes each dim still open. `model` names the source in messages ("model", "program").
    pub fn check_bindings(
        &self,
        used: &BTreeSet<String>,
        unbound: BTreeSet<String>,
        model: &str,
    ) -> Result<(), BindingMismatch> {
        let mut unused: Vec<&String> = self
            .dims
            .keys()
            .chain(self.shapes.keys())
            .chain(self.constants.keys())
            .filter(|k| !used.contains(*k))
            .collect();
        unused.sort();
        if !unbound.is_empty() {
            let mut list = unbound.into_iter().collect::<Vec<_>>().join(", ");
            if !unused.is_empty() {
                let names = unused.iter().map(|k| format!("'{k}'")).collect::<Vec<_>>().join(", ");
                list.push_str(&format!(" (and {names}, given, matches nothing in the {model})"));
            }
            return Err(BindingMismatch::Unbound(list));
        }
        match unused.first() {
            Some(k) => Err(BindingMismatch::Unused(k.to_string())),
            None => Ok(()),
        }
    }
}

/// The unsupported ops of a model as one list, each op once with how many nodes use it and the first of them:
/// `'Foo' (node 'a'), 'Bar' (3 nodes, the first 'b')`. `found` holds (op, node) in model order.
pub fn unsupported_ops_list(found: &[(String, String)]) -> String {
    let mut ops: Vec<(&String, Vec<&String>)> = Vec::new();
    for (op, node) in found {
        match ops.iter_mut().find(|(o, _)| *o == op) {
            Some((_, nodes)) => nodes.push(node),
            None => ops.push((op, vec![node])),
        }
    }
    ops.iter()
        .map(|(op, nodes)| match nodes.as_slice() {
            [one] => format!("'{op}' (node '{one}')"),
            many => format!("'{op}' ({} nodes, the first '{}')", many.len(), many[0]),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A model's run-time interface as its file declares it, before any dim is bound: what `--kv-cache` decides the
/// decoder's steps from (which inputs are the cache, along which axis, at what rank), whichever frontend read it.
#[derive(Clone, Debug, Default)]
pub struct Signature {
    /// Run-time inputs in model order (weights excluded), each dim its size or `None` where the model leaves it
    /// symbolic.
    pub inputs: Vec<(String, Vec<Option<usize>>)>,
    /// Output names in model order.
    pub outputs: Vec<String>,
}
