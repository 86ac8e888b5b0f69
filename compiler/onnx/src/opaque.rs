//! What the stages that import a model more than once need from its ONNX form: its signature (run-time inputs
//! with their declared dims, and outputs), and the model with its large weights as unknown inputs (for the
//! cache-layout proof of `--kv-cache`, which computes nothing from them).

use crate::proto::{
    AttributeProto, Dimension, GraphProto, ModelProto, NodeProto, TensorProto, TensorShapeProto, TypeProto,
    TypeProtoTensor, ValueInfoProto,
};
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
/// computed from; a mask table a Slice reads stays) becomes a run-time input of its shape, so the probe imports
/// neither read nor store it; onnxruntime's quantized products and lookups first become the float ops they compute
/// over such an input (`dequantized_readers`). Returns their names: the proof takes them as unknown in the compiled
/// graph too.
pub fn without_large_weights(model: &mut ModelProto, min_elements: u64) -> HashSet<String> {
    const WEIGHT_READERS: [&str; 6] = ["MatMul", "Gemm", "Conv", "Gather", "GatherND", "Transpose"];
    let mut names = HashSet::new();
    let Some(g) = model.graph.as_mut() else { return names };
    dequantized_readers(g, min_elements);
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

/// onnxruntime's quantized readers of large weights, as the float ops they compute over a float weight of the
/// decoded shape (a new initializer-free name, `<weight>.dequantized`, that [`without_large_weights`] then makes an
/// unknown input): `MatMulNBits(A, B, scales, .., bias)` as `MatMul(A, [K, N])` (plus the bias) and
/// `GatherBlockQuantized(data, indices, scales)` over its rows as `Gather`. The proof computes nothing from their
/// results, and importing a quantized weight decodes every code: an int4 0.5B model's probes spent seconds each.
fn dequantized_readers(g: &mut GraphProto, min_elements: u64) {
    let inits: HashMap<String, (Vec<i64>, i32)> =
        g.initializer.iter().map(|t| (t.name.clone(), (t.dims.clone(), t.data_type))).collect();
    let large = |name: &str| {
        inits.get(name).filter(|(d, _)| d.iter().map(|&x| x.max(0) as u64).product::<u64>() >= min_elements)
    };
    let int =
        |n: &NodeProto, key: &str, default: i64| n.attribute.iter().find(|a| a.name == key).map_or(default, |a| a.i);
    // A lookup's table may be a constant Reshape of a large initializer (the builder's tied int4 embedding reads
    // the LM head's codes so): its data type and target dims, and the Reshapes read by nothing else.
    let constants = g.node.iter().filter(|n| n.op_type == "Constant" && n.domain.is_empty() && n.output.len() == 1);
    let ints: HashMap<&str, Vec<i64>> =
        g.initializer
            .iter()
            .map(|t| (t.name.as_str(), t))
            .chain(constants.filter_map(|n| {
                Some((n.output[0].as_str(), n.attribute.iter().find(|a| a.name == "value")?.t.as_ref()?))
            }))
            .filter(|(_, t)| t.data_type == 7 && t.dims.len() == 1)
            .map(|(name, t)| {
                let raw = t.raw_data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")));
                (name, if t.raw_data.is_empty() { t.int64_data.clone() } else { raw.collect() })
            })
            .collect();
    let mut readers: HashMap<&str, usize> = HashMap::new();
    for n in &g.node {
        for i in &n.input {
            *readers.entry(i.as_str()).or_default() += 1;
        }
    }
    let reshaped: HashMap<String, (Vec<i64>, i32)> = g
        .node
        .iter()
        .filter(|n| n.op_type == "Reshape" && n.domain.is_empty() && n.input.len() == 2 && n.output.len() == 1)
        .filter(|n| readers.get(n.output[0].as_str()) == Some(&1))
        .filter_map(|n| {
            let ((_, dt), shape) = (large(&n.input[0])?, ints.get(n.input[1].as_str())?);
            shape.iter().all(|&d| d > 0).then(|| (n.output[0].clone(), (shape.clone(), *dt)))
        })
        .collect();
    let reshape_inputs: HashMap<String, Vec<String>> = g
        .node
        .iter()
        .filter(|n| n.output.first().is_some_and(|o| reshaped.contains_key(o)))
        .map(|n| (n.output[0].clone(), n.input.clone()))
        .collect();
    let mut dropped = HashSet::new();
    let mut replaced: HashSet<String> = HashSet::new();
    let mut nodes = Vec::with_capacity(g.node.len());
    let mut added = Vec::new();
    for n in std::mem::take(&mut g.node) {
        let input = |i: usize| n.input.get(i).map(String::as_str).filter(|s| !s.is_empty());
        let float = input(2).and_then(|s| inits.get(s)).map(|(_, t)| *t);
        let table = input(0).and_then(|s| large(s).or_else(|| reshaped.get(s)).cloned());
        let rewrite = match (n.domain.as_str(), n.op_type.as_str(), float) {
            ("com.microsoft", "MatMulNBits", Some(t)) if input(1).and_then(large).is_some() && input(4).is_none() => {
                let (k, m) = (int(&n, "K", 0), int(&n, "N", 0));
                Some(("MatMul", vec![k, m], t))
            }
            ("com.microsoft", "GatherBlockQuantized", Some(t))
                if int(&n, "gather_axis", 0) == 0 && [-1, 1].contains(&int(&n, "quantize_axis", 1)) =>
            {
                // uint8 data packs 8 / bits codes a byte; int4/uint4 data holds one each.
                table.filter(|(d, _)| d.len() == 2).map(|(d, dt)| {
                    let per = if dt == 2 { 8 / int(&n, "bits", 4).clamp(1, 8) } else { 1 };
                    if reshaped.contains_key(&n.input[0]) {
                        dropped.insert(n.input[0].clone());
                    }
                    ("Gather", vec![d[0], d[1] * per], t)
                })
            }
            _ => None,
        };
        let Some((op, dims, elem)) = rewrite.filter(|r| r.1.iter().all(|&d| d > 0)) else {
            nodes.push(n);
            continue;
        };
        replaced.extend(n.input.iter().filter(|i| !i.is_empty()).cloned());
        if let Some(r) = dropped.iter().find(|&o| n.input.first() == Some(o)) {
            replaced.extend(reshape_inputs.get(r).into_iter().flatten().cloned());
        }
        let weight = format!("{}.dequantized", n.input[if op == "Gather" { 0 } else { 1 }]);
        let (a, bias) = (n.input[0].clone(), input(5).map(str::to_string));
        let (ins, first) = if op == "Gather" {
            (vec![weight.clone(), n.input[1].clone()], None)
        } else {
            (vec![a, weight.clone()], bias.as_ref().map(|_| format!("{}.product", n.output[0])))
        };
        let out = first.clone().unwrap_or_else(|| n.output[0].clone());
        let attribute = if op == "Gather" {
            vec![AttributeProto { name: "axis".into(), r#type: 2, i: 0, ..Default::default() }]
        } else {
            Vec::new()
        };
        nodes.push(NodeProto {
            input: ins,
            output: vec![out.clone()],
            name: n.name.clone(),
            op_type: op.into(),
            domain: String::new(),
            attribute,
        });
        if let (Some(b), Some(_)) = (bias, first) {
            nodes.push(NodeProto {
                input: vec![out, b],
                output: vec![n.output[0].clone()],
                name: format!("{}.bias", n.name),
                op_type: "Add".into(),
                ..Default::default()
            });
        }
        if !added.iter().any(|t: &TensorProto| t.name == weight) {
            added.push(TensorProto { name: weight, dims, data_type: elem, ..Default::default() });
        }
    }
    nodes.retain(|n| !(n.op_type == "Reshape" && n.output.first().is_some_and(|o| dropped.contains(o))));
    // The quantized weights, scales and zero points that no node reads any more (in a subgraph neither) go.
    let mut read = HashSet::new();
    read_names(&nodes, &mut read);
    let outputs: HashSet<&str> = g.output.iter().map(|o| o.name.as_str()).collect();
    g.initializer
        .retain(|t| !replaced.contains(&t.name) || read.contains(t.name.as_str()) || outputs.contains(t.name.as_str()));
    g.node = nodes;
    // Initializers without data: the caller turns each (large, read only by MatMul and Gather) into an input.
    g.initializer.extend(added);
}

/// Every name the nodes read, in their subgraphs too (an If's branches read the outer graph's initializers).
fn read_names<'a>(nodes: &'a [NodeProto], read: &mut HashSet<&'a str>) {
    for n in nodes {
        read.extend(n.input.iter().map(String::as_str));
        for a in &n.attribute {
            for sub in a.g.iter().chain(&a.graphs) {
                read_names(&sub.node, read);
            }
        }
    }
}
