//! ONNX frontend: decodes a ModelProto and imports its main graph into the IR.
//!
//! **Architecture Invariant:** the frontend only translates. It resolves names, binds symbolic input dims,
//! decodes tensors and normalises every attribute-vs-input variant (opsets 11–22) into the input form, so each
//! IR op has one form. It infers no shapes beyond the graph inputs: that is `wgslc-passes`' job.

mod composite;
mod contrib;
mod control;
mod importer;
mod opaque;
pub mod proto;
mod rnn;
mod tensor;

use importer::Importer;
use proto::{ModelProto, NodeProto};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use wgslc_ir::{Graph, Tensor, TensorType};

pub use opaque::{dim_names, signature, without_large_weights};
pub use tensor::dtype_from_onnx;
pub use wgslc_ir::ImportOptions;

/// Decodes a standalone TensorProto (as in the ONNX test suite's `.pb` files); external data is refused.
pub fn decode_tensor(bytes: &[u8]) -> Result<Tensor, ImportError> {
    let t = <proto::TensorProto as prost::Message>::decode(bytes).map_err(decode_error)?;
    tensor::decode(&t, None)
}

/// The names of a model's run-time inputs (graph inputs that are not initializers), in order.
pub fn input_names(bytes: &[u8]) -> Result<Vec<String>, ImportError> {
    let m = <ModelProto as prost::Message>::decode(bytes).map_err(decode_error)?;
    let g = m.graph.ok_or(ImportError::NoGraph)?;
    let inits: std::collections::HashSet<&str> = g.initializer.iter().map(|t| t.name.as_str()).collect();
    Ok(g.input.iter().filter(|i| !inits.contains(i.name.as_str())).map(|i| i.name.clone()).collect())
}

/// Decodes a serialized ModelProto (for importing it more than once, as `--kv-cache` does).
pub fn decode_model(bytes: &[u8]) -> Result<ModelProto, ImportError> {
    <ModelProto as prost::Message>::decode(bytes).map_err(decode_error)
}

/// The files a model's initializers keep their data in (external data `location`s, relative to the model's
/// directory), each once, in first-use order: what a build script must watch besides the model.
pub fn external_data_files(bytes: &[u8]) -> Result<Vec<String>, ImportError> {
    let m = decode_model(bytes)?;
    let mut files: Vec<String> = Vec::new();
    for t in m.graph.iter().flat_map(|g| &g.initializer) {
        for e in t.external_data.iter().filter(|e| e.key == "location") {
            if !files.contains(&e.value) {
                files.push(e.value.clone());
            }
        }
    }
    Ok(files)
}

/// The op types of a model's main graph, in node order (for reports).
pub fn op_types(bytes: &[u8]) -> Result<Vec<String>, ImportError> {
    let m = <ModelProto as prost::Message>::decode(bytes).map_err(decode_error)?;
    Ok(m.graph.map(|g| g.node.into_iter().map(|n| n.op_type).collect()).unwrap_or_default())
}

/// prost names every enclosing field of a decode failure; past a few levels (a deeply nested subgraph) only the
/// outermost and innermost matter.
fn decode_error(e: prost::DecodeError) -> ImportError {
    let text = e.to_string();
    let parts: Vec<&str> = text.split(": ").collect();
    if parts.len() <= 8 {
        return ImportError::Decode(text);
    }
    let n = parts.len();
    ImportError::Decode(format!(
        "{}: {}: … ({} nested fields) …: {}: {}",
        parts[0],
        parts[1],
        n - 4,
        parts[n - 2],
        parts[n - 1]
    ))
}

/// Why a model could not be imported. Every variant names what it is about (node, tensor or input).
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read '{path}': {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("not a valid ONNX model: {0}")]
    Decode(String),
    #[error("the model has no graph")]
    NoGraph,
    #[error("node '{node}' ({op}): {reason}")]
    Node { node: String, op: String, reason: String },
    #[error("node '{node}' uses op '{op}' of domain '{domain}', which wgslc does not support")]
    UnknownDomain { node: String, op: String, domain: String },
    #[error("node '{node}': unsupported op '{op}'")]
    UnsupportedOp { node: String, op: String },
    /// Several unsupported ops, each with how many nodes use it and the first of them.
    #[error("unsupported ops: {0}")]
    UnsupportedOps(String),
    #[error("tensor '{name}': {reason}")]
    Tensor { name: String, reason: String },
    #[error("input '{name}': {reason}")]
    Input { name: String, reason: String },
    #[error("unbound symbolic dimensions: {0}; bind them with --dim NAME=VALUE or --shape INPUT=AxBxC")]
    UnboundDims(String),
    #[error("node '{node}' reads '{value}', which no node, input or initializer defines")]
    UndefinedValue { node: String, value: String },
    #[error("graph output '{0}' is not produced by any node, input or initializer")]
    UndefinedOutput(String),
    #[error("value '{0}' is defined more than once")]
    Duplicate(String),
    #[error("binding '{0}' does not match any symbolic dimension or input of the model")]
    UnusedBinding(String),
}

/// Reads and imports a model file; external data is resolved relative to the file's directory.
pub fn import_file(path: &Path, opts: &ImportOptions) -> Result<Graph, ImportError> {
    let bytes = std::fs::read(path).map_err(|source| ImportError::Io { path: path.to_owned(), source })?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
    import_bytes(&bytes, Some(&dir), opts)
}

/// Imports a serialized ModelProto. `model_dir` is where external data may live (`None` refuses external data).
pub fn import_bytes(bytes: &[u8], model_dir: Option<&Path>, opts: &ImportOptions) -> Result<Graph, ImportError> {
    let model = <ModelProto as prost::Message>::decode(bytes).map_err(decode_error)?;
    import_model(&model, model_dir, opts)
}

/// The domain of wgslc's own ops in ONNX graphs: `Sample` (see `wgslc_ir::Op::Sample`), which draws a token from
/// logits (`--kv-cache` adds it to a decoder's steps in the IR; a model may name it to draw tokens itself).
pub const WGSLC_DOMAIN: &str = "wgslc";

/// The opset of the default domain.
fn default_opset(model: &ModelProto) -> i64 {
    model.opset_import.iter().find(|o| o.domain.is_empty() || o.domain == "ai.onnx").map(|o| o.version).unwrap_or(1)
}

pub fn import_model(model: &ModelProto, model_dir: Option<&Path>, opts: &ImportOptions) -> Result<Graph, ImportError> {
    let graph = model.graph.as_ref().ok_or(ImportError::NoGraph)?;
    if !graph.sparse_initializer.is_empty() {
        return Err(ImportError::Tensor {
            name: "sparse_initializer".into(),
            reason: "sparse initializers are not supported".into(),
        });
    }
    let mut imp = Importer {
        g: Graph::new(),
        names: HashMap::new(),
        opset: default_opset(model),
        model_dir,
        shared: HashMap::new(),
    };

    for init in &graph.initializer {
        let t = tensor::decode(init, imp.model_dir)?;
        if imp.names.contains_key(&init.name) {
            return Err(ImportError::Duplicate(init.name.clone()));
        }
        let v = imp.g.add_const(init.name.clone(), t);
        imp.names.insert(init.name.clone(), v);
    }

    // Graph inputs; those that are also initializers are weights.
    let mut unbound = BTreeSet::new();
    let mut used_bindings = BTreeSet::new();
    for inp in &graph.input {
        if imp.names.contains_key(&inp.name) {
            continue;
        }
        if let Some(t) = opts.constants.get(&inp.name) {
            used_bindings.insert(inp.name.clone());
            let v = imp.g.add_const(inp.name.clone(), t.clone());
            imp.names.insert(inp.name.clone(), v);
            continue;
        }
        let tt = inp
            .r#type
            .as_ref()
            .and_then(|t| {
                if t.sequence_type.is_some() || t.map_type.is_some() || t.optional_type.is_some() {
                    None
                } else {
                    t.tensor_type.as_ref()
                }
            })
            .ok_or_else(|| ImportError::Input {
                name: inp.name.clone(),
                reason: "only tensor inputs are supported (sequence, map, optional and sparse inputs are not)".into(),
            })?;
        let dtype =
            dtype_from_onnx(tt.elem_type).map_err(|reason| ImportError::Input { name: inp.name.clone(), reason })?;
        let shape = if let Some(s) = opts.shapes.get(&inp.name) {
            used_bindings.insert(inp.name.clone());
            // A whole shape must fit what the model declares: its rank and every fixed dim.
            if let Some(declared) = tt.shape.as_ref() {
                let bad = |reason: String| ImportError::Input { name: inp.name.clone(), reason };
                let shown = |v: &[usize]| v.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x");
                if declared.dim.len() != s.len() {
                    return Err(bad(format!(
                        "--shape {}={} has {} dims, the model declares {}",
                        inp.name,
                        shown(s),
                        s.len(),
                        declared.dim.len()
                    )));
                }
                for (i, (d, &v)) in declared.dim.iter().zip(s).enumerate() {
                    if let Some(f) = d.dim_value.filter(|&f| f >= 0 && f as usize != v) {
                        return Err(bad(format!("--shape {}={}: dim {i} is fixed at {f}", inp.name, shown(s))));
                    }
                    // A dim the shape gives is a binding's use, and must agree with it.
                    if let Some((p, &b)) = d.dim_param.as_ref().and_then(|p| opts.dims.get_key_value(p)) {
                        if b != v {
                            return Err(bad(format!(
                                "--shape {}={}: dim {i} is '{p}', bound to {b}",
                                inp.name,
                                shown(s)
                            )));
                        }
                        used_bindings.insert(p.clone());
                    }
                }
            }
            Some(s.clone())
        } else {
            let mut shape = Vec::new();
            let mut ok = true;
            for (i, d) in tt.shape.as_ref().map(|s| s.dim.as_slice()).unwrap_or(&[]).iter().enumerate() {
                match (d.dim_value, &d.dim_param) {
                    (Some(v), _) if v >= 0 => shape.push(v as usize),
                    (Some(v), _) => {
                        return Err(ImportError::Input {
                            name: inp.name.clone(),
                            reason: format!("dimension {i} is negative ({v})"),
                        })
                    }
                    (None, Some(p)) if opts.dims.contains_key(p) => {
                        used_bindings.insert(p.clone());
                        shape.push(opts.dims[p]);
                    }
                    (None, Some(p)) if !p.is_empty() => {
                        unbound.insert(format!("'{p}' (input '{}', dim {i})", inp.name));
                        ok = false;
                    }
                    _ => {
                        unbound.insert(format!("unnamed dim {i} of input '{}' (use --shape)", inp.name));
                        ok = false;
                    }
                }
            }
            if tt.shape.is_none() {
                unbound.insert(format!("the whole shape of input '{}' (use --shape)", inp.name));
                ok = false;
            }
            ok.then_some(shape)
        };
        if shape.as_ref().is_some_and(|s| s.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).is_none()) {
            return Err(ImportError::Input { name: inp.name.clone(), reason: "shape overflows".into() });
        }
        let v = imp.g.add_value(inp.name.clone(), shape.map(|s| TensorType::new(dtype, s)));
        if imp.names.insert(inp.name.clone(), v).is_some() {
            return Err(ImportError::Duplicate(inp.name.clone()));
        }
        imp.g.inputs.push(v);
    }
    // A misspelled binding is named too: it is often why a dim is unbound.
    opts.check_bindings(&used_bindings, unbound, "model").map_err(|m| match m {
        wgslc_ir::BindingMismatch::Unbound(list) => ImportError::UnboundDims(list),
        wgslc_ir::BindingMismatch::Unused(k) => ImportError::UnusedBinding(k),
    })?;

    // Unsupported ops are all listed: each is recorded, its outputs stand in as untyped values so that later
    // nodes still import, and the first other error after one is left for after they are supported.
    let mut unsupported: Vec<(String, String)> = Vec::new();
    for i in topological_order(&graph.node) {
        let node = &graph.node[i];
        match imp.node(i, node) {
            Ok(()) => {}
            Err(ImportError::UnsupportedOp { node: name, op }) => {
                unsupported.push((op, name));
                for o in node.output.iter().filter(|o| !o.is_empty()) {
                    if !imp.names.contains_key(o) {
                        let v = imp.g.add_value(o.clone(), None);
                        imp.names.insert(o.clone(), v);
                    }
                }
            }
            Err(e) if unsupported.is_empty() => return Err(e),
            Err(_) => {}
        }
    }
    match unsupported.as_slice() {
        [] => {}
        [(op, node)] => return Err(ImportError::UnsupportedOp { node: node.clone(), op: op.clone() }),
        all => return Err(ImportError::UnsupportedOps(wgslc_ir::unsupported_ops_list(all))),
    }

    for out in &graph.output {
        let v = *imp.names.get(&out.name).ok_or_else(|| ImportError::UndefinedOutput(out.name.clone()))?;
        imp.g.outputs.push(v);
    }
    Ok(imp.g)
}

/// The order to import `nodes` in: each after the nodes that produce its inputs (and the outer-scope values its
/// subgraphs read), ties kept in file order. ONNX requires topological order but onnxruntime does not, and tools
/// write graphs that are not in it (onnxruntime's float16 converter appends the Casts of `keep_io_types` at the
/// end). Nodes on a cycle keep their file order after the rest, where their first read of a value not yet defined
/// is refused by name.
pub(crate) fn topological_order(nodes: &[NodeProto]) -> Vec<usize> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        for o in n.output.iter().filter(|o| !o.is_empty()) {
            producer.entry(o.as_str()).or_insert(i);
        }
    }
    // Every name a node reads: its inputs and, for subgraph attributes, every name read inside them (names the
    // subgraph defines itself are produced by none of these nodes, so they add no edge).
    fn reads<'a>(n: &'a NodeProto, out: &mut Vec<&'a str>) {
        out.extend(n.input.iter().filter(|s| !s.is_empty()).map(String::as_str));
        for a in &n.attribute {
            for g in a.g.iter().chain(&a.graphs) {
                for inner in &g.node {
                    reads(inner, out);
                }
                out.extend(g.output.iter().map(|o| o.name.as_str()));
            }
        }
    }
    let mut waiting = vec![0usize; nodes.len()];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        let mut names = Vec::new();
        reads(n, &mut names);
        let mut deps: Vec<usize> = names.iter().filter_map(|s| producer.get(s).copied()).filter(|&p| p != i).collect();
        deps.sort_unstable();
        deps.dedup();
        waiting[i] = deps.len();
        for p in deps {
            dependents[p].push(i);
        }
    }
    let mut ready: BinaryHeap<Reverse<usize>> = (0..nodes.len()).filter(|&i| waiting[i] == 0).map(Reverse).collect();
    let mut order = Vec::with_capacity(nodes.len());
    let mut placed = vec![false; nodes.len()];
    while let Some(Reverse(i)) = ready.pop() {
        order.push(i);
        placed[i] = true;
        for &d in &dependents[i] {
            waiting[d] -= 1;
            if waiting[d] == 0 {
                ready.push(Reverse(d));
            }
        }
    }
    order.extend((0..nodes.len()).filter(|&i| !placed[i]));
    order
}

#[cfg(test)]
mod tests;
