//! The host evaluator used by constant folding: resolved elementwise and layout ops on host tensors.
//! Floats compute in f64 and round to the declared dtype; integers compute in i64 with wrapping arithmetic.

use wgslc_ir::{
    broadcast_shapes, broadcast_strides, strided_indices, BinaryOp, DType, Data, Op, ScatterReduction, Tensor, UnaryOp,
};

/// Evaluates a resolved op on constant inputs; `None` if the op is not host-evaluable.
pub(crate) fn eval(op: &Op, inputs: &[&Tensor], out_types: &[wgslc_ir::TensorType]) -> Option<Vec<Tensor>> {
    let out = &out_types[0];
    let t = match op {
        Op::Unary(u) => unary(*u, inputs[0], out.dtype),
        Op::Binary(b) => binary(*b, inputs[0], inputs[1], &out.shape, out.dtype),
        Op::Where => {
            let (c, x, y) = (inputs[0], inputs[1], inputs[2]);
            let ci = strided_indices(&out.shape, 0, &broadcast_strides(&c.shape, &out.shape));
            let xi = strided_indices(&out.shape, 0, &broadcast_strides(&x.shape, &out.shape));
            let yi = strided_indices(&out.shape, 0, &broadcast_strides(&y.shape, &out.shape));
            let cv = c.to_f64();
            let idx: Vec<(bool, usize, usize)> =
                ci.iter().zip(&xi).zip(&yi).map(|((&c, &x), &y)| (cv[c] != 0.0, x, y)).collect();
            let data = match (&x.data, &y.data) {
                (Data::F32(a), Data::F32(b)) => {
                    Data::F32(idx.iter().map(|&(c, i, j)| if c { a[i] } else { b[j] }).collect())
                }
                (Data::I64(a), Data::I64(b)) => {
                    Data::I64(idx.iter().map(|&(c, i, j)| if c { a[i] } else { b[j] }).collect())
                }
                (Data::Bool(a), Data::Bool(b)) => {
                    Data::Bool(idx.iter().map(|&(c, i, j)| if c { a[i] } else { b[j] }).collect())
                }
                _ => return None,
            };
            Tensor { dtype: out.dtype, shape: out.shape.clone(), data }
        }
        Op::Cast { to, saturate } => cast(inputs[0], *to, *saturate),
        Op::Alias => inputs[0].reshaped(out.shape.clone()),
        Op::StridedCopy { offset, strides } => Tensor {
            dtype: out.dtype,
            shape: out.shape.clone(),
            data: inputs[0].data.gather(&strided_indices(&out.shape, *offset, strides)),
        },
        Op::Concat { axis } => {
            let axis = *axis as usize;
            let outer: usize = out.shape[..axis].iter().product();
            let mut idx_parts: Vec<Data> = Vec::new();
            for o in 0..outer {
                for t in inputs {
                    let inner: usize = t.shape[axis..].iter().product();
                    idx_parts.push(t.data.gather(&(o * inner..(o + 1) * inner).collect::<Vec<_>>()));
                }
            }
            let parts: Vec<&Data> = idx_parts.iter().collect();
            let data = if parts.is_empty() { empty_like(&inputs[0].data) } else { Data::concat(&parts) };
            Tensor { dtype: out.dtype, shape: out.shape.clone(), data }
        }
        Op::Gather { axis } => {
            let axis = *axis as usize;
            let (d, ind) = (inputs[0], inputs[1]);
            let outer: usize = d.shape[..axis].iter().product();
            let inner: usize = d.shape[axis + 1..].iter().product();
            let n = d.shape[axis] as i64;
            let mut idx = Vec::new();
            for o in 0..outer {
                for &i in &ind.to_i64() {
                    let i = if i < 0 { i + n } else { i };
                    if !(0..n).contains(&i) {
                        return None;
                    }
                    let base = (o * d.shape[axis] + i as usize) * inner;
                    idx.extend(base..base + inner);
                }
            }
            Tensor { dtype: out.dtype, shape: out.shape.clone(), data: d.data.gather(&idx) }
        }
        // Small products of constants: rotary tables (positions × inverse frequencies) as the core-ATen dialect
        // writes them. Large ones stay kernels (folding weights into weights is the GPU's job, not the compiler's).
        Op::MatMul if out.dtype.is_float() => matmul(inputs[0], inputs[1], out)?,
        // Masks built from positions (the core-ATen form of a causal mask counts positions with a cumsum).
        Op::CumSum { axis: Some(axis), exclusive, reverse, prod } if (*axis as usize) < out.shape.len() => {
            let axis = *axis as usize;
            let outer: usize = out.shape[..axis].iter().product();
            let n = out.shape[axis];
            let inner: usize = out.shape[axis + 1..].iter().product();
            let x = inputs[0].to_f64();
            let mut y = vec![0.0; x.len()];
            for o in 0..outer {
                for i in 0..inner {
                    let mut acc = if *prod { 1.0 } else { 0.0 };
                    for step in 0..n {
                        let k = if *reverse { n - 1 - step } else { step };
                        let at = (o * n + k) * inner + i;
                        if *exclusive {
                            y[at] = acc;
                        }
                        acc = if *prod { acc * x[at] } else { acc + x[at] };
                        if !*exclusive {
                            y[at] = acc;
                        }
                    }
                }
            }
            Tensor::from_f64(out.dtype, out.shape.clone(), y)
        }
        // ScatterND: the in-place slice assignment of a mask (`mask[..., :n] = mask[..., :n].masked_fill(..)`).
        Op::Scatter { axis: None, reduction } => scatter_nd(inputs[0], inputs[1], inputs[2], *reduction)?,
        // Computed on the device only: constant inputs to these stay kernels (or are rewritten into the ops above
        // by shape inference first).
        wgslc_ir::import_level!()
        | Op::MatMul
        | Op::Gemm { .. }
        | Op::Conv { .. }
        | Op::Pool { .. }
        | Op::GlobalPool(_)
        | Op::BatchNorm { .. }
        | Op::Softmax { .. }
        | Op::LayerNorm { .. }
        | Op::ArgReduce { .. }
        | Op::ArgChunks { .. }
        | Op::ArgMerge { .. }
        | Op::Trilu { .. }
        | Op::RotateHalf
        | Op::GatherElements { .. }
        | Op::CumSum { .. }
        | Op::Pad { .. }
        | Op::Reduce { .. }
        | Op::TopK { .. }
        | Op::Sample
        | Op::CacheWrite { .. }
        | Op::GatherBlocks { .. }
        | Op::Recurrence(_)
        | Op::Scatter { axis: Some(_), .. }
        | Op::TileCopy => return None,
    };
    Some(vec![t])
}

/// ScatterND(data, indices, updates): each index tuple (the last axis of `indices`, `k` long, negative counting
/// from the end) names a slice of `data` that the matching slice of `updates` replaces (or is combined with);
/// `None` where an index is out of range or the shapes disagree.
fn scatter_nd(data: &Tensor, indices: &Tensor, updates: &Tensor, reduction: ScatterReduction) -> Option<Tensor> {
    let (&k, batch) = indices.shape.split_last()?;
    if k == 0 || k > data.shape.len() || updates.shape[..] != [batch, &data.shape[k..]].concat()[..] {
        return None;
    }
    let slice: usize = data.shape[k..].iter().product();
    let strides = wgslc_ir::contiguous_strides(&data.shape);
    let idx = indices.to_i64();
    // Where each output element comes from: the data (its own index) or an update (data.len() + its index).
    let mut source: Vec<usize> = (0..data.numel()).collect();
    let mut writes: Vec<(usize, usize)> = Vec::new();
    for (t, tuple) in idx.chunks(k.max(1)).enumerate().take(batch.iter().product()) {
        let mut base = 0;
        for (d, &i) in tuple.iter().enumerate().take(k) {
            let n = data.shape[d] as i64;
            let i = if i < 0 { i + n } else { i };
            if !(0..n).contains(&i) {
                return None;
            }
            base += i as usize * strides[d];
        }
        for e in 0..slice {
            writes.push((base + e, t * slice + e));
        }
    }
    if reduction == ScatterReduction::None {
        for &(at, from) in &writes {
            source[at] = data.numel() + from;
        }
        let all = Data::concat(&[&data.data, &updates.data]);
        return Some(Tensor { dtype: data.dtype, shape: data.shape.clone(), data: all.gather(&source) });
    }
    if data.dtype == DType::Bool {
        return None;
    }
    let (mut y, u) = (data.to_f64(), updates.to_f64());
    for &(at, from) in &writes {
        let (a, b) = (y[at], u[from]);
        y[at] = match reduction {
            ScatterReduction::Add => a + b,
            ScatterReduction::Mul => a * b,
            ScatterReduction::Max => a.max(b),
            ScatterReduction::Min => a.min(b),
            ScatterReduction::None => b,
        };
    }
    Some(Tensor::from_f64(data.dtype, data.shape.clone(), y))
}

/// Batched, broadcasting MatMul on the host, for at most 2^22 multiply-adds.
fn matmul(a: &Tensor, b: &Tensor, out: &wgslc_ir::TensorType) -> Option<Tensor> {
    let (ra, rb, r) = (a.shape.len(), b.shape.len(), out.shape.len());
    if ra < 2 || rb < 2 || r < 2 {
        return None;
    }
    let (m, k, n) = (a.shape[ra - 2], a.shape[ra - 1], b.shape[rb - 1]);
    if b.shape[rb - 2] != k || out.shape[r - 2] != m || out.shape[r - 1] != n {
        return None;
    }
    let batch = &out.shape[..r - 2];
    let count: usize = batch.iter().product();
    if count.checked_mul(m * n * k).is_none_or(|macs| macs > 1 << 22) {
        return None;
    }
    // Each input's batch offset (in matrices) for each output batch index, broadcasting size-1 and missing dims.
    let offsets = |shape: &[usize]| strided_indices(batch, 0, &broadcast_strides(&shape[..shape.len() - 2], batch));
    let (oa, ob) = (offsets(&a.shape), offsets(&b.shape));
    let (x, y) = (a.to_f64(), b.to_f64());
    let mut z = Vec::with_capacity(count * m * n);
    for i in 0..count {
        let (pa, pb) = (oa[i] * m * k, ob[i] * k * n);
        for row in 0..m {
            for col in 0..n {
                z.push((0..k).map(|t| x[pa + row * k + t] * y[pb + t * n + col]).sum::<f64>());
            }
        }
    }
    Some(Tensor::from_f64(out.dtype, out.shape.clone(), z))
}

fn empty_like(d: &Data) -> Data {
    match d {
        Data::F32(_) => Data::F32(vec![]),
        Data::I64(_) => Data::I64(vec![]),
        Data::Bool(_) => Data::Bool(vec![]),
        Data::Blocks(_) => Data::F32(vec![]),
    }
}

/// ONNX Cast on the host: floats round onto a narrower float type's grid ([`DType::round`]), integers wrap to a
/// narrower integer type ([`DType::wrap`]), floats become integers by truncation toward zero.
pub(crate) fn cast(t: &Tensor, to: DType, saturate: bool) -> Tensor {
    let data = match (&t.data, to) {
        // A quantized constant's values are f32 already: into float32 it stays quantized.
        (Data::Blocks(_), DType::F32) => t.data.clone(),
        (Data::Blocks(b), _) => {
            let decoded = Tensor { dtype: DType::F32, shape: t.shape.clone(), data: Data::F32(b.decode()) };
            return cast(&decoded, to, saturate);
        }
        (Data::F32(v), d) if d.is_float() => Data::F32(v.iter().map(|&x| d.round(x, saturate)).collect()),
        (Data::F32(v), DType::Bool) => Data::Bool(v.iter().map(|&x| x != 0.0).collect()),
        (Data::F32(v), d) => Data::I64(v.iter().map(|&x| d.wrap(x as i64)).collect()),
        (Data::I64(v), d) if d.is_float() => Data::F32(v.iter().map(|&x| d.round(x as f32, saturate)).collect()),
        (Data::I64(v), DType::Bool) => Data::Bool(v.iter().map(|&x| x != 0).collect()),
        (Data::I64(v), d) => Data::I64(v.iter().map(|&x| d.wrap(x)).collect()),
        (Data::Bool(v), d) if d.is_float() => Data::F32(v.iter().map(|&x| x as u8 as f32).collect()),
        (Data::Bool(v), DType::Bool) => Data::Bool(v.clone()),
        (Data::Bool(v), _) => Data::I64(v.iter().map(|&x| x as i64).collect()),
    };
    Tensor { dtype: to, shape: t.shape.clone(), data }
}

/// erf with |error| < 1.2e-7 (Numerical Recipes' erfc Chebyshev fit), the same accuracy class as the shader's.
pub(crate) fn erf(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.26551223
            + t * (1.00002368
                + t * (0.37409196
                    + t * (0.09678418
                        + t * (-0.18628806
                            + t * (0.27886807
                                + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
            .exp();
    if x >= 0.0 {
        1.0 - r
    } else {
        r - 1.0
    }
}

fn unary(u: UnaryOp, t: &Tensor, out: DType) -> Tensor {
    if let (Data::I64(v), true) = (&t.data, out.is_int()) {
        let f = |x: i64| -> i64 {
            match u {
                UnaryOp::Neg => x.wrapping_neg(),
                UnaryOp::Abs => x.wrapping_abs(),
                UnaryOp::Relu => x.max(0),
                UnaryOp::Clip(lo, hi) => (x as f64).clamp(lo as f64, hi as f64) as i64,
                UnaryOp::BitwiseNot => !x,
                UnaryOp::Sign => x.signum(),
                _ => x,
            }
        };
        return Tensor::i64(t.shape.clone(), v.iter().map(|&x| f(x)).collect()).retyped(out);
    }
    let v = t.to_f64();
    let r: Vec<f64> = v
        .iter()
        .map(|&x| match u {
            UnaryOp::Neg => -x,
            UnaryOp::Abs => x.abs(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Reciprocal => 1.0 / x,
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Erf => erf(x),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            UnaryOp::Relu => x.max(0.0),
            UnaryOp::Gelu => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
            UnaryOp::GeluTanh => {
                0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
            }
            UnaryOp::LeakyRelu(a) => {
                if x < 0.0 {
                    a as f64 * x
                } else {
                    x
                }
            }
            UnaryOp::HardSigmoid(a, b) => (a as f64 * x + b as f64).clamp(0.0, 1.0),
            UnaryOp::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
            UnaryOp::Clip(lo, hi) => x.max(lo as f64).min(hi as f64),
            UnaryOp::Not => (x == 0.0) as u8 as f64,
            UnaryOp::IsNaN => x.is_nan() as u8 as f64,
            UnaryOp::Identity => x,
            UnaryOp::Floor => x.floor(),
            UnaryOp::Ceil => x.ceil(),
            UnaryOp::Sin => x.sin(),
            UnaryOp::Cos => x.cos(),
            UnaryOp::Tan => x.tan(),
            UnaryOp::Asin => x.asin(),
            UnaryOp::Acos => x.acos(),
            UnaryOp::Atan => x.atan(),
            UnaryOp::Sinh => x.sinh(),
            UnaryOp::Cosh => x.cosh(),
            UnaryOp::Asinh => x.asinh(),
            UnaryOp::Acosh => x.acosh(),
            UnaryOp::Atanh => x.atanh(),
            UnaryOp::Softplus => x.exp().ln_1p(),
            UnaryOp::Softsign => x / (1.0 + x.abs()),
            UnaryOp::Elu(a) => {
                if x < 0.0 {
                    a as f64 * (x.exp() - 1.0)
                } else {
                    x
                }
            }
            UnaryOp::Selu(a, g) => g as f64 * if x <= 0.0 { a as f64 * (x.exp() - 1.0) } else { x },
            UnaryOp::Celu(a) => x.max(0.0) + (a as f64 * ((x / a as f64).exp() - 1.0)).min(0.0),
            UnaryOp::ThresholdedRelu(a) => {
                if x > a as f64 {
                    x
                } else {
                    0.0
                }
            }
            UnaryOp::Mish => x * x.exp().ln_1p().tanh(),
            UnaryOp::Sign => {
                if x > 0.0 {
                    1.0
                } else if x < 0.0 {
                    -1.0
                } else {
                    x
                }
            }
            UnaryOp::Round => x.round_ties_even(),
            UnaryOp::IsInf(p, n) => ((p && x == f64::INFINITY) || (n && x == f64::NEG_INFINITY)) as u8 as f64,
            UnaryOp::Shrink(b, l) => {
                if x < -l as f64 {
                    x + b as f64
                } else if x > l as f64 {
                    x - b as f64
                } else {
                    0.0
                }
            }
            UnaryOp::BitwiseNot => !(x as i64) as f64,
            UnaryOp::Swish(a) => x / (1.0 + (-(a as f64) * x).exp()),
        })
        .collect();
    Tensor::from_f64(out, t.shape.clone(), r)
}

fn binary(b: BinaryOp, x: &Tensor, y: &Tensor, shape: &[usize], out: DType) -> Tensor {
    debug_assert_eq!(broadcast_shapes(&x.shape, &y.shape).as_deref(), Some(shape));
    let xi = strided_indices(shape, 0, &broadcast_strides(&x.shape, shape));
    let yi = strided_indices(shape, 0, &broadcast_strides(&y.shape, shape));
    let ints = x.dtype.is_int() && y.dtype.is_int();
    if ints && !b.returns_bool() {
        let (xv, yv) = (x.to_i64(), y.to_i64());
        let r = pairs(&xi, &yi, &xv, &yv, |a, c| match b {
            BinaryOp::Add => a.wrapping_add(c),
            BinaryOp::Sub => a.wrapping_sub(c),
            BinaryOp::Mul => a.wrapping_mul(c),
            BinaryOp::Div => {
                if c == 0 {
                    0
                } else {
                    a.wrapping_div(c)
                }
            }
            BinaryOp::Pow => (a as f64).powf(c as f64) as i64,
            BinaryOp::Max => a.max(c),
            BinaryOp::Min => a.min(c),
            BinaryOp::Mod { fmod: true } => {
                if c == 0 {
                    0
                } else {
                    a.wrapping_rem(c)
                }
            }
            BinaryOp::Mod { fmod: false } => {
                if c == 0 {
                    0
                } else {
                    a.wrapping_rem(c).wrapping_add(c).wrapping_rem(c)
                }
            }
            BinaryOp::BitwiseAnd => a & c,
            BinaryOp::BitwiseOr => a | c,
            BinaryOp::BitwiseXor => a ^ c,
            BinaryOp::BitShiftLeft => a.wrapping_shl(c as u32),
            BinaryOp::BitShiftRight => ((a as u64).wrapping_shr(c as u32)) as i64,
            BinaryOp::PRelu => {
                if a < 0 {
                    a.wrapping_mul(c)
                } else {
                    a
                }
            }
            _ => unreachable!("bool-returning ops are handled below"),
        });
        return Tensor::i64(shape.to_vec(), r).retyped(out);
    }
    let (xv, yv) = (x.to_f64(), y.to_f64());
    let r = pairs(&xi, &yi, &xv, &yv, |a, c| match b {
        BinaryOp::Add => a + c,
        BinaryOp::Sub => a - c,
        BinaryOp::Mul => a * c,
        BinaryOp::Div => a / c,
        BinaryOp::Pow => a.powf(c),
        BinaryOp::Max => a.max(c),
        BinaryOp::Min => a.min(c),
        BinaryOp::Equal => (a == c) as u8 as f64,
        BinaryOp::Less => (a < c) as u8 as f64,
        BinaryOp::LessOrEqual => (a <= c) as u8 as f64,
        BinaryOp::Greater => (a > c) as u8 as f64,
        BinaryOp::GreaterOrEqual => (a >= c) as u8 as f64,
        BinaryOp::And => (a != 0.0 && c != 0.0) as u8 as f64,
        BinaryOp::Or => (a != 0.0 || c != 0.0) as u8 as f64,
        BinaryOp::Xor => ((a != 0.0) != (c != 0.0)) as u8 as f64,
        BinaryOp::Mod { fmod: true } => a % c,
        BinaryOp::Mod { fmod: false } => a - c * (a / c).floor(),
        BinaryOp::PRelu => {
            if a < 0.0 {
                a * c
            } else {
                a
            }
        }
        BinaryOp::BitwiseAnd
        | BinaryOp::BitwiseOr
        | BinaryOp::BitwiseXor
        | BinaryOp::BitShiftLeft
        | BinaryOp::BitShiftRight => f64::NAN,
    });
    Tensor::from_f64(out, shape.to_vec(), r)
}

/// `f(x[xi[k]], y[yi[k]])` for every k: a binary op over two broadcast reads.
fn pairs<T: Copy, R>(xi: &[usize], yi: &[usize], x: &[T], y: &[T], f: impl Fn(T, T) -> R) -> Vec<R> {
    xi.iter().zip(yi).map(|(&i, &j)| f(x[i], y[j])).collect()
}

trait Retype {
    fn retyped(self, d: DType) -> Tensor;
}

impl Retype for Tensor {
    fn retyped(mut self, d: DType) -> Tensor {
        self.dtype = d;
        self
    }
}
