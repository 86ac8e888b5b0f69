//! Control flow known at compile time, imported as straight-line ops: an `If` whose condition folds imports the
//! branch it takes; a `Loop` whose trip count (and condition) fold and a `Scan` (whose length is its inputs')
//! import their body once per iteration, the carried values threaded through and the scan outputs stacked.
//!
//! The condition is usually computed from inputs bound with `--const` (a voice-activity detector branches on its
//! sample rate through `Equal(sr, 16000)`), so the importer folds it by running shape inference over a copy of the
//! graph imported so far — the one place the frontend infers anything (see the crate's invariant). Only the taken
//! branch is translated: ops or shapes that are valid only in the other never matter. Its names are scoped as
//! ONNX scopes them: the branch sees the outer values and its own, its own shadow outer ones for the branch's
//! duration, and its values and nodes are named `<If node>/<name>` in the IR (`<Loop node>/<i>/<name>` for
//! iteration i), so they stay unique.

use crate::importer::Importer;
use crate::proto::{GraphProto, NodeProto};
use crate::{tensor, ImportError};
use std::collections::HashSet;
use wgslc_ir::{DType, Data, Graph, Op, Tensor, ValueId};

/// The most body copies one Loop or Scan may unroll into (iterations × body nodes).
const MAX_UNROLLED_NODES: usize = 200_000;
/// The most iterations of one Loop or Scan.
const MAX_ITERATIONS: usize = 4096;
/// The most iterations of a Loop whose condition is recomputed by its body (each one folds it over a copy of the
/// graph).
const MAX_FOLDED_CONDITIONS: usize = 256;

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

        let result = self.import_subgraph(index, branch, name, &[])?;
        // The node's outputs are the branch's results.
        let outs: Vec<String> = outs.into_iter().cloned().collect();
        self.bind_outputs(name, "If", &outs, &result)
    }

    /// Imports subgraph `body` in scope `scope`: its formal inputs bound to `inputs` (in order), its initializers,
    /// nodes and values named `<scope>/<name>`; its own names shadow outer ones only while it is imported.
    /// Returns its outputs.
    fn import_subgraph(
        &mut self,
        index: usize,
        body: &GraphProto,
        scope: &str,
        inputs: &[ValueId],
    ) -> Result<Vec<ValueId>, ImportError> {
        let mut shadowed: Vec<(String, Option<ValueId>)> = Vec::new();
        let scoped = |s: &str| format!("{scope}/{s}");
        for (formal, &v) in body.input.iter().zip(inputs) {
            shadowed.push((formal.name.clone(), self.names.insert(formal.name.clone(), v)));
        }
        let result = (|| {
            for init in &body.initializer {
                let t = tensor::decode(init, self.model_dir)?;
                let v = self.g.add_const(scoped(&init.name), t);
                shadowed.push((init.name.clone(), self.names.insert(init.name.clone(), v)));
            }
            for i in crate::topological_order(&body.node) {
                let n = &body.node[i];
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
            body.output
                .iter()
                .map(|o| {
                    self.names
                        .get(&o.name)
                        .copied()
                        .ok_or_else(|| ImportError::UndefinedValue { node: scope.to_string(), value: o.name.clone() })
                })
                .collect::<Result<Vec<ValueId>, ImportError>>()
        })();
        for (n, v) in shadowed.into_iter().rev() {
            match v {
                Some(v) => self.names.insert(n, v),
                None => self.names.remove(&n),
            };
        }
        result
    }

    /// Defines the node's outputs `outs` as copies of `values` (empty names skipped).
    fn bind_outputs(&mut self, name: &str, op: &str, outs: &[String], values: &[ValueId]) -> Result<(), ImportError> {
        let err = |reason: String| ImportError::Node { node: name.to_string(), op: op.into(), reason };
        for (k, (out, &v)) in outs.iter().zip(values).enumerate() {
            if out.is_empty() {
                continue;
            }
            if self.names.contains_key(out) {
                return Err(ImportError::Duplicate(out.clone()));
            }
            let o = self.g.add_value(out.clone(), None);
            self.g
                .add_node(format!("{name}/out{k}"), Op::Identity, vec![Some(v)], vec![o])
                .map_err(|e| err(e.to_string()))?;
            self.names.insert(out.clone(), o);
        }
        Ok(())
    }

    /// The value of `v` if it folds at compile time (constants, `--const` inputs and what they compute).
    fn fold(&self, v: ValueId) -> Result<Option<Tensor>, String> {
        if let Some(t) = self.g.const_data(v) {
            return Ok(Some(t.clone()));
        }
        let mut probe = self.g.clone();
        wgslc_passes::infer_shapes(&mut probe).map_err(|e| e.to_string())?;
        Ok(probe.const_data(v).cloned())
    }

    /// The shape of `v` (inferring over a copy of the graph imported so far).
    fn shape_of(&self, v: ValueId) -> Result<Vec<usize>, String> {
        Ok(self.shapes_of(&[v])?.remove(0))
    }

    /// The shapes of `vs`, inferring over a copy of the graph imported so far once, where any is not yet known.
    pub(crate) fn shapes_of(&self, vs: &[ValueId]) -> Result<Vec<Vec<usize>>, String> {
        let known = |g: &Graph| -> Option<Vec<Vec<usize>>> {
            vs.iter()
                .map(|&v| g.value(v).ty.as_ref().or(g.const_data(v).map(|t| t.ty()).as_ref()).map(|t| t.shape.clone()))
                .collect()
        };
        if let Some(s) = known(&self.g) {
            return Ok(s);
        }
        let mut probe = self.g.clone();
        wgslc_passes::infer_shapes(&mut probe).map_err(|e| e.to_string())?;
        known(&probe).ok_or_else(|| "its shape is unknown".to_string())
    }

    fn value_of(&self, node: &str, s: &str) -> Result<ValueId, ImportError> {
        self.names
            .get(s)
            .copied()
            .ok_or_else(|| ImportError::UndefinedValue { node: node.to_string(), value: s.to_string() })
    }

    /// `Loop` with a trip count and condition that fold at compile time, unrolled.
    pub(crate) fn unroll_loop(&mut self, index: usize, node: &NodeProto, name: &str) -> Result<(), ImportError> {
        let err = |reason: String| ImportError::Node { node: name.to_string(), op: "Loop".into(), reason };
        let body = node
            .attribute
            .iter()
            .find(|a| a.name == "body")
            .and_then(|a| a.g.as_ref())
            .ok_or_else(|| err("it has no body".into()))?;
        let input = |i: usize| node.input.get(i).filter(|s| !s.is_empty());
        let truth = |t: &Tensor| match &t.data {
            Data::Bool(v) => v.first().copied().unwrap_or(false),
            Data::I64(v) => v.first().is_some_and(|&x| x != 0),
            Data::F32(v) => v.first().is_some_and(|&x| x != 0.0),
            Data::Blocks(b) => b.numel() > 0 && b.value(0) != 0.0,
        };
        let folded = |this: &Self, v: ValueId, what: &str| -> Result<Tensor, ImportError> {
            this.fold(v).map_err(|e| err(format!("folding its {what} failed: {e}")))?.ok_or_else(|| {
                let from = run_time_inputs(&this.g, v);
                err(format!(
                    "its {what} is computed at run time (from {}): wgslc unrolls a Loop whose trip count and \
                         condition are known at compile time (bind those inputs with --const)",
                    if from.is_empty() { "the loop body".to_string() } else { from.join(", ") }
                ))
            })
        };
        let trips = match input(0) {
            Some(m) => {
                let m = self.value_of(name, m)?;
                if self.g.inputs.contains(&m) {
                    return Err(err(format!(
                        "the trip count input '{}' must be known at compile time: wgslc unrolls the loop (bind it \
                         with --const)",
                        self.g.value(m).name
                    )));
                }
                Some(folded(self, m, "trip count")?.to_i64().first().copied().unwrap_or(0).max(0) as usize)
            }
            None => None,
        };
        let mut cond = match input(1) {
            Some(c) => {
                let c = self.value_of(name, c)?;
                if self.g.inputs.contains(&c) {
                    return Err(err(format!(
                        "the condition input '{}' must be known at compile time: wgslc unrolls the loop (bind it \
                         with --const)",
                        self.g.value(c).name
                    )));
                }
                truth(&folded(self, c, "condition")?)
            }
            None => true,
        };
        let carried: Vec<ValueId> =
            node.input.iter().skip(2).map(|s| self.value_of(name, s)).collect::<Result<_, _>>()?;
        let n = carried.len();
        if body.input.len() != n + 2 || body.output.len() < n + 1 {
            return Err(err(format!(
                "its body takes {} inputs and gives {} outputs for {n} carried values",
                body.input.len(),
                body.output.len()
            )));
        }
        let k = body.output.len() - 1 - n;
        let recomputed = trips.is_none() || body.output[0].name != body.input[1].name;
        let cap = if recomputed { MAX_FOLDED_CONDITIONS } else { MAX_ITERATIONS };
        let limit = (MAX_UNROLLED_NODES / body.node.len().max(1)).min(cap);
        let (mut state, mut scans) = (carried, vec![Vec::new(); k]);
        let mut i = 0usize;
        while cond && trips.is_none_or(|m| i < m) {
            if i >= limit {
                return Err(err(format!(
                    "unrolling it takes more than {limit} iterations of its {}-node body",
                    body.node.len()
                )));
            }
            let it = self.g.add_const(format!("{name}/{i}/iteration"), Tensor::i64(vec![], vec![i as i64]));
            let c = self.g.add_const(
                format!("{name}/{i}/cond"),
                Tensor { dtype: DType::Bool, shape: vec![], data: Data::Bool(vec![true]) },
            );
            let mut ins = vec![it, c];
            ins.extend(&state);
            let outs = self.import_subgraph(index, body, &format!("{name}/{i}"), &ins)?;
            state = outs[1..=n].to_vec();
            for (j, s) in outs[n + 1..].iter().enumerate() {
                scans[j].push(*s);
            }
            // The condition of the next iteration: the body's, when it is not simply passed through.
            if recomputed {
                cond = truth(&folded(self, outs[0], "condition")?);
            }
            i += 1;
        }
        let mut results = state;
        for (j, parts) in scans.into_iter().enumerate() {
            if parts.is_empty() {
                return Err(err(format!("it runs no iteration, so scan output {j} has no shape")));
            }
            results.push(self.stack(name, &format!("scan{j}"), &parts, 0)?);
        }
        self.bind_outputs(name, "Loop", &node.output, &results)
    }

    /// `parts` (equal shapes) stacked along a new axis `axis`.
    fn stack(&mut self, name: &str, what: &str, parts: &[ValueId], axis: i64) -> Result<ValueId, ImportError> {
        let axes = self.ints_const(name, &format!("{what}_axis"), vec![axis]);
        let mut lifted = Vec::with_capacity(parts.len());
        for (i, &p) in parts.iter().enumerate() {
            lifted.push(Some(self.emit(name, &format!("{what}_{i}"), Op::Unsqueeze, &[Some(p), Some(axes)])?));
        }
        self.emit(name, what, Op::Concat { axis }, &lifted)
    }

    /// `Scan` (opset 9+): the body imported once per step of the scanned axis, unrolled.
    pub(crate) fn unroll_scan(&mut self, index: usize, node: &NodeProto, name: &str) -> Result<(), ImportError> {
        let err = |reason: String| ImportError::Node { node: name.to_string(), op: "Scan".into(), reason };
        let attr = |k: &str| node.attribute.iter().find(|a| a.name == k);
        let body = attr("body").and_then(|a| a.g.as_ref()).ok_or_else(|| err("it has no body".into()))?;
        if self.opset < 9 {
            return Err(err("Scan before opset 9 (a batch axis and sequence_lens) is not supported".into()));
        }
        let m = attr("num_scan_inputs").map(|a| a.i).ok_or_else(|| err("it has no num_scan_inputs".into()))?;
        let m = usize::try_from(m).map_err(|_| err(format!("num_scan_inputs {m} is negative")))?;
        let ins: Vec<ValueId> = node.input.iter().map(|s| self.value_of(name, s)).collect::<Result<_, _>>()?;
        if m > ins.len() || body.input.len() != ins.len() {
            return Err(err(format!("its body takes {} inputs for the node's {}", body.input.len(), ins.len())));
        }
        let n = ins.len() - m;
        let k = body.output.len().checked_sub(n).ok_or_else(|| err("its body gives too few outputs".into()))?;
        let ints =
            |k: &str, len: usize| -> Vec<i64> { attr(k).map(|a| a.ints.clone()).unwrap_or_else(|| vec![0; len]) };
        let (in_axes, in_dirs) = (ints("scan_input_axes", m), ints("scan_input_directions", m));
        let (out_axes, out_dirs) = (ints("scan_output_axes", k), ints("scan_output_directions", k));
        if in_axes.len() != m || in_dirs.len() != m || out_axes.len() != k || out_dirs.len() != k {
            return Err(err("its axes and directions attributes do not match its inputs and outputs".into()));
        }
        let mut len = None;
        let mut axes = Vec::new();
        for (j, &x) in ins[n..].iter().enumerate() {
            let shape = self.shape_of(x).map_err(|e| err(format!("scan input {j}: {e}")))?;
            let r = shape.len() as i64;
            let a = if in_axes[j] < 0 { in_axes[j] + r } else { in_axes[j] };
            if !(0..r).contains(&a) {
                return Err(err(format!("scan input {j}: axis {} is outside rank {r}", in_axes[j])));
            }
            let t = shape[a as usize];
            if len.is_some_and(|l| l != t) {
                return Err(err(format!("scan inputs have different lengths ({} and {t})", len.unwrap_or(0))));
            }
            len = Some(t);
            axes.push(a);
        }
        let len = len.ok_or_else(|| err("it has no scan input".into()))?;
        if len > MAX_ITERATIONS || len * body.node.len().max(1) > MAX_UNROLLED_NODES {
            return Err(err(format!("unrolling {len} steps of its {}-node body is too large", body.node.len())));
        }
        if len == 0 && k > 0 {
            return Err(err("its scan inputs are empty, so its scan outputs have no shape".into()));
        }
        let mut state: Vec<ValueId> = ins[..n].to_vec();
        let mut scans = vec![Vec::new(); k];
        for step in 0..len {
            let mut args = state.clone();
            for (j, &x) in ins[n..].iter().enumerate() {
                let t = if in_dirs[j] != 0 { len - 1 - step } else { step };
                let at = self.g.add_const(format!("{name}/{step}/at{j}"), Tensor::i64(vec![], vec![t as i64]));
                args.push(self.emit(
                    name,
                    &format!("{step}/slice{j}"),
                    Op::Gather { axis: axes[j] },
                    &[Some(x), Some(at)],
                )?);
            }
            let outs = self.import_subgraph(index, body, &format!("{name}/{step}"), &args)?;
            state = outs[..n].to_vec();
            for (j, s) in outs[n..].iter().enumerate() {
                scans[j].push(*s);
            }
        }
        let mut results = state;
        for (j, mut parts) in scans.into_iter().enumerate() {
            if out_dirs[j] != 0 {
                parts.reverse();
            }
            let rank = self.shape_of(parts[0]).map_err(|e| err(format!("scan output {j}: {e}")))?.len() as i64 + 1;
            let a = if out_axes[j] < 0 { out_axes[j] + rank } else { out_axes[j] };
            results.push(self.stack(name, &format!("scan{j}"), &parts, a)?);
        }
        self.bind_outputs(name, "Scan", &node.output, &results)
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
