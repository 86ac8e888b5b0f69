//! Reductions, softmax, products and convolutions, pooling, normalization, attention and indexing.

use super::*;

impl Importer<'_> {
    /// A reduction, contraction, normalization or indexing op: whether `base` is one (then translated).
    pub(super) fn compute(&mut self, n: &N, base: &str, overload: &str) -> R<bool> {
        use BinaryOp as B;
        let done: R<()> = match base {
            // ---- reductions ----
            "sum" => self.reduce(n, ReduceOp::Sum, "dim"),
            "mean" => self.reduce(n, ReduceOp::Mean, "dim"),
            "amax" => self.reduce(n, ReduceOp::Max, "dim"),
            "amin" => self.reduce(n, ReduceOp::Min, "dim"),
            "prod" => self.reduce(n, ReduceOp::Prod, "dim"),
            "logsumexp" => self.reduce(n, ReduceOp::LogSumExp, "dim"),
            "any" => self.any_all(n, true),
            "all" => self.any_all(n, false),
            "max" | "min" if overload == "dim" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let d = self.dim(n, self.int(n, "dim", None)?, shape.len())? as i64;
                let keepdim = self.boolean(n, "keepdim", false)?;
                let x = self.t(n, "self")?;
                let is_max = base == "max";
                let op = if is_max { ReduceOp::Max } else { ReduceOp::Min };
                let vals = self.out_name(n, 0)?;
                let v = self.emit(
                    n,
                    "values",
                    Op::Reduce { op, axes: Some(vec![d]), keepdims: keepdim, noop_with_empty_axes: false },
                    &[Some(x)],
                )?;
                self.vals.insert(vals, Val::T(v));
                let idx = self.emit(
                    n,
                    "indices",
                    Op::ArgReduce { max: is_max, axis: d, keepdims: keepdim, select_last: false },
                    &[Some(x)],
                )?;
                self.alias(n, 1, idx)
            }
            "max" | "min" => self.reduce(n, if base == "max" { ReduceOp::Max } else { ReduceOp::Min }, "dim"),
            "argmax" | "argmin" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let keepdim = self.boolean(n, "keepdim", false)?;
                let x = self.t(n, "self")?;
                let (x, d) = match self.opt_int(n, "dim")? {
                    Some(d) => (x, self.dim(n, d, shape.len())? as i64),
                    None => {
                        let s = self.ints_const(n, &[-1]);
                        (self.emit(n, "flat", Op::Reshape { allowzero: false }, &[Some(x), Some(s)])?, 0)
                    }
                };
                let a = self.emit(
                    n,
                    "arg",
                    Op::ArgReduce { max: base == "argmax", axis: d, keepdims: keepdim, select_last: false },
                    &[Some(x)],
                )?;
                self.reshape_to_out(n, a, 0, None)
            }
            "cumsum" | "cumprod" => {
                let (in_dt, shape) = self.arg_meta(n, "self")?;
                let (out_dt, _) = self.out_meta(n, 0)?;
                let d = self.dim(n, self.int(n, "dim", None)?, shape.len())? as i64;
                let x = self.t(n, "self")?;
                let x = self.cast(n, x, in_dt, out_dt)?;
                let a = self.konst(n, "axis", Tensor::i64(vec![], vec![d]));
                self.finish(
                    n,
                    Op::CumSum { axis: None, exclusive: false, reverse: false, prod: base == "cumprod" },
                    &[Some(x), Some(a)],
                )
            }
            "_softmax" | "softmax" | "_log_softmax" | "log_softmax" => {
                let (in_dt, shape) = self.arg_meta(n, "self")?;
                let (out_dt, _) = self.out_meta(n, 0)?;
                let d = self.dim(n, self.int(n, "dim", None)?, shape.len())? as i64;
                let x = self.t(n, "self")?;
                let x = self.cast(n, x, in_dt, out_dt)?;
                self.finish(n, Op::Softmax { axis: d, legacy: false, log: base.contains("log") }, &[Some(x)])
            }
            // ---- contractions ----
            "mm" | "bmm" | "matmul" => {
                let x = self.t(n, "self")?;
                let y = self.t(n, if base == "matmul" { "other" } else { "mat2" })?;
                if base == "bmm" && self.unflattened_bmm(n, x, y)?.is_some() {
                    return Ok(true);
                }
                if base == "mm" && self.unflattened_mm(n, x, y, None, "self")?.is_some() {
                    return Ok(true);
                }
                self.finish(n, Op::MatMul, &[Some(x), Some(y)])
            }
            "addmm" => {
                let alpha = self.number(n, "alpha", Some(1.0))? as f32;
                let beta = self.number(n, "beta", Some(1.0))? as f32;
                let c = self.t(n, "self")?;
                let a = self.t(n, "mat1")?;
                let b = self.t(n, "mat2")?;
                if alpha == 1.0 && beta == 1.0 && self.unflattened_mm(n, a, b, Some(c), "mat1")?.is_some() {
                    return Ok(true);
                }
                self.finish(n, Op::Gemm { alpha, beta, trans_a: false, trans_b: false }, &[Some(a), Some(b), Some(c)])
            }
            "baddbmm" => {
                let alpha = self.number(n, "alpha", Some(1.0))?;
                let beta = self.number(n, "beta", Some(1.0))?;
                let (dt, _) = self.out_meta(n, 0)?;
                let c = self.t(n, "self")?;
                let p = self.emit(n, "bmm", Op::MatMul, &[Some(self.t(n, "batch1")?), Some(self.t(n, "batch2")?)])?;
                let p = if alpha != 1.0 {
                    let a = self.scalar(n, dt, alpha);
                    self.emit(n, "alpha", Op::Binary(B::Mul), &[Some(p), Some(a)])?
                } else {
                    p
                };
                let c = if beta != 1.0 {
                    let b = self.scalar(n, dt, beta);
                    self.emit(n, "beta", Op::Binary(B::Mul), &[Some(c), Some(b)])?
                } else {
                    c
                };
                self.finish(n, Op::Binary(B::Add), &[Some(p), Some(c)])
            }
            "linear" => {
                let x = self.t(n, "input")?;
                let w = self.t(n, "weight")?;
                let (_, xs) = self.arg_meta(n, "input")?;
                let bias = self.opt_t(n, "bias")?;
                if xs.len() == 2 {
                    if let Some(b) = bias {
                        return self
                            .finish(
                                n,
                                Op::Gemm { alpha: 1.0, beta: 1.0, trans_a: false, trans_b: true },
                                &[Some(x), Some(w), Some(b)],
                            )
                            .map(|()| true);
                    }
                }
                let wt = self.emit(n, "weight_t", Op::Transpose { perm: Some(vec![1, 0]) }, &[Some(w)])?;
                match bias {
                    None => self.finish(n, Op::MatMul, &[Some(x), Some(wt)]),
                    Some(b) => {
                        let p = self.emit(n, "matmul", Op::MatMul, &[Some(x), Some(wt)])?;
                        self.finish(n, Op::Binary(B::Add), &[Some(p), Some(b)])
                    }
                }
            }
            "convolution" | "conv1d" | "conv2d" | "_convolution" => {
                let x = self.t(n, "input")?;
                let w = self.t(n, "weight")?;
                let b = self.opt_t(n, "bias")?;
                let (_, ws) = self.arg_meta(n, "weight")?;
                let spatial = ws.len().saturating_sub(2);
                let expand = |v: Vec<i64>, what: &str| -> R<Vec<usize>> {
                    let v = if v.len() == 1 { vec![v[0]; spatial] } else { v };
                    if v.len() != spatial || v.iter().any(|&x| x < 0) {
                        return Err(n.err(format!("'{what}' {v:?} does not fit {spatial} spatial dims")));
                    }
                    Ok(v.into_iter().map(|x| x as usize).collect())
                };
                let strides = expand(self.ints(n, "stride", Some(vec![1]))?, "stride")?;
                let dilations = expand(self.ints(n, "dilation", Some(vec![1]))?, "dilation")?;
                let group = self.int(n, "groups", Some(1))?.max(1) as usize;
                let (pads, auto_pad) = match n.arg("padding") {
                    Some(Argument::AsString(s)) => match s.as_str() {
                        "same" => (vec![], AutoPad::SameUpper),
                        "valid" => (vec![], AutoPad::Valid),
                        other => return Err(n.err(format!("padding '{other}'"))),
                    },
                    _ => {
                        let p = expand(self.ints(n, "padding", Some(vec![0]))?, "padding")?;
                        (p.iter().chain(&p).copied().collect(), AutoPad::NotSet)
                    }
                };
                let window = Window { kernel: ws[2..].to_vec(), strides, pads, dilations, auto_pad, ceil_mode: false };
                if self.boolean(n, "transposed", false)? {
                    let output_padding = expand(self.ints(n, "output_padding", Some(vec![0]))?, "output_padding")?;
                    return self
                        .finish(
                            n,
                            Op::ConvTranspose { window, group, output_padding, output_shape: vec![] },
                            &[Some(x), Some(w), b],
                        )
                        .map(|()| true);
                }
                self.finish(n, Op::Conv { window, group }, &[Some(x), Some(w), b])
            }
            "max_pool2d_with_indices"
            | "max_pool2d"
            | "max_pool1d"
            | "max_pool3d"
            | "max_pool1d_with_indices"
            | "max_pool3d_with_indices" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let window = self.window_pool(n, shape.len())?;
                let x = self.t(n, "self")?;
                self.not_computed(n, 1, "MaxPool's indices are not computed by wgslc")?;
                self.finish(n, Op::Pool { kind: PoolKind::Max, window, count_include_pad: false }, &[Some(x)])
            }
            "avg_pool2d" | "avg_pool1d" | "avg_pool3d" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let window = self.window_pool(n, shape.len())?;
                if self.opt_int(n, "divisor_override")?.is_some() {
                    return Err(n.err("divisor_override is not supported"));
                }
                let count_include_pad = self.boolean(n, "count_include_pad", true)?;
                let x = self.t(n, "self")?;
                self.finish(n, Op::Pool { kind: PoolKind::Avg, window, count_include_pad }, &[Some(x)])
            }
            "adaptive_avg_pool2d" | "_adaptive_avg_pool2d" | "adaptive_avg_pool1d" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let (_, out) = self.out_meta(n, 0)?;
                let x = self.t(n, "self")?;
                let r = shape.len();
                if out[2..].iter().all(|&o| o == 1) {
                    let axes: Vec<i64> = (2..r as i64).collect();
                    return self
                        .finish(
                            n,
                            Op::Reduce {
                                op: ReduceOp::Mean,
                                axes: Some(axes),
                                keepdims: true,
                                noop_with_empty_axes: false,
                            },
                            &[Some(x)],
                        )
                        .map(|()| true);
                }
                if shape[2..].iter().zip(&out[2..]).any(|(&i, &o)| o == 0 || i % o != 0) {
                    return Err(n.err(format!(
                        "adaptive pooling from {:?} to {:?}: only sizes that divide evenly are supported",
                        &shape[2..],
                        &out[2..]
                    )));
                }
                let kernel: Vec<usize> = shape[2..].iter().zip(&out[2..]).map(|(&i, &o)| i / o).collect();
                let window = Window {
                    kernel: kernel.clone(),
                    strides: kernel,
                    pads: vec![0; 2 * (r - 2)],
                    dilations: vec![1; r - 2],
                    auto_pad: AutoPad::NotSet,
                    ceil_mode: false,
                };
                self.finish(n, Op::Pool { kind: PoolKind::Avg, window, count_include_pad: false }, &[Some(x)])
            }
            // ---- normalization ----
            "_native_batch_norm_legit_no_training"
            | "batch_norm"
            | "_native_batch_norm_legit"
            | "native_batch_norm" => {
                if base != "_native_batch_norm_legit_no_training" && self.boolean(n, "training", false)? {
                    return Err(n.err("BatchNorm in training mode: export after model.eval()"));
                }
                let eps = self.number(n, "eps", Some(1e-5))? as f32;
                let x = self.t(n, "input")?;
                let (dt, shape) = self.arg_meta(n, "input")?;
                let c = shape.get(1).copied().unwrap_or(1);
                let ones = |s: &mut Self, v: f64| s.konst(n, "affine", Tensor::from_f64(dt, vec![c], vec![v; c]));
                let w = match self.opt_t(n, "weight")? {
                    Some(w) => w,
                    None => ones(self, 1.0),
                };
                let b = match self.opt_t(n, "bias")? {
                    Some(b) => b,
                    None => ones(self, 0.0),
                };
                let mean = self.t(n, "running_mean")?;
                let var = self.t(n, "running_var")?;
                self.not_computed(n, 1, "BatchNorm's saved statistics are not computed")?;
                self.finish(n, Op::BatchNorm { epsilon: eps }, &[Some(x), Some(w), Some(b), Some(mean), Some(var)])
            }
            "native_layer_norm" | "layer_norm" | "rms_norm" => {
                let x = self.t(n, "input")?;
                let (dt, shape) = self.arg_meta(n, "input")?;
                let normalized = self.ints(n, "normalized_shape", None)?;
                let k = normalized.len();
                if k == 0 || k > shape.len() {
                    return Err(n.err(format!("normalized_shape {normalized:?} does not fit {shape:?}")));
                }
                let rms = base == "rms_norm";
                let eps = match self.opt_number(n, "eps")? {
                    Some(e) => e as f32,
                    None if rms => f32::EPSILON,
                    None => 1e-5,
                };
                let tail: Vec<usize> = shape[shape.len() - k..].to_vec();
                let numel: usize = tail.iter().product();
                let w = match self.opt_t(n, "weight")? {
                    Some(w) => w,
                    None => self.konst(n, "ones", Tensor::from_f64(dt, tail.clone(), vec![1.0; numel])),
                };
                let b = if rms { None } else { self.opt_t(n, "bias")? };
                self.not_computed(n, 1, "LayerNorm's saved statistics are not computed")?;
                self.finish(n, Op::LayerNorm { axis: -(k as i64), epsilon: eps, rms }, &[Some(x), Some(w), b])
            }
            "scaled_dot_product_attention" => {
                if self.number(n, "dropout_p", Some(0.0))? != 0.0 {
                    return Err(n.err("dropout_p other than 0 (training) is not supported"));
                }
                let q = self.t(n, "query")?;
                let k = self.t(n, "key")?;
                let v = self.t(n, "value")?;
                let (_, qs) = self.arg_meta(n, "query")?;
                let (_, ks) = self.arg_meta(n, "key")?;
                if qs.len() != 4 || ks.len() != 4 {
                    return Err(n.err("only 4-D query, key and value ([batch, heads, seq, dim]) are supported"));
                }
                let mask = self.opt_t(n, "attn_mask")?;
                let scale = self.opt_number(n, "scale")?.map(|s| s as f32);
                let attrs = AttentionAttrs {
                    is_causal: self.boolean(n, "is_causal", false)?,
                    q_num_heads: None,
                    kv_num_heads: None,
                    scale,
                    softcap: 0.0,
                    qk_matmul_output_mode: 0,
                    own_key_seen: false,
                };
                self.finish(n, Op::Attention(attrs), &[Some(q), Some(k), Some(v), mask])
            }
            // ---- indexing ----
            "embedding" => {
                let w = self.t(n, "weight")?;
                let i = self.t(n, "indices")?;
                self.finish(n, Op::Gather { axis: 0 }, &[Some(w), Some(i)])
            }
            "gather" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let d = self.dim(n, self.int(n, "dim", None)?, shape.len())? as i64;
                let x = self.t(n, "self")?;
                let i = self.t(n, "index")?;
                self.finish(n, Op::GatherElements { axis: d }, &[Some(x), Some(i)])
            }
            "index" => self.index(n),
            "tril" | "triu" => {
                let x = self.t(n, "self")?;
                let k = self.int(n, "diagonal", Some(0))?;
                let kc = self.konst(n, "diagonal", Tensor::i64(vec![], vec![k]));
                self.finish(n, Op::Trilu { upper: base == "triu", k: None }, &[Some(x), Some(kc)])
            }
            "diff" => {
                if self.int(n, "n", Some(1))? != 1 {
                    return Err(n.err("diff with n other than 1 is not supported"));
                }
                let (dt, shape) = self.out_meta(n, 0)?;
                let (_, xs) = self.arg_meta(n, "self")?;
                let d = self.dim(n, self.int(n, "dim", Some(-1))?, xs.len())? as i64;
                let mut parts = Vec::new();
                for key in ["prepend", "self", "append"] {
                    if let Some(v) = self.opt_t(n, key)? {
                        let (vdt, _) = self.arg_meta(n, key)?;
                        parts.push(Some(self.cast(n, v, vdt, dt)?));
                    }
                }
                let x = if parts.len() == 1 {
                    parts[0].unwrap()
                } else {
                    self.emit(n, "joined", Op::Concat { axis: d }, &parts)?
                };
                let len = shape[d as usize] as i64;
                let ax = self.ints_const(n, &[d]);
                let (s0, e0, s1, e1) = (
                    self.ints_const(n, &[1]),
                    self.ints_const(n, &[len + 1]),
                    self.ints_const(n, &[0]),
                    self.ints_const(n, &[len]),
                );
                let hi = self.emit(n, "hi", Op::Slice, &[Some(x), Some(s0), Some(e0), Some(ax)])?;
                let lo = self.emit(n, "lo", Op::Slice, &[Some(x), Some(s1), Some(e1), Some(ax)])?;
                let op = if dt == DType::Bool { B::Xor } else { B::Sub };
                self.finish(n, Op::Binary(op), &[Some(hi), Some(lo)])
            }
            _ => return Ok(false),
        };
        done.map(|()| true)
    }

    /// `mm(view(X), W)` (+ bias) where the view flattens X's leading dims: `MatMul(X, W)` (+ bias) over X's own
    /// shape, then viewed as the mm's output — the 3-D product a `linear` is, which the norm and epilogue folds
    /// of the ONNX path recognize.
    pub(super) fn unflattened_mm(
        &mut self,
        n: &N,
        a: ValueId,
        w: ValueId,
        bias: Option<ValueId>,
        a_key: &str,
    ) -> R<Option<()>> {
        let Some((x, hx)) = self.origins.get(&a).cloned() else { return Ok(None) };
        let (_, a_shape) = self.arg_meta(n, a_key)?;
        let (_, out) = self.out_meta(n, 0)?;
        let r = hx.len();
        if r < 3 || a_shape.len() != 2 || hx[r - 1] != a_shape[1] || hx[..r - 1].iter().product::<usize>() != a_shape[0]
        {
            return Ok(None);
        }
        let mut p = self.emit(n, "product", Op::MatMul, &[Some(x), Some(w)])?;
        if let Some(b) = bias {
            p = self.emit(n, "bias", Op::Binary(BinaryOp::Add), &[Some(p), Some(b)])?;
        }
        let mut p_shape = hx[..r - 1].to_vec();
        p_shape.push(out[1]);
        self.reshape_to_out(n, p, 0, Some(p_shape))?;
        Ok(Some(()))
    }

    /// `bmm(view(A), view(B))` where the views flatten the same leading batch dims of A and B: `MatMul(A, B)`
    /// (then viewed as the bmm's output), or `None` when the operands are not such views.
    pub(super) fn unflattened_bmm(&mut self, n: &N, a: ValueId, b: ValueId) -> R<Option<()>> {
        let (Some((sa, ha)), Some((sb, hb))) = (self.origins.get(&a).cloned(), self.origins.get(&b).cloned()) else {
            return Ok(None);
        };
        let (_, a_shape) = self.arg_meta(n, "self")?;
        let (_, b_shape) = self.arg_meta(n, "mat2")?;
        let r = ha.len();
        if r < 4 || hb.len() != r || ha[..r - 2] != hb[..r - 2] || a_shape.len() != 3 || b_shape.len() != 3 {
            return Ok(None);
        }
        let batch: usize = ha[..r - 2].iter().product();
        if ha[r - 2..] != a_shape[1..] || hb[r - 2..] != b_shape[1..] || batch != a_shape[0] || batch != b_shape[0] {
            return Ok(None);
        }
        let p = self.emit(n, "batched", Op::MatMul, &[Some(sa), Some(sb)])?;
        let mut p_shape = ha[..r - 2].to_vec();
        p_shape.extend([ha[r - 2], hb[r - 1]]);
        self.reshape_to_out(n, p, 0, Some(p_shape))?;
        Ok(Some(()))
    }

    pub(super) fn reduce(&mut self, n: &N, op: ReduceOp, dims_key: &str) -> R<()> {
        let (in_dt, shape) = self.arg_meta(n, "self")?;
        let (out_dt, _) = self.out_meta(n, 0)?;
        let keepdim = self.boolean(n, "keepdim", false)?;
        let dims = self.opt_ints(n, dims_key)?.unwrap_or_default();
        let mut axes: Vec<i64> = if dims.is_empty() {
            (0..shape.len() as i64).collect()
        } else {
            dims.iter().map(|&d| self.dim(n, d, shape.len()).map(|d| d as i64)).collect::<R<_>>()?
        };
        axes.sort();
        axes.dedup();
        let x = self.t(n, "self")?;
        // Sums of bools and ints accumulate in the output's dtype (torch promotes them to int64).
        let x = if out_dt != DType::Bool { self.cast(n, x, in_dt, out_dt)? } else { x };
        self.finish(n, Op::Reduce { op, axes: Some(axes), keepdims: keepdim, noop_with_empty_axes: false }, &[Some(x)])
    }

    /// `any`/`all` over `dim`: a max/min of the values as 0/1.
    pub(super) fn any_all(&mut self, n: &N, any: bool) -> R<()> {
        let (in_dt, shape) = self.arg_meta(n, "self")?;
        let keepdim = self.boolean(n, "keepdim", false)?;
        let dims = match self.opt_ints(n, "dim")? {
            Some(d) if !d.is_empty() => d,
            _ => (0..shape.len() as i64).collect(),
        };
        let mut axes: Vec<i64> =
            dims.iter().map(|&d| self.dim(n, d, shape.len()).map(|d| d as i64)).collect::<R<_>>()?;
        axes.sort();
        axes.dedup();
        let x = self.t(n, "self")?;
        let b = self.cast(n, x, in_dt, DType::Bool)?;
        let f = self.emit(n, "as_int", Op::cast(DType::I32), &[Some(b)])?;
        let op = if any { ReduceOp::Max } else { ReduceOp::Min };
        let r = self.emit(
            n,
            "reduce",
            Op::Reduce { op, axes: Some(axes), keepdims: keepdim, noop_with_empty_axes: false },
            &[Some(f)],
        )?;
        self.finish(n, Op::cast(DType::Bool), &[Some(r)])
    }

    pub(super) fn window_pool(&self, n: &N, rank: usize) -> R<Window> {
        let spatial = rank.saturating_sub(2);
        let expand = |v: Vec<i64>, what: &str| -> R<Vec<usize>> {
            let v = if v.len() == 1 { vec![v[0]; spatial] } else { v };
            if v.len() != spatial || v.iter().any(|&x| x < 0) {
                return Err(n.err(format!("'{what}' {v:?} does not fit {spatial} spatial dims")));
            }
            Ok(v.into_iter().map(|x| x as usize).collect())
        };
        let kernel = expand(self.ints(n, "kernel_size", None)?, "kernel_size")?;
        let strides = match self.opt_ints(n, "stride")? {
            Some(s) if !s.is_empty() => expand(s, "stride")?,
            _ => kernel.clone(),
        };
        let pad = expand(self.ints(n, "padding", Some(vec![0]))?, "padding")?;
        let dilations = expand(self.ints(n, "dilation", Some(vec![1]))?, "dilation")?;
        let ceil_mode = self.boolean(n, "ceil_mode", false)?;
        Ok(Window {
            kernel,
            strides,
            pads: pad.iter().chain(&pad).copied().collect(),
            dilations,
            auto_pad: AutoPad::NotSet,
            ceil_mode,
        })
    }

    /// `x[i0, i1, ...]` with index tensors (None for whole dims): adjacent indices select elements of the
    /// merged dims they cover, as a Gather over the row-major index `i0 · size1 + i1 + ...`.
    pub(super) fn index(&mut self, n: &N) -> R<()> {
        let (_, shape) = self.arg_meta(n, "self")?;
        let idx: Vec<Option<String>> = match n.arg("indices") {
            Some(Argument::AsTensors(ts)) => ts.iter().map(|t| Some(t.name.clone())).collect(),
            Some(Argument::AsOptionalTensors(ts)) => ts
                .iter()
                .map(|t| match t {
                    OptionalTensor::AsTensor(t) => Some(t.name.clone()),
                    OptionalTensor::AsNone(_) => None,
                })
                .collect(),
            _ => return Err(n.err("argument 'indices' is not a tensor list")),
        };
        let used: Vec<usize> = idx.iter().enumerate().filter(|(_, t)| t.is_some()).map(|(i, _)| i).collect();
        let (Some(&first), Some(&last)) = (used.first(), used.last()) else {
            let x = self.t(n, "self")?;
            return self.alias(n, 0, x);
        };
        if last - first + 1 != used.len() {
            return Err(n.err("index tensors separated by a full slice (x[i, :, j]) are not supported"));
        }
        if last >= shape.len() {
            return Err(n.err("more indices than dims"));
        }
        let x = self.t(n, "self")?;
        let mut flat: Option<ValueId> = None;
        for (k, d) in used.iter().enumerate() {
            let name = idx[*d].clone().unwrap();
            let (dt, _) = self.meta(n, &name)?;
            if dt == DType::Bool {
                return Err(n.err("boolean-mask indexing (data-dependent shapes) is not supported"));
            }
            let v = self.value(n, &name)?;
            let v = self.cast(n, v, dt, DType::I64)?;
            if used.len() == 1 {
                flat = Some(v);
                break;
            }
            // Negative indices count from the end (Python's modulo).
            let size = self.konst(n, "size", Tensor::i64(vec![], vec![shape[*d] as i64]));
            let v = self.emit(n, "wrap", Op::Binary(BinaryOp::Mod { fmod: false }), &[Some(v), Some(size)])?;
            let stride: usize = used[k + 1..].iter().map(|&e| shape[e]).product();
            let v = if stride != 1 {
                let s = self.konst(n, "stride", Tensor::i64(vec![], vec![stride as i64]));
                self.emit(n, "scaled", Op::Binary(BinaryOp::Mul), &[Some(v), Some(s)])?
            } else {
                v
            };
            flat = Some(match flat {
                None => v,
                Some(f) => self.emit(n, "sum", Op::Binary(BinaryOp::Add), &[Some(f), Some(v)])?,
            });
        }
        let x = if used.len() > 1 {
            let mut merged: Vec<i64> = shape[..first].iter().map(|&s| s as i64).collect();
            merged.push(used.iter().map(|&d| shape[d] as i64).product());
            merged.extend(shape[last + 1..].iter().map(|&s| s as i64));
            let s = self.ints_const(n, &merged);
            self.emit(n, "merged", Op::Reshape { allowzero: true }, &[Some(x), Some(s)])?
        } else {
            x
        };
        let g = self.emit(n, "gather", Op::Gather { axis: first as i64 }, &[Some(x), flat])?;
        self.reshape_to_out(n, g, 0, None)
    }
}
