//! `resolve`: each op's output types, and the resolved op it becomes (parameter inputs absorbed).

use super::layout::{resolve_window, slice, split, window_out};
use super::{alias, keep, one_input, Ctx, Resolved, FOLD_LIMIT};
use crate::PassError;
use wgslc_ir::{
    broadcast_shapes, broadcast_strides, contiguous_strides, DType, Op, Tensor, TensorType, UnaryOp, ValueId,
};

pub(super) fn resolve(cx: &Ctx) -> Result<Resolved, PassError> {
    let node = cx.g.node(cx.n);
    let op = node.op.clone();
    match op {
        Op::Unary(u) => {
            let t = cx.ty(0)?.clone();
            let dtype = match u {
                UnaryOp::Not => {
                    if t.dtype != DType::Bool {
                        return Err(cx.err(format!("Not needs a bool input, got {}", t.dtype)));
                    }
                    DType::Bool
                }
                UnaryOp::IsNaN | UnaryOp::IsInf(..) => DType::Bool,
                UnaryOp::BitwiseNot if !t.dtype.is_int() => {
                    return Err(cx.err(format!("BitwiseNot needs an integer input, got {}", t.dtype)))
                }
                _ => t.dtype,
            };
            Ok(keep(cx, op, vec![TensorType::new(dtype, t.shape)]))
        }
        Op::Binary(b) => {
            let (x, y) = (cx.ty(0)?, cx.ty(1)?);
            use wgslc_ir::BinaryOp as B;
            if !matches!(b, B::Pow) {
                cx.check_same_dtype(x, y)?;
            }
            if matches!(b, B::BitwiseAnd | B::BitwiseOr | B::BitwiseXor | B::BitShiftLeft | B::BitShiftRight)
                && !x.dtype.is_int()
            {
                return Err(cx.err(format!("bitwise ops need integers, got {}", x.dtype)));
            }
            if matches!(b, B::And | B::Or | B::Xor) && x.dtype != DType::Bool {
                return Err(cx.err(format!("logical ops need bool, got {}", x.dtype)));
            }
            if b == B::PRelu && broadcast_shapes(&x.shape, &y.shape).as_deref() != Some(&x.shape[..]) {
                return Err(cx.err(format!("slope {:?} does not broadcast to X {:?}", y.shape, x.shape)));
            }
            let shape = broadcast_shapes(&x.shape, &y.shape)
                .ok_or_else(|| cx.err(format!("shapes {:?} and {:?} do not broadcast", x.shape, y.shape)))?;
            let dtype = if b.returns_bool() { DType::Bool } else { x.dtype };
            Ok(keep(cx, op, vec![TensorType::new(dtype, shape)]))
        }
        Op::Where => {
            let (c, x, y) = (cx.ty(0)?, cx.ty(1)?, cx.ty(2)?);
            cx.check_same_dtype(x, y)?;
            if c.dtype != DType::Bool {
                return Err(cx.err(format!("the condition must be bool, got {}", c.dtype)));
            }
            let shape = broadcast_shapes(&c.shape, &x.shape)
                .and_then(|s| broadcast_shapes(&s, &y.shape))
                .ok_or_else(|| cx.err("the three shapes do not broadcast"))?;
            Ok(keep(cx, op, vec![TensorType::new(x.dtype, shape)]))
        }
        Op::Cast { to, .. } => {
            let t = cx.ty(0)?;
            if t.dtype == to {
                return alias(cx, t.shape.clone());
            }
            Ok(keep(cx, op, vec![TensorType::new(to, t.shape.clone())]))
        }
        Op::Clip => {
            let t = cx.ty(0)?.clone();
            let bound = |i: usize, default: f32| -> Result<f32, PassError> {
                Ok(match cx.const_input(i, "min/max")? {
                    Some(c) if c.numel() == 1 => c.to_f64()[0] as f32,
                    Some(_) => return Err(cx.err("min and max must be scalars")),
                    None => default,
                })
            };
            let (lo, hi) = (bound(1, f32::NEG_INFINITY)?, bound(2, f32::INFINITY)?);
            one_input(cx, Op::Unary(UnaryOp::Clip(lo, hi)), t)
        }
        Op::MatMul => {
            let (a, b) = (cx.ty(0)?, cx.ty(1)?);
            cx.check_same_dtype(a, b)?;
            if !a.dtype.is_float() {
                return Err(cx.err(format!("integer MatMul ({}) is not supported", a.dtype)));
            }
            if a.rank() == 0 || b.rank() == 0 {
                return Err(cx.err("MatMul inputs must have rank ≥ 1"));
            }
            let (m, k) = if a.rank() == 1 { (1, a.shape[0]) } else { (a.shape[a.rank() - 2], a.shape[a.rank() - 1]) };
            let (k2, nn) = if b.rank() == 1 { (b.shape[0], 1) } else { (b.shape[b.rank() - 2], b.shape[b.rank() - 1]) };
            if k != k2 {
                return Err(cx.err(format!("inner dimensions differ: {:?} @ {:?}", a.shape, b.shape)));
            }
            let ab = &a.shape[..a.rank().saturating_sub(2)];
            let bb = &b.shape[..b.rank().saturating_sub(2)];
            let mut shape = broadcast_shapes(ab, bb)
                .ok_or_else(|| cx.err(format!("batch dimensions do not broadcast: {:?} and {:?}", a.shape, b.shape)))?;
            if a.rank() > 1 {
                shape.push(m);
            }
            if b.rank() > 1 {
                shape.push(nn);
            }
            Ok(keep(cx, op, vec![TensorType::new(a.dtype, shape)]))
        }
        Op::Gemm { trans_a, trans_b, .. } => {
            let (a, b) = (cx.ty(0)?, cx.ty(1)?);
            if a.rank() != 2 || b.rank() != 2 {
                return Err(cx.err("Gemm inputs must be 2-D"));
            }
            let (m, k) = if trans_a { (a.shape[1], a.shape[0]) } else { (a.shape[0], a.shape[1]) };
            let (k2, nn) = if trans_b { (b.shape[1], b.shape[0]) } else { (b.shape[0], b.shape[1]) };
            if k != k2 {
                return Err(cx.err(format!("inner dimensions differ: {:?} and {:?}", a.shape, b.shape)));
            }
            if cx.opt_input(2).is_some() {
                let c = cx.ty(2)?;
                if broadcast_shapes(&c.shape, &[m, nn]).as_deref() != Some(&[m, nn][..]) {
                    return Err(cx.err(format!("C of shape {:?} does not broadcast to [{m}, {nn}]", c.shape)));
                }
            }
            Ok(keep(cx, op, vec![TensorType::new(a.dtype, vec![m, nn])]))
        }
        Op::Conv { window, group } => {
            let (x, w) = (cx.ty(0)?, cx.ty(1)?);
            if x.rank() < 3 || w.rank() != x.rank() {
                return Err(cx.err(format!("X {:?} and W {:?} must have the same rank ≥ 3", x.shape, w.shape)));
            }
            let c = x.shape[1];
            if group == 0 || c % group != 0 || w.shape[0] % group != 0 || w.shape[1] * group != c {
                return Err(cx.err(format!("channels {c} do not match W {:?} with group {group}", w.shape)));
            }
            if let Some(b) = cx.opt_input(2) {
                let bt = cx.g.ty(b);
                if bt.shape != [w.shape[0]] {
                    return Err(cx.err(format!("bias shape {:?} must be [{}]", bt.shape, w.shape[0])));
                }
            }
            let spatial = &x.shape[2..];
            let window = resolve_window(cx, window, &w.shape[2..], spatial)?;
            let mut shape = vec![x.shape[0], w.shape[0]];
            shape.extend(window_out(cx, &window, spatial)?);
            Ok(keep(cx, Op::Conv { window, group }, vec![TensorType::new(x.dtype, shape)]))
        }
        Op::Pool { kind, window, count_include_pad } => {
            let x = cx.ty(0)?.clone();
            if x.rank() < 3 {
                return Err(cx.err("pooling needs rank ≥ 3"));
            }
            let k = window.kernel.clone();
            if k.len() != x.rank() - 2 {
                return Err(cx.err("kernel_shape rank does not match the input"));
            }
            let window = resolve_window(cx, window, &k, &x.shape[2..])?;
            let mut shape = x.shape[..2].to_vec();
            shape.extend(window_out(cx, &window, &x.shape[2..])?);
            one_input(cx, Op::Pool { kind, window, count_include_pad }, TensorType::new(x.dtype, shape))
        }
        Op::GlobalPool(_) => {
            let x = cx.ty(0)?.clone();
            if x.rank() < 3 {
                return Err(cx.err("global pooling needs rank ≥ 3"));
            }
            let mut shape = x.shape.clone();
            shape[2..].iter_mut().for_each(|d| *d = 1);
            Ok(keep(cx, op, vec![TensorType::new(x.dtype, shape)]))
        }
        Op::BatchNorm { .. } => {
            let x = cx.ty(0)?.clone();
            if x.rank() < 2 {
                return Err(cx.err("BatchNormalization needs rank ≥ 2"));
            }
            for i in 1..5 {
                let t = cx.ty(i)?;
                if t.shape != [x.shape[1]] {
                    return Err(cx.err(format!("parameter {i} has shape {:?}, expected [{}]", t.shape, x.shape[1])));
                }
            }
            Ok(keep(cx, op, vec![x]))
        }
        Op::Softmax { axis, legacy, log } => {
            let x = cx.ty(0)?.clone();
            let axis = if x.rank() == 0 { 0 } else { cx.axis(axis, x.rank())? as i64 };
            Ok(keep(cx, Op::Softmax { axis, legacy, log }, vec![x]))
        }
        Op::ArgReduce { max, axis, keepdims, select_last } => {
            let x = cx.ty(0)?.clone();
            let axis = cx.axis(axis, x.rank())?;
            let mut shape = x.shape.clone();
            if keepdims {
                shape[axis] = 1;
            } else {
                shape.remove(axis);
            }
            let op = Op::ArgReduce { max, axis: axis as i64, keepdims, select_last };
            one_input(cx, op, TensorType::new(DType::I64, shape))
        }
        Op::ArgChunks { max, select_last, chunk } => {
            let x = cx.ty(0)?.clone();
            let Some((&n, rows)) = x.shape.split_last().filter(|_| chunk > 0) else {
                return Err(cx.err(format!("needs a row to cut into chunks, got {x}")));
            };
            let mut shape = rows.to_vec();
            shape.extend([n.div_ceil(chunk), 2]);
            one_input(cx, Op::ArgChunks { max, select_last, chunk }, TensorType::new(DType::F32, shape))
        }
        Op::ArgMerge { max, select_last, keepdims } => {
            let x = cx.ty(0)?.clone();
            if x.rank() < 2 || x.shape[x.rank() - 1] != 2 {
                return Err(cx.err(format!("needs [rows…, chunks, 2] pairs, got {x}")));
            }
            let mut shape = x.shape[..x.rank() - 2].to_vec();
            if keepdims {
                shape.push(1);
            }
            one_input(cx, Op::ArgMerge { max, select_last, keepdims }, TensorType::new(DType::I64, shape))
        }
        Op::Recurrence(a) => {
            let (gx, rt) = (cx.ty(0)?, cx.ty(1)?);
            let (d, h, g) = (a.directions, a.hidden, a.cell.gates());
            let [dd, t, b, gh] = gx.shape[..] else {
                return Err(cx.err(format!("the projected inputs must be [D, T, B, G·H], got {gx}")));
            };
            if dd != d || gh != g * h || rt.shape != [d, h, g * h] || gx.dtype != DType::F32 || rt.dtype != DType::F32 {
                return Err(cx.err(format!("inputs {gx} and {rt} do not fit {d} direction(s) of {h} units")));
            }
            let state = [a.cell.states(), d, b, h];
            let expect = |i: usize, shape: &[usize], float: bool| -> Result<(), PassError> {
                match cx.opt_input(i) {
                    None => Ok(()),
                    Some(_) => {
                        let ty = cx.ty(i)?;
                        if ty.shape != shape || (float && ty.dtype != DType::F32) || (!float && !ty.dtype.is_int()) {
                            return Err(cx.err(format!("input {i} is {ty}, expected {shape:?}")));
                        }
                        Ok(())
                    }
                }
            };
            expect(2, &state, true)?;
            expect(3, &[d, 3 * h], true)?;
            expect(4, &[b], false)?;
            expect(5, &[d, h], true)?;
            let outs = vec![TensorType::new(DType::F32, vec![t, d, b, h]), TensorType::new(DType::F32, state.to_vec())];
            Ok(keep(cx, Op::Recurrence(a), outs))
        }
        Op::Sample => {
            let (x, t, params, counter) = (cx.ty(0)?, cx.ty(1)?, cx.ty(2)?, cx.ty(3)?);
            if !x.dtype.is_float() || x.shape.last().is_none_or(|&n| n == 0) {
                return Err(cx.err(format!("the logits must be float with a non-empty last axis, got {x}")));
            }
            if !t.dtype.is_float() || t.numel() != 1 {
                return Err(cx.err(format!("the temperature must be one float, got {t}")));
            }
            if !params.dtype.is_int() || params.numel() != 2 {
                return Err(cx.err(format!("the params must be two integers (top-k, seed), got {params}")));
            }
            if !counter.dtype.is_int() || counter.numel() == 0 {
                return Err(cx.err(format!("the counter must be integers, got {counter}")));
            }
            let shape = x.shape[..x.rank() - 1].to_vec();
            Ok(keep(cx, Op::Sample, vec![TensorType::new(DType::I64, shape)]))
        }
        Op::CacheWrite { axis } => {
            let (c, new, row) = (cx.ty(0)?.clone(), cx.ty(1)?, cx.ty(2)?);
            let fits = axis < c.rank()
                && new.rank() == c.rank()
                && new.dtype == c.dtype
                && (0..c.rank())
                    .all(|d| if d == axis { new.shape[d] <= c.shape[d] } else { new.shape[d] == c.shape[d] });
            if !fits {
                return Err(cx.err(format!("the new rows {new} do not fit the cache {c} along axis {axis}")));
            }
            if !row.dtype.is_int() || row.numel() != 1 {
                return Err(cx.err(format!("the row must be one integer, got {row}")));
            }
            // Written in place: the cache must be memory the caller owns across runs (a graph input), never a
            // weight or an intermediate another kernel may share.
            if !cx.g.inputs.contains(&cx.input(0)?) {
                return Err(cx.err("the cache it writes in place must be a graph input"));
            }
            Ok(keep(cx, op, vec![c]))
        }
        Op::GatherBlocks { rows } => {
            let ind = cx.ty(0)?.clone();
            let first = cx.ty(1)?.clone();
            if !ind.dtype.is_int() || first.rank() == 0 || rows == 0 {
                return Err(cx.err(format!("needs integer indices and blocks of rows, got {ind} and {first}")));
            }
            let last = cx.g.node(cx.n).inputs.len() - 1;
            for i in 1..=last {
                let b = cx.ty(i)?;
                let len_ok = if i == last { (1..=rows).contains(&b.shape[0]) } else { b.shape[0] == rows };
                if b.dtype != first.dtype || b.shape[1..] != first.shape[1..] || !len_ok {
                    return Err(cx.err(format!("block {} ({b}) does not continue a table of {rows}-row blocks", i - 1)));
                }
            }
            let mut shape = ind.shape.clone();
            shape.extend(&first.shape[1..]);
            Ok(keep(cx, op, vec![TensorType::new(first.dtype, shape)]))
        }
        Op::Trilu { upper, .. } => {
            let x = cx.ty(0)?.clone();
            if x.rank() < 2 {
                return Err(cx.err("Trilu needs rank ≥ 2"));
            }
            let k = cx.const_scalar(1, "k")?.map(|t| t.to_i64()[0]).unwrap_or(0);
            one_input(cx, Op::Trilu { upper, k: Some(k) }, x)
        }
        Op::RotateHalf => {
            let x = cx.ty(0)?.clone();
            if !x.dtype.is_float() || x.shape.last().is_none_or(|&w| w % 2 != 0) {
                return Err(cx.err("RotateHalf needs a float input with an even last dimension"));
            }
            one_input(cx, Op::RotateHalf, x)
        }
        Op::GatherElements { axis } => {
            let (x, ind) = (cx.ty(0)?.clone(), cx.ty(1)?.clone());
            let axis = cx.axis(axis, x.rank())?;
            if ind.rank() != x.rank() || !ind.dtype.is_int() {
                return Err(cx.err("indices must be integers of the data's rank"));
            }
            Ok(keep(cx, Op::GatherElements { axis: axis as i64 }, vec![TensorType::new(x.dtype, ind.shape)]))
        }
        Op::CumSum { exclusive, reverse, prod, .. } => {
            let x = cx.ty(0)?.clone();
            let a = cx.const_scalar(1, "axis")?.ok_or_else(|| cx.err("missing axis"))?.to_i64()[0];
            let axis = cx.axis(a, x.rank())? as i64;
            one_input(cx, Op::CumSum { axis: Some(axis), exclusive, reverse, prod }, x)
        }
        Op::TopK { axis, largest, .. } => {
            let x = cx.ty(0)?.clone();
            let axis = cx.axis(axis, x.rank())?;
            let k = cx.const_scalar(1, "K")?.ok_or_else(|| cx.err("missing K"))?.to_i64()[0];
            if k < 0 || k as usize > x.shape[axis] {
                return Err(cx.err(format!("K = {k} is outside 0..={}", x.shape[axis])));
            }
            let mut shape = x.shape.clone();
            shape[axis] = k as usize;
            let op = Op::TopK { axis: axis as i64, largest, k: Some(k as usize) };
            let outs = [TensorType::new(x.dtype, shape.clone()), TensorType::new(DType::I64, shape)];
            Ok(Resolved {
                op,
                inputs: vec![Some(cx.input(0)?)],
                outputs: outs[..node.outputs.len()].to_vec(),
                folded: None,
            })
        }
        Op::Scatter { axis, reduction } => {
            let (d, ind, upd) = (cx.ty(0)?.clone(), cx.ty(1)?.clone(), cx.ty(2)?.clone());
            if !ind.dtype.is_int() || upd.dtype != d.dtype {
                return Err(cx.err("indices must be integers and updates of the data's type"));
            }
            let axis = match axis {
                Some(a) => {
                    if ind.shape != upd.shape || ind.rank() != d.rank() {
                        return Err(cx.err("indices and updates must have one shape, of the data's rank"));
                    }
                    Some(cx.axis(a, d.rank())? as i64)
                }
                None => {
                    let q = *ind.shape.last().ok_or_else(|| cx.err("indices must have rank ≥ 1"))?;
                    if q > d.rank() {
                        return Err(cx.err("index tuples are longer than the data's rank"));
                    }
                    None
                }
            };
            Ok(keep(cx, Op::Scatter { axis, reduction }, vec![d]))
        }
        Op::Pad { mode, .. } => {
            let x = cx.ty(0)?.clone();
            let given = cx.const_input(1, "pads")?.ok_or_else(|| cx.err("missing pads"))?.to_i64();
            let value = cx.const_scalar(2, "constant_value")?.map(|t| t.to_f64()[0] as f32).unwrap_or(0.0);
            let r = x.rank();
            let axes: Vec<usize> = match cx.const_input(3, "axes")? {
                Some(t) => t.to_i64().iter().map(|&a| cx.axis(a, r)).collect::<Result<_, _>>()?,
                None => (0..r).collect(),
            };
            if given.len() != 2 * axes.len() {
                return Err(cx.err(format!("pads {given:?} must have {} entries", 2 * axes.len())));
            }
            let mut pads = vec![0i64; 2 * r];
            for (i, &a) in axes.iter().enumerate() {
                pads[a] = given[i];
                pads[a + r] = given[i + axes.len()];
            }
            let mut shape = Vec::with_capacity(r);
            for d in 0..r {
                let n = x.shape[d] as i64 + pads[d] + pads[d + r];
                if n < 0 || (mode != wgslc_ir::PadMode::Constant && x.shape[d] == 0 && n > 0) {
                    return Err(cx.err(format!("pads {pads:?} do not fit dimension {d} of {:?}", x.shape)));
                }
                shape.push(n as usize);
            }
            one_input(cx, Op::Pad { mode, pads: Some(pads), value }, TensorType::new(x.dtype, shape))
        }
        Op::Tile => {
            let x = cx.ty(0)?.clone();
            let reps = cx.const_input(1, "repeats")?.ok_or_else(|| cx.err("missing repeats"))?.to_i64();
            if reps.len() != x.rank() || reps.iter().any(|&r| r < 0) {
                return Err(cx.err(format!("repeats {reps:?} must be {} non-negative counts", x.rank())));
            }
            let shape: Vec<usize> = x.shape.iter().zip(&reps).map(|(&d, &r)| d * r as usize).collect();
            if reps.iter().all(|&r| r == 1) {
                return alias(cx, shape);
            }
            one_input(cx, Op::TileCopy, TensorType::new(x.dtype, shape))
        }
        Op::CastLike { saturate } => {
            let (x, like) = (cx.ty(0)?.clone(), cx.ty(1)?.dtype);
            if x.dtype == like {
                return alias(cx, x.shape);
            }
            one_input(cx, Op::Cast { to: like, saturate }, TensorType::new(like, x.shape))
        }
        Op::Size => {
            let t = Tensor::i64(vec![], vec![cx.ty(0)?.numel() as i64]);
            Ok(Resolved { op, inputs: vec![], outputs: vec![t.ty()], folded: Some(vec![t]) })
        }
        Op::EyeLike { k, dtype } => {
            let x = cx.ty(0)?;
            if x.rank() != 2 {
                return Err(cx.err("EyeLike needs a 2-D input"));
            }
            let c = x.shape[1];
            let v: Vec<f64> =
                (0..x.numel()).map(|i| if (i % c) as i64 - (i / c) as i64 == k { 1.0 } else { 0.0 }).collect();
            let t = Tensor::from_f64(dtype.unwrap_or(x.dtype), x.shape.clone(), v);
            Ok(Resolved { op, inputs: vec![], outputs: vec![t.ty()], folded: Some(vec![t]) })
        }
        Op::LayerNorm { axis, epsilon, rms } => {
            let x = cx.ty(0)?.clone();
            let axis = cx.axis(axis, x.rank())?;
            let norm = &x.shape[axis..];
            // Scale is required (ONNX's LayerNormalization and RMSNormalization both declare it so).
            cx.input(1)?;
            for i in 1..3 {
                if cx.opt_input(i).is_some() {
                    let t = cx.ty(i)?;
                    if broadcast_shapes(&t.shape, norm).as_deref() != Some(norm) {
                        return Err(cx.err(format!("scale/bias {:?} do not broadcast to {:?}", t.shape, norm)));
                    }
                }
            }
            let mut stats_shape = x.shape[..axis].to_vec();
            stats_shape.resize(x.rank(), 1);
            let mut outs = vec![x.clone()];
            outs.resize(node.outputs.len(), TensorType::new(DType::F32, stats_shape));
            Ok(keep(cx, Op::LayerNorm { axis: axis as i64, epsilon, rms }, outs))
        }
        Op::Reduce { op: rop, axes, keepdims, noop_with_empty_axes } => {
            let x = cx.ty(0)?.clone();
            let given = match axes {
                Some(a) => Some(a),
                None => cx.const_input(1, "axes")?.map(|t| t.to_i64()),
            };
            let mut axes: Vec<usize> = match given {
                Some(a) if !a.is_empty() => a.iter().map(|&a| cx.axis(a, x.rank())).collect::<Result<_, _>>()?,
                _ if noop_with_empty_axes => return alias(cx, x.shape.clone()),
                _ => (0..x.rank()).collect(),
            };
            axes.sort();
            axes.dedup();
            let mut shape = Vec::new();
            for (d, &s) in x.shape.iter().enumerate() {
                if !axes.contains(&d) {
                    shape.push(s);
                } else if keepdims {
                    shape.push(1);
                }
            }
            let op = Op::Reduce {
                op: rop,
                axes: Some(axes.iter().map(|&a| a as i64).collect()),
                keepdims,
                noop_with_empty_axes,
            };
            one_input(cx, op, TensorType::new(x.dtype, shape))
        }
        Op::Reshape { allowzero } => {
            let x = cx.ty(0)?.clone();
            let spec = cx.const_input(1, "shape")?.ok_or_else(|| cx.err("missing shape"))?.to_i64();
            let shape = wgslc_ir::reshape_target(&x.shape, &spec, allowzero).map_err(|e| cx.err(e))?;
            alias(cx, shape)
        }
        Op::Flatten { axis } => {
            let x = cx.ty(0)?.clone();
            let a = if axis == x.rank() as i64 { x.rank() } else { cx.axis(axis, x.rank().max(1))? };
            alias(cx, vec![x.shape[..a].iter().product(), x.shape[a..].iter().product()])
        }
        Op::Unsqueeze => {
            let x = cx.ty(0)?.clone();
            let axes = cx.const_input(1, "axes")?.ok_or_else(|| cx.err("missing axes"))?.to_i64();
            let r = x.rank() + axes.len();
            let mut axes: Vec<usize> = axes.iter().map(|&a| cx.axis(a, r)).collect::<Result<_, _>>()?;
            axes.sort();
            let mut shape = x.shape.clone();
            for a in axes {
                shape.insert(a, 1);
            }
            alias(cx, shape)
        }
        Op::Squeeze => {
            let x = cx.ty(0)?.clone();
            let axes: Vec<usize> = match cx.const_input(1, "axes")? {
                Some(t) => t.to_i64().iter().map(|&a| cx.axis(a, x.rank())).collect::<Result<_, _>>()?,
                None => (0..x.rank()).filter(|&d| x.shape[d] == 1).collect(),
            };
            if let Some(&a) = axes.iter().find(|&&a| x.shape[a] != 1) {
                return Err(cx.err(format!("cannot squeeze axis {a} of size {}", x.shape[a])));
            }
            let shape = x.shape.iter().enumerate().filter(|(d, _)| !axes.contains(d)).map(|(_, &s)| s).collect();
            alias(cx, shape)
        }
        Op::Identity => alias(cx, cx.ty(0)?.shape.clone()),
        Op::Dropout => {
            let ratio = cx.const_scalar(1, "ratio")?.map(|t| t.to_f64()[0]).unwrap_or(0.5);
            let training = cx.const_scalar(2, "training_mode")?.is_some_and(|t| t.to_f64()[0] != 0.0);
            if training && ratio != 0.0 {
                return Err(cx.err("training-mode Dropout is random; export in eval mode"));
            }
            alias(cx, cx.ty(0)?.shape.clone())
        }
        Op::Transpose { perm } => {
            let x = cx.ty(0)?.clone();
            let perm = perm.unwrap_or_else(|| (0..x.rank()).rev().collect());
            let mut seen = perm.clone();
            seen.sort();
            if seen != (0..x.rank()).collect::<Vec<_>>() {
                return Err(cx.err(format!("perm {perm:?} is not a permutation of 0..{}", x.rank())));
            }
            let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
            // Moving only size-1 axes keeps the element order: a reshape.
            let moved: Vec<usize> = perm.iter().copied().filter(|&p| x.shape[p] != 1).collect();
            if moved.windows(2).all(|w| w[0] < w[1]) {
                return alias(cx, shape);
            }
            let cs = contiguous_strides(&x.shape);
            let strides = perm.iter().map(|&p| cs[p] as i64).collect();
            one_input(cx, Op::StridedCopy { offset: 0, strides }, TensorType::new(x.dtype, shape))
        }
        Op::Expand => {
            let x = cx.ty(0)?.clone();
            let spec: Vec<usize> = cx
                .const_input(1, "shape")?
                .ok_or_else(|| cx.err("missing shape"))?
                .to_i64()
                .iter()
                .map(|&d| usize::try_from(d).map_err(|_| cx.err(format!("negative dim {d}"))))
                .collect::<Result<_, _>>()?;
            let shape = broadcast_shapes(&x.shape, &spec)
                .ok_or_else(|| cx.err(format!("{:?} does not expand to {spec:?}", x.shape)))?;
            if shape.iter().product::<usize>() == x.numel() {
                return alias(cx, shape);
            }
            let strides = broadcast_strides(&x.shape, &shape);
            one_input(cx, Op::StridedCopy { offset: 0, strides }, TensorType::new(x.dtype, shape))
        }
        Op::Concat { axis } => {
            let inputs: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
            let first = cx.ty(0)?.clone();
            let axis = cx.axis(axis, first.rank())?;
            let mut shape = first.shape.clone();
            shape[axis] = 0;
            for &v in &inputs {
                let t = cx.g.ty(v);
                if t.rank() != first.rank()
                    || t.dtype != first.dtype
                    || t.shape.iter().enumerate().any(|(d, &s)| d != axis && s != first.shape[d])
                {
                    return Err(cx.err(format!("input {} does not match {}", t, first)));
                }
                shape[axis] += t.shape[axis];
            }
            // Empty parts contribute nothing.
            let inputs: Vec<Option<ValueId>> =
                inputs.into_iter().filter(|&v| cx.g.ty(v).shape[axis] > 0).map(Some).collect();
            if inputs.len() == 1 {
                return Ok(Resolved {
                    op: Op::Alias,
                    inputs,
                    outputs: vec![TensorType::new(first.dtype, shape)],
                    folded: None,
                });
            }
            Ok(Resolved {
                op: Op::Concat { axis: axis as i64 },
                inputs,
                outputs: vec![TensorType::new(first.dtype, shape)],
                folded: None,
            })
        }
        Op::Split { axis } => split(cx, axis),
        Op::Slice => slice(cx),
        Op::Gather { axis } => {
            let (x, ind) = (cx.ty(0)?.clone(), cx.ty(1)?.clone());
            if !ind.dtype.is_int() {
                return Err(cx.err(format!("indices must be integers, got {}", ind.dtype)));
            }
            let axis = cx.axis(axis, x.rank())?;
            let mut shape = x.shape[..axis].to_vec();
            shape.extend(&ind.shape);
            shape.extend(&x.shape[axis + 1..]);
            let out = TensorType::new(x.dtype, shape);
            // A constant scalar index on run-time data is a strided view: no index buffer, no gather kernel.
            if let Some(c) = cx.g.const_data(cx.input(1)?) {
                let n = x.shape[axis] as i64;
                let idx: Vec<i64> = c.to_i64();
                if let Some(&i) = idx.iter().find(|&&i| !(-n..n).contains(&i)) {
                    return Err(cx.err(format!("index {i} is out of range for axis {axis} of size {n}")));
                }
                if ind.rank() == 0 && cx.g.const_data(cx.input(0)?).is_none() {
                    let i = if idx[0] < 0 { idx[0] + n } else { idx[0] };
                    let cs = contiguous_strides(&x.shape);
                    let strides = (0..x.rank()).filter(|&d| d != axis).map(|d| cs[d] as i64).collect();
                    return one_input(cx, Op::StridedCopy { offset: i * cs[axis] as i64, strides }, out);
                }
            }
            Ok(keep(cx, Op::Gather { axis: axis as i64 }, vec![out]))
        }
        Op::Shape { start, end } => {
            let x = cx.ty(0)?;
            let r = x.rank() as i64;
            let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
            let (s, e) = (clamp(start), clamp(end.unwrap_or(r)));
            let dims: Vec<i64> = x.shape[s..e.max(s)].iter().map(|&d| d as i64).collect();
            let t = Tensor::i64(vec![dims.len()], dims);
            Ok(Resolved { op, inputs: vec![], outputs: vec![t.ty()], folded: Some(vec![t]) })
        }
        Op::ConstantOfShape(ref value) => {
            let dims = cx.const_input(0, "shape")?.ok_or_else(|| cx.err("missing shape"))?.to_i64();
            let shape: Vec<usize> = dims
                .iter()
                .map(|&d| usize::try_from(d).map_err(|_| cx.err(format!("negative dim {d}"))))
                .collect::<Result<_, _>>()?;
            let n: usize = shape.iter().product();
            if n > FOLD_LIMIT * 4 {
                return Err(cx.err(format!("a constant of {n} elements is too large to embed")));
            }
            let t = Tensor { dtype: value.dtype, shape: shape.clone(), data: value.data.gather(&vec![0; n]) };
            Ok(Resolved { op, inputs: vec![], outputs: vec![t.ty()], folded: Some(vec![t]) })
        }
        Op::Range => {
            let get = |i: usize, w: &str| -> Result<Tensor, PassError> {
                cx.const_scalar(i, w)?.cloned().ok_or_else(|| cx.err(format!("missing {w}")))
            };
            let (s, l, d) = (get(0, "start")?, get(1, "limit")?, get(2, "delta")?);
            let (sv, lv, dv) = (s.to_f64()[0], l.to_f64()[0], d.to_f64()[0]);
            if dv == 0.0 {
                return Err(cx.err("delta is zero"));
            }
            let n = ((lv - sv) / dv).ceil().max(0.0) as usize;
            if n > FOLD_LIMIT * 4 {
                return Err(cx.err(format!("a range of {n} elements is too large to embed")));
            }
            let t = if s.dtype.is_int() {
                let (si, di) = (s.to_i64()[0], d.to_i64()[0]);
                Tensor {
                    dtype: s.dtype,
                    shape: vec![n],
                    data: wgslc_ir::Data::I64((0..n as i64).map(|i| si + i * di).collect()),
                }
            } else {
                Tensor::from_f64(s.dtype, vec![n], (0..n).map(|i| sv + i as f64 * dv).collect())
            };
            Ok(Resolved { op, inputs: vec![], outputs: vec![t.ty()], folded: Some(vec![t]) })
        }
        wgslc_ir::composite!() => unreachable!("composites are expanded before resolution"),
        Op::Alias | Op::StridedCopy { .. } | Op::TileCopy => {
            // Already resolved (passes may run inference again); the output types stand.
            let outs = node.outputs.iter().map(|&o| cx.g.ty(o).clone()).collect();
            Ok(keep(cx, op, outs))
        }
    }
}
