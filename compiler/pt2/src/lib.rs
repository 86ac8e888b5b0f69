//! torch.export frontend: reads a `.pt2` archive (`torch.export.save`) without Python and imports its program —
//! an FX graph of ATen ops with its signature, tensor metadata, symbolic sizes and weights — into the IR.
//!
//! **Architecture Invariant:** as for ONNX, the frontend only translates. Each ATen op becomes the IR ops that
//! say what it computes (the core ATen dialect of `run_decompositions()`, and the training-IR dialect's ops where
//! they differ: `linear`, `layer_norm`, `scaled_dot_product_attention`, ...). Shapes come from the graph's own
//! tensor metadata, so view-like ops (view, squeeze, unsqueeze, flatten, expand) are reshapes to the size torch
//! recorded, and symbolic sizes (`s0`, `s77 + 1`) are evaluated once the user binds the symbols (`--dim s0=N`,
//! checked against the program's range constraints, or `--shape INPUT=AxB`). Shape inference, fusion and the
//! memory plan are the same passes as for ONNX.

mod archive;
mod aten;
mod pickle;
pub mod schema;
mod sym;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use wgslc_ir::{DType, Graph, ImportOptions, Tensor, TensorType, ValueId};

/// Why a `.pt2` could not be imported. Every variant names what it is about (entry, node, input or symbol).
#[derive(Debug, thiserror::Error)]
pub enum Pt2Error {
    #[error("cannot read '{path}': {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("not a valid .pt2 archive: {0}")]
    Archive(String),
    #[error("the program JSON does not match torch's export schema (major version 8): {0}")]
    Schema(String),
    #[error(
        "export schema version {major}.{minor} (written by torch {torch}) is not supported: wgslc reads major \
         version 8 (torch 2.6 and later)"
    )]
    Version { major: i64, minor: i64, torch: String },
    #[error("node '{node}' ({op}): {reason}")]
    Node { node: String, op: String, reason: String },
    #[error("node '{node}': unsupported op '{op}'")]
    UnsupportedOp { node: String, op: String },
    #[error("unsupported ops: {0}")]
    UnsupportedOps(String),
    #[error("input '{name}': {reason}")]
    Input { name: String, reason: String },
    #[error("output '{name}': {reason}")]
    Output { name: String, reason: String },
    #[error("unbound symbolic dimensions: {0}; bind them with --dim NAME=VALUE or --shape INPUT=AxBxC")]
    UnboundDims(String),
    #[error("--dim {name}={value}: {reason}")]
    Dim { name: String, value: usize, reason: String },
    #[error("binding '{0}' does not match any symbolic dimension or input of the program")]
    UnusedBinding(String),
    #[error("'{name}': {reason}")]
    Tensor { name: String, reason: String },
}

/// torch's `ScalarType` enum (schema.yaml) as an IR dtype.
pub(crate) fn dtype_of(t: i64) -> Result<DType, String> {
    Ok(match t {
        1 => DType::U8,
        2 => DType::I8,
        3 => DType::I16,
        4 => DType::I32,
        5 => DType::I64,
        6 => DType::F16,
        7 => DType::F32,
        8 => DType::F64,
        12 => DType::Bool,
        13 => DType::BF16,
        28 => DType::U16,
        29 => DType::F8E4M3FN,
        30 => DType::F8E5M2,
        31 => DType::F8E4M3FNUZ,
        32 => DType::F8E5M2FNUZ,
        9..=11 => return Err("complex tensors are not supported".into()),
        other => return Err(format!("dtype {other} is not supported")),
    })
}

/// Reads and imports a `.pt2` file (memory-mapped: uncompressed weights are decoded straight from the file).
pub fn import_file(path: &Path, opts: &ImportOptions) -> Result<Graph, Pt2Error> {
    let file = std::fs::File::open(path).map_err(|source| Pt2Error::Io { path: path.to_owned(), source })?;
    // SAFETY: the map is read-only and lives only for this import; a file changed underneath by another process
    // can give wrong weights, never unsafety beyond what reading it would give.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| Pt2Error::Io { path: path.to_owned(), source })?;
    import_bytes(&map, opts)
}

/// The program's user inputs, each size its value or `None` where symbolic, and its user outputs by the names
/// the program gives them (`cat_3`, not a name the model chose), as [`import_file`] would bind them.
pub fn signature_file(path: &Path) -> Result<wgslc_ir::Signature, Pt2Error> {
    let file = std::fs::File::open(path).map_err(|source| Pt2Error::Io { path: path.to_owned(), source })?;
    // SAFETY: as in `import_file`.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| Pt2Error::Io { path: path.to_owned(), source })?;
    let contents = archive::open(&map).map_err(Pt2Error::Archive)?;
    let ep = program(&contents)?;
    let graph = &ep.graph_module.graph;
    let sig = &ep.graph_module.signature;
    let mut out = wgslc_ir::Signature::default();
    for spec in &sig.input_specs {
        if let schema::InputSpec::UserInput { arg: schema::Argument::AsTensor(t) } = spec {
            let meta = graph
                .tensor_values
                .get(&t.name)
                .ok_or_else(|| Pt2Error::Input { name: t.name.clone(), reason: "no tensor metadata".into() })?;
            let dims = meta
                .sizes
                .iter()
                .map(|s| match s {
                    schema::SymInt::AsInt(n) => usize::try_from(*n).ok(),
                    schema::SymInt::AsExpr(_) => None,
                })
                .collect();
            out.inputs.push((t.name.clone(), dims));
        }
    }
    for spec in &sig.output_specs {
        if let schema::OutputSpec::UserOutput { arg: schema::Argument::AsTensor(t) } = spec {
            out.outputs.push(t.name.clone());
        }
    }
    Ok(out)
}

/// Imports a `.pt2` archive held in memory.
pub fn import_bytes(bytes: &[u8], opts: &ImportOptions) -> Result<Graph, Pt2Error> {
    let contents = archive::open(bytes).map_err(Pt2Error::Archive)?;
    import_program(&program(&contents)?, &contents, opts)
}

/// The ATen targets of a program's nodes, in order (for reports).
pub fn op_types(bytes: &[u8]) -> Result<Vec<String>, Pt2Error> {
    let contents = archive::open(bytes).map_err(Pt2Error::Archive)?;
    Ok(program(&contents)?.graph_module.graph.nodes.into_iter().map(|n| n.target).collect())
}

/// The program of an archive, its schema version checked first so that an unknown major is refused by name
/// rather than by whatever field it changed.
fn program(contents: &archive::Contents) -> Result<schema::ExportedProgram, Pt2Error> {
    let json = schema::quote_non_finite(&contents.program);
    let version: schema::VersionOnly = serde_json::from_slice(&json).map_err(|e| Pt2Error::Schema(e.to_string()))?;
    if version.schema_version.major != schema::SCHEMA_MAJOR {
        return Err(Pt2Error::Version {
            major: version.schema_version.major,
            minor: version.schema_version.minor,
            torch: version.torch_version.unwrap_or_else(|| "unknown".into()),
        });
    }
    serde_json::from_slice(&json).map_err(|e| Pt2Error::Schema(e.to_string()))
}

fn import_program(
    ep: &schema::ExportedProgram,
    contents: &archive::Contents,
    opts: &ImportOptions,
) -> Result<Graph, Pt2Error> {
    let graph = &ep.graph_module.graph;
    let sig = &ep.graph_module.signature;
    let mut used: BTreeSet<String> = BTreeSet::new();

    // Symbols: bound by --dim, or read off a --shape of an input whose size is the bare symbol.
    let mut dims: HashMap<String, i64> = HashMap::new();
    for (k, &v) in &opts.dims {
        if ep.range_constraints.contains_key(k) || graph_mentions(graph, k) {
            dims.insert(k.clone(), v as i64);
            used.insert(k.clone());
        }
    }
    for spec in &sig.input_specs {
        if let schema::InputSpec::UserInput { arg: schema::Argument::AsTensor(t) } = spec {
            let Some(shape) = opts.shapes.get(&t.name) else { continue };
            used.insert(t.name.clone());
            let meta = graph
                .tensor_values
                .get(&t.name)
                .ok_or_else(|| Pt2Error::Input { name: t.name.clone(), reason: "no tensor metadata".into() })?;
            if meta.sizes.len() != shape.len() {
                return Err(Pt2Error::Input {
                    name: t.name.clone(),
                    reason: format!("--shape has {} dims, the program's input has {}", shape.len(), meta.sizes.len()),
                });
            }
            for (s, &v) in meta.sizes.iter().zip(shape) {
                if let Some(sym) = match s {
                    schema::SymInt::AsExpr(e) => sym::as_symbol(&e.expr_str),
                    schema::SymInt::AsInt(_) => None,
                } {
                    dims.entry(sym).or_insert(v as i64);
                }
            }
        }
    }
    for (name, &v) in &dims {
        if let Some(r) = ep.range_constraints.get(name) {
            let (lo, hi) = (r.min_val.unwrap_or(i64::MIN), r.max_val.unwrap_or(i64::MAX));
            if v < lo || v > hi {
                return Err(Pt2Error::Dim {
                    name: name.clone(),
                    value: v as usize,
                    reason: format!("the program was exported for {name} in {}", range_text(lo, hi)),
                });
            }
        }
    }

    let mut imp = aten::Importer::new(graph, dims);
    let mut tied: HashMap<(String, Vec<i64>, Vec<i64>, i64), ValueId> = HashMap::new();
    let mut unbound: BTreeSet<String> = BTreeSet::new();
    if sig.input_specs.len() != graph.inputs.len() {
        return Err(Pt2Error::Schema(format!(
            "the signature names {} inputs, the graph has {}",
            sig.input_specs.len(),
            graph.inputs.len()
        )));
    }
    for spec in &sig.input_specs {
        use schema::InputSpec as S;
        let (arg, fqn) = match spec {
            S::UserInput { arg } => {
                let schema::Argument::AsTensor(t) = arg else {
                    // A non-tensor user input (an int or float argument) was specialized by export when it is a
                    // constant; a SymInt input is bound through its symbol.
                    continue;
                };
                let name = &t.name;
                if let Some(c) = opts.constants.get(name) {
                    used.insert(name.clone());
                    let v = imp.g.add_const(name.clone(), c.clone());
                    imp.bind(name, v);
                    continue;
                }
                let meta = graph
                    .tensor_values
                    .get(name)
                    .ok_or_else(|| Pt2Error::Input { name: name.clone(), reason: "no tensor metadata".into() })?;
                let dtype = dtype_of(meta.dtype).map_err(|reason| Pt2Error::Input { name: name.clone(), reason })?;
                let mut shape = Vec::new();
                for (i, s) in meta.sizes.iter().enumerate() {
                    match imp.size(s) {
                        Ok(v) => shape.push(v),
                        Err(sym::Unbound(sym)) => {
                            let range = ep
                                .range_constraints
                                .get(&sym)
                                .map(|r| {
                                    format!(", {}", range_text(r.min_val.unwrap_or(0), r.max_val.unwrap_or(i64::MAX)))
                                })
                                .unwrap_or_default();
                            unbound.insert(format!("'{sym}' (input '{name}', dim {i}{range})"));
                        }
                    }
                }
                if shape.len() == meta.sizes.len() {
                    if shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).is_none() {
                        return Err(Pt2Error::Input { name: name.clone(), reason: "shape overflows".into() });
                    }
                    let v = imp.g.add_value(name.clone(), Some(TensorType::new(dtype, shape)));
                    imp.g.inputs.push(v);
                    imp.bind(name, v);
                }
                continue;
            }
            S::Parameter { arg, parameter_name } => (arg, parameter_name),
            S::Buffer { arg, buffer_name } => (arg, buffer_name),
            S::TensorConstant { arg, tensor_constant_name } => (arg, tensor_constant_name),
            S::CustomObj { custom_obj_name } => {
                return Err(Pt2Error::Input {
                    name: custom_obj_name.clone(),
                    reason: "custom objects (TorchScript classes) are not supported".into(),
                })
            }
            S::Token { arg } => {
                return Err(Pt2Error::Input {
                    name: arg.name.clone(),
                    reason: "effect tokens (side-effecting ops) are not supported".into(),
                })
            }
            S::ConstantInput { name, .. } => {
                return Err(Pt2Error::Input { name: name.clone(), reason: "constant inputs are not supported".into() })
            }
        };
        let p = contents.payloads.get(fqn).ok_or_else(|| Pt2Error::Tensor {
            name: fqn.clone(),
            reason: format!("the program reads it, the archive ({} layout) does not hold it", contents.layout),
        })?;
        let key = (p.storage.clone(), p.sizes.clone(), p.strides.clone(), p.offset);
        let v = match tied.get(&key) {
            Some(&v) => v,
            None => {
                let storage = contents.storages.get(&p.storage).ok_or_else(|| Pt2Error::Tensor {
                    name: fqn.clone(),
                    reason: format!("its data '{}' is missing", p.storage),
                })?;
                let t: Tensor =
                    archive::decode(p, storage).map_err(|reason| Pt2Error::Tensor { name: fqn.clone(), reason })?;
                // A dotted FQN never collides with an FX name (identifiers), so weights keep their names.
                let name = if fqn.contains('.') { fqn.clone() } else { imp.g.fresh_name(fqn) };
                let v = imp.g.add_const(name, t);
                tied.insert(key, v);
                v
            }
        };
        imp.bind(&arg.name, v);
    }
    opts.check_bindings(&used, unbound, "program").map_err(|m| match m {
        wgslc_ir::BindingMismatch::Unbound(list) => Pt2Error::UnboundDims(list),
        wgslc_ir::BindingMismatch::Unused(k) => Pt2Error::UnusedBinding(k),
    })?;

    imp.nodes(&graph.nodes)?;

    for spec in &sig.output_specs {
        use schema::OutputSpec as O;
        match spec {
            O::UserOutput { arg } => {
                let v = imp.output(arg)?;
                imp.g.outputs.push(v);
            }
            O::BufferMutation { buffer_name, .. } => {
                return Err(Pt2Error::Output {
                    name: buffer_name.clone(),
                    reason: "the program writes this buffer (a model in training mode, e.g. BatchNorm statistics): \
                             export it after model.eval()"
                        .into(),
                })
            }
            O::UserInputMutation { user_input_name, .. } => {
                return Err(Pt2Error::Output {
                    name: user_input_name.clone(),
                    reason: "the program writes this input in place, which wgslc does not support".into(),
                })
            }
            O::LossOutput { arg }
            | O::GradientToParameter { arg }
            | O::GradientToUserInput { arg }
            | O::ParameterMutation { arg }
            | O::Token { arg } => {
                return Err(Pt2Error::Output {
                    name: arg.name.clone(),
                    reason: "a training program (loss, gradients, mutations or effect tokens) is not supported".into(),
                })
            }
        }
    }
    if imp.g.outputs.is_empty() {
        return Err(Pt2Error::Output { name: "(none)".into(), reason: "the program returns no tensor".into() });
    }
    Ok(imp.g)
}

fn range_text(lo: i64, hi: i64) -> String {
    if hi >= i64::MAX / 2 {
        format!("[{lo}, ∞)")
    } else {
        format!("[{lo}, {hi}]")
    }
}

/// Whether a symbol appears in any size of the graph (a symbol without a range constraint).
fn graph_mentions(g: &schema::Graph, name: &str) -> bool {
    g.tensor_values
        .values()
        .any(|m| m.sizes.iter().any(|s| matches!(s, schema::SymInt::AsExpr(e) if sym::mentions(&e.expr_str, name))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn testdata(case: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/pt2").join(case).join("model.pt2")
    }

    fn weights(g: &Graph) -> Vec<(String, Tensor)> {
        let mut w: Vec<(String, Tensor)> = g
            .value_ids()
            .filter_map(|v| Some((g.value(v).name.clone(), g.const_data(v)?.clone())))
            .filter(|(n, _)| n.contains('.'))
            .collect();
        w.sort_by(|a, b| a.0.cmp(&b.0));
        w
    }

    /// GPT-2 ties its LM head to the token embedding: one storage in the archive, one value in the graph.
    #[test]
    fn tied_weights_are_one_value() {
        let g = import_file(&testdata("gpt2"), &ImportOptions::default()).unwrap();
        let names: Vec<String> = weights(&g).into_iter().map(|(n, _)| n).collect();
        let tied = ["m.transformer.wte.weight", "m.lm_head.weight"];
        assert_eq!(names.iter().filter(|n| tied.contains(&n.as_str())).count(), 1, "{names:?}");
    }

    /// The archives torch 2.6 (a flat ZIP of pickles, `-Infinity` in the JSON) and torch 2.8 (one weights pickle)
    /// wrote of the same seeded models hold the weights torch 2.11's archive holds, bit for bit.
    #[test]
    fn every_torch_versions_archive_reads_the_same_weights() {
        for model in ["mlp", "cnn", "nanogpt"] {
            let want = weights(&import_file(&testdata(model), &ImportOptions::default()).unwrap());
            assert!(want.len() >= 4);
            for version in ["26", "28"] {
                let got = weights(
                    &import_file(&testdata(&format!("{model}_torch{version}")), &ImportOptions::default()).unwrap(),
                );
                // Constants the graph makes of arguments differ by version (torch 2.6 lists a view's shape).
                for w in want.iter().filter(|w| w.0.ends_with("weight") || w.0.ends_with("bias")) {
                    assert!(got.contains(w), "{model} written by torch {version}: {} differs or is missing", w.0);
                }
            }
        }
    }

    /// A symbol is bound by --dim or read off --shape, inside the range the program was exported for.
    #[test]
    fn symbolic_batch_binds_within_its_range() {
        let path = testdata("mlp_dynamic");
        let at = |dims: &[(&str, usize)], shapes: &[(&str, Vec<usize>)]| {
            let opts = ImportOptions {
                dims: dims.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
                shapes: shapes.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
                ..Default::default()
            };
            import_file(&path, &opts).map(|g| g.ty(g.inputs[0]).shape.clone())
        };
        assert_eq!(at(&[("s77", 9)], &[]).unwrap(), vec![9, 32]);
        assert_eq!(at(&[], &[("x", vec![5, 32])]).unwrap(), vec![5, 32]);
        let e = at(&[("s77", 65)], &[]).unwrap_err().to_string();
        assert!(e.contains("[1, 64]"), "{e}");
        let e = at(&[], &[]).unwrap_err().to_string();
        assert!(e.contains("'s77' (input 'x', dim 0, [1, 64])"), "{e}");
        let e = at(&[("s77", 4), ("batch", 4)], &[]).unwrap_err().to_string();
        assert!(e.contains("'batch'"), "{e}");
    }
}
