//! QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear as elementwise ops, over the integer types
//! (int2/int4/int8/int16 and their unsigned kinds) and the 8-bit and 4-bit floats: the scale and zero point are
//! broadcast along their axis (repeated per block when blocked). Into an integer type, rounding is WGSL's round
//! (half to even, as ONNX asks) and saturation a Clip to the type's range; into a float type both are the Cast's
//! (round half to even onto the type's grid, `saturate` as the attribute says).

use crate::PassError;
use wgslc_ir::{BinaryOp, Builder, DType, Op, ReduceOp, TensorType, UnaryOp, ValueId};

/// What a quantized type is: an integer range, or a narrow float type (rounded and saturated by Cast).
enum Quantized {
    Int(f64, f64),
    Float,
}

fn quantized(t: DType, err: &dyn Fn(String) -> PassError) -> Result<Quantized, PassError> {
    match (t.int_bits(), t.float_format()) {
        (Some((w, signed)), _) if w <= 16 => {
            let half = (1u64 << (w - 1)) as f64;
            Ok(if signed { Quantized::Int(-half, half - 1.0) } else { Quantized::Int(0.0, 2.0 * half - 1.0) })
        }
        (_, Some(f)) if f.saturable || t == DType::F4E2M1 => Ok(Quantized::Float),
        _ => Err(err(format!(
            "quantized type {} is not supported (int2/4/8/16, uint2/4/8/16, float8 and float4e2m1 are)",
            t.name()
        ))),
    }
}

/// `p` (a scale or zero point) shaped to broadcast against `x` of shape `xs`: a scalar as is, a vector along
/// `axis`, or (blocked) each element repeated `block` times along `axis` and cut to its length.
fn broadcast(
    b: &mut Builder,
    p: ValueId,
    pt: &TensorType,
    xs: &[usize],
    axis: i64,
    block: usize,
    err: &dyn Fn(String) -> PassError,
) -> Result<ValueId, PassError> {
    if pt.numel() == 1 && block == 0 {
        return Ok(b.reshape(p, &[])?);
    }
    let r = xs.len() as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if !(0..r).contains(&a) {
        return Err(err(format!("axis {axis} is outside rank {r}")));
    }
    let a = a as usize;
    if block == 0 {
        if pt.shape != [xs[a]] {
            return Err(err(format!("a per-axis scale or zero point must be [{}], got {:?}", xs[a], pt.shape)));
        }
        let mut shape = vec![1; xs.len()];
        shape[a] = xs[a];
        return Ok(b.reshape(p, &shape)?);
    }
    let blocks = xs[a].div_ceil(block);
    let mut want = xs.to_vec();
    want[a] = blocks;
    if pt.shape != want {
        return Err(err(format!("a blocked scale or zero point must be {want:?}, got {:?}", pt.shape)));
    }
    // [.., blocks, ..] → [.., blocks, 1, ..] → [.., blocks, block, ..] → [.., blocks·block, ..] → cut.
    let mut wide = want.clone();
    wide.insert(a + 1, 1);
    let v = b.reshape(p, &wide)?;
    wide[a + 1] = block;
    let s = b.ints(&wide.iter().map(|&d| d as i64).collect::<Vec<_>>());
    let v = b.op(Op::Expand, &[Some(v), Some(s)])?;
    let mut merged = want.clone();
    merged[a] = blocks * block;
    let v = b.reshape(v, &merged)?;
    if blocks * block == xs[a] {
        return Ok(v);
    }
    let (st, en, ax) = (b.ints(&[0]), b.ints(&[xs[a] as i64]), b.ints(&[a as i64]));
    Ok(b.op(Op::Slice, &[Some(v), Some(st), Some(en), Some(ax)])?)
}

/// saturate(round(x / scale) + zero_point) as `to`.
fn quantize(
    b: &mut Builder,
    x: ValueId,
    scale: ValueId,
    zp: Option<ValueId>,
    (to, saturate): (DType, bool),
    err: &dyn Fn(String) -> PassError,
) -> Result<ValueId, PassError> {
    let kind = quantized(to, err)?;
    let mut q = b.bin(BinaryOp::Div, x, scale)?;
    if let Quantized::Int(..) = kind {
        q = b.op(Op::Unary(UnaryOp::Round), &[Some(q)])?;
    }
    if let Some(z) = zp {
        let zf = b.op(Op::cast(DType::F32), &[Some(z)])?;
        q = b.bin(BinaryOp::Add, q, zf)?;
    }
    if let Quantized::Int(lo, hi) = kind {
        let (lo, hi) = (b.scalar(DType::F32, lo), b.scalar(DType::F32, hi));
        q = b.op(Op::Clip, &[Some(q), Some(lo), Some(hi)])?;
    }
    Ok(b.op(Op::Cast { to, saturate }, &[Some(q)])?)
}

/// A DequantizeLinear of constants — a weight the quantizers stored as int8/uint8/int4/uint4/int2/uint2 codes with
/// float32 or float16 scales, per tensor, per axis or in blocks — as one block-quantized constant
/// (`wgslc_ir::Blocks`) that the kernels reading it decode, read in the model's layout through a transpose where
/// the quantization axis is not the one the constant is stored along. `None` when the inputs are not constants
/// of such a form (the elementwise expansion then applies, and folds where it can).
fn dequantized_constant(
    b: &mut Builder,
    inputs: &[Option<ValueId>],
    xt: &TensorType,
    st: &TensorType,
    axis: i64,
    block: usize,
    err: &dyn Fn(String) -> PassError,
) -> Result<Option<ValueId>, PassError> {
    use std::sync::Arc;
    use wgslc_ir::{Data, Quantized, Tensor, Zeros};
    let konst = |i: usize| inputs.get(i).copied().flatten().and_then(|v| b.g.const_data(v));
    let (Some(x), Some(s)) = (konst(0), konst(1)) else { return Ok(None) };
    let zp = match inputs.get(2).copied().flatten() {
        Some(_) => match konst(2) {
            Some(z) => Some(z),
            None => return Ok(None),
        },
        None => None,
    };
    let Some((bits, signed)) = xt.dtype.int_bits().filter(|&(w, _)| [2, 4, 8].contains(&w)) else { return Ok(None) };
    if xt.shape.is_empty() || xt.numel() == 0 || !matches!(st.dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Ok(None);
    }
    // Unsigned codes: a signed type's values offset by half its range, and its zero points likewise.
    let off = if signed { 1i64 << (bits - 1) } else { 0 };
    let codes: Vec<u8> = x.to_i64().iter().map(|&q| (q + off) as u8).collect();
    let scales: Vec<f32> = s.to_f64().into_iter().map(|v| v as f32).collect();
    let zeros = match zp {
        Some(z) => Zeros::Blocks(z.to_i64().iter().map(|&q| (q + off) as u8).collect()),
        None => Zeros::All(off as u8),
    };
    let scale_dtype = if st.dtype == DType::F16 { DType::F16 } else { DType::F32 };
    let r = xt.shape.len() as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if !(0..r).contains(&a) {
        return Err(err(format!("axis {axis} is outside rank {r}")));
    }
    let a = a as usize;
    let q = Quantized { shape: &xt.shape, bits, codes, scales, scale_dtype, zeros };
    let placed = if q.scales.len() == 1 && block == 0 {
        q.per_tensor()
    } else if block == 0 {
        if st.shape != [xt.shape[a]] {
            return Err(err(format!("a per-axis scale must be [{}], got {:?}", xt.shape[a], st.shape)));
        }
        // A per-axis zero point list is one per block of the stored rows already.
        q.per_axis(a)
    } else {
        let mut want = xt.shape.clone();
        want[a] = xt.shape[a].div_ceil(block);
        if st.shape != want {
            return Err(err(format!("a blocked scale must be {want:?}, got {:?}", st.shape)));
        }
        q.blocked(a, block)
    };
    let mut placed = placed;
    if let Zeros::Blocks(z) = &placed.blocks.zeros {
        if z.len() != placed.blocks.scales.len() {
            return Err(err(format!("{} zero points for {} scales", z.len(), placed.blocks.scales.len())));
        }
        // Per tensor with zero points given per row above: one for all.
        if z.iter().all(|&c| c == z[0]) {
            placed.blocks.zeros = Zeros::All(z[0]);
        }
    }
    if placed.blocks.check().is_err() {
        return Ok(None);
    }
    let t = Tensor { dtype: st.dtype, shape: placed.stored.clone(), data: Data::Blocks(Arc::new(placed.blocks)) };
    let stored = b.const_named("quantized", t);
    Ok(Some(match placed.perm {
        None => stored,
        Some(perm) => b.transpose(stored, &perm)?,
    }))
}

pub(super) fn expand(
    b: &mut Builder,
    op: &Op,
    inputs: &[Option<ValueId>],
    types: &[Option<TensorType>],
    err: &dyn Fn(String) -> PassError,
) -> Result<Vec<Option<ValueId>>, PassError> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let ty = |i: usize| types.get(i).cloned().flatten();
    let x = input(0).ok_or_else(|| err("missing x".into()))?;
    let xt = ty(0).expect("typed");
    match op {
        Op::DequantizeLinear { axis, block_size } => {
            let scale = input(1).ok_or_else(|| err("missing x_scale".into()))?;
            let st = ty(1).expect("typed");
            quantized(xt.dtype, err)?;
            if let Some(w) = dequantized_constant(b, inputs, &xt, &st, *axis, *block_size, err)? {
                return Ok(vec![Some(w)]);
            }
            let s = broadcast(b, scale, &st, &xt.shape, *axis, *block_size, err)?;
            let mut y = b.op(Op::cast(DType::F32), &[Some(x)])?;
            if let Some(z) = input(2) {
                let z = broadcast(b, z, &ty(2).expect("typed"), &xt.shape, *axis, *block_size, err)?;
                let zf = b.op(Op::cast(DType::F32), &[Some(z)])?;
                y = b.bin(BinaryOp::Sub, y, zf)?;
            }
            let s = if st.dtype == DType::F32 { s } else { b.op(Op::cast(DType::F32), &[Some(s)])? };
            let y = b.bin(BinaryOp::Mul, y, s)?;
            Ok(vec![Some(if st.dtype == DType::F32 { y } else { b.op(Op::cast(st.dtype), &[Some(y)])? })])
        }
        Op::QuantizeLinear { axis, block_size, output_dtype, saturate } => {
            let scale = input(1).ok_or_else(|| err("missing y_scale".into()))?;
            let s = broadcast(b, scale, &ty(1).expect("typed"), &xt.shape, *axis, *block_size, err)?;
            let to = match (ty(2), output_dtype) {
                (Some(z), _) => z.dtype,
                (None, Some(t)) => *t,
                (None, None) => DType::U8,
            };
            let zp = match input(2) {
                Some(z) => Some(broadcast(b, z, &ty(2).expect("typed"), &xt.shape, *axis, *block_size, err)?),
                None => None,
            };
            let xf = if xt.dtype == DType::F32 { x } else { b.op(Op::cast(DType::F32), &[Some(x)])? };
            let sf = b.op(Op::cast(DType::F32), &[Some(s)])?;
            Ok(vec![Some(quantize(b, xf, sf, zp, (to, *saturate), err)?)])
        }
        Op::DynamicQuantizeLinear => {
            // scale = (max(x, 0) − min(x, 0)) / 255; zero point = saturate(round(−min / scale)).
            let all = b.ints(&(0..xt.rank() as i64).collect::<Vec<_>>());
            let reduce = |b: &mut Builder, op: ReduceOp| {
                b.op(Op::Reduce { op, axes: None, keepdims: false, noop_with_empty_axes: false }, &[Some(x), Some(all)])
            };
            let (mx, mn) = (reduce(b, ReduceOp::Max)?, reduce(b, ReduceOp::Min)?);
            let zero = b.scalar(DType::F32, 0.0);
            let mx = b.bin(BinaryOp::Max, mx, zero)?;
            let mn = b.bin(BinaryOp::Min, mn, zero)?;
            let span = b.bin(BinaryOp::Sub, mx, mn)?;
            let q = b.scalar(DType::F32, 255.0);
            let scale = b.bin(BinaryOp::Div, span, q)?;
            let neg = b.op(Op::Unary(UnaryOp::Neg), &[Some(mn)])?;
            let zp = quantize(b, neg, scale, None, (DType::U8, true), err)?;
            let y = quantize(b, x, scale, Some(zp), (DType::U8, true), err)?;
            Ok(vec![Some(y), Some(scale), Some(zp)])
        }
        _ => unreachable!("a quantization op"),
    }
}
