//! Pass tests on hand-built graphs.

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

/// A k×k window, unit strides, "same" padding.
fn window(k: usize) -> wgslc_ir::Window {
    wgslc_ir::Window {
        kernel: vec![k, k],
        strides: vec![1, 1],
        pads: vec![k / 2; 4],
        dilations: vec![1, 1],
        auto_pad: wgslc_ir::AutoPad::NotSet,
        ceil_mode: false,
    }
}

/// x → depthwise Conv (k×k) → Relu → 1x1 Conv with `m` output channels.
fn depthwise_then_pointwise(k: usize, m: usize) -> Graph {
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[1, 8, 10, 10]);
    let wd = g.add_const("wd", Tensor::f32(vec![8, 1, k, k], vec![0.5; 8 * k * k]));
    let d = g.add_value("d", None);
    g.add_node("dw", Op::Conv { window: window(k), group: 8 }, vec![Some(x), Some(wd)], vec![d]).unwrap();
    let r = g.add_value("r", None);
    g.add_node("relu", Op::Unary(wgslc_ir::UnaryOp::Relu), vec![Some(d)], vec![r]).unwrap();
    let wp = g.add_const("wp", Tensor::f32(vec![m, 8, 1, 1], vec![0.25; m * 8]));
    let y = g.add_value("y", None);
    g.add_node("pw", Op::Conv { window: window(1), group: 1 }, vec![Some(r), Some(wp)], vec![y]).unwrap();
    g.outputs.push(y);
    run_pipeline(&mut g, None).unwrap();
    g
}

#[test]
fn depthwise_folds_into_the_pointwise_conv_while_recomputation_is_cheap() {
    // Up to 32 output channels; a 5x5 window too (25 taps · (⌈m/16⌉ − 1) ≤ m); 33 channels not.
    for (k, m, kernels) in [(3, 8, 1), (3, 32, 1), (3, 33, 2), (5, 32, 1)] {
        let g = depthwise_then_pointwise(k, m);
        let sched = schedule(&g, &FuseOptions::default()).unwrap();
        assert_eq!(sched.kernels.len(), kernels, "{k}x{k} depthwise into {m} channels");
        if kernels == 1 {
            let d = sched.kernels[0].depthwise().expect("depthwise folded");
            assert_eq!(g.node(d.conv).name, "dw");
        } else {
            let reasons: Vec<&str> = sched.boundaries.iter().map(|b| b.reason.as_str()).collect();
            assert!(reasons.iter().any(|r| r.contains("9-tap window") && r.contains("33 output")), "{reasons:?}");
        }
    }
    // A second reader of the depthwise output keeps it materialized.
    let mut g = depthwise_then_pointwise(3, 8);
    let r = g.node_ids().find(|&n| g.node(n).name == "relu").map(|n| g.node(n).outputs[0]).unwrap();
    g.outputs.push(r);
    let sched = schedule(&g, &FuseOptions::default()).unwrap();
    assert!(sched.kernels.iter().all(|k| k.depthwise().is_none()));
}

/// MobileNetV2's inverted-residual block: x [1, 16, 14, 14] → 1x1 expansion to `e` → ReLU6 → depthwise 3x3 →
/// ReLU6 → 1x1 projection to `m` (+ x when `m` is 16).
fn inverted_residual(e: usize, m: usize) -> Graph {
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[1, 16, 14, 14]);
    let relu6 = |g: &mut Graph, name: &str, v: ValueId| {
        let r = g.add_value(name, None);
        g.add_node(name, Op::Unary(wgslc_ir::UnaryOp::Clip(0.0, 6.0)), vec![Some(v)], vec![r]).unwrap();
        r
    };
    let we = g.add_const("we", Tensor::f32(vec![e, 16, 1, 1], vec![0.1; e * 16]));
    let ex = g.add_value("ex", None);
    g.add_node("expand", Op::Conv { window: window(1), group: 1 }, vec![Some(x), Some(we)], vec![ex]).unwrap();
    let ex = relu6(&mut g, "relu6_e", ex);
    let wd = g.add_const("wd", Tensor::f32(vec![e, 1, 3, 3], vec![0.1; e * 9]));
    let d = g.add_value("d", None);
    g.add_node("dw", Op::Conv { window: window(3), group: e }, vec![Some(ex), Some(wd)], vec![d]).unwrap();
    let d = relu6(&mut g, "relu6_d", d);
    let wp = g.add_const("wp", Tensor::f32(vec![m, e, 1, 1], vec![0.1; m * e]));
    let mut y = g.add_value("p", None);
    g.add_node("project", Op::Conv { window: window(1), group: 1 }, vec![Some(d), Some(wp)], vec![y]).unwrap();
    if m == 16 {
        let s = g.add_value("y", None);
        g.add_node("add", Op::Binary(BinaryOp::Add), vec![Some(y), Some(x)], vec![s]).unwrap();
        y = s;
    }
    g.outputs.push(y);
    run_pipeline(&mut g, None).unwrap();
    g
}

#[test]
fn inverted_residual_blocks_fuse_while_the_projection_is_narrow() {
    let fused = FuseOptions::default();
    let names = |g: &Graph, k: &KernelGroup| k.nodes().iter().map(|&n| g.node(n).name.clone()).collect::<Vec<_>>();
    // Unfused, the expansion stays a product of its own; the depthwise Conv folds into the 16-channel projection.
    let g = inverted_residual(96, 16);
    let unfused = FuseOptions { inverted_residual: InvertedResidualMode::Unfused, ..Default::default() };
    let sched = schedule(&g, &unfused).unwrap();
    assert_eq!(sched.kernels.len(), 2);
    assert!(sched.kernels.iter().all(|k| k.expand().is_none()));
    // By default the whole block is one kernel: expansion, depthwise, projection and the residual Add.
    let sched = schedule(&g, &fused).unwrap();
    assert_eq!(sched.kernels.len(), 1);
    let k = &sched.kernels[0];
    assert_eq!(names(&g, k), ["expand", "relu6_e", "dw", "relu6_d", "project", "add"]);
    assert_eq!(g.node(k.expand().unwrap().conv).name, "expand");
    assert_eq!(g.node(k.depthwise().unwrap().conv).name, "dw");
    // A projection wider than 64 channels keeps its own product; the expansion still folds into the depthwise Conv.
    let g = inverted_residual(96, 80);
    let sched = schedule(&g, &fused).unwrap();
    assert_eq!(sched.kernels.len(), 2);
    assert_eq!(names(&g, &sched.kernels[0]), ["expand", "relu6_e", "dw", "relu6_d"]);
    let reasons: Vec<&str> = sched.boundaries.iter().map(|b| b.reason.as_str()).collect();
    assert!(reasons.iter().any(|r| r.contains("80 output channels") && r.contains("at most 64")), "{reasons:?}");
    // A second reader of the expansion keeps it materialized.
    let mut g = inverted_residual(96, 16);
    let e = g.node_ids().find(|&n| g.node(n).name == "relu6_e").map(|n| g.node(n).outputs[0]).unwrap();
    g.outputs.push(e);
    let sched = schedule(&g, &fused).unwrap();
    assert!(sched.kernels.iter().all(|k| k.expand().is_none()));
}

#[test]
fn expansion_tiles_fit_workgroup_memory_and_bound_recomputation() {
    // 56x56 block of MobileNetV2 (24 → 144 → 24): 2x2 tiles hold all 144 expanded channels, one step.
    let t = expand_tile(1, (56, 56), (3, 3), (1, 1), (1, 1), 24, 144, Some(24)).unwrap();
    assert_eq!((t.ty, t.tx, t.ec, t.lanes, t.per_lane), (2, 2, 144, 64, 1));
    assert!(t.x_chunk == 24 && (t.hy * t.hx + t.ty * t.tx) * t.ec + 24 * t.hy * t.hx <= WORKGROUP_FLOATS);
    // Without a projection each workgroup takes a few channels of the largest tile, its window 16 channels at a
    // time when all 96 do not fit.
    let t = expand_tile(1, (14, 14), (3, 3), (1, 1), (1, 1), 96, 576, None).unwrap();
    assert_eq!((t.ty, t.ec, t.x_chunk), (8, EXPAND_STEP_CHANNELS, 16));
    // An 11x11 window's expansion would be recomputed more than EXPAND_MAX_RECOMPUTE times on every tile (5x on
    // 8x8 tiles); a 7x7 one passes on 8x8 tiles (3.1x).
    assert!(expand_tile(1, (14, 14), (11, 11), (1, 1), (1, 1), 64, 64, Some(16)).is_none());
    assert_eq!(expand_tile(1, (14, 14), (7, 7), (1, 1), (1, 1), 64, 64, Some(16)).map(|t| t.ty), Some(8));
    // Too many output channels for one thread's registers at any tile.
    assert!(expand_tile(1, (56, 56), (3, 3), (1, 1), (1, 1), 24, 144, Some(4096)).is_none());
}

/// x → Relu and x → Conv(3x3) → Relu, joined along channels: SqueezeNet's fire module with `extra` also read
/// (a graph output) when set.
fn two_branches_joined(output_branch: bool) -> Graph {
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[1, 8, 10, 10]);
    let w = g.add_const("w", Tensor::f32(vec![6, 8, 3, 3], vec![0.1; 6 * 8 * 9]));
    let c = g.add_value("c", None);
    g.add_node("conv", Op::Conv { window: window(3), group: 1 }, vec![Some(x), Some(w)], vec![c]).unwrap();
    let (r1, r2) = (g.add_value("r1", None), g.add_value("r2", None));
    g.add_node("relu1", Op::Unary(wgslc_ir::UnaryOp::Relu), vec![Some(c)], vec![r1]).unwrap();
    g.add_node("relu2", Op::Unary(wgslc_ir::UnaryOp::Relu), vec![Some(x)], vec![r2]).unwrap();
    let y = g.add_value("y", None);
    g.add_node("concat", Op::Concat { axis: 1 }, vec![Some(r2), Some(r1)], vec![y]).unwrap();
    g.outputs.push(y);
    if output_branch {
        g.outputs.push(r1);
    }
    run_pipeline(&mut g, None).unwrap();
    g
}

#[test]
fn concat_is_written_in_place_by_its_producers() {
    let g = two_branches_joined(false);
    let sched = schedule(&g, &FuseOptions::default()).unwrap();
    assert_eq!(sched.kernels.len(), 2, "{:?}", sched.kernels);
    assert_eq!(sched.concats.len(), 1);
    let slots: Vec<usize> = sched.kernels.iter().filter_map(|k| k.write_into().map(|(_, s)| s)).collect();
    assert_eq!(slots, [1, 0], "the Conv writes slot 1 at channel 8 onwards, the Relu slot 0");
    let conv = &sched.kernels[0];
    assert_eq!(conv.recipe.store.as_ref().map(|p| p.offset), Some(8 * 100));
    // Both writers bind the Concat's output, which lives from the first write.
    let mem = plan_memory(&g, &sched).unwrap();
    verify_plan(&g, &sched, &mem).unwrap();
    // A branch that is also a graph output keeps the Concat's copy kernels.
    let g = two_branches_joined(true);
    let sched = schedule(&g, &FuseOptions::default()).unwrap();
    assert!(sched.concats.is_empty() && sched.kernels.iter().all(|k| k.write_into().is_none()));
}

/// `x: [1, S, 4]` → Softmax over S → ReduceSum over S, and a Gather of row `idx` along S; built at S = `s`.
fn ranged_graph(s: usize, idx: i64) -> Graph {
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[1, s, 4]);
    let sm = g.add_value("sm", None);
    g.add_node("softmax", Op::Softmax { axis: 1, legacy: false, log: false }, vec![Some(x)], vec![sm]).unwrap();
    let axes = g.add_const("axes", Tensor::i64(vec![1], vec![1]));
    let sum = g.add_value("sum", None);
    let reduce = Op::Reduce { op: wgslc_ir::ReduceOp::Sum, axes: None, keepdims: false, noop_with_empty_axes: false };
    g.add_node("sum", reduce, vec![Some(sm), Some(axes)], vec![sum]).unwrap();
    let i = g.add_const("i", Tensor::i64(vec![], vec![idx]));
    let row = g.add_value("row", None);
    g.add_node("row", Op::Gather { axis: 1 }, vec![Some(x), Some(i)], vec![row]).unwrap();
    g.outputs.extend([sum, row]);
    run_pipeline(&mut g, Some("dce")).unwrap();
    g
}

#[test]
fn ranges_find_the_ranged_axes_and_mask_the_reads_across_them() {
    let dims = [DimRange { name: "S".into(), min: 2, max: 8 }];
    assert_eq!(probe_value(&dims[0]), 4);
    let mut g = ranged_graph(8, 0);
    let r = apply_ranges(&mut g, &dims, &[ranged_graph(4, 0)]).unwrap();
    assert_eq!(r.io["x"], [RangedAxis { axis: 1, dim: 0, factor: 1 }]);
    assert!(r.io["sum"].is_empty() && r.io["row"].is_empty());
    assert_eq!(g.value(*g.inputs.last().unwrap()).name, DIMS_INPUT);
    // The softmax reads x through a mask along S (the reduction after it reads the softmax, masked again).
    let softmax = g.node_ids().find(|&n| g.node(n).name == "softmax").unwrap();
    let read = g.node(softmax).inputs[0].unwrap();
    let masked = g.value(read).producer.map(|p| g.node(p).op.clone());
    assert_eq!(masked, Some(Op::Where));
    assert_eq!(r.masked[&read], [1]);
    // Row 1 lies below MIN = 2 and is kept; row -1 moves with S and is refused by node.
    let mut ok = ranged_graph(8, 1);
    assert!(apply_ranges(&mut ok, &dims, &[ranged_graph(4, 1)]).is_ok());
    let mut last = ranged_graph(8, -1);
    let e = apply_ranges(&mut last, &dims, &[ranged_graph(4, -1)]).unwrap_err().to_string();
    assert!(e.contains("node 'row'") && e.contains("move with the run's value"), "{e}");
}

/// The matrix-vector layouts of an LLM decode step (Qwen2.5-0.5B's shapes): every workgroup is 256 threads, B is
/// read in at least 32-byte runs, and the workgroups reach [`GEMV_WORKGROUPS`] where the outputs allow it.
#[test]
fn gemv_tilings_fill_the_gpu_with_coalesced_reads() {
    let cases = [
        // (outputs, K, K-major, vec4) → (lanes, outputs per workgroup)
        ((151_936, 896, true, false), (32, 8)), // LM head tied to the embedding table
        ((896, 4864, false, true), (2, 8)),     // down projection: narrow, K split inside the workgroup
        ((9728, 896, false, true), (8, 32)),    // gate and up, merged
        ((9728, 896, false, false), (32, 32)),  // the same without vec4 loads
        ((896, 896, true, false), (128, 2)),    // K-major and narrow: more lanes per output
        ((10, 64, true, false), (64, 4)),       // lanes never exceed K (rounded up)
    ];
    for ((nn, k, kmajor, vec4), (lanes, cols)) in cases {
        let t = gemv_tiling(nn, k, 1, kmajor, vec4);
        assert_eq!((t.lanes, t.cols), (lanes, cols), "{nn} outputs over K = {k}: {t:?}");
        assert_eq!(t.lanes * t.groups, 256);
        let run_bytes = if kmajor { t.lanes * 4 } else { t.lanes * t.vec * 4 };
        assert!(run_bytes >= 32, "{t:?} reads runs of {run_bytes} bytes");
        if nn.div_ceil(t.cols) < GEMV_WORKGROUPS {
            assert!(if kmajor { t.cols == 1 || t.lanes >= k } else { t.lanes * 4 * t.vec == 32 }, "{t:?}");
        }
    }
}

/// The packed (narrow-weight) matrix-vector layouts of Qwen2.5-0.5B's decode step, as measured
/// ([`packed_gemv_tiling`]): every workgroup is 256 threads, a group's columns never straddle two blocks of a split
/// weight, and a K longer than the staged chunk gets 64 lanes a column.
#[test]
fn packed_gemv_tilings_follow_the_measured_shapes() {
    let cases = [
        // (outputs, block columns, K, staged) → (lanes, columns a group)
        ((151_936, None, 896, 896), (16, 4)),        // 4-bit LM head
        ((30_388, Some(30_388), 896, 896), (16, 4)), // a block of a split f16 head
        ((30_387, Some(30_387), 896, 896), (32, 1)), // a block of an odd width: one column a group
        ((896, None, 4864, 2048), (64, 2)),          // down projection: three chunks of A
        ((9728, None, 896, 896), (16, 4)),           // gate and up, merged
        ((1152, None, 896, 896), (32, 1)),           // Q, K and V, merged
        ((896, None, 896, 896), (32, 1)),            // o-projection
    ];
    for ((nn, block_cols, k, staged), (lanes, per_group)) in cases {
        let t = packed_gemv_tiling(nn, block_cols, k, staged);
        assert_eq!((t.lanes, t.per_group), (lanes, per_group), "{nn} outputs over K = {k}: {t:?}");
        assert_eq!(t.lanes * t.groups, 256);
        assert_eq!(t.cols, t.groups * t.per_group);
        assert!(block_cols.is_none_or(|b| b % t.per_group == 0), "{t:?}");
    }
}

/// A decode step's narrow projection (896 outputs) reads its weight K-major through a transposing view, with the
/// same values at every (k, n); the prefill step's product of the same weight reads the same view; a weight the
/// one-row product fills the GPU with row-major, and one also read by a Gather, stay as they are.
#[test]
fn weights_of_few_output_one_row_products_are_stored_k_major() {
    let (k, n) = (64, 896);
    let mut g = Graph::new();
    // Three one-row inputs: products of one input would be merged into one.
    let [x, x2, x3] = ["x", "x2", "x3"].map(|name| f32_input(&mut g, name, &[1, k]));
    let xs = f32_input(&mut g, "xs", &[32, k]);
    let w: Vec<f32> = (0..k * n).map(|i| i as f32).collect();
    let wv = g.add_const("w", Tensor::f32(vec![k, n], w.clone()));
    let wide = g.add_const("wide", Tensor::f32(vec![k, 8192], vec![0.5; k * 8192]));
    let table = g.add_const("table", Tensor::f32(vec![k, n], vec![1.0; k * n]));
    let out = |g: &mut Graph, name: &str, op: Op, ins: &[ValueId]| {
        let y = g.add_value(name, None);
        g.add_node(name, op, ins.iter().map(|&v| Some(v)).collect(), vec![y]).unwrap();
        g.outputs.push(y);
        y
    };
    out(&mut g, "decode", Op::MatMul, &[x, wv]);
    out(&mut g, "prefill", Op::MatMul, &[xs, wv]);
    out(&mut g, "up", Op::MatMul, &[x2, wide]);
    out(&mut g, "head", Op::MatMul, &[x3, table]);
    let ids = g.add_value("ids", Some(TensorType::new(DType::I64, vec![1])));
    g.inputs.push(ids);
    out(&mut g, "embed", Op::Gather { axis: 0 }, &[table, ids]);
    run_pipeline(&mut g, None).unwrap();
    let b_of = |g: &Graph, name: &str| {
        let n = g.node_ids().find(|&m| g.node(m).name == name).unwrap();
        g.node(n).inputs[1].unwrap()
    };
    let view = b_of(&g, "decode");
    assert_eq!(view, b_of(&g, "prefill"), "one view for both products");
    let p = g.node(g.value(view).producer.expect("a view"));
    assert_eq!(p.op, Op::StridedCopy { offset: 0, strides: vec![1, k as i64] });
    let stored = g.const_data(p.inputs[0].unwrap()).expect("a constant");
    assert_eq!(stored.shape, [n, k]);
    let wgslc_ir::Data::F32(t) = &stored.data else { panic!("f32") };
    assert!((0..k).all(|kk| (0..n).all(|nn| t[nn * k + kk] == w[kk * n + nn])), "the same values");
    for name in ["up", "head"] {
        assert!(g.const_data(b_of(&g, name)).is_some(), "{name} keeps its row-major weight");
    }
    let s = schedule(&g, &FuseOptions::default()).unwrap();
    assert!(s.folded.contains(&g.value(view).producer.unwrap()), "the view is folded into its readers");
}

/// K's and V's cache writes at one row; with `dependent`, V's new row is a slice of K's cache (read after its
/// write).
fn two_cache_writes(dependent: bool) -> Graph {
    let mut g = Graph::new();
    let (kc, vc) = (f32_input(&mut g, "kc", &[1, 2, 8, 16]), f32_input(&mut g, "vc", &[1, 2, 8, 16]));
    let (k, v) = (f32_input(&mut g, "k", &[1, 2, 1, 16]), f32_input(&mut g, "v", &[1, 2, 1, 16]));
    let row = g.add_value("row", Some(TensorType::new(DType::I64, vec![1])));
    g.inputs.push(row);
    let keys = g.add_value("keys", None);
    g.add_node("kw", Op::CacheWrite { axis: 2 }, vec![Some(kc), Some(k), Some(row)], vec![keys]).unwrap();
    let v = if dependent {
        let s = g.add_value("s", None);
        let c = |g: &mut Graph, n: &str, x: i64| g.add_const(n, Tensor::i64(vec![1], vec![x]));
        let (st, en, ax) = (c(&mut g, "st", 0), c(&mut g, "en", 1), c(&mut g, "ax", 2));
        let slice = Op::Slice;
        g.add_node("first", slice, vec![Some(keys), Some(st), Some(en), Some(ax)], vec![s]).unwrap();
        s
    } else {
        v
    };
    let values = g.add_value("values", None);
    g.add_node("vw", Op::CacheWrite { axis: 2 }, vec![Some(vc), Some(v), Some(row)], vec![values]).unwrap();
    g.outputs.extend([keys, values]);
    run_pipeline(&mut g, None).unwrap();
    g
}

#[test]
fn cache_writes_at_one_row_share_a_dispatch_when_independent() {
    let g = two_cache_writes(false);
    let sched = schedule(&g, &FuseOptions::default()).unwrap();
    let writes: Vec<_> = sched.kernels.iter().filter(|k| k.anchor.is_some()).collect();
    assert_eq!(writes.len(), 1, "{:?}", sched.kernels);
    assert!(writes[0].second_cache_write().is_some());
    // V's new row read out of K's cache: two dispatches, V's after K's.
    let g = two_cache_writes(true);
    let sched = schedule(&g, &FuseOptions::default()).unwrap();
    assert!(sched.kernels.iter().all(|k| k.second_cache_write().is_none()), "{:?}", sched.kernels);
    assert_eq!(sched.kernels.iter().filter(|k| k.anchor.is_some()).count(), 2);
}

/// A decode step's attention over both caches right after their writes: q `[1, 2, 1, 16]` scores the 8 keys of
/// `keys` (K's cache as written), softmax, times `values`. With `other_reader`, K's written cache is also summed
/// by a node of its own.
fn decode_attention(other_reader: bool) -> Graph {
    let mut g = Graph::new();
    let (kc, vc) = (f32_input(&mut g, "kc", &[1, 2, 8, 16]), f32_input(&mut g, "vc", &[1, 2, 8, 16]));
    let (k, v) = (f32_input(&mut g, "k", &[1, 2, 1, 16]), f32_input(&mut g, "v", &[1, 2, 1, 16]));
    let q = f32_input(&mut g, "q", &[1, 2, 1, 16]);
    let row = g.add_value("row", Some(TensorType::new(DType::I64, vec![1])));
    g.inputs.push(row);
    let (keys, values) = (g.add_value("keys", None), g.add_value("values", None));
    g.add_node("kw", Op::CacheWrite { axis: 2 }, vec![Some(kc), Some(k), Some(row)], vec![keys]).unwrap();
    g.add_node("vw", Op::CacheWrite { axis: 2 }, vec![Some(vc), Some(v), Some(row)], vec![values]).unwrap();
    let val = |g: &mut Graph, n: &str| g.add_value(n, None);
    let (kt, s, p, o) = (val(&mut g, "kt"), val(&mut g, "s"), val(&mut g, "p"), val(&mut g, "o"));
    g.add_node("kt", Op::Transpose { perm: Some(vec![0, 1, 3, 2]) }, vec![Some(keys)], vec![kt]).unwrap();
    g.add_node("qk", Op::MatMul, vec![Some(q), Some(kt)], vec![s]).unwrap();
    g.add_node("softmax", Op::Softmax { axis: -1, legacy: false, log: false }, vec![Some(s)], vec![p]).unwrap();
    g.add_node("pv", Op::MatMul, vec![Some(p), Some(values)], vec![o]).unwrap();
    g.outputs.push(o);
    if other_reader {
        let r = val(&mut g, "r");
        let sum = Op::Reduce {
            op: wgslc_ir::ReduceOp::Sum,
            axes: Some(vec![2]),
            keepdims: true,
            noop_with_empty_axes: false,
        };
        g.add_node("sum", sum, vec![Some(keys)], vec![r]).unwrap();
        g.outputs.push(r);
    }
    run_pipeline(&mut g, None).unwrap();
    g
}

#[test]
fn a_decode_steps_cache_writes_join_the_attention_that_reads_them() {
    let g = decode_attention(false);
    let sched = schedule(&g, &FuseOptions::default()).unwrap();
    assert_eq!(sched.kernels.len(), 1, "{:?}", sched.kernels);
    let (_, writes) = sched.kernels[0].cache_rows().expect("the writes folded into the attention");
    let names: Vec<&str> = writes.iter().map(|&w| g.node(w).name.as_str()).collect();
    assert_eq!(names, ["kw", "vw"]);
    // K's cache as written also read elsewhere: the writes keep their kernel, before both readers.
    let g = decode_attention(true);
    let sched = schedule(&g, &FuseOptions::default()).unwrap();
    assert!(sched.kernels.iter().all(|k| k.cache_rows().is_none()), "{:?}", sched.kernels);
    assert!(sched.kernels[0].second_cache_write().is_some(), "{:?}", sched.kernels);
}

#[test]
fn functions_of_a_bounded_position_become_one_table_lookup() {
    // pos → Cast → × inverse frequencies → Concat(f, f) → cos, sin: rotary tables of a decode step.
    let build = |pos_shape: &[usize]| {
        let mut g = Graph::new();
        let pos = g.add_value("pos", Some(TensorType::new(DType::I64, pos_shape.to_vec())));
        g.inputs.push(pos);
        let inv = g.add_const("inv", Tensor::f32(vec![1, 2], vec![1.0, 0.01]));
        let n = pos_shape.iter().product::<usize>();
        let v = |g: &mut Graph, name: &str, dt: DType, shape: Vec<usize>| {
            g.add_value(name, Some(TensorType::new(dt, shape)))
        };
        let pf = v(&mut g, "pf", DType::F32, vec![n, 1]);
        let pr = v(&mut g, "pr", DType::I64, vec![n, 1]);
        g.add_node("r", Op::Alias, vec![Some(pos)], vec![pr]).unwrap();
        g.add_node("cast", Op::Cast { to: DType::F32, saturate: true }, vec![Some(pr)], vec![pf]).unwrap();
        let f = v(&mut g, "f", DType::F32, vec![n, 2]);
        g.add_node("mul", Op::Binary(BinaryOp::Mul), vec![Some(pf), Some(inv)], vec![f]).unwrap();
        let cat = v(&mut g, "cat", DType::F32, vec![n, 4]);
        g.add_node("cat", Op::Concat { axis: 1 }, vec![Some(f), Some(f)], vec![cat]).unwrap();
        let (c, s) = (v(&mut g, "c", DType::F32, vec![n, 4]), v(&mut g, "s", DType::F32, vec![n, 4]));
        g.add_node("cos", Op::Unary(wgslc_ir::UnaryOp::Cos), vec![Some(cat)], vec![c]).unwrap();
        g.add_node("sin", Op::Unary(wgslc_ir::UnaryOp::Sin), vec![Some(cat)], vec![s]).unwrap();
        let x = f32_input(&mut g, "x", &[n, 4]);
        let (y, z) = (v(&mut g, "y", DType::F32, vec![n, 4]), v(&mut g, "z", DType::F32, vec![n, 4]));
        g.add_node("y", Op::Binary(BinaryOp::Mul), vec![Some(x), Some(c)], vec![y]).unwrap();
        g.add_node("z", Op::Binary(BinaryOp::Mul), vec![Some(x), Some(s)], vec![z]).unwrap();
        g.outputs.extend([y, z]);
        (g, pos)
    };
    let (mut g, pos) = build(&[1, 1]);
    assert!(tabulate_bounded_input(&mut g, pos, 10, 1 << 20).unwrap());
    let ops: Vec<&str> = g.topo_order().unwrap().iter().map(|&n| g.node(n).op.name()).collect();
    assert!(!ops.contains(&"Cos") && !ops.contains(&"Concat") && ops.contains(&"Gather"), "{ops:?}");
    let table = g.value_ids().find_map(|v| g.const_data(v).filter(|t| t.shape == [10, 8])).expect("a [10, 8] table");
    let t = table.to_f64();
    for p in 0..10 {
        let row: Vec<f64> = [1.0f32, 0.01, 1.0, 0.01].iter().map(|&w| (p as f32 * w) as f64).collect();
        let want: Vec<f64> = row.iter().map(|a| a.cos()).chain(row.iter().map(|a| a.sin())).collect();
        for (got, want) in t[p * 8..(p + 1) * 8].iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "position {p}: {got} against {want}");
        }
    }
    // Several positions at once (a prefill step) are not one row of a table.
    let (mut g, pos) = build(&[1, 3]);
    assert!(!tabulate_bounded_input(&mut g, pos, 10, 1 << 20).unwrap());
    // Nor a table over the limit.
    let (mut g, pos) = build(&[1, 1]);
    assert!(!tabulate_bounded_input(&mut g, pos, 10, 100).unwrap());
}

/// A graph of `n` one-row products of `x` by `ws` and their outputs.
fn products(g: &mut Graph, x: ValueId, ws: &[ValueId]) -> Vec<ValueId> {
    ws.iter()
        .enumerate()
        .map(|(i, &w)| {
            let y = g.add_value(format!("y{i}"), None);
            g.add_node(format!("mm{i}"), Op::MatMul, vec![Some(x), Some(w)], vec![y]).unwrap();
            g.outputs.push(y);
            y
        })
        .collect()
}

/// Quantized `[n, k]` weights read through a transpose (MatMulNBits' form) on one input are merged into one
/// product over their rows one after the other, still quantized, each result a slice of it with its values.
#[test]
fn quantized_sibling_products_merge_their_rows() {
    let k = 64;
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[1, k]);
    let mut ws = Vec::new();
    let mut blocks = Vec::new();
    for (i, n) in [32usize, 16].into_iter().enumerate() {
        let vals: Vec<f32> = (0..n * k).map(|j| ((j * 7 + i) % 13) as f32 - 6.0).collect();
        let q = wgslc_ir::Blocks::quantize(&vals, k, 32, 4, DType::F16);
        blocks.push(q.clone());
        let data = wgslc_ir::Data::Blocks(std::sync::Arc::new(q));
        let c = g.add_const(format!("q{i}"), Tensor { dtype: DType::F32, shape: vec![n, k], data });
        let t = g.add_value(format!("t{i}"), None);
        g.add_node(format!("tr{i}"), Op::Transpose { perm: Some(vec![1, 0]) }, vec![Some(c)], vec![t]).unwrap();
        ws.push(t);
    }
    products(&mut g, x, &ws);
    run_pipeline(&mut g, None).unwrap();
    let mms: Vec<_> = g.node_ids().filter(|&n| g.node(n).op == Op::MatMul).collect();
    assert_eq!(mms.len(), 1, "one product");
    let b = g.node(mms[0]).inputs[1].unwrap();
    let stored = g.node(g.value(b).producer.expect("a transposing view")).inputs[0].unwrap();
    let merged = g.const_data(stored).unwrap().data.blocks().expect("still quantized").clone();
    assert_eq!(merged, wgslc_ir::Blocks::concat_rows(&[&blocks[0], &blocks[1]]).unwrap());
    assert_eq!(narrow_of(&g, stored).map(|n| n.bytes(48 * k)), Some(merged.layout().words as u64 * 4));
}

/// A narrow constant read by a kernel that cannot decode it (a LayerNormalization's scale) becomes float32 with
/// the values it stood for; one read by products and lookups stays narrow.
#[test]
fn narrow_constants_widen_only_where_a_reader_cannot_decode() {
    let mut g = Graph::new();
    let x = g.add_value("x", Some(TensorType::new(DType::F16, vec![2, 8])));
    g.inputs.push(x);
    let half = |v: f32| DType::F16.round(v, false);
    let scale = g.add_const(
        "scale",
        Tensor { dtype: DType::F16, shape: vec![8], data: wgslc_ir::Data::F32(vec![half(0.3); 8]) },
    );
    let w = g.add_const(
        "w",
        Tensor { dtype: DType::F16, shape: vec![8, 4], data: wgslc_ir::Data::F32(vec![half(0.1); 32]) },
    );
    let ln = g.add_value("ln", None);
    let op = Op::LayerNorm { axis: -1, epsilon: 1e-5, rms: false };
    g.add_node("ln", op, vec![Some(x), Some(scale)], vec![ln]).unwrap();
    products(&mut g, ln, &[w]);
    run_pipeline(&mut g, None).unwrap();
    assert_eq!(narrow_of(&g, scale), None);
    assert_eq!(g.const_data(scale).unwrap().dtype, DType::F32);
    assert_eq!(g.const_data(scale).unwrap().to_f64()[0], half(0.3) as f64);
    assert_eq!(narrow_of(&g, w), Some(Narrow::Half(DType::F16)));
    assert_eq!(stored_bytes(&g, w), 64);
}

/// `--weights q4`: a `[K, N]` product weight is stored `[N, K]` in blocks along K behind a transposing view, a tied
/// table (a lookup and, transposed, an LM head) in place once, a narrow lookup table (rotary's) not at all; the
/// stored values are within half a quantization step of the originals but for each block's clamped extreme.
#[test]
fn weights_are_quantized_along_the_axis_their_readers_reduce() {
    let (k, n, v) = (64, 48, 300);
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[1, k]);
    let ids = g.add_value("ids", Some(TensorType::new(DType::I64, vec![1])));
    g.inputs.push(ids);
    let vals = |len: usize, s: usize| (0..len).map(|j| (((j * 31 + s) % 17) as f32 - 8.0) / 8.0).collect::<Vec<f32>>();
    let w = g.add_const("w", Tensor::f32(vec![k, n], vals(k * n, 1)));
    let table = g.add_const("table", Tensor::f32(vec![v, k], vals(v * k, 2)));
    let rotary = g.add_const("rotary", Tensor::f32(vec![v, 32], vals(v * 32, 3)));
    let y = products(&mut g, x, &[w])[0];
    let head = g.add_value("head_t", Some(TensorType::new(DType::F32, vec![k, v])));
    g.add_node("head_t", Op::StridedCopy { offset: 0, strides: vec![1, k as i64] }, vec![Some(table)], vec![head])
        .unwrap();
    products(&mut g, y, &[]);
    let logits = g.add_value("logits", None);
    let h = g.add_value("h", None);
    g.add_node("h", Op::Gather { axis: 0 }, vec![Some(table), Some(ids)], vec![h]).unwrap();
    g.add_node("head", Op::MatMul, vec![Some(h), Some(head)], vec![logits]).unwrap();
    g.outputs.push(logits);
    let r = g.add_value("r", None);
    g.add_node("r", Op::Gather { axis: 0 }, vec![Some(rotary), Some(ids)], vec![r]).unwrap();
    g.outputs.push(r);
    // The pipeline folds the small head's transpose and stores it K-major again: the table itself, kept once.
    run_pipeline(&mut g, None).unwrap();
    let changes = narrow_weights(&mut g, WeightFormat::Q4, 32).unwrap();
    let names: Vec<&str> = changes.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().any(|n| n.starts_with("w")) && names.contains(&"table"), "{names:?}");
    let q = g.const_data(table).unwrap().data.blocks().expect("the table in place").clone();
    assert_eq!((q.row, q.block, q.bits), (k, 32, 4));
    assert!(narrow_of(&g, rotary).is_none(), "rotary's table is no weight");
    // The product weight: read through a transposing view of a [N, K] quantized constant.
    let mm = g.node_ids().find(|&m| g.node(m).name == "mm0").unwrap();
    let view = g.node(mm).inputs[1].unwrap();
    let stored = g.node(g.value(view).producer.unwrap()).inputs[0].unwrap();
    let sq = g.const_data(stored).unwrap();
    assert_eq!(sq.shape, [n, k]);
    let orig = vals(k * n, 1);
    let b = sq.data.blocks().unwrap();
    for kk in 0..k {
        for nn in 0..n {
            let got = b.value(nn * k + kk);
            let step = b.scales[b.block_of(nn * k + kk)].abs();
            assert!((got - orig[kk * n + nn]).abs() <= step * 1.0001, "({kk}, {nn})");
        }
    }
    for c in &changes {
        assert!(c.bytes_after * 6 < c.bytes_before && c.rel_rms_error > 0.0 && c.rel_rms_error < 0.1, "{c:?}");
    }
}

#[test]
fn probes_evaluate_attention_biases_and_the_positions_the_network_reads() {
    // scores = q·k (data) → + bias(mask) → Softmax; the position is also read by a product of data (rotary).
    let mut g = Graph::new();
    let v = |g: &mut Graph, name: &str, dt: DType, shape: &[usize]| {
        g.add_value(name, Some(TensorType::new(dt, shape.to_vec())))
    };
    let mask = v(&mut g, "mask", DType::I64, &[4]);
    let pos = v(&mut g, "pos", DType::I64, &[1]);
    let q = f32_input(&mut g, "q", &[1, 2]);
    let k = f32_input(&mut g, "k", &[2, 4]);
    g.inputs.extend([mask, pos]);
    let mf = v(&mut g, "mf", DType::F32, &[4]);
    g.add_node("cast", Op::Cast { to: DType::F32, saturate: true }, vec![Some(mask)], vec![mf]).unwrap();
    let one = g.add_const("one", Tensor::f32(vec![], vec![1.0]));
    let big = g.add_const("big", Tensor::f32(vec![], vec![-1e9]));
    let inv = v(&mut g, "inv", DType::F32, &[4]);
    g.add_node("sub", Op::Binary(BinaryOp::Sub), vec![Some(one), Some(mf)], vec![inv]).unwrap();
    let bias = v(&mut g, "bias", DType::F32, &[4]);
    g.add_node("scale", Op::Binary(BinaryOp::Mul), vec![Some(inv), Some(big)], vec![bias]).unwrap();
    let s = v(&mut g, "s", DType::F32, &[1, 4]);
    g.add_node("qk", Op::MatMul, vec![Some(q), Some(k)], vec![s]).unwrap();
    let sb = v(&mut g, "sb", DType::F32, &[1, 4]);
    g.add_node("add_mask", Op::Binary(BinaryOp::Add), vec![Some(s), Some(bias)], vec![sb]).unwrap();
    let p = v(&mut g, "p", DType::F32, &[1, 4]);
    g.add_node("softmax", Op::Softmax { axis: -1, legacy: false, log: false }, vec![Some(sb)], vec![p]).unwrap();
    let pf = v(&mut g, "pf", DType::F32, &[1]);
    g.add_node("pos_f", Op::Cast { to: DType::F32, saturate: true }, vec![Some(pos)], vec![pf]).unwrap();
    let r = v(&mut g, "r", DType::F32, &[1, 4]);
    g.add_node("rot", Op::Binary(BinaryOp::Mul), vec![Some(p), Some(pf)], vec![r]).unwrap();
    g.outputs.push(r);
    run_passes(&mut g, None, Some("infer"), true).unwrap();
    let given = [(mask, Tensor::i64(vec![4], vec![1, 1, 0, 1])), (pos, Tensor::i64(vec![1], vec![7]))];
    let probed = probe(&g, &given, |_| true).unwrap();
    let [sm] = &probed.softmaxes[..] else { panic!("{:?}", probed.softmaxes) };
    assert_eq!((sm.softmax.as_str(), sm.mask_node.as_deref(), sm.axis), ("softmax", Some("add_mask"), 1));
    assert_eq!(sm.bias.to_f64(), vec![0.0, 0.0, -1e9, 0.0]);
    // The position, cast, is read by the product of data; the mask only by the Softmax's chain.
    let frontier: Vec<(&str, Vec<f64>)> = probed.frontier.iter().map(|(n, t)| (n.as_str(), t.to_f64())).collect();
    assert_eq!(frontier, [("pf", vec![7.0])]);
    // Scores computed from data other than a product can't be probed.
    let mut h = Graph::new();
    let x = f32_input(&mut h, "x", &[1, 4]);
    let e = v(&mut h, "e", DType::F32, &[1, 4]);
    h.add_node("softmax", Op::Softmax { axis: -1, legacy: false, log: false }, vec![Some(x)], vec![e]).unwrap();
    h.outputs.push(e);
    run_passes(&mut h, None, Some("infer"), true).unwrap();
    let err = probe(&h, &[], |_| true).unwrap_err().to_string();
    assert!(err.contains("'softmax'") && err.contains("data other than a product"), "{err}");
}
