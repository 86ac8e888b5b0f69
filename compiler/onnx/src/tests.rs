//! Frontend tests on models built in code.

use crate::proto::*;
use crate::*;
use wgslc_ir::Op;

fn input(name: &str, dims: &[Dimension]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor { elem_type: 1, shape: Some(TensorShapeProto { dim: dims.to_vec() }) }),
            ..Default::default()
        }),
    }
}

fn fixed(d: i64) -> Dimension {
    Dimension { dim_value: Some(d), dim_param: None }
}

fn param(p: &str) -> Dimension {
    Dimension { dim_value: None, dim_param: Some(p.into()) }
}

fn node(op: &str, ins: &[&str], outs: &[&str]) -> NodeProto {
    NodeProto {
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        name: format!("{op}_node"),
        op_type: op.into(),
        ..Default::default()
    }
}

fn model(nodes: Vec<NodeProto>, inputs: Vec<ValueInfoProto>, outputs: &[&str], inits: Vec<TensorProto>) -> ModelProto {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: 17 }],
        graph: Some(GraphProto {
            node: nodes,
            input: inputs,
            output: outputs.iter().map(|n| ValueInfoProto { name: n.to_string(), r#type: None }).collect(),
            initializer: inits,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn import(m: &ModelProto, opts: &ImportOptions) -> Result<Graph, ImportError> {
    import_model(m, None, opts)
}

#[test]
fn unbound_symbolic_dims_are_listed() {
    let m = model(
        vec![node("Relu", &["x"], &["y"])],
        vec![input("x", &[param("batch"), fixed(4), param("seq")])],
        &["y"],
        vec![],
    );
    let err = import(&m, &ImportOptions::default()).unwrap_err().to_string();
    assert!(err.contains("'batch'") && err.contains("'seq'") && err.contains("--dim"), "{err}");
    let mut opts = ImportOptions::default();
    opts.dims.insert("batch".into(), 2);
    opts.dims.insert("seq".into(), 5);
    let g = import(&m, &opts).unwrap();
    assert_eq!(g.ty(g.inputs[0]).shape, vec![2, 4, 5]);
    opts.dims.insert("typo".into(), 1);
    assert!(import(&m, &opts).unwrap_err().to_string().contains("'typo'"));
}

#[test]
fn undefined_values_and_duplicates_are_named() {
    let m = model(vec![node("Relu", &["nope"], &["y"])], vec![input("x", &[fixed(2)])], &["y"], vec![]);
    let err = import(&m, &ImportOptions::default()).unwrap_err().to_string();
    assert!(err.contains("'Relu_node'") && err.contains("'nope'"), "{err}");
    let m = model(
        vec![node("Relu", &["x"], &["y"]), node("Neg", &["x"], &["y"])],
        vec![input("x", &[fixed(2)])],
        &["y"],
        vec![],
    );
    assert!(import(&m, &ImportOptions::default()).unwrap_err().to_string().contains("'y' is defined more than once"));
    let m = model(vec![], vec![input("x", &[fixed(2)])], &["ghost"], vec![]);
    assert!(import(&m, &ImportOptions::default()).unwrap_err().to_string().contains("'ghost'"));
}

#[test]
fn tensors_are_decoded_with_size_checks() {
    let raw = TensorProto {
        name: "w".into(),
        dims: vec![2],
        data_type: 1,
        raw_data: 1.5f32.to_le_bytes().repeat(2),
        ..Default::default()
    };
    assert_eq!(tensor::decode(&raw, None).unwrap().to_f64(), vec![1.5, 1.5]);
    let short = TensorProto { raw_data: vec![0; 5], ..raw.clone() };
    assert!(tensor::decode(&short, None).unwrap_err().to_string().contains("raw data holds 5 bytes"));
    let huge = TensorProto { dims: vec![1 << 20, 1 << 20, 1 << 20], ..raw.clone() };
    assert!(tensor::decode(&huge, None).unwrap_err().to_string().contains("too many elements"));
    let neg = TensorProto { dims: vec![-3], ..raw.clone() };
    assert!(tensor::decode(&neg, None).unwrap_err().to_string().contains("negative dimension"));
    let typed =
        TensorProto { name: "i".into(), dims: vec![3], data_type: 7, int64_data: vec![1, -2, 3], ..Default::default() };
    assert_eq!(tensor::decode(&typed, None).unwrap().to_i64(), vec![1, -2, 3]);
    let f16 = TensorProto {
        name: "h".into(),
        dims: vec![1],
        data_type: 10,
        raw_data: vec![0x00, 0x3c],
        ..Default::default()
    };
    assert_eq!(tensor::decode(&f16, None).unwrap().to_f64(), vec![1.0]);
}

#[test]
fn external_data_stays_inside_the_model_directory() {
    let dir = tempdir();
    std::fs::write(dir.join("w.bin"), [0u8; 16]).unwrap();
    let ext = |loc: &str, offset: &str, length: &str| TensorProto {
        name: "w".into(),
        dims: vec![2],
        data_type: 1,
        data_location: 1,
        external_data: vec![
            StringStringEntryProto { key: "location".into(), value: loc.into() },
            StringStringEntryProto { key: "offset".into(), value: offset.into() },
            StringStringEntryProto { key: "length".into(), value: length.into() },
        ],
        ..Default::default()
    };
    assert_eq!(tensor::decode(&ext("w.bin", "8", "8"), Some(&dir)).unwrap().to_f64(), vec![0.0, 0.0]);
    for (loc, off, len, want) in [
        ("../w.bin", "0", "8", "escapes"),
        ("/etc/passwd", "0", "8", "escapes"),
        ("w.bin", "12", "8", "outside"),
        ("w.bin", "0", "12", "differs"),
        ("missing.bin", "0", "8", "cannot read"),
    ] {
        let err = tensor::decode(&ext(loc, off, len), Some(&dir)).unwrap_err().to_string();
        assert!(err.contains(want), "{loc}: {err}");
    }
    assert!(tensor::decode(&ext("w.bin", "0", "8"), None).is_err());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn opset_variants_normalise_to_inputs() {
    // Unsqueeze-11 (axes attribute) and Unsqueeze-13 (axes input) import to the same form.
    let mut n = node("Unsqueeze", &["x"], &["y"]);
    n.attribute.push(AttributeProto { name: "axes".into(), ints: vec![0], ..Default::default() });
    let mut m = model(vec![n], vec![input("x", &[fixed(3)])], &["y"], vec![]);
    m.opset_import[0].version = 11;
    let g = import(&m, &ImportOptions::default()).unwrap();
    let node = g.node(g.node_ids().next().unwrap());
    assert_eq!(node.op, Op::Unsqueeze);
    assert_eq!(node.inputs.len(), 2);
    assert_eq!(g.const_data(node.inputs[1].unwrap()).unwrap().to_i64(), vec![0]);
}

/// An attribute that the model's opset made an input is refused, not ignored: ReduceMean-18 with an `axes`
/// attribute would otherwise reduce over every axis (onnxruntime rejects such a model as invalid).
#[test]
fn attributes_that_became_inputs_are_refused() {
    for (op, opset, since) in [("ReduceMean", 18, 18), ("ReduceSum", 13, 13), ("Unsqueeze", 13, 13)] {
        let mut n = node(op, &["x"], &["y"]);
        n.attribute.push(AttributeProto { name: "axes".into(), ints: vec![0], ..Default::default() });
        let mut m = model(vec![n], vec![input("x", &[fixed(3)])], &["y"], vec![]);
        m.opset_import[0].version = opset;
        let err = import(&m, &ImportOptions::default()).unwrap_err().to_string();
        assert!(err.contains(&format!("'axes' is not part of {op} at opset {opset}: since opset {since}")), "{err}");
        // One opset earlier the attribute is the op's own, and imports.
        m.opset_import[0].version = opset - 1;
        import(&m, &ImportOptions::default()).unwrap();
    }
}

#[test]
fn unknown_domains_and_subgraphs_are_refused() {
    let mut n = node("Relu", &["x"], &["y"]);
    n.domain = "com.microsoft".into();
    let m = model(vec![n], vec![input("x", &[fixed(3)])], &["y"], vec![]);
    assert!(matches!(import(&m, &ImportOptions::default()), Err(ImportError::UnknownDomain { .. })));
    let mut n = node("SequenceMap", &["x"], &["y"]);
    n.attribute.push(AttributeProto { name: "body".into(), g: Some(GraphProto::default()), ..Default::default() });
    let m = model(vec![n], vec![input("x", &[fixed(3)])], &["y"], vec![]);
    assert!(import(&m, &ImportOptions::default()).unwrap_err().to_string().contains("subgraph"));
    // A Loop is unrolled, so its trip count must be known: a run-time one names the input to bind.
    let mut n = node("Loop", &["x"], &["y"]);
    n.attribute.push(AttributeProto { name: "body".into(), g: Some(GraphProto::default()), ..Default::default() });
    let m = model(vec![n], vec![input("x", &[fixed(1)])], &["y"], vec![]);
    let e = import(&m, &ImportOptions::default()).unwrap_err().to_string();
    assert!(e.contains("trip count input 'x' must be known at compile time"), "{e}");
    // An If on a run-time condition names the input to bind.
    let mut n = node("If", &["x"], &["y"]);
    n.attribute.push(AttributeProto {
        name: "then_branch".into(),
        g: Some(GraphProto::default()),
        ..Default::default()
    });
    let m = model(vec![n], vec![input("x", &[fixed(1)])], &["y"], vec![]);
    let e = import(&m, &ImportOptions::default()).unwrap_err().to_string();
    assert!(e.contains("the condition input 'x' must be known at compile time"), "{e}");
}

fn tempdir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("wgslc-onnx-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn an_omitted_first_output_is_refused_after_the_op_is_known() {
    let x = || vec![input("x", &[fixed(2), fixed(3)])];
    // An unsupported op is named as such, whatever its outputs.
    let m = model(vec![node("Unique", &["x"], &["", "y"])], x(), &["y"], vec![]);
    let err = import(&m, &ImportOptions::default()).unwrap_err().to_string();
    assert!(err.contains("unsupported op 'Unique'"), "{err}");
    // Recurrences may omit Y (a state update reads only Y_h and Y_c).
    let m = model(vec![node("LSTM", &["x"], &["", "y_h"])], x(), &["y_h"], vec![]);
    assert!(import(&m, &ImportOptions::default()).is_ok());
    // A supported op (and one imported as several nodes) says what is missing.
    for op in ["Relu", "Sum"] {
        let m = model(vec![node(op, &["x"], &["", "y"])], x(), &["y"], vec![]);
        let err = import(&m, &ImportOptions::default()).unwrap_err().to_string();
        assert!(err.contains(&format!("'{op}_node'")) && err.contains("first output is omitted"), "{err}");
    }
    let m = model(vec![node("Relu", &["x"], &["", ""])], x(), &[], vec![]);
    assert!(import(&m, &ImportOptions::default()).unwrap_err().to_string().contains("has no outputs"));
}

#[test]
fn shapes_and_bindings_are_checked_against_the_model() {
    let m = model(vec![node("Relu", &["x"], &["y"])], vec![input("x", &[param("batch"), fixed(16)])], &["y"], vec![]);
    let with_shape = |s: Vec<usize>| {
        let mut o = ImportOptions::default();
        o.shapes.insert("x".into(), s);
        import(&m, &o).map(|_| ()).map_err(|e| e.to_string())
    };
    assert!(with_shape(vec![2, 16]).is_ok());
    let err = with_shape(vec![2, 5]).unwrap_err();
    assert!(err.contains("--shape x=2x5: dim 1 is fixed at 16"), "{err}");
    let err = with_shape(vec![]).unwrap_err();
    assert!(err.contains("has 0 dims, the model declares 2"), "{err}");
    // A misspelled --dim is named next to the dim it failed to bind.
    let mut o = ImportOptions::default();
    o.dims.insert("bacth".into(), 2);
    let err = import(&m, &o).unwrap_err().to_string();
    assert!(err.contains("'batch'") && err.contains("'bacth', given, matches nothing"), "{err}");
}

#[test]
fn every_unsupported_op_is_listed() {
    let m = model(
        vec![
            node("NonZero", &["x"], &["a"]),
            node("Relu", &["a"], &["b"]),
            node("NonZero", &["b"], &["c"]),
            node("Einsum2", &["c"], &["y"]),
        ],
        vec![input("x", &[fixed(2)])],
        &["y"],
        vec![],
    );
    let err = import(&m, &ImportOptions::default()).unwrap_err().to_string();
    assert!(
        err.contains("'NonZero' (2 nodes, the first 'NonZero_node')")
            && err.contains("'Einsum2' (node 'Einsum2_node')"),
        "{err}"
    );
    // One unsupported op keeps the one-op message.
    let m = model(vec![node("NonZero", &["x"], &["y"])], vec![input("x", &[fixed(2)])], &["y"], vec![]);
    let err = import(&m, &ImportOptions::default()).unwrap_err().to_string();
    assert_eq!(err, "node 'NonZero_node': unsupported op 'NonZero'");
}

/// Nodes listed out of topological order (onnxruntime's float16 converter appends its input Casts last) are
/// imported in data order; a cycle is still refused by the value its first node reads.
#[test]
fn nodes_out_of_topological_order_are_imported_in_data_order() {
    let m = model(
        vec![node("Neg", &["c"], &["y"]), node("Relu", &["x"], &["c"])],
        vec![input("x", &[fixed(4)])],
        &["y"],
        vec![],
    );
    let g = import(&m, &ImportOptions::default()).unwrap();
    let ops: Vec<&str> = g.topo_order().unwrap().into_iter().map(|n| g.node(n).op.name()).collect();
    assert_eq!(ops, ["Relu", "Neg"]);
    let order = topological_order(&[node("A", &["x"], &["a"]), node("B", &["x"], &["b"]), node("C", &["b"], &["c"])]);
    assert_eq!(order, [0, 1, 2], "an ordered graph keeps its order");
    let cycle = model(
        vec![node("Neg", &["b"], &["a"]), node("Relu", &["a"], &["b"])],
        vec![input("x", &[fixed(4)])],
        &["b"],
        vec![],
    );
    let e = import(&cycle, &ImportOptions::default()).unwrap_err().to_string();
    assert!(e.contains("which no node, input or initializer defines"), "{e}");
}

/// The layout proof's probe model of onnxruntime-genai's int4 build (testdata/genai, the builder's own file): every
/// MatMulNBits and the tied embedding's GatherBlockQuantized (over a Reshape of the LM head's codes) read float
/// weights of the decoded shapes that are unknown inputs, so no probe decodes a code; the model still imports.
#[test]
fn probe_models_read_quantized_weights_as_unknown_floats() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/genai/qwen2_int4_webgpu");
    let mut m = decode_model(&std::fs::read(dir.join("model.onnx")).unwrap()).unwrap();
    let quantized =
        |m: &ModelProto| m.graph.as_ref().unwrap().node.iter().filter(|n| n.op_type == "MatMulNBits").count();
    let before = quantized(&m);
    let names = without_large_weights(&mut m, 1 << 12);
    let g = m.graph.as_ref().unwrap();
    let ops: Vec<&str> = g.node.iter().map(|n| n.op_type.as_str()).collect();
    // The o-projections' codes (512 bytes in this tiny model) are under the size that goes.
    assert_eq!((before, quantized(&m)), (11, 2), "{ops:?}");
    assert!(!ops.contains(&"GatherBlockQuantized") && !ops.contains(&"Reshape"), "{ops:?}");
    let lm_head = g.input.iter().find(|i| i.name == "lm_head.MatMul.weight_Q4.dequantized").expect("the LM head");
    let dims: Vec<i64> = lm_head
        .r#type
        .as_ref()
        .unwrap()
        .tensor_type
        .as_ref()
        .unwrap()
        .shape
        .as_ref()
        .unwrap()
        .dim
        .iter()
        .map(|d| d.dim_value.unwrap())
        .collect();
    assert_eq!(dims, [64, 256], "[K, N]");
    assert!(names.contains("lm_head.MatMul.weight_Q4.dequantized"));
    assert!(names.contains("/model/embed_tokens/Reshape/output_0.dequantized"));
    assert!(!g.initializer.iter().any(|t| t.name == "lm_head.MatMul.weight_Q4"), "the codes are not imported");
    let mut io = ImportOptions::default();
    io.dims.insert("batch_size".into(), 1);
    io.dims.insert("sequence_length".into(), 1);
    io.dims.insert("past_sequence_length".into(), 2);
    io.dims.insert("total_sequence_length".into(), 3);
    io.dims.insert("kv_cache_dim".into(), 16);
    import_model(&m, Some(&dir), &io).unwrap();
}
