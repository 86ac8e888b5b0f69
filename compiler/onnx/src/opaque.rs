//! What the stages that import a model more than once need from its ONNX form: its signature (run-time inputs
//! with their declared dims, and outputs), and the model with its large weights as unknown inputs (for the
//! cache-layout proof of `--kv-cache`, which computes nothing from them).

use crate::proto::{Dimension, ModelProto, TensorShapeProto, TypeProto, TypeProtoTensor, ValueInfoProto};
use crate::ImportError;
use std::collections::{HashMap, HashSet};

/// The run-time inputs (graph inputs that are not initializers) with their dims (`None` where symbolic or
/// unknown, a symbolic dim named in `bound` its size there), and the outputs, as the model declares them.
pub fn signature(model: &ModelProto, bound: &HashMap<String, usize>) -> Result<wgslc_ir::Signature, ImportError> {
    let g = model.graph.as_ref().ok_or(ImportError::NoGraph)?;
    let inits: HashSet<&str> = g.initializer.iter().map(|t| t.name.as_str()).collect();
    let dims = |v: &ValueInfoProto| -> Vec<Option<usize>> {
        dims_of(v)
            .map(|d| {
                d.dim_value
                    .filter(|&v| v >= 0)
                    .map(|v| v as usize)
                    .or_else(|| d.dim_param.as_ref().and_then(|p| bound.get(p)).copied())
            })
            .collect()
    };
    Ok(wgslc_ir::Signature {
        inputs: g
            .input
            .iter()
            .filter(|i| !inits.contains(i.name.as_str()))
            .map(|i| (i.name.clone(), dims(i)))
            .collect(),
        outputs: g.output.iter().map(|o| o.name.clone()).collect(),
    })
}

/// The names of an input's symbolic dims (`None` for a fixed or unnamed one); empty for a name that is no input.
pub fn dim_names(model: &ModelProto, input: &str) -> Vec<Option<String>> {
    let Some(g) = model.graph.as_ref() else { return Vec::new() };
    g.input.iter().find(|i| i.name == input).map_or_else(Vec::new, |i| {
        dims_of(i).map(|d| d.dim_param.clone().filter(|p| d.dim_value.is_none() && !p.is_empty())).collect()
    })
}

fn dims_of(v: &ValueInfoProto) -> impl Iterator<Item = &Dimension> {
    let shape = v.r#type.as_ref().and_then(|t| t.tensor_type.as_ref()).and_then(|t| t.shape.as_ref());
    shape.into_iter().flat_map(|s| s.dim.iter())
}

/// The model as the cache-layout proof imports it at its probe shapes: every initializer of `min_elements` or more
/// that only float products and lookups read (the weights of MatMul, Gemm, Conv and Gather, which no mask is
/// computed from; a mask table a Slice reads stays, and so do quantized weights, which their ops take as
/// initializers only) becomes a run-time input of its shape, so the probe imports neither read nor store it.
/// Returns their names: the proof takes them as unknown in the compiled graph too.
pub fn without_large_weights(model: &mut ModelProto, min_elements: u64) -> HashSet<String> {
    const WEIGHT_READERS: [&str; 6] = ["MatMul", "Gemm", "Conv", "Gather", "GatherND", "Transpose"];
    let mut names = HashSet::new();
    let Some(g) = model.graph.as_mut() else { return names };
    let mut readers: HashMap<&str, Vec<&str>> = HashMap::new();
    for n in &g.node {
        for i in &n.input {
            readers.entry(i.as_str()).or_default().push(n.op_type.as_str());
        }
    }
    for t in &g.initializer {
        let n: u64 = t.dims.iter().map(|&d| d.max(0) as u64).product();
        let weight = readers.get(t.name.as_str()).is_some_and(|r| r.iter().all(|op| WEIGHT_READERS.contains(op)));
        if n >= min_elements && weight {
            names.insert(t.name.clone());
        }
    }
    let mut kept = Vec::new();
    for t in std::mem::take(&mut g.initializer) {
        if !names.contains(&t.name) {
            kept.push(t);
            continue;
        }
        let dim = t.dims.iter().map(|&d| Dimension { dim_value: Some(d), dim_param: None }).collect();
        if !g.input.iter().any(|i| i.name == t.name) {
            g.input.push(ValueInfoProto {
                name: t.name.clone(),
                r#type: Some(TypeProto {
                    tensor_type: Some(TypeProtoTensor {
                        elem_type: t.data_type,
                        shape: Some(TensorShapeProto { dim }),
                    }),
                    ..Default::default()
                }),
            });
        }
    }
    g.initializer = kept;
    names
}
