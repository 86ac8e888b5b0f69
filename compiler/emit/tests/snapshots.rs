//! Snapshots of the emitted WGSL for representative kernels, so a change to a template or to the view structs is
//! visible in review. Every snapshot is re-parsed and re-validated by naga here too.

use wgslc_emit::{emit, validate, Limits};
use wgslc_ir::{BinaryOp, DType, Graph, Op, Tensor, TensorType, UnaryOp, Window};
use wgslc_passes::{plan_memory, run_pipeline, schedule, FuseOptions};

fn input(g: &mut Graph, name: &str, shape: &[usize]) -> wgslc_ir::ValueId {
    let v = g.add_value(name, Some(TensorType::new(DType::F32, shape.to_vec())));
    g.inputs.push(v);
    v
}

fn weight(g: &mut Graph, name: &str, shape: &[usize]) -> wgslc_ir::ValueId {
    let n: usize = shape.iter().product();
    // Distinct per name: identical constants would be stored (and bound) once.
    let seed = name.bytes().map(f32::from).sum::<f32>();
    g.add_const(name, Tensor::f32(shape.to_vec(), (0..n).map(|i| (i as f32 + seed) * 0.01).collect()))
}

fn node(g: &mut Graph, op: Op, ins: &[wgslc_ir::ValueId]) -> wgslc_ir::ValueId {
    let y = g.add_value(format!("{}_out", op.name()), None);
    g.add_node(op.name(), op, ins.iter().map(|&v| Some(v)).collect(), vec![y]).unwrap();
    y
}

/// A square 2-D window: k×k, stride s, p on every side.
fn win(k: usize, s: usize, p: usize) -> Window {
    Window {
        kernel: vec![k, k],
        strides: vec![s, s],
        pads: vec![p; 4],
        dilations: vec![],
        auto_pad: wgslc_ir::AutoPad::NotSet,
        ceil_mode: false,
    }
}

/// Compiles a graph (fused) and returns the subgroup modules of the kernels that have one, concatenated.
fn subgroup_modules(mut g: Graph) -> String {
    run_pipeline(&mut g, None).unwrap();
    let sched = schedule(&g, &FuseOptions::default()).unwrap();
    let plan = plan_memory(&g, &sched).unwrap();
    let mut all = String::new();
    for k in emit(&g, &sched, &plan, &Limits::default()).unwrap() {
        validate(k.kernel.clone(), &Limits::default()).unwrap();
        if let Some(sg) = &k.kernel.subgroups {
            all +=
                &format!("// ---- {} ({:?} workgroups), subgroup module\n{sg}\n", k.kernel.name, k.kernel.workgroups);
        }
    }
    all
}

/// Compiles a graph (fused) and returns every kernel's WGSL, concatenated.
fn kernels(g: Graph) -> String {
    kernels_with(g, true)
}

fn kernels_with(mut g: Graph, fuse: bool) -> String {
    run_pipeline(&mut g, None).unwrap();
    let sched = schedule(&g, &FuseOptions { fuse, ..Default::default() }).unwrap();
    let plan = plan_memory(&g, &sched).unwrap();
    let ks = emit(&g, &sched, &plan, &Limits::default()).unwrap();
    let mut all = String::new();
    for k in ks {
        // Re-validate exactly the text that goes into the snapshot.
        validate(k.kernel.clone(), &Limits::default()).unwrap();
        all += &format!("// ---- {} ({:?} workgroups)\n{}\n", k.kernel.name, k.kernel.workgroups, k.kernel.wgsl);
    }
    all
}

/// A transformer MLP step: MatMul with a transposed weight (folded into strides), bias, GELU and a residual add
/// as the epilogue: one kernel.
#[test]
fn matmul_with_folded_transpose_and_epilogue() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[2, 4, 8]);
    let w = input(&mut g, "w", &[6, 8]);
    let wt = node(&mut g, Op::Transpose { perm: Some(vec![1, 0]) }, &[w]);
    let mm = node(&mut g, Op::MatMul, &[x, wt]);
    let bias = weight(&mut g, "bias", &[6]);
    let b = node(&mut g, Op::Binary(BinaryOp::Add), &[mm, bias]);
    let act = node(&mut g, Op::Unary(UnaryOp::Gelu), &[b]);
    let res = input(&mut g, "res", &[2, 4, 6]);
    let y = g.add_value("y", None);
    g.add_node("residual", Op::Binary(BinaryOp::Add), vec![Some(act), Some(res)], vec![y]).unwrap();
    g.outputs.push(y);
    let fused = kernels(g.clone());
    assert_eq!(fused.matches("// ---- ").count(), 1, "one kernel:\n{fused}");
    insta::assert_snapshot!(fused);
    assert_eq!(kernels_with(g, false).matches("// ---- ").count(), 5);
}

#[test]
fn broadcast_binary_and_activation() {
    let mut g = Graph::new();
    let a = input(&mut g, "a", &[2, 3, 4]);
    let b = input(&mut g, "b", &[3, 1]);
    let s = node(&mut g, Op::Binary(BinaryOp::Sub), &[a, b]);
    let y = node(&mut g, Op::Unary(UnaryOp::Gelu), &[s]);
    g.outputs.push(y);
    insta::assert_snapshot!(kernels(g));
}

#[test]
fn gemm_transposed_with_bias() {
    let mut g = Graph::new();
    let a = input(&mut g, "a", &[5, 7]);
    let w = weight(&mut g, "w", &[3, 7]);
    let c = weight(&mut g, "c", &[3]);
    let y = node(&mut g, Op::Gemm { alpha: 1.0, beta: 1.0, trans_a: false, trans_b: true }, &[a, w, c]);
    g.outputs.push(y);
    insta::assert_snapshot!(kernels(g));
}

/// A product with 256 output tiles of 128x128: each thread holds 8x8 outputs in runs of four, read from workgroup
/// memory as `vec4`s; a bias as its epilogue.
#[test]
fn a_large_product_reads_runs_of_four() {
    let mut g = Graph::new();
    let a = input(&mut g, "a", &[2048, 40]);
    let b = input(&mut g, "b", &[40, 2048]);
    let mm = node(&mut g, Op::MatMul, &[a, b]);
    let bias = weight(&mut g, "bias", &[2048]);
    let y = node(&mut g, Op::Binary(BinaryOp::Add), &[mm, bias]);
    g.outputs.push(y);
    let k = kernels(g);
    assert!(k.contains("var<workgroup> smem: array<vec4<f32>") && k.contains("128x128 output tile"), "{k}");
    insta::assert_snapshot!(k);
}

/// A prompt-shaped product (128 rows, K = 1024): 32x32 tiles in four K-slices, each thread's 4x4 outputs one run of
/// four a side, read as `vec4`s; the slices' partial tiles summed through workgroup memory.
#[test]
fn a_short_product_splits_k_over_runs_of_four() {
    let mut g = Graph::new();
    let a = input(&mut g, "a", &[128, 1024]);
    let b = input(&mut g, "b", &[1024, 1024]);
    let y = node(&mut g, Op::MatMul, &[a, b]);
    g.outputs.push(y);
    let k = kernels(g);
    assert!(k.contains("var<workgroup> smem: array<vec4<f32>") && k.contains("in 4 slice(s)"), "{k}");
    insta::assert_snapshot!(k);
}

/// `x` ([.., k]) through an RMSNorm (weights "gamma") into a product with a [k, n] weight "w", the graph's output:
/// the kernels, which must be one.
fn rms_norm_product_kernels(mut g: Graph, x: wgslc_ir::ValueId, k: usize, n: usize) -> String {
    let scale = weight(&mut g, "gamma", &[k]);
    let norm = node(&mut g, Op::LayerNorm { axis: -1, epsilon: 1e-6, rms: true }, &[x, scale]);
    let w = weight(&mut g, "w", &[k, n]);
    let y = node(&mut g, Op::MatMul, &[norm, w]);
    g.outputs.push(y);
    let kernels = kernels(g);
    assert_eq!(kernels.matches("// ----").count(), 1, "one kernel:\n{kernels}");
    kernels
}

/// A prompt's RMSNorm folded into its product (64 rows): each row's sum of squares from the A tiles as they are
/// loaded, the norm's weights scaling A's k-columns as they are staged (one load a thread a k-step), and the row
/// factors applied to the sums.
#[test]
fn a_tiled_product_normalizes_its_rows() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[64, 256]);
    let k = rms_norm_product_kernels(g, x, 256, 512);
    // A in whole vec4s: each thread's four k of a row scaled by four of the norm's weights, its squares summed as a
    // vec4.
    assert!(k.contains("let g = vec4<f32>(rms_scale[min(gk,") && k.contains("pa[0] * g[0]"), "{k}");
    assert!(k.contains("ssq = fma(pa, pa, ssq);"), "{k}");
    insta::assert_snapshot!(k);
}

/// A Softmax, a LayerNormalization and a Reduce over the normalized rows.
fn softmax_layernorm_reduce() -> Graph {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[2, 5, 6]);
    let s = node(&mut g, Op::Softmax { axis: 1, legacy: false, log: false }, &[x]);
    let scale = weight(&mut g, "scale", &[6]);
    let l = node(&mut g, Op::LayerNorm { axis: -1, epsilon: 1e-5, rms: false }, &[s, scale]);
    let y = node(
        &mut g,
        Op::Reduce {
            op: wgslc_ir::ReduceOp::Mean,
            axes: Some(vec![0, 2]),
            keepdims: false,
            noop_with_empty_axes: false,
        },
        &[l],
    );
    g.outputs.push(y);
    g
}

#[test]
fn softmax_layernorm_and_reduce() {
    insta::assert_snapshot!(kernels(softmax_layernorm_reduce()));
}

/// The row reductions' subgroup modules: 64 invocations a row, each reduction `subgroupMax` / `subgroupAdd`, one
/// barrier, and the subgroups' results shared by a subgroup's lanes (one partial subgroup where the device's are
/// larger than 64).
#[test]
fn row_reductions_in_subgroups() {
    let k = subgroup_modules(softmax_layernorm_reduce());
    assert!(k.contains("templates/softmax.wgsl") && k.contains("templates/layernorm.wgsl"), "{k}");
    assert!(k.contains("@workgroup_size(64)") && k.contains("reduce_sum(ssize, s)"), "{k}");
    insta::assert_snapshot!(k);
}

#[test]
fn conv_and_pool() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[1, 4, 8, 8]);
    let w = weight(&mut g, "w", &[6, 2, 3, 3]);
    let c = node(&mut g, Op::Conv { window: win(3, 1, 1), group: 2 }, &[x, w]);
    let y =
        node(&mut g, Op::Pool { kind: wgslc_ir::PoolKind::Max, window: win(2, 2, 0), count_include_pad: false }, &[c]);
    g.outputs.push(y);
    insta::assert_snapshot!(kernels(g));
}

#[test]
fn conv_as_implicit_gemm_with_relu() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[2, 3, 9, 9]);
    let w = weight(&mut g, "w", &[8, 3, 3, 3]);
    let b = weight(&mut g, "b", &[8]);
    let c = node(&mut g, Op::Conv { window: win(3, 2, 1), group: 1 }, &[x, w, b]);
    let y = node(&mut g, Op::Unary(UnaryOp::Relu), &[c]);
    g.outputs.push(y);
    let k = kernels(g);
    assert_eq!(k.matches("// ---- ").count(), 1, "one kernel:\n{k}");
    insta::assert_snapshot!(k);
}

/// MobileNet's depthwise 3x3 (stride 2) → ReLU6 → 1x1 projection: the projection computes its B operand from the
/// depthwise input's windows as it loads it, one kernel.
#[test]
fn depthwise_folds_into_the_pointwise_conv() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[1, 8, 9, 9]);
    let (wd, bd) = (weight(&mut g, "wd", &[8, 1, 3, 3]), weight(&mut g, "bd", &[8]));
    let d = node(&mut g, Op::Conv { window: win(3, 2, 1), group: 8 }, &[x, wd, bd]);
    let r = node(&mut g, Op::Unary(UnaryOp::Clip(0.0, 6.0)), &[d]);
    let wp = weight(&mut g, "wp", &[12, 8, 1, 1]);
    let y = node(&mut g, Op::Conv { window: win(1, 1, 0), group: 1 }, &[r, wp]);
    g.outputs.push(y);
    let k = kernels(g);
    assert_eq!(k.matches("// ---- ").count(), 1, "one kernel:\n{k}");
    insta::assert_snapshot!(k);
}

/// MobileNetV2's inverted-residual block: expansion → ReLU6 → depthwise 3x3 →
/// ReLU6 → projection → residual Add in one kernel, the expansion over each tile's window in workgroup memory.
#[test]
fn inverted_residual_block_is_one_kernel() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[1, 4, 6, 6]);
    let (we, be) = (weight(&mut g, "we", &[12, 4, 1, 1]), weight(&mut g, "be", &[12]));
    let e = node(&mut g, Op::Conv { window: win(1, 1, 0), group: 1 }, &[x, we, be]);
    let e = node(&mut g, Op::Unary(UnaryOp::Clip(0.0, 6.0)), &[e]);
    let (wd, bd) = (weight(&mut g, "wd", &[12, 1, 3, 3]), weight(&mut g, "bd", &[12]));
    let d = node(&mut g, Op::Conv { window: win(3, 1, 1), group: 12 }, &[e, wd, bd]);
    let d = node(&mut g, Op::Unary(UnaryOp::Clip(0.0, 6.0)), &[d]);
    let (wp, bp) = (weight(&mut g, "wp", &[4, 12, 1, 1]), weight(&mut g, "bp", &[4]));
    let p = node(&mut g, Op::Conv { window: win(1, 1, 0), group: 1 }, &[d, wp, bp]);
    let y = node(&mut g, Op::Binary(BinaryOp::Add), &[p, x]);
    g.outputs.push(y);
    let k = kernels(g);
    assert_eq!(k.matches("// ---- ").count(), 1, "one kernel:\n{k}");
    insta::assert_snapshot!(k);
}

/// A Transpose is a strided view: the Concat beside a graph input keeps its copy kernels (no producer can write
/// into it), and its first copy reads `x` through the transposed strides, so the Transpose has no kernel.
#[test]
fn layout_ops_become_strided_copies() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[2, 3, 4]);
    let t = node(&mut g, Op::Transpose { perm: Some(vec![2, 0, 1]) }, &[x]);
    let other = input(&mut g, "z", &[4, 1, 3]);
    let y = g.add_value("cat", None);
    g.add_node("concat", Op::Concat { axis: 1 }, vec![Some(t), Some(other)], vec![y]).unwrap();
    g.outputs.push(y);
    insta::assert_snapshot!(kernels(g));
}

/// Scaled, masked attention (Q·Kᵀ with Kᵀ folded into strides, scale, additive mask, softmax, ·V): one kernel
/// with an online softmax, the scale and mask in the score epilogue.
#[test]
fn attention_is_one_kernel() {
    insta::assert_snapshot!(attention_kernel(4));
}

/// The same over 130 keys (three tiles of 64): each workgroup first checks which key tiles the mask leaves some
/// row to see, scores only those, and scores every key again where a row's maximum stays below -1e29.
#[test]
fn attention_skips_masked_key_tiles() {
    insta::assert_snapshot!(attention_kernel(130));
}

/// A prefill chunk's attention: 4 query rows over `Concat(past, new)` keys and values (a Slice of each cache, the
/// window, then the chunk's rows), as one kernel that reads both Concats in place (`Fold::ReadConcat`): each key
/// from the cache or from the chunk's rows by its index, no Concat kernel.
#[test]
fn attention_reads_its_concatenated_keys_in_place() {
    let mut g = Graph::new();
    let q = input(&mut g, "q", &[2, 4, 8]);
    let mut kv = vec![];
    for name in ["k", "v"] {
        let cache = input(&mut g, &format!("{name}_cache"), &[2, 10, 8]);
        let (starts, ends, axes) = (
            g.add_const(format!("{name}_s"), Tensor::i64(vec![1], vec![0])),
            g.add_const(format!("{name}_e"), Tensor::i64(vec![1], vec![6])),
            g.add_const(format!("{name}_a"), Tensor::i64(vec![1], vec![1])),
        );
        let window = node(&mut g, Op::Slice, &[cache, starts, ends, axes]);
        let new = input(&mut g, &format!("{name}_new"), &[2, 4, 8]);
        kv.push(node(&mut g, Op::Concat { axis: 1 }, &[window, new]));
    }
    let kt = node(&mut g, Op::Transpose { perm: Some(vec![0, 2, 1]) }, &[kv[0]]);
    let s = node(&mut g, Op::MatMul, &[q, kt]);
    let p = node(&mut g, Op::Softmax { axis: 2, legacy: false, log: false }, &[s]);
    let y = node(&mut g, Op::MatMul, &[p, kv[1]]);
    g.outputs.push(y);
    let k = one_attention_kernel(g);
    assert!(k.contains("fn concat_b(key: u32") && k.contains("fn concat_v(key: u32"), "read by key:\n{k}");
    insta::assert_snapshot!(k);
}

/// Compiles a graph with attention fused, which must give one kernel (no Concat kernels either), and returns it.
fn one_attention_kernel(mut g: Graph) -> String {
    run_pipeline(&mut g, None).unwrap();
    let opts = FuseOptions { attention: wgslc_passes::AttentionMode::Fused, ..Default::default() };
    let sched = schedule(&g, &opts).unwrap();
    let plan = plan_memory(&g, &sched).unwrap();
    let ks = emit(&g, &sched, &plan, &Limits::default()).unwrap();
    assert_eq!(ks.len(), 1, "one attention kernel");
    format!("// ---- {} ({:?} workgroups)\n{}\n", ks[0].kernel.name, ks[0].kernel.workgroups, ks[0].kernel.wgsl)
}

/// Scaled, masked attention of 4 query rows over `keys` keys, as one kernel.
fn attention_kernel(keys: usize) -> String {
    let mut g = Graph::new();
    let q = input(&mut g, "q", &[2, 4, 8]);
    let k = input(&mut g, "k", &[2, keys, 8]);
    let v = input(&mut g, "v", &[2, keys, 8]);
    let mask = input(&mut g, "mask", &[4, keys]);
    let kt = node(&mut g, Op::Transpose { perm: Some(vec![0, 2, 1]) }, &[k]);
    let s = node(&mut g, Op::MatMul, &[q, kt]);
    let scale = g.add_const("scale", Tensor::f32(vec![], vec![0.35]));
    let s = node(&mut g, Op::Binary(BinaryOp::Mul), &[s, scale]);
    let s = node(&mut g, Op::Binary(BinaryOp::Add), &[s, mask]);
    let p = node(&mut g, Op::Softmax { axis: 2, legacy: false, log: false }, &[s]);
    let y = g.add_value("y", None);
    g.add_node("pv", Op::MatMul, vec![Some(p), Some(v)], vec![y]).unwrap();
    g.outputs.push(y);
    one_attention_kernel(g)
}

/// A SwiGLU MLP with its residual: `down(SiLU(x · gate) · (x · up)) + x`.
fn swiglu_residual(g: &mut Graph, x: wgslc_ir::ValueId, [wg, wu, wd]: [wgslc_ir::ValueId; 3]) -> wgslc_ir::ValueId {
    let gate = node(g, Op::MatMul, &[x, wg]);
    let up = node(g, Op::MatMul, &[x, wu]);
    let sig = node(g, Op::Unary(UnaryOp::Sigmoid), &[gate]);
    let silu = node(g, Op::Binary(BinaryOp::Mul), &[gate, sig]);
    let h = node(g, Op::Binary(BinaryOp::Mul), &[silu, up]);
    let down = node(g, Op::MatMul, &[h, wd]);
    node(g, Op::Binary(BinaryOp::Add), &[down, x])
}

/// An LLM decode step's MLP at one token: the products are matrix-vector kernels (row-major weights read as
/// vec4s, K split in the workgroup), `SiLU(gate) · up` is computed inside the down projection as it loads its A
/// row (`Fold::RowOperand`), the residual add is the epilogue; and a head tied to a `[vocab, hidden]` table reads
/// it K-major.
#[test]
fn one_row_products_are_matrix_vector_kernels() {
    let k = kernels(mlp_and_tied_head());
    assert!(!k.contains("matmul.wgsl"), "every product is one row:\n{k}");
    assert_eq!(k.matches("fn operand_a(").count(), 1, "SiLU · up inside the down projection:\n{k}");
    assert!(k.contains("array<vec4<f32>>"), "row-major weights read as vec4s:\n{k}");
    assert!(k.contains("B's columns are contiguous (K-major)"), "the tied head reads K-major:\n{k}");
    insta::assert_snapshot!(k);
}

/// A decode MLP (SwiGLU, a residual add) and a head tied to a `[vocab, hidden]` table.
fn mlp_and_tied_head() -> Graph {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[1, 1, 16]);
    let (wg, wu, wd) =
        (weight(&mut g, "wg", &[16, 32]), weight(&mut g, "wu", &[16, 32]), weight(&mut g, "wd", &[32, 16]));
    let y = swiglu_residual(&mut g, x, [wg, wu, wd]);
    let table = input(&mut g, "table", &[40, 16]);
    let tt = node(&mut g, Op::Transpose { perm: Some(vec![1, 0]) }, &[table]);
    let logits = node(&mut g, Op::MatMul, &[y, tt]);
    g.outputs.push(logits);
    g
}

/// The subgroup modules of the one-row products above: each group's lanes (K-major, the head) or each output's
/// groups (row-major B, read as vec4s) summed by shuffles, invocations numbered by subgroup.
#[test]
fn one_row_products_sum_their_lanes_in_subgroups() {
    let k = subgroup_modules(mlp_and_tied_head());
    assert_eq!(k.matches("templates/gemv.wgsl").count(), 3, "every product has a subgroup module:\n{k}");
    assert_eq!(k.matches("enable subgroups;").count(), 3, "{k}");
    assert!(k.contains("let tid = sid * ssize + slane;") && k.contains("subgroupShuffleXor(total, m)"), "{k}");
    insta::assert_snapshot!(k);
}

/// A residual sum read only by an RMSNorm that feeds a one-row product: the matrix-vector kernel computes the sum as
/// it loads its row (`Fold::RowOperand`), takes the row's sum of squares from it, and normalizes the product
/// (`Fold::RmsNorm`): one kernel, and neither the sum nor the norm reaches memory.
#[test]
fn residual_sum_normalized_in_a_one_row_product() {
    let mut g = Graph::new();
    let (x, r) = (input(&mut g, "x", &[1, 1, 32]), input(&mut g, "r", &[1, 1, 32]));
    let sum = node(&mut g, Op::Binary(BinaryOp::Add), &[x, r]);
    let k = rms_norm_product_kernels(g, sum, 32, 48);
    assert_eq!(
        k.matches("operand_a(0.0, a_base + kb)").count(),
        2,
        "the sum computed for the product and the norm:\n{k}"
    );
    insta::assert_snapshot!(k);
}

/// The same decode MLP with narrow weights: 4-bit gate/up and down weights (block-quantized, float16 scales, the
/// merged gate/up stored K-major behind a transposing view) and a float16 tied head. Every product is the packed
/// matrix-vector kernel (A staged in workgroup memory; B read a vec4 of 32 codes or 8 halves at a time); the
/// residual input stays float32.
#[test]
fn one_row_products_over_narrow_weights() {
    let k = kernels(narrow_mlp_and_head());
    assert_eq!(k.matches("templates/gemv_packed.wgsl").count(), 3, "every product packed:\n{k}");
    assert!(k.contains("array<vec4<u32>>") && k.contains("unpack2x16float(wv.x)"), "units of 4 words:\n{k}");
    insta::assert_snapshot!(k);
}

/// Their subgroup modules: the packed kernel's lane sums by shuffles.
#[test]
fn narrow_products_sum_their_lanes_in_subgroups() {
    let k = subgroup_modules(narrow_mlp_and_head());
    assert_eq!(k.matches("templates/gemv_packed.wgsl").count(), 3, "every product has a subgroup module:\n{k}");
    assert!(k.contains("subgroupShuffleXor(total0, m)"), "{k}");
    insta::assert_snapshot!(k);
}

fn narrow_mlp_and_head() -> Graph {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[1, 1, 64]);
    let q4 = |g: &mut Graph, name: &str, n: usize, k: usize| {
        let vals: Vec<f32> = (0..n * k).map(|i| ((i * 37 + name.len()) % 29) as f32 / 29.0 - 0.5).collect();
        let b = wgslc_ir::Blocks::quantize(&vals, k, 32, 4, DType::F16);
        let c =
            g.add_const(name, Tensor { dtype: DType::F32, shape: vec![n, k], data: wgslc_ir::Data::Blocks(b.into()) });
        node(g, Op::Transpose { perm: Some(vec![1, 0]) }, &[c])
    };
    let (wg, wu, wd) = (q4(&mut g, "wg", 64, 64), q4(&mut g, "wu", 64, 64), q4(&mut g, "wd", 64, 64));
    let y = swiglu_residual(&mut g, x, [wg, wu, wd]);
    let vals: Vec<f32> = (0..40 * 64).map(|i| DType::F16.round(i as f32 * 0.01, false)).collect();
    let table =
        g.add_const("table", Tensor { dtype: DType::F16, shape: vec![40, 64], data: wgslc_ir::Data::F32(vals) });
    let tt = node(&mut g, Op::Transpose { perm: Some(vec![1, 0]) }, &[table]);
    let yh = node(&mut g, Op::Cast { to: DType::F16, saturate: true }, &[y]);
    let logits = node(&mut g, Op::MatMul, &[yh, tt]);
    g.outputs.push(logits);
    g
}

/// A one-row product over an LLM head's width of 4-bit codes (135,200 outputs, K = 32): each workgroup computes
/// 4 tiles of 32 columns one after another, A staged once, each next tile's codes and scales loaded before the
/// current tile's sums; the codes are masked in place, A staged times 2^-4s for the code 4s bits up its half-word.
#[test]
fn a_wide_four_bit_head_loops_over_tiles() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[1, 1, 32]);
    let (n, k) = (135_200, 32);
    let vals: Vec<f32> = (0..n * k).map(|i| ((i * 37) % 29) as f32 / 29.0 - 0.5).collect();
    let b = wgslc_ir::Blocks::quantize(&vals, k, 32, 4, DType::F16);
    let w = g.add_const("w", Tensor { dtype: DType::F32, shape: vec![n, k], data: wgslc_ir::Data::Blocks(b.into()) });
    let wt = node(&mut g, Op::Transpose { perm: Some(vec![1, 0]) }, &[w]);
    let y = node(&mut g, Op::MatMul, &[x, wt]);
    g.outputs.push(y);
    let k = kernels(g);
    assert!(k.contains("for (var tile = 0u; tile < 4u;") && k.contains("as1 * 0.0625f"), "tiles, codes in place:\n{k}");
    insta::assert_snapshot!(k);
}

/// A decode step's attention over `[1, 2, 8, 16]` caches: the new key and value rows written into them in place
/// (`CacheWrite` at the row the loop gives; K's computed by an elementwise kernel, rotary's place), then the one
/// query row's (computed the same way) scores, [mask,] softmax and product with V over the caches.
fn decode_step(masked: bool) -> Graph {
    let mut g = Graph::new();
    let (kc, vc) = (input(&mut g, "k_cache", &[1, 2, 8, 16]), input(&mut g, "v_cache", &[1, 2, 8, 16]));
    let (k, v, q) =
        (input(&mut g, "k", &[1, 2, 1, 16]), input(&mut g, "v", &[1, 2, 1, 16]), input(&mut g, "q", &[1, 2, 1, 16]));
    let row = g.add_value("row", Some(TensorType::new(DType::I64, vec![1])));
    g.inputs.push(row);
    let mask = masked.then(|| input(&mut g, "mask", &[1, 1, 1, 8]));
    let cos = input(&mut g, "cos", &[1, 1, 1, 16]);
    let k = node(&mut g, Op::Binary(BinaryOp::Mul), &[k, cos]);
    let keys = node(&mut g, Op::CacheWrite { axis: 2 }, &[kc, k, row]);
    let q = node(&mut g, Op::Binary(BinaryOp::Mul), &[q, cos]);
    let values = node(&mut g, Op::CacheWrite { axis: 2 }, &[vc, v, row]);
    let kt = node(&mut g, Op::Transpose { perm: Some(vec![0, 1, 3, 2]) }, &[keys]);
    let mut scores = node(&mut g, Op::MatMul, &[q, kt]);
    if let Some(mask) = mask {
        let scale = g.add_const("scale", Tensor::f32(vec![], vec![0.25]));
        let scaled = node(&mut g, Op::Binary(BinaryOp::Mul), &[scores, scale]);
        scores = node(&mut g, Op::Binary(BinaryOp::Add), &[scaled, mask]);
    }
    let p = node(&mut g, Op::Softmax { axis: -1, legacy: false, log: false }, &[scores]);
    let out = node(&mut g, Op::MatMul, &[p, values]);
    g.outputs.push(out);
    g
}

/// With the mask the writes keep a kernel of their own (K's and V's in one, K's rows computed there): the attention
/// kernel would bind nine buffers with them (the limit is eight).
#[test]
fn a_decode_step_writes_its_cache_in_place() {
    let k = kernels(decode_step(true));
    assert_eq!(k.matches("templates/cache_write.wgsl").count(), 1, "K's and V's cache writes in one kernel:\n{k}");
    assert!(k.contains("var<storage, read_write> cache1"), "{k}");
    assert_eq!(k.matches("fn operand_a(").count(), 2, "K's rows in its cache write, Q's in the scores:\n{k}");
    assert_eq!(k.matches("// ---- ").count(), 2, "the cache writes, then attention as one kernel:\n{k}");
    assert!(k.contains("templates/attention_row.wgsl"), "{k}");
    assert!(k.contains("var<storage, read_write> cache"), "written in place:\n{k}");
    insta::assert_snapshot!(k);
}

/// Without the mask the attention kernel does the cache writes (`Fold::CacheRows`): both caches bound read-write
/// once, workgroup 0 writing the new rows, every workgroup taking its head's new key and value from workgroup
/// memory and scoring keys up to the new row only (a `CacheWrite`'s contract: the rows after it are masked out,
/// which `--kv-cache` proves; this graph, built by hand, has no mask to prove it by).
#[test]
fn a_decode_steps_attention_writes_its_cache() {
    let k = kernels(decode_step(false));
    assert_eq!(k.matches("// ---- ").count(), 1, "the cache writes inside the attention kernel:\n{k}");
    assert!(k.contains("templates/attention_row.wgsl"), "{k}");
    assert!(k.contains("var<storage, read_write> b") && k.contains("var<storage, read_write> v"), "{k}");
    assert!(k.contains("fn operand_k(") && k.contains("fn operand_a("), "K's rows and Q's computed:\n{k}");
    insta::assert_snapshot!(k);
}

/// Its subgroup module: the softmax's maximum and sum by `subgroupMax` / `subgroupAdd` and one barrier each, the
/// slices' p·V sums by shuffles across the slices of a subgroup.
#[test]
fn a_decode_steps_attention_reduces_in_subgroups() {
    let k = subgroup_modules(decode_step(false));
    assert!(k.contains("templates/attention_row.wgsl"), "{k}");
    assert!(k.contains("subgroupMax(v)") && k.contains("subgroupShuffleXor(pv, m)"), "{k}");
    insta::assert_snapshot!(k);
}

/// The decode loop's advance kernel: the chosen token into the next step's input and the history, the row, the
/// position (stored as floats here, converted) and the mask word moved on by one.
#[test]
fn the_decode_loop_advances_on_the_gpu() {
    let mut g = Graph::new();
    let int = |g: &mut Graph, name: &str, n: usize| {
        let v = g.add_value(name, Some(TensorType::new(DType::I64, vec![n])));
        g.inputs.push(v);
        v
    };
    let (ids, row, mask, tokens) =
        (int(&mut g, "ids", 1), int(&mut g, "row", 1), int(&mut g, "mask", 8), int(&mut g, "t", 8));
    let positions = input(&mut g, "positions", &[1]);
    let token = g.add_value("token", Some(TensorType::new(DType::I64, vec![1])));
    g.add_node("next", Op::Binary(BinaryOp::Add), vec![Some(ids), Some(row)], vec![token]).unwrap();
    g.outputs.push(token);
    run_pipeline(&mut g, None).unwrap();
    let sched = schedule(&g, &FuseOptions::default()).unwrap();
    let plan = plan_memory(&g, &sched).unwrap();
    let a = wgslc_emit::Advance {
        name: "wgslc.advance/greedy".into(),
        token,
        tokens,
        input_ids: ids,
        cache_row: row,
        attention_mask: mask,
        position_ids: Some(positions),
        capacity: 8,
    };
    let k = validate(wgslc_emit::advance(&g, &plan, &a).unwrap(), &Limits::default()).unwrap();
    let wgsl = &k.kernel.wgsl;
    assert!(wgsl.contains("var<storage, read> token") && wgsl.contains("var<storage, read_write> mask"), "{wgsl}");
    assert!(wgsl.contains("positions[0] = f32(next)"), "{wgsl}");
    insta::assert_snapshot!(wgsl);
}
