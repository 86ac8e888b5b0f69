//! QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear over the integer types (int8/uint8/int16/uint16)
//! as elementwise ops: the scale and zero point are broadcast along their axis (repeated per block when blocked),
//! rounding is WGSL's round (half to even, as ONNX asks) and saturation a Clip to the type's range.

use crate::PassError;
use wgslc_ir::{BinaryOp, Builder, DType, Op, ReduceOp, TensorType, UnaryOp, ValueId};

/// The range of an integer quantized type.
fn range(t: DType, err: &dyn Fn(String) -> PassError) -> Result<(f64, f64), PassError> {
    Ok(match t {
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        DType::U16 => (0.0, 65535.0),
        DType::I16 => (-32768.0, 32767.0),
        other => {
            return Err(err(format!(
                "quantized type {} is not supported (int8, uint8, int16, uint16 are)",
                other.name()
            )))
        }
    })
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
    to: DType,
    err: &dyn Fn(String) -> PassError,
) -> Result<ValueId, PassError> {
    let (lo, hi) = range(to, err)?;
    let q = b.bin(BinaryOp::Div, x, scale)?;
    let mut q = b.op(Op::Unary(UnaryOp::Round), &[Some(q)])?;
    if let Some(z) = zp {
        let zf = b.op(Op::Cast(DType::F32), &[Some(z)])?;
        q = b.bin(BinaryOp::Add, q, zf)?;
    }
    let (lo, hi) = (b.scalar(DType::F32, lo), b.scalar(DType::F32, hi));
    let q = b.op(Op::Clip, &[Some(q), Some(lo), Some(hi)])?;
    Ok(b.op(Op::Cast(to), &[Some(q)])?)
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
            range(xt.dtype, err)?;
            let s = broadcast(b, scale, &st, &xt.shape, *axis, *block_size, err)?;
            let mut y = b.op(Op::Cast(DType::F32), &[Some(x)])?;
            if let Some(z) = input(2) {
                let z = broadcast(b, z, &ty(2).expect("typed"), &xt.shape, *axis, *block_size, err)?;
                let zf = b.op(Op::Cast(DType::F32), &[Some(z)])?;
                y = b.bin(BinaryOp::Sub, y, zf)?;
            }
            let s = if st.dtype == DType::F32 { s } else { b.op(Op::Cast(DType::F32), &[Some(s)])? };
            let y = b.bin(BinaryOp::Mul, y, s)?;
            Ok(vec![Some(if st.dtype == DType::F32 { y } else { b.op(Op::Cast(st.dtype), &[Some(y)])? })])
        }
        Op::QuantizeLinear { axis, block_size, output_dtype } => {
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
            let xf = if xt.dtype == DType::F32 { x } else { b.op(Op::Cast(DType::F32), &[Some(x)])? };
            let sf = b.op(Op::Cast(DType::F32), &[Some(s)])?;
            Ok(vec![Some(quantize(b, xf, sf, zp, to, err)?)])
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
            let zp = quantize(b, neg, scale, None, DType::U8, err)?;
            let y = quantize(b, x, scale, Some(zp), DType::U8, err)?;
            Ok(vec![Some(y), Some(scale), Some(zp)])
        }
        _ => unreachable!("a quantization op"),
    }
}
