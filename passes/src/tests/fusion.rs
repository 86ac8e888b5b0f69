//! Convolution folds (depthwise, MobileNet's inverted residuals) and Concats written in place.

use super::*;

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

/// A Concat that keeps its copy kernels (its inputs are a view of a graph input and a value the caller also reads,
/// as a prefill step's window of the cache beside the chunk's rows) reads the view through its strides: the
/// window's own copy kernel is gone, and the Concat's copy binds the cache itself.
#[test]
fn a_concat_that_keeps_its_copies_reads_a_window_through_its_view() {
    let mut g = Graph::new();
    let cache = f32_input(&mut g, "cache", &[1, 2, 64, 16]);
    let x = f32_input(&mut g, "x", &[1, 2, 8, 16]);
    let [window, new, y] = ["window", "new", "y"].map(|n| g.add_value(n, None));
    let slice = Op::StridedCopy { offset: 0, strides: vec![2048, 1024, 16, 1] };
    g.add_node("window", slice, vec![Some(cache)], vec![window]).unwrap();
    g.add_node("rotate", Op::Unary(wgslc_ir::UnaryOp::Neg), vec![Some(x)], vec![new]).unwrap();
    g.add_node("cat", Op::Concat { axis: 2 }, vec![Some(window), Some(new)], vec![y]).unwrap();
    g.outputs.extend([y, new]);
    g.value_mut(window).ty = Some(TensorType::new(DType::F32, vec![1, 2, 56, 16]));
    run_pipeline(&mut g, None).unwrap();
    let sched = schedule(&g, &FuseOptions::default()).unwrap();
    let names: Vec<&str> = sched.kernels.iter().map(|k| g.node(k.last()).name.as_str()).collect();
    assert_eq!(names, ["rotate", "cat"], "the window has no kernel of its own");
    let cat = sched.kernels.iter().find(|k| g.node(k.last()).op == (Op::Concat { axis: 2 })).unwrap();
    assert_eq!(group_io(&g, &sched, cat).0, [cache, new], "the copy reads the cache through the window's strides");
    verify_schedule(&g, &sched).unwrap();
}

/// One-element constants read by pointwise nodes are literals, not bindings: a chain over seven inputs and three
/// scalar constants is one kernel within the 8 storage bindings (seven inputs and its output), where binding the
/// constants would need eleven and split it.
#[test]
fn scalar_constants_cost_no_binding() {
    let mut g = Graph::new();
    let xs: Vec<ValueId> = (0..7).map(|i| f32_input(&mut g, &format!("x{i}"), &[4, 4])).collect();
    let mut acc = xs[0];
    for (i, &x) in xs[1..].iter().enumerate() {
        let s = g.add_value(format!("s{i}"), None);
        g.add_node(format!("add{i}"), Op::Binary(BinaryOp::Add), vec![Some(acc), Some(x)], vec![s]).unwrap();
        acc = s;
        if i % 2 == 0 {
            let c = g.add_const(format!("c{i}"), Tensor::f32(vec![1], vec![0.5 + i as f32]));
            let m = g.add_value(format!("m{i}"), None);
            g.add_node(format!("mul{i}"), Op::Binary(BinaryOp::Mul), vec![Some(acc), Some(c)], vec![m]).unwrap();
            acc = m;
        }
    }
    g.outputs.push(acc);
    run_pipeline(&mut g, None).unwrap();
    assert_eq!(g.value_ids().filter(|&v| crate::scalar_literal(&g, v).is_some()).count(), 3);
    let s = schedule(&g, &FuseOptions::default()).unwrap();
    assert_eq!(s.kernels.len(), 1, "{:?}", s.kernels);
}

/// A product with few output tiles over a long K runs as parts of K summed by one more kernel (`split_k`): a
/// 32-token prefill's down projection in 8 parts, its bias and residual Add in the kernel that sums the parts;
/// products that fill the GPU, or whose K is short, stay whole.
#[test]
fn long_products_with_few_tiles_split_k_across_workgroups() {
    // (rows, N, K) → parts, from the measured shapes in `k_splits`' doc.
    for ((m, nn, k), parts) in [
        ((32, 896, 4864), 8),
        ((128, 768, 3072), 4),
        ((512, 896, 4864), 1),
        ((128, 768, 768), 1),
        ((32, 4864, 896), 1),
        ((1, 896, 4864), 1),
        ((4096, 4096, 4096), 1),
        ((40, 48, 1000), 1),
    ] {
        assert_eq!(k_splits(m, nn, k), parts, "{m}x{k}x{nn}");
    }
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[1, 32, 4864]);
    let r = f32_input(&mut g, "r", &[1, 32, 896]);
    let w = g.add_const("w", Tensor::f32(vec![4864, 896], vec![0.01; 4864 * 896]));
    let bias = g.add_const("bias", Tensor::f32(vec![896], vec![0.5; 896]));
    let [p, q, y] = ["p", "q", "y"].map(|n| g.add_value(n, None));
    g.add_node("down", Op::MatMul, vec![Some(x), Some(w)], vec![p]).unwrap();
    g.add_node("bias", Op::Binary(BinaryOp::Add), vec![Some(p), Some(bias)], vec![q]).unwrap();
    g.add_node("residual", Op::Binary(BinaryOp::Add), vec![Some(q), Some(r)], vec![y]).unwrap();
    g.outputs.push(y);
    run_pipeline(&mut g, None).unwrap();
    split_k(&mut g).unwrap();
    verify(&g, Stage::Legalized).unwrap();
    let products: Vec<_> = g.node_ids().filter(|&n| g.node(n).op == Op::MatMul).collect();
    assert_eq!(products.len(), 1);
    assert_eq!(g.ty(g.node(products[0]).outputs[0]).shape, [8, 32, 896]);
    // The product's value is now the last of the parts' sums; its readers are unchanged.
    assert_eq!(g.node(g.value(p).producer.unwrap()).op, Op::Binary(BinaryOp::Add));
    assert_eq!(g.ty(p).shape, [1, 32, 896]);
    let sched = schedule(&g, &FuseOptions::default()).unwrap();
    assert_eq!(sched.kernels.len(), 2);
    assert_eq!(sched.kernels[0].anchor, Some(products[0]));
    let sums = &sched.kernels[1];
    assert_eq!(sums.last(), g.value(y).producer.unwrap(), "the epilogue is in the kernel that sums the parts");
    // The same product with an RMSNormalization before it stays whole: the norm is computed in the product.
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[32, 4864]);
    let gamma = g.add_const("gamma", Tensor::f32(vec![4864], vec![1.0; 4864]));
    let w = g.add_const("w", Tensor::f32(vec![4864, 896], vec![0.01; 4864 * 896]));
    let [xn, y] = ["xn", "y"].map(|n| g.add_value(n, None));
    let norm = Op::LayerNorm { axis: -1, epsilon: 1e-6, rms: true };
    g.add_node("norm", norm, vec![Some(x), Some(gamma)], vec![xn]).unwrap();
    g.add_node("down", Op::MatMul, vec![Some(xn), Some(w)], vec![y]).unwrap();
    g.outputs.push(y);
    run_pipeline(&mut g, None).unwrap();
    let before = g.num_nodes();
    split_k(&mut g).unwrap();
    assert_eq!(g.num_nodes(), before);
    let sched = schedule(&g, &FuseOptions::default()).unwrap();
    assert!(sched.kernels.len() == 1 && sched.kernels[0].rms_norm().is_some());
    // The same product over K = 896 (a gate projection's) stays whole.
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[32, 896]);
    let w = g.add_const("w", Tensor::f32(vec![896, 4864], vec![0.01; 896 * 4864]));
    let y = g.add_value("y", None);
    g.add_node("gate", Op::MatMul, vec![Some(x), Some(w)], vec![y]).unwrap();
    g.outputs.push(y);
    run_pipeline(&mut g, None).unwrap();
    let before = g.num_nodes();
    split_k(&mut g).unwrap();
    assert_eq!(g.num_nodes(), before);
}

/// A 3×3 convolution over many input channels with few output positions (ResNet-18's last stage: 512 channels of
/// 7×7, K = 4608) runs as a Conv of 8 groups over eighths of the input channels, its weight regrouped (group i's
/// output channel o is the original's over input channels i·64..), the blocks summed with the bias and the ReLU
/// in one kernel; the first stage's (64 channels of 56×56, K = 576) stays whole.
#[test]
fn long_convolutions_with_few_tiles_split_k_into_groups() {
    let conv = |c: usize, hw: usize| {
        let mut g = Graph::new();
        let x = f32_input(&mut g, "x", &[1, c, hw, hw]);
        let w = g.add_const("w", Tensor::f32(vec![c, c, 3, 3], (0..c * c * 9).map(|i| i as f32).collect()));
        let b = g.add_const("b", Tensor::f32(vec![c], vec![0.5; c]));
        let [y, r] = ["y", "r"].map(|n| g.add_value(n, None));
        g.add_node("conv", Op::Conv { window: window(3), group: 1 }, vec![Some(x), Some(w), Some(b)], vec![y]).unwrap();
        g.add_node("relu", Op::Unary(wgslc_ir::UnaryOp::Relu), vec![Some(y)], vec![r]).unwrap();
        g.outputs.push(r);
        run_pipeline(&mut g, None).unwrap();
        split_k(&mut g).unwrap();
        verify(&g, Stage::Legalized).unwrap();
        g
    };
    let g = conv(512, 7);
    let convs: Vec<_> = g.node_ids().filter(|&n| matches!(g.node(n).op, Op::Conv { .. })).collect();
    assert_eq!(convs.len(), 1);
    let node = g.node(convs[0]);
    assert!(matches!(node.op, Op::Conv { group: 8, .. }), "{:?}", node.op);
    assert_eq!(g.ty(node.outputs[0]).shape, [1, 8 * 512, 7, 7]);
    let w = g.const_data(node.inputs[1].unwrap()).unwrap();
    assert_eq!(w.shape, [8 * 512, 64, 3, 3]);
    let wgslc_ir::Data::F32(w) = &w.data else { panic!("f32 weight") };
    // Group 3's output channel 5, its input channel 2, tap 4: the original's channel 5 over input 3·64 + 2.
    assert_eq!(w[((3 * 512 + 5) * 64 + 2) * 9 + 4], (((5 * 512) + 3 * 64 + 2) * 9 + 4) as f32);
    let sched = schedule(&g, &FuseOptions::default()).unwrap();
    assert_eq!(sched.kernels.len(), 2, "the grouped product, then the sums with the bias and the ReLU");
    let g = conv(64, 56);
    assert!(g.node_ids().any(|n| matches!(g.node(n).op, Op::Conv { group: 1, .. })));
}

/// Q·Kᵀ → softmax → ·V in two heads of 8: `rows` query rows over `keys` keys.
fn attention_graph(rows: usize, keys: usize) -> Graph {
    let mut g = Graph::new();
    let q = f32_input(&mut g, "q", &[2, rows, 8]);
    let k = f32_input(&mut g, "k", &[2, keys, 8]);
    let v = f32_input(&mut g, "v", &[2, keys, 8]);
    let kt = g.add_value("kt", None);
    g.add_node("kt", Op::Transpose { perm: Some(vec![0, 2, 1]) }, vec![Some(k)], vec![kt]).unwrap();
    let s = g.add_value("s", None);
    g.add_node("qk", Op::MatMul, vec![Some(q), Some(kt)], vec![s]).unwrap();
    let p = g.add_value("p", None);
    g.add_node("softmax", Op::Softmax { axis: 2, legacy: false, log: false }, vec![Some(s)], vec![p]).unwrap();
    let y = g.add_value("y", None);
    g.add_node("pv", Op::MatMul, vec![Some(p), Some(v)], vec![y]).unwrap();
    g.outputs.push(y);
    run_pipeline(&mut g, None).unwrap();
    g
}

#[test]
fn self_attention_is_one_kernel_up_to_its_token_limit() {
    let n = ATTENTION_SELF_MAX_TOKENS;
    // (query rows, keys, one attention kernel): self-attention up to the limit, not beyond; fewer rows than keys
    // (a prefill chunk against its cache) beyond it too.
    for (rows, keys, fused) in [(n, n, true), (n + 1, n + 1, false), (4, 2 * n, true), (n + 1, 2 * n, true)] {
        let g = attention_graph(rows, keys);
        let sched = schedule(&g, &FuseOptions::default()).unwrap();
        let attention = sched.kernels.iter().filter(|k| k.has(FoldKind::Attention)).count();
        assert_eq!(attention == 1, fused, "{rows} rows over {keys} keys: {} kernels", sched.kernels.len());
        assert_eq!(sched.kernels.len(), if fused { 1 } else { 3 }, "{rows} rows over {keys} keys");
    }
}
