//! Pass tests on hand-built graphs.

mod decode;
mod fusion;

use crate::*;
use wgslc_ir::{BinaryOp, DType, Graph, Op, Tensor, TensorType, ValueId};

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

/// A ScatterND of constants folds (a mask's slice assignment), negative indices counting from the end; the
/// reductions combine with the data.
#[test]
fn constant_scatter_nd_folds() {
    for (reduction, want) in [
        (wgslc_ir::ScatterReduction::None, vec![1.0, 2.0, 7.0, 8.0, 5.0, 6.0]),
        (wgslc_ir::ScatterReduction::Add, vec![1.0, 2.0, 10.0, 12.0, 5.0, 6.0]),
    ] {
        let mut g = Graph::new();
        let x = f32_input(&mut g, "x", &[3, 2]);
        let data = g.add_const("data", Tensor::f32(vec![3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
        let idx = g.add_const("idx", Tensor::i64(vec![1, 1], vec![-2]));
        let upd = g.add_const("upd", Tensor::f32(vec![1, 2], vec![7.0, 8.0]));
        let s = g.add_value("s", None);
        let op = Op::Scatter { axis: None, reduction };
        g.add_node("scatter", op, vec![Some(data), Some(idx), Some(upd)], vec![s]).unwrap();
        let y = g.add_value("y", None);
        g.add_node("add", Op::Binary(BinaryOp::Add), vec![Some(x), Some(s)], vec![y]).unwrap();
        g.outputs.push(y);
        run_pipeline(&mut g, None).unwrap();
        assert_eq!(g.num_nodes(), 1);
        assert_eq!(g.const_data(s).unwrap().to_f64(), want);
    }
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

/// A small deterministic generator (xorshift), so property tests need no extra dependency and replay exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A random DAG of elementwise ops, MatMuls, Softmaxes, Transposes and Reshapes over [4, 8] and [8, 8] tensors.
fn random_graph(seed: u64) -> Graph {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut g = Graph::new();
    let mut vals = vec![f32_input(&mut g, "x0", &[4, 8]), f32_input(&mut g, "x1", &[4, 8])];
    let w = g.add_const("w", Tensor::f32(vec![8, 8], (0..64).map(|i| i as f32 * 0.01).collect()));
    let nodes = 4 + rng.below(20);
    for i in 0..nodes {
        let a = vals[rng.below(vals.len())];
        let b = vals[rng.below(vals.len())];
        let y = g.add_value(format!("v{i}"), None);
        let (op, ins) = match rng.below(7) {
            0 => (Op::Binary(BinaryOp::Add), vec![Some(a), Some(b)]),
            1 => (Op::Binary(BinaryOp::Mul), vec![Some(a), Some(b)]),
            2 => (Op::Unary(wgslc_ir::UnaryOp::Tanh), vec![Some(a)]),
            3 => (Op::MatMul, vec![Some(a), Some(w)]),
            4 => (Op::Softmax { axis: -1, legacy: false, log: false }, vec![Some(a)]),
            5 => {
                // Transpose then back: a layout copy the scheduler may fold.
                let t = g.add_value(format!("t{i}"), None);
                g.add_node(format!("tr{i}"), Op::Transpose { perm: Some(vec![1, 0]) }, vec![Some(a)], vec![t]).unwrap();
                (Op::Transpose { perm: Some(vec![1, 0]) }, vec![Some(t)])
            }
            _ => {
                let s = g.add_const(format!("s{i}"), Tensor::i64(vec![2], vec![8, 4]));
                let r = g.add_value(format!("r{i}"), None);
                g.add_node(format!("rs{i}"), Op::Reshape { allowzero: false }, vec![Some(a), Some(s)], vec![r])
                    .unwrap();
                let s2 = g.add_const(format!("s2{i}"), Tensor::i64(vec![2], vec![4, 8]));
                (Op::Reshape { allowzero: false }, vec![Some(r), Some(s2)])
            }
        };
        g.add_node(format!("n{i}"), op, ins, vec![y]).unwrap();
        vals.push(y);
    }
    // One or two outputs, from late values.
    g.outputs.push(*vals.last().unwrap());
    if rng.below(2) == 0 {
        let o = vals[2 + rng.below(vals.len() - 2)];
        if !g.outputs.contains(&o) {
            g.outputs.push(o);
        }
    }
    g
}

#[test]
fn property_random_dags_schedule_and_plan_soundly() {
    for seed in 0..200u64 {
        for fuse in [true, false] {
            for reuse in [true, false] {
                let mut g = random_graph(seed);
                run_pipeline_with(&mut g, None, fuse).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
                let sched = schedule(&g, &FuseOptions { fuse, ..Default::default() })
                    .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
                // verify_schedule ran inside: every group reads only values written by earlier groups.
                let plan = plan_memory_with(&g, &sched, &MemoryOptions { reuse, ..Default::default() })
                    .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
                // Independently of verify_plan: values overlapping in memory are never live at once, every value
                // is written before it is read, offsets are aligned and slots fit their buffers.
                for (i, a) in plan.lifetimes.iter().enumerate() {
                    assert!(a.first <= a.last, "seed {seed}");
                    for b in &plan.lifetimes[i + 1..] {
                        if a.buffer == b.buffer && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes {
                            assert!(
                                a.last < b.first || b.last < a.first,
                                "seed {seed}: values live at once overlap in memory"
                            );
                        }
                    }
                }
                // WebGPU's binding rules hold for every kernel: no buffer bound both read-only and read-write, no
                // two writable bindings overlap.
                for k in &sched.kernels {
                    let (reads, writes) = group_io(&g, &sched, k);
                    let b: Vec<(ValueId, bool)> =
                        reads.iter().map(|&v| (v, false)).chain(writes.iter().map(|&v| (v, true))).collect();
                    let rw = binding_access(&plan, &b);
                    for (i, &(v, _)) in b.iter().enumerate() {
                        let s = plan.slots[&v];
                        for (j, &(u, _)) in b.iter().enumerate().skip(i + 1) {
                            let t = plan.slots[&u];
                            if s.buffer == t.buffer {
                                assert_eq!(rw[i], rw[j], "seed {seed}: a buffer bound read-only and read-write");
                                let overlap = s.offset < t.offset + t.size && t.offset < s.offset + s.size;
                                assert!(!(rw[i] && overlap && s != t), "seed {seed}: writable bindings overlap");
                            }
                        }
                    }
                }
                for s in plan.slots.values() {
                    assert_eq!(s.offset % ALIGN, 0);
                    assert!(s.offset + s.size <= plan.buffers[s.buffer].size, "seed {seed}");
                }
                // In-place writes merge lifetimes, so the bound that holds is the one over the merged spans.
                let merged_bound = (0..sched.kernels.len())
                    .map(|s| {
                        plan.lifetimes.iter().filter(|l| l.first <= s && s <= l.last).map(|l| l.bytes).sum::<u64>()
                    })
                    .max()
                    .unwrap_or(0);
                assert!(plan.stats.planned_bytes >= merged_bound, "seed {seed}");
                assert!(plan.in_place.is_empty() || reuse, "seed {seed}");
                // Offsets are 256-aligned, so small values may pad; never more than that.
                let aligned: u64 = plan.lifetimes.iter().map(|l| l.bytes.div_ceil(ALIGN) * ALIGN).sum();
                assert!(plan.stats.planned_bytes <= aligned, "seed {seed}");
                if !reuse {
                    assert_eq!(plan.stats.planned_bytes, plan.stats.naive_bytes);
                }
            }
        }
    }
}

#[test]
fn an_elementwise_chain_runs_in_place() {
    // x → tanh → tanh → tanh → tanh → y: each tanh's input dies there, so t1 and t2 are written over t0: one
    // 4096-byte slot, below the 8192-byte bound of liveness alone.
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[1024]);
    let mut v = x;
    for i in 0..4 {
        let y = g.add_value(format!("t{i}"), None);
        g.add_node(format!("n{i}"), Op::Unary(wgslc_ir::UnaryOp::Tanh), vec![Some(v)], vec![y]).unwrap();
        v = y;
    }
    g.outputs.push(v);
    run_pipeline(&mut g, None).unwrap();
    let sched = schedule(&g, &FuseOptions { fuse: false, ..Default::default() }).unwrap();
    let plan = plan_memory(&g, &sched).unwrap();
    assert_eq!(plan.in_place.len(), 2);
    assert_eq!(plan.lifetimes.len(), 1);
    assert_eq!(plan.stats.naive_bytes, 12288);
    assert_eq!(plan.stats.lower_bound_bytes, 8192);
    assert_eq!(plan.stats.planned_bytes, 4096);
    let t = |name: &str| g.value_ids().find(|&v| g.value(v).name == name).unwrap();
    assert_eq!(plan.slots[&t("t0")], plan.slots[&t("t2")]);
}

#[test]
fn a_matmul_chain_alternates_arenas_and_binds_inputs_read_only() {
    // x → t0 → t1 → t2 → y through MatMuls (no in-place: a product reads other rows than it writes): t0 and t2
    // share memory once t0 is dead, and alternating two arenas costs nothing over the bound.
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[32, 32]);
    let w = g.add_const("w", Tensor::f32(vec![32, 32], (0..1024).map(|i| (i % 7) as f32 * 0.01).collect()));
    let mut v = x;
    for i in 0..4 {
        let y = g.add_value(format!("t{i}"), None);
        g.add_node(format!("n{i}"), Op::MatMul, vec![Some(v), Some(w)], vec![y]).unwrap();
        v = y;
    }
    g.outputs.push(v);
    run_pipeline(&mut g, None).unwrap();
    let sched = schedule(&g, &FuseOptions { fuse: false, ..Default::default() }).unwrap();
    let plan = plan_memory(&g, &sched).unwrap();
    assert!(plan.in_place.is_empty());
    assert_eq!(plan.lifetimes.len(), 3);
    assert_eq!(plan.stats.lower_bound_bytes, 8192);
    assert_eq!(plan.stats.planned_bytes, 8192);
    let at = |l: &Lifetime| (l.buffer, l.offset);
    assert_eq!(at(&plan.lifetimes[0]), at(&plan.lifetimes[2]));
    assert_ne!(at(&plan.lifetimes[0]), at(&plan.lifetimes[1]));
    // A chain alternates between two sets of arenas at no cost, so every kernel binds its input read-only.
    assert!(plan.stats.split_arenas);
    for k in &sched.kernels {
        let (reads, writes) = group_io(&g, &sched, k);
        let b: Vec<(ValueId, bool)> =
            reads.iter().map(|&v| (v, false)).chain(writes.iter().map(|&v| (v, true))).collect();
        assert_eq!(binding_access(&plan, &b), b.iter().map(|&(_, w)| w).collect::<Vec<_>>());
    }
}

/// One op on the same inputs computes once (an opset-23 export's per-layer Cos of one angle table, twice); a node
/// of a decoder's prefill step stays apart from the decode step's.
#[test]
fn identical_nodes_compute_once_within_a_step() {
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[4]);
    let cos = |g: &mut Graph, name: &str| {
        let v = g.add_value(name, None);
        g.add_node(name, Op::Unary(wgslc_ir::UnaryOp::Cos), vec![Some(x)], vec![v]).unwrap();
        v
    };
    let (a, b, p) = (cos(&mut g, "cos_q"), cos(&mut g, "cos_k"), cos(&mut g, &format!("{PREFILL}cos")));
    let sum = g.add_value("sum", None);
    g.add_node("sum", Op::Binary(BinaryOp::Add), vec![Some(a), Some(b)], vec![sum]).unwrap();
    let y = g.add_value("y", None);
    g.add_node("y", Op::Binary(BinaryOp::Add), vec![Some(sum), Some(p)], vec![y]).unwrap();
    g.outputs.push(y);
    infer_shapes(&mut g).unwrap();
    dedupe_nodes(&mut g).unwrap();
    eliminate_dead_code(&mut g);
    let names: Vec<String> = g.topo_order().unwrap().iter().map(|&n| g.node(n).name.clone()).collect();
    assert_eq!(names.iter().filter(|n| n.contains("cos")).count(), 2, "{names:?}");
    let s = g.node(g.value(sum).producer.unwrap());
    assert_eq!(s.inputs, [Some(a), Some(a)]);
}
