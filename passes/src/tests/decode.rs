//! What a decode step needs: ranged dims, the matrix-vector layouts, weights stored K-major or narrow, cache
//! writes and the attention that takes them, tabulated position functions, and the probes of a mask.

use super::*;

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
        let t = gemv_tiling(nn, k, 1, kmajor, vec4, Target::Gpu);
        assert_eq!((t.lanes, t.cols), (lanes, cols), "{nn} outputs over K = {k}: {t:?}");
        assert_eq!(t.lanes * t.groups, 256);
        let run_bytes = if kmajor { t.lanes * 4 } else { t.lanes * t.vec * 4 };
        assert!(run_bytes >= 32, "{t:?} reads runs of {run_bytes} bytes");
        if nn.div_ceil(t.cols) < GEMV_WORKGROUPS {
            assert!(if kmajor { t.cols == 1 || t.lanes >= k } else { t.lanes * 4 * t.vec == 32 }, "{t:?}");
        }
    }
}

/// On a CPU adapter ([`Target::Cpu`]) a one-row product's sums over K stay in at most 4 threads each (one barrier,
/// no reduction tree), and small products take one workgroup (a CPU pays for every workgroup's 256 invocations):
/// a workgroup per `CPU_GEMV_MACS_PER_WORKGROUP` multiply-adds, at most `CPU_GEMV_WORKGROUPS`.
#[test]
fn cpu_gemv_tilings_keep_each_sum_in_few_threads() {
    let cases = [
        // (outputs, K, K-major, vec4) → (lanes, groups, outputs per workgroup)
        ((512, 64, false, true), (256, 1, 1024)), // the tiny testdata Llama's gate/up: one workgroup
        ((64, 128, false, true), (256, 1, 1024)), // its down projection
        ((1152, 896, false, true), (256, 1, 1024)), // Q, K and V of a 0.5B model: 2 MMACs, 2 workgroups
        ((896, 4864, false, true), (64, 4, 256)), // its down projection: 8 wanted, 4 at the most groups
        ((9728, 896, false, true), (256, 1, 1024)), // its gate and up: 10 workgroups at one group
        ((256, 64, true, false), (1, 256, 256)),  // K-major: each thread walks its output's K alone
        ((151_936, 896, true, false), (1, 256, 256)), // a tied LM head
    ];
    for ((nn, k, kmajor, vec4), (lanes, groups, cols)) in cases {
        let t = gemv_tiling(nn, k, 1, kmajor, vec4, Target::Cpu);
        assert_eq!((t.lanes, t.groups, t.cols), (lanes, groups, cols), "{nn} outputs over K = {k}: {t:?}");
        assert_eq!(t.lanes * t.groups, 256);
        assert!(if kmajor { t.lanes } else { t.groups } <= 4, "{t:?}");
    }
}

/// The packed (narrow-weight) matrix-vector layouts of Qwen2.5-0.5B's decode step, as measured
/// ([`packed_gemv_tiling`]): every workgroup is 256 threads, a group's columns never straddle two blocks of a split
/// weight, and a K longer than the staged chunk gets 64 lanes a column.
#[test]
fn packed_gemv_tilings_follow_the_measured_shapes() {
    let cases = [
        // (outputs, block columns, K, staged) → (lanes, columns a group, tiles a workgroup)
        ((151_936, None, 896, 896), (16, 2, 4)),        // 4-bit LM head
        ((128_256, None, 2048, 2048), (32, 4, 1)),      // a Llama-3 head: A too wide for 16 lanes
        ((128_256, None, 1024, 1024), (16, 2, 2)),      // … over K = 1024: 2 tiles keep 2,004 workgroups
        ((50_257, None, 768, 768), (16, 2, 1)),         // GPT-2's head: 786 workgroups of one tile
        ((30_388, Some(30_388), 896, 896), (16, 2, 1)), // a block of a split f16 head
        ((30_387, Some(30_387), 896, 896), (32, 1, 1)), // a block of an odd width: one column a group
        ((896, None, 4864, 2048), (64, 2, 1)),          // down projection: three chunks of A
        ((9728, None, 896, 896), (16, 2, 1)),           // gate and up, merged
        ((1152, None, 896, 896), (32, 1, 1)),           // Q, K and V, merged
        ((896, None, 896, 896), (32, 1, 1)),            // o-projection
    ];
    for ((nn, block_cols, k, staged), (lanes, per_group, tiles)) in cases {
        let t = packed_gemv_tiling(nn, block_cols, k, staged);
        assert_eq!((t.lanes, t.per_group, t.tiles), (lanes, per_group, tiles), "{nn} outputs over K = {k}: {t:?}");
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
    run_passes(&mut g, None, Some("infer"), &FuseOptions::default()).unwrap();
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
    run_passes(&mut h, None, Some("infer"), &FuseOptions::default()).unwrap();
    let err = probe(&h, &[], |_| true).unwrap_err().to_string();
    assert!(err.contains("'softmax'") && err.contains("data other than a product"), "{err}");
}
