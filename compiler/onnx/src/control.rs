//! `If` whose condition is known at compile time: the taken branch is imported in place of the node.
//!
//! The condition is usually computed from inputs bound with `--const` (a voice-activity detector branches on its
//! sample rate through `Equal(sr, 16000)`), so the importer folds it by running shape inference over a copy of the
//! graph imported so far — the one place the frontend infers anything (see the crate's invariant). Only the taken
//! branch is translated: ops or shapes that are valid only in the other never matter. Its names are scoped as
//! ONNX scopes them: the branch sees the outer values and its own, its own shadow outer ones for the branch's
//! duration, and its values and nodes are named `<If node>/<name>` in the IR, so they stay unique.

use crate::importer::Importer;
use crate::proto::NodeProto;
use crate::{tensor, ImportError};
use std::collections::HashSet;
use wgslc_ir::{DType, Graph, Op, ValueId};

impl Importer<'_> {
    pub(crate) fn inline_if(&mut self, index: usize, node: &NodeProto, name: &str) -> Result<(), ImportError> {
        let err = |reason: String| ImportError::Node { node: name.to_string(), op: "If".into(), reason };
        let cond_name =
            node.input.first().filter(|s| !s.is_empty()).ok_or_else(|| err("it has no condition".into()))?;
        let cond = *self
            .names
            .get(cond_name)
            .ok_or_else(|| ImportError::UndefinedValue { node: name.to_string(), value: cond_name.clone() })?;
        let at_run_time = || {
            if self.g.inputs.contains(&cond) {
                return err(format!(
                    "the condition input '{cond_name}' must be known at compile time: wgslc compiles the branch it \
                     takes (bind it with --const)"
                ));
            }
            let inputs = run_time_inputs(&self.g, cond);
            err(format!(
                "its condition '{cond_name}' is computed at run time from {}: wgslc compiles an If whose condition \
                 is known at compile time (bind those with --const)",
                inputs.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", ")
            ))
        };
        let value = match self.g.const_data(cond) {
            Some(t) => t.clone(),
            None => {
                let mut probe = self.g.clone();
                wgslc_passes::infer_shapes(&mut probe)
                    .map_err(|e| err(format!("folding its condition '{cond_name}' failed: {e}")))?;
                probe.const_data(cond).cloned().ok_or_else(at_run_time)?
            }
        };
        if value.numel() != 1 {
            return Err(err(format!("its condition '{cond_name}' has {} elements, not one", value.numel())));
        }
        let taken = if value.dtype == DType::Bool || value.dtype.is_int() {
            value.to_i64()[0] != 0
        } else {
            value.to_f64()[0] != 0.0
        };
        let key = if taken { "then_branch" } else { "else_branch" };
        let branch = node
            .attribute
            .iter()
            .find(|a| a.name == key)
            .and_then(|a| a.g.as_ref())
            .ok_or_else(|| err(format!("it has no {key}")))?;
        let outs: Vec<&String> = node.output.iter().collect();
        if branch.output.len() != outs.len() {
            return Err(err(format!("its {key} has {} outputs for the node's {}", branch.output.len(), outs.len())));
        }

        // The branch's own names, with what they shadowed, restored after it.
        let mut shadowed: Vec<(String, Option<ValueId>)> = Vec::new();
        let scoped = |s: &str| format!("{name}/{s}");
        for init in &branch.initializer {
            let t = tensor::decode(init, self.model_dir)?;
            let v = self.g.add_const(scoped(&init.name), t);
            shadowed.push((init.name.clone(), self.names.insert(init.name.clone(), v)));
        }
        let result = (|| {
            for (i, n) in branch.node.iter().enumerate() {
                let own = if n.name.is_empty() { format!("{}_{i}", n.op_type) } else { n.name.clone() };
                let inner = NodeProto { name: scoped(&own), ..n.clone() };
                for o in n.output.iter().filter(|o| !o.is_empty()) {
                    shadowed.push((o.clone(), self.names.remove(o)));
                }
                self.node(index, &inner)?;
                for o in n.output.iter().filter(|o| !o.is_empty()) {
                    if let Some(&v) = self.names.get(o) {
                        if self.g.value(v).name == *o {
                            self.g.value_mut(v).name = scoped(o);
                        }
                    }
                }
            }
            branch
                .output
                .iter()
                .map(|o| {
                    self.names
                        .get(&o.name)
                        .copied()
                        .ok_or_else(|| ImportError::UndefinedValue { node: name.to_string(), value: o.name.clone() })
                })
                .collect::<Result<Vec<ValueId>, ImportError>>()
        })();
        for (n, v) in shadowed.into_iter().rev() {
            match v {
                Some(v) => self.names.insert(n, v),
                None => self.names.remove(&n),
            };
        }
        // The node's outputs are the branch's results.
        for (k, (out, v)) in outs.iter().zip(result?).enumerate() {
            if out.is_empty() {
                continue;
            }
            if self.names.contains_key(*out) {
                return Err(ImportError::Duplicate((*out).clone()));
            }
            let o = self.g.add_value((*out).clone(), None);
            self.g
                .add_node(scoped(&format!("out{k}")), Op::Identity, vec![Some(v)], vec![o])
                .map_err(|e| err(e.to_string()))?;
            self.names.insert((*out).clone(), o);
        }
        Ok(())
    }
}

/// The graph inputs that value `v` is computed from.
fn run_time_inputs(g: &Graph, v: ValueId) -> Vec<String> {
    let (mut seen, mut stack, mut found) = (HashSet::new(), vec![v], Vec::new());
    while let Some(v) = stack.pop() {
        if !seen.insert(v) {
            continue;
        }
        if g.inputs.contains(&v) {
            found.push(g.value(v).name.clone());
        }
        if let Some(p) = g.value(v).producer {
            stack.extend(g.node(p).inputs.iter().flatten());
        }
    }
    found.sort();
    found
}
