//! Unit tests of the decoder plan: cache pairing and the signatures it refuses.

use super::*;

fn sig(inputs: &[(&str, &[Option<usize>])], outputs: &[&str]) -> Signature {
    Signature {
        inputs: inputs.iter().map(|(n, d)| (n.to_string(), d.to_vec())).collect(),
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
    }
}

fn kv() -> KvCache {
    KvCache { capacity: 10, chunk: 4, state: vec![], fixed: HashSet::new() }
}

const ROLES_2D: [(&str, &[Option<usize>]); 3] =
    [("input_ids", &[None, None]), ("attention_mask", &[None, None]), ("position_ids", &[None, None])];
const CACHE: &[Option<usize>] = &[None, Some(2), None, Some(16)];

/// Named pairs, the steps' import shapes, and positional pairs where no output is named `present.N.*`.
#[test]
fn caches_pair_by_name_or_by_position() {
    let mut ins = ROLES_2D.to_vec();
    ins.push(("past_key_values.0.key", CACHE));
    let named = sig(&ins, &["logits", "present.0.key"]);
    let p = DecoderPlan::new(&named, &kv(), CacheLayout::Window).unwrap();
    assert_eq!(p.pairs, [("present.0.key".to_string(), "past_key_values.0.key".to_string())]);
    assert!(!p.positional);
    let d = p.step_shapes(StepKind::Decode);
    assert_eq!(d["past_key_values.0.key"], [1, 2, 9, 16]);
    assert_eq!(d["attention_mask"], [1, 10]);
    assert_eq!(d["input_ids"], [1, 1]);
    let f = p.step_shapes(StepKind::Prefill);
    assert_eq!((f["input_ids"].clone(), f["attention_mask"].clone()), (vec![1, 4], vec![1, 13]));
    // Every key at its position: the capacity a multiple of the chunk, the prefill step's past one chunk short.
    let p = DecoderPlan::new(&named, &kv(), CacheLayout::Positions).unwrap();
    assert_eq!(p.step_shapes(StepKind::Prefill)["past_key_values.0.key"], [1, 2, 8, 16]);

    let mut ins = ROLES_2D.to_vec();
    ins.extend([("pk0", CACHE), ("pv0", CACHE)]);
    let p = DecoderPlan::new(&sig(&ins, &["view_9", "cat_1", "cat_2"]), &kv(), CacheLayout::Window).unwrap();
    assert!(p.positional);
    assert_eq!(p.logits, "view_9");
    assert_eq!(p.pairs[1], ("cat_2".to_string(), "pv0".to_string()));
}

/// What generation can't use is refused by the input it is about.
#[test]
fn unusable_signatures_are_refused_by_input() {
    let refused = |ins: &[(&str, &[Option<usize>])], outs: &[&str]| {
        DecoderPlan::new(&sig(ins, outs), &kv(), CacheLayout::Window).unwrap_err().to_string()
    };
    let two_symbolic: &[Option<usize>] = &[None, None, None, Some(16)];
    let mut ins = ROLES_2D.to_vec();
    ins.push(("past_key_values.0.key", two_symbolic));
    let e = refused(&ins, &["logits", "present.0.key"]);
    assert!(e.starts_with("input 'past_key_values.0.key'") && e.contains("it has 2"), "{e}");
    let mut ins = ROLES_2D[..1].to_vec();
    ins.push(("past_key_values.0.key", CACHE));
    let e = refused(&ins, &["logits", "present.0.key"]);
    assert!(e.starts_with("input 'attention_mask'"), "{e}");
    // Without position_ids (positions from the mask, as onnxruntime-genai's models derive them) it plans.
    let mut ins = ROLES_2D[..2].to_vec();
    ins.push(("past_key_values.0.key", CACHE));
    assert!(DecoderPlan::new(&sig(&ins, &["logits", "present.0.key"]), &kv(), CacheLayout::Window).is_ok());
    let mut ins = ROLES_2D.to_vec();
    ins.extend([("past_key_values.0.key", CACHE), ("token_type_ids", &[None, None][..])]);
    let e = refused(&ins, &["logits", "present.0.key"]);
    assert!(e.starts_with("input 'token_type_ids'") && e.contains("--const"), "{e}");
    // No named pair and not one output per cache after the logits.
    let mut ins = ROLES_2D.to_vec();
    ins.extend([("pk0", CACHE), ("pv0", CACHE)]);
    let e = refused(&ins, &["view_9", "cat_1"]);
    assert!(e.contains("found no cache inputs"), "{e}");
}

/// A prefill step's `logits = Cast(MatMul(h, B))` gathered at its last index: after `last_row` the head reads
/// the gathered row of `h`, the step's `logits` output is that one row (keeping the name), and `dce` drops the
/// chunk-wide product; logits that another node also reads stay as they are.
#[test]
fn the_prefill_head_multiplies_the_last_row_only() {
    let build = |extra_reader: bool| {
        let mut g = Graph::new();
        let f32s = |shape: &[usize]| Some(TensorType::new(DType::F32, shape.to_vec()));
        let h = g.add_value("prefill/h", f32s(&[1, 4, 8]));
        let index = g.add_value(format!("{PREFILL}{LAST_INDEX}"), Some(TensorType::new(DType::I64, vec![1])));
        g.inputs = vec![h, index];
        let b = g.add_const("head", Tensor::f32(vec![8, 10], vec![0.5; 80]));
        let product = g.add_value("prefill/product", f32s(&[1, 4, 10]));
        g.add_node("prefill/matmul", Op::MatMul, vec![Some(h), Some(b)], vec![product]).unwrap();
        let logits = g.add_value("prefill/logits", f32s(&[1, 4, 10]));
        let cast = Op::Cast { to: DType::F32, saturate: true };
        g.add_node("prefill/cast", cast, vec![Some(product)], vec![logits]).unwrap();
        let row = g.add_value(format!("{PREFILL}{LAST_LOGITS}"), f32s(&[1, 1, 10]));
        let gather = Op::Gather { axis: 1 };
        g.add_node(format!("{PREFILL}{LAST_LOGITS}"), gather, vec![Some(logits), Some(index)], vec![row]).unwrap();
        let next = g.add_value("prefill/next_token", Some(TensorType::new(DType::I64, vec![1, 1])));
        let argmax = Op::ArgReduce { max: true, axis: -1, keepdims: false, select_last: false };
        g.add_node("prefill/next_token", argmax, vec![Some(row)], vec![next]).unwrap();
        g.outputs = vec![logits, next];
        if extra_reader {
            let e = g.add_value("prefill/exp", f32s(&[1, 4, 10]));
            g.add_node("prefill/exp", Op::Unary(wgslc_ir::UnaryOp::Exp), vec![Some(logits)], vec![e]).unwrap();
            g.outputs.push(e);
        }
        g
    };
    let mut g = build(false);
    prefill_head_on_last_row(&mut g).unwrap();
    crate::eliminate_dead_code(&mut g);
    let out = g.value(g.outputs[0]);
    assert_eq!((out.name.as_str(), &out.ty.as_ref().unwrap().shape[..]), ("prefill/logits", &[1, 1, 10][..]));
    let matmuls: Vec<NodeId> = g.node_ids().filter(|&n| g.node(n).op == Op::MatMul).collect();
    assert_eq!(matmuls.len(), 1, "the chunk-wide product is gone");
    let a = g.node(matmuls[0]).inputs[0].unwrap();
    let gather = g.node(g.value(a).producer.unwrap());
    assert_eq!((&gather.op, gather.inputs[0]), (&Op::Gather { axis: 1 }, Some(g.inputs[0])));
    assert_eq!(g.value(a).ty.as_ref().unwrap().shape, [1, 1, 8]);
    // The ArgMax reads the new row.
    let argmax = g.node_ids().find(|&n| matches!(g.node(n).op, Op::ArgReduce { .. })).unwrap();
    assert_eq!(g.node(argmax).inputs[0], Some(g.outputs[0]));

    let mut g = build(true);
    let before = g.num_nodes();
    prefill_head_on_last_row(&mut g).unwrap();
    assert_eq!(g.num_nodes(), before, "logits read by another node: unchanged");
    assert_eq!(g.ty(g.outputs[0]).shape, [1, 4, 10]);
}
