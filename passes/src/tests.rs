//! Pass tests on hand-built graphs.

use crate::*;
use wgslc_ir::{BinaryOp, DType, Graph, Op, Tensor, TensorType};

fn f32_input(g: &mut Graph, name: &str, shape: &[usize]) -> wgslc_ir::ValueId {
    let v = g.add_value(name, Some(TensorType::new(DType::F32, shape.to_vec())));
    g.inputs.push(v);
    v
}

#[test]
fn shape_subgraph_folds_into_an_alias() {
    // x: [2, 3, 4] → Shape → Gather(0) → Concat([·, -1]) → Reshape(x, ·): the exporter pattern for flatten.
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[2, 3, 4]);
    let shape = g.add_value("shape", None);
    g.add_node("shape", Op::Shape { start: 0, end: None }, vec![Some(x)], vec![shape]).unwrap();
    let zero = g.add_const("zero", Tensor::i64(vec![1], vec![0]));
    let batch = g.add_value("batch", None);
    g.add_node("gather", Op::Gather { axis: 0 }, vec![Some(shape), Some(zero)], vec![batch]).unwrap();
    let minus1 = g.add_const("m1", Tensor::i64(vec![1], vec![-1]));
    let spec = g.add_value("spec", None);
    g.add_node("concat", Op::Concat { axis: 0 }, vec![Some(batch), Some(minus1)], vec![spec]).unwrap();
    let y = g.add_value("y", None);
    g.add_node("reshape", Op::Reshape { allowzero: false }, vec![Some(x), Some(spec)], vec![y]).unwrap();
    g.outputs.push(y);

    run_pipeline(&mut g, None).unwrap();
    // Only the alias (Reshape) and the copy that gives the output its own buffer remain.
    let ops: Vec<String> = g.topo_order().unwrap().iter().map(|&n| g.node(n).op.name().to_string()).collect();
    assert_eq!(ops, ["Alias", "StridedCopy"]);
    assert_eq!(g.ty(g.outputs[0]).shape, vec![2, 12]);
}

#[test]
fn constant_arithmetic_folds_and_runtime_arithmetic_stays() {
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[3]);
    let a = g.add_const("a", Tensor::f32(vec![3], vec![1.0, 2.0, 3.0]));
    let b = g.add_const("b", Tensor::f32(vec![], vec![10.0]));
    let ab = g.add_value("ab", None);
    g.add_node("mul", Op::Binary(BinaryOp::Mul), vec![Some(a), Some(b)], vec![ab]).unwrap();
    let y = g.add_value("y", None);
    g.add_node("add", Op::Binary(BinaryOp::Add), vec![Some(x), Some(ab)], vec![y]).unwrap();
    g.outputs.push(y);
    run_pipeline(&mut g, None).unwrap();
    assert_eq!(g.num_nodes(), 1);
    assert_eq!(g.const_data(ab).unwrap().to_f64(), vec![10.0, 20.0, 30.0]);
}

#[test]
fn runtime_shape_input_is_a_clear_error() {
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[4]);
    let s = g.add_value("s", Some(TensorType::new(DType::I64, vec![1])));
    g.inputs.push(s);
    let y = g.add_value("y", None);
    g.add_node("r", Op::Reshape { allowzero: false }, vec![Some(x), Some(s)], vec![y]).unwrap();
    g.outputs.push(y);
    let err = run_pipeline(&mut g, None).unwrap_err().to_string();
    assert!(err.contains("node 'r' (Reshape)") && err.contains("must be known at compile time"), "{err}");
}

#[test]
fn int64_constants_out_of_i32_range_are_refused() {
    let mut g = Graph::new();
    let x = g.add_value("x", Some(TensorType::new(DType::I64, vec![1])));
    g.inputs.push(x);
    let big = g.add_const("big", Tensor::i64(vec![1], vec![1 << 40]));
    let y = g.add_value("y", None);
    g.add_node("add", Op::Binary(BinaryOp::Add), vec![Some(x), Some(big)], vec![y]).unwrap();
    g.outputs.push(y);
    let err = run_pipeline(&mut g, None).unwrap_err().to_string();
    assert!(err.contains("'big'") && err.contains("i32"), "{err}");
}

#[test]
fn memory_plan_gives_aliases_their_roots_slot() {
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[2, 2]);
    let r = g.add_value("r", None);
    g.add_node("relu", Op::Unary(wgslc_ir::UnaryOp::Relu), vec![Some(x)], vec![r]).unwrap();
    let s = g.add_const("s", Tensor::i64(vec![1], vec![4]));
    let f = g.add_value("f", None);
    g.add_node("flat", Op::Reshape { allowzero: false }, vec![Some(r), Some(s)], vec![f]).unwrap();
    let y = g.add_value("y", None);
    g.add_node("neg", Op::Unary(wgslc_ir::UnaryOp::Neg), vec![Some(f)], vec![y]).unwrap();
    g.outputs.push(y);
    run_pipeline(&mut g, None).unwrap();
    let sched = schedule(&g, &FuseOptions { fuse: false, ..Default::default() }).unwrap();
    assert_eq!(sched.kernels.len(), 2);
    let plan = plan_memory(&g, &sched).unwrap();
    assert_eq!(plan.slots[&r], plan.slots[&f]);
    assert_ne!(plan.slots[&x].buffer, plan.slots[&r].buffer);
    assert_eq!(plan.buffers.len(), 3);
}
