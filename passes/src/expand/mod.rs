//! Composite ops expanded into simpler ones once shapes are known: Attention, DepthToSpace, SpaceToDepth,
//! LpNormalization, LRN, GatherND, Resize (and Upsample), Hardmax, InstanceNormalization, GroupNormalization,
//! ConvTranspose (conv_transpose.rs), 3-D pooling (two separable 2-D pools), LSTM/GRU/RNN (rnn.rs), Einsum
//! (einsum.rs) and the Quantize/DequantizeLinear family (quantize.rs). Each expansion builds ordinary nodes that
//! shape inference then types and folds like any other.

mod conv_transpose;
mod einsum;
mod quantize;
mod rnn;

use crate::PassError;
use wgslc_ir::{
    AttentionAttrs, AutoPad, BinaryOp, Builder, DType, Graph, NodeId, Op, PoolKind, ReduceOp, Tensor, TensorType,
    UnaryOp, ValueId, Window,
};

/// The value of a parameter input that must be a compile-time constant (the same message as inference's).
fn need_const<'a>(
    g: &'a Graph,
    v: ValueId,
    what: &str,
    err: &dyn Fn(String) -> PassError,
) -> Result<&'a Tensor, PassError> {
    g.const_data(v).ok_or_else(|| {
        err(format!(
            "the {what} input '{}' must be known at compile time (it is computed at run time)",
            g.value(v).name
        ))
    })
}

/// Whether `op` is expanded by [`expand`].
pub(crate) fn is_composite(op: &Op) -> bool {
    matches!(op, wgslc_ir::composite!()) || matches!(op, Op::Pool { window, .. } if window.kernel.len() == 3)
}

/// Replaces composite node `n` by its expansion and returns the new nodes in data order (the caller infers them).
pub(crate) fn expand(g: &mut Graph, n: NodeId) -> Result<Vec<NodeId>, PassError> {
    let node = g.node(n).clone();
    let err = |reason: String| PassError::Node { node: node.name.clone(), op: node.op.name().into(), reason };
    let ty = |g: &Graph, i: usize| -> Result<TensorType, PassError> {
        let v = node.inputs.get(i).copied().flatten().ok_or_else(|| err(format!("missing input {i}")))?;
        g.value(v).ty.clone().ok_or_else(|| err(format!("input {i} has no type")))
    };
    let x = node.inputs.first().copied().flatten().ok_or_else(|| err("missing input 0".into()))?;
    let xt = ty(g, 0)?;
    g.remove_node(n);
    let mut b = Builder::new(g, node.name.clone());
    let results: Vec<Option<ValueId>> = match &node.op {
        Op::DepthToSpace { blocksize: bs, crd } => {
            let (bs, s) = (*bs, &xt.shape);
            if s.len() != 4 || bs == 0 || s[1] % (bs * bs) != 0 {
                return Err(err(format!("cannot rearrange {s:?} with blocksize {bs}")));
            }
            let (nb, c, h, w) = (s[0], s[1] / (bs * bs), s[2], s[3]);
            let (shape6, perm) = if *crd {
                ([nb, c, bs, bs, h, w], [0, 1, 4, 2, 5, 3])
            } else {
                ([nb, bs, bs, c, h, w], [0, 3, 4, 1, 5, 2])
            };
            let r = b.reshape(x, &shape6)?;
            let t = b.transpose(r, &perm)?;
            vec![Some(b.reshape(t, &[nb, c, h * bs, w * bs])?)]
        }
        Op::SpaceToDepth { blocksize: bs, crd } => {
            let (bs, s) = (*bs, &xt.shape);
            if s.len() != 4 || bs == 0 || s[2] % bs != 0 || s[3] % bs != 0 {
                return Err(err(format!("cannot rearrange {s:?} with blocksize {bs}")));
            }
            let (nb, c, h, w) = (s[0], s[1], s[2] / bs, s[3] / bs);
            let r = b.reshape(x, &[nb, c, h, bs, w, bs])?;
            let perm = if *crd { [0, 1, 3, 5, 2, 4] } else { [0, 3, 5, 1, 2, 4] };
            let t = b.transpose(r, &perm)?;
            vec![Some(b.reshape(t, &[nb, c * bs * bs, h, w])?)]
        }
        Op::LpNormalization { axis, p } => {
            let rop = match p {
                1 => ReduceOp::L1,
                2 => ReduceOp::L2,
                _ => return Err(err(format!("p must be 1 or 2, got {p}"))),
            };
            let axes = b.ints(&[*axis]);
            let norm = b.op(
                Op::Reduce { op: rop, axes: None, keepdims: true, noop_with_empty_axes: false },
                &[Some(x), Some(axes)],
            )?;
            // A zero norm gives zeros, not NaN.
            let zero = b.scalar(xt.dtype, 0.0);
            let is_zero = b.bin(BinaryOp::Equal, norm, zero)?;
            let q = b.bin(BinaryOp::Div, x, norm)?;
            vec![Some(b.op(Op::Where, &[Some(is_zero), Some(zero), Some(q)])?)]
        }
        // A 3-D window is two 2-D ones: max, average (the valid count is a product of per-axis counts, with
        // count_include_pad or without) and Lp pooling are separable. [N, C, D, H, W] pools (H, W) as
        // [N, C·D, H, W], then D as [N, C, D, H'·W'] with a (kd, 1) window.
        Op::Pool { kind, window: w, count_include_pad } => {
            let s = &xt.shape;
            if s.len() != 5 {
                return Err(err(format!("a 3-D window needs a rank-5 input, got {s:?}")));
            }
            let (n, c, d, h, wd) = (s[0], s[1], s[2], s[3], s[4]);
            let fill = |v: &Vec<usize>, dflt: usize, len: usize| if v.is_empty() { vec![dflt; len] } else { v.clone() };
            let (k, st, dl) = (w.kernel.clone(), fill(&w.strides, 1, 3), fill(&w.dilations, 1, 3));
            if st.len() != 3 || dl.len() != 3 || st.contains(&0) || dl.contains(&0) {
                return Err(err("strides and dilations must be positive and match the spatial rank".into()));
            }
            let sp = [d, h, wd];
            let pads: Vec<usize> = match w.auto_pad {
                AutoPad::NotSet if w.pads.is_empty() => vec![0; 6],
                AutoPad::NotSet if w.pads.len() == 6 => w.pads.clone(),
                AutoPad::NotSet => return Err(err(format!("pads {:?} must have 6 entries", w.pads))),
                AutoPad::Valid => vec![0; 6],
                AutoPad::SameUpper | AutoPad::SameLower => {
                    let mut p = vec![0; 6];
                    for a in 0..3 {
                        let total =
                            ((sp[a].div_ceil(st[a]) - 1) * st[a] + (k[a] - 1) * dl[a] + 1).saturating_sub(sp[a]);
                        let small = total / 2;
                        let (b0, e0) = if w.auto_pad == AutoPad::SameUpper {
                            (small, total - small)
                        } else {
                            (total - small, small)
                        };
                        p[a] = b0;
                        p[a + 3] = e0;
                    }
                    p
                }
            };
            let win = |kernel: Vec<usize>, strides: Vec<usize>, pads: Vec<usize>, dilations: Vec<usize>| Window {
                kernel,
                strides,
                pads,
                dilations,
                auto_pad: AutoPad::NotSet,
                ceil_mode: w.ceil_mode,
            };
            let hw =
                win(vec![k[1], k[2]], vec![st[1], st[2]], vec![pads[1], pads[2], pads[4], pads[5]], vec![dl[1], dl[2]]);
            let dw = win(vec![k[0], 1], vec![st[0], 1], vec![pads[0], 0, pads[3], 0], vec![dl[0], 1]);
            let pool = |b: &mut Builder, x: ValueId, window: Window| {
                b.op(Op::Pool { kind: *kind, window, count_include_pad: *count_include_pad }, &[Some(x)])
            };
            let flat = b.reshape(x, &[n, c * d, h, wd])?;
            let y = pool(&mut b, flat, hw)?;
            // H' and W' are inferred for the 2-D pool; the reshapes name them through -1 and 0.
            let s1 = b.ints(&[n as i64, c as i64, d as i64, -1]);
            let y = b.op(Op::Reshape { allowzero: false }, &[Some(y), Some(s1)])?;
            let y = pool(&mut b, y, dw)?;
            let oh = out_len(h, k[1], st[1], pads[1], pads[4], dl[1], w.ceil_mode)
                .ok_or_else(|| err("the window is larger than the padded input".into()))?;
            let s2 = b.ints(&[n as i64, c as i64, 0, oh as i64, -1]);
            vec![Some(b.op(Op::Reshape { allowzero: false }, &[Some(y), Some(s2)])?)]
        }
        Op::Lrn { size, alpha, beta, bias } => {
            // Σ x² over the channel window as an average pool (count_include_pad: the window always divides by
            // `size`) over [N, 1, C, rest], so alpha/size · Σ = alpha · mean.
            let s = &xt.shape;
            if s.len() < 3 {
                return Err(err(format!("the input must be [N, C, d1, …], got rank {}", s.len())));
            }
            if xt.dtype != DType::F32 {
                return Err(err(format!("the input must be float32, got {:?}", xt.dtype)));
            }
            let rest: usize = s[2..].iter().product();
            let sq = b.bin(BinaryOp::Mul, x, x)?;
            let sq = b.reshape(sq, &[s[0], 1, s[1], rest])?;
            let (before, after) = ((size - 1) / 2, size - 1 - (size - 1) / 2);
            let window = Window {
                kernel: vec![*size, 1],
                strides: vec![1, 1],
                pads: vec![before, 0, after, 0],
                dilations: vec![1, 1],
                auto_pad: AutoPad::NotSet,
                ceil_mode: false,
            };
            let mean = b.un(Op::Pool { kind: PoolKind::Avg, window, count_include_pad: true }, sq)?;
            let mean = b.reshape(mean, s)?;
            let (al, bi, be) = (
                b.scalar(DType::F32, *alpha as f64),
                b.scalar(DType::F32, *bias as f64),
                b.scalar(DType::F32, *beta as f64),
            );
            let scaled = b.bin(BinaryOp::Mul, mean, al)?;
            let base = b.bin(BinaryOp::Add, scaled, bi)?;
            let den = b.bin(BinaryOp::Pow, base, be)?;
            vec![Some(b.bin(BinaryOp::Div, x, den)?)]
        }
        Op::GatherNd { batch_dims } => {
            // A Gather of rows: data viewed as [batches · Π indexed dims, rest…], each index tuple turned into its
            // row (negative components wrapped, then Σ component · row stride, plus the batch element's first row).
            // Every step folds when the indices are constants.
            let ind = node.inputs.get(1).copied().flatten().ok_or_else(|| err("missing indices".into()))?;
            let it = ty(b.g, 1)?;
            let (bd, q, xs) = (*batch_dims, it.rank(), &xt.shape);
            if !it.dtype.is_int() {
                return Err(err(format!("indices must be integers, got {}", it.dtype)));
            }
            let k = match it.shape.last() {
                Some(&k) if k >= 1 && bd < q && bd + k <= xs.len() => k,
                _ => {
                    return Err(err(format!("indices {:?} do not index data {:?} after {bd} batch dims", it.shape, xs)))
                }
            };
            if it.shape[..bd] != xs[..bd] {
                return Err(err(format!("the first {bd} dims of data {:?} and indices {:?} differ", xs, it.shape)));
            }
            let block: usize = xs[bd..bd + k].iter().product();
            let batches: usize = xs[..bd].iter().product();
            // The batch elements' first rows are a constant, one per batch element.
            if batches > 1 << 24 {
                return Err(err(format!("{batches} batch elements are more than GatherND takes (2^24)")));
            }
            let mut lin: Option<ValueId> = None;
            for j in 0..k {
                let stride: usize = xs[bd + j + 1..bd + k].iter().product();
                let jv = b.konst(Tensor::i64(vec![], vec![j as i64]));
                let c = b.op(Op::Gather { axis: -1 }, &[Some(ind), Some(jv)])?;
                let (zero, size) = (b.scalar(it.dtype, 0.0), b.scalar(it.dtype, xs[bd + j] as f64));
                let neg = b.bin(BinaryOp::Less, c, zero)?;
                let wrapped = b.bin(BinaryOp::Add, c, size)?;
                let mut c = b.op(Op::Where, &[Some(neg), Some(wrapped), Some(c)])?;
                if stride != 1 {
                    let s = b.scalar(it.dtype, stride as f64);
                    c = b.bin(BinaryOp::Mul, c, s)?;
                }
                lin = Some(match lin {
                    Some(l) => b.bin(BinaryOp::Add, l, c)?,
                    None => c,
                });
            }
            let mut lin = lin.expect("k >= 1");
            if batches > 1 {
                let mut shape = xs[..bd].to_vec();
                shape.extend(std::iter::repeat_n(1, q - 1 - bd));
                let first = (0..batches).map(|i| (i * block) as f64).collect();
                let first = b.konst(Tensor::from_f64(it.dtype, shape, first));
                lin = b.bin(BinaryOp::Add, lin, first)?;
            }
            let mut rows = vec![batches * block];
            rows.extend(&xs[bd + k..]);
            let data = b.reshape(x, &rows)?;
            vec![Some(b.op(Op::Gather { axis: 0 }, &[Some(data), Some(lin)])?)]
        }
        Op::Resize(attrs) => {
            let rank = xt.rank();
            let konst = |v: Option<ValueId>, what: &str| -> Result<Option<Vec<f64>>, PassError> {
                match v {
                    Some(v) if b.g.ty(v).numel() > 0 => Ok(Some(need_const(b.g, v, what, &err)?.to_f64())),
                    _ => Ok(None),
                }
            };
            let input = |i: usize| node.inputs.get(i).copied().flatten();
            let (scales, sizes) = (konst(input(2), "scales")?, konst(input(3), "sizes")?);
            let axes: Vec<usize> = match &attrs.axes {
                Some(a) => a
                    .iter()
                    .map(|&d| {
                        let d = if d < 0 { d + rank as i64 } else { d };
                        usize::try_from(d)
                            .ok()
                            .filter(|&d| d < rank)
                            .ok_or_else(|| err(format!("axis {d} is out of range")))
                    })
                    .collect::<Result<_, _>>()?,
                None => (0..rank).collect(),
            };
            let by_scales = sizes.is_none();
            let (mut scale, mut out) =
                resize_plan(&xt.shape, &axes, scales, sizes, &attrs.keep_aspect_ratio).map_err(&err)?;
            // tf_crop_and_resize samples the region of interest [start, end] (fractions of each axis): from
            // scales, the output covers n · (end − start) · scale positions.
            let mut roi = vec![None; rank];
            if attrs.coordinates == "tf_crop_and_resize" {
                let r = konst(input(1), "roi")?.ok_or_else(|| err("tf_crop_and_resize needs the roi input".into()))?;
                if r.len() != 2 * axes.len() {
                    return Err(err(format!("roi has {} values for {} axes", r.len(), axes.len())));
                }
                for (i, &a) in axes.iter().enumerate() {
                    let (start, end) = (r[i], r[axes.len() + i]);
                    roi[a] = Some((start, end));
                    if by_scales {
                        out[a] = (xt.shape[a] as f64 * (end - start) * scale[a]).floor().max(0.0) as usize;
                    }
                    if (start, end) != (0.0, 1.0) {
                        // Forces the axis through the taps even when its size is unchanged.
                        scale[a] = f64::NAN;
                    }
                }
            }
            if attrs.mode != wgslc_ir::ResizeMode::Nearest && !xt.dtype.is_float() {
                return Err(err(format!("{:?} resizing needs a float input, got {}", attrs.mode, xt.dtype)));
            }
            let mut plans = Vec::new();
            for &a in &axes {
                if xt.shape[a] != out[a] || scale[a].is_nan() || (scale[a] - 1.0).abs() >= 1e-12 {
                    let s = if scale[a].is_nan() { out[a] as f64 / xt.shape[a].max(1) as f64 } else { scale[a] };
                    plans.push((a, resize_taps(attrs, xt.shape[a], out[a], s, roi[a]).map_err(&err)?));
                }
            }
            // Integer nearest upsampling on every resized axis (the detectors' ×2): one view of the input, each
            // element repeated along a new axis after each resized one; a single copy where it materializes.
            let repeats: Option<Vec<(usize, usize)>> = plans
                .iter()
                .map(|(a, (taps, outside))| {
                    upsample_factor(taps, xt.shape[*a]).filter(|_| !outside.contains(&true)).map(|f| (*a, f))
                })
                .collect();
            let y = match repeats {
                Some(reps) if !reps.is_empty() => {
                    let (mut split, mut wide) = (Vec::new(), Vec::new());
                    for (d, &e) in xt.shape.iter().enumerate() {
                        split.push(e);
                        wide.push(e);
                        if let Some(&(_, f)) = reps.iter().find(|(a, _)| *a == d) {
                            split.push(1);
                            wide.push(f);
                        }
                    }
                    let r = b.reshape(x, &split)?;
                    let to = b.ints(&wide.iter().map(|&d| d as i64).collect::<Vec<_>>());
                    let e = b.op(Op::Expand, &[Some(r), Some(to)])?;
                    b.reshape(e, &out)?
                }
                _ => {
                    let (mut y, mut shape) = (x, xt.shape.clone());
                    for (a, (taps, outside)) in &plans {
                        let fill = (attrs.extrapolation_value as f64, outside.as_slice());
                        y = resize_axis(&mut b, y, &shape, *a, taps, fill, xt.dtype)?;
                        shape[*a] = out[*a];
                    }
                    y
                }
            };
            vec![Some(b.un(Op::Identity, y)?)]
        }
        Op::CenterCropPad => {
            let shape_in = node.inputs.get(1).copied().flatten().ok_or_else(|| err("missing shape".into()))?;
            let target = need_const(b.g, shape_in, "shape", &err)?.to_i64();
            let r = xt.rank();
            let axes: Vec<usize> = match node.inputs.get(2).copied().flatten() {
                Some(a) => need_const(b.g, a, "axes", &err)?
                    .to_i64()
                    .iter()
                    .map(|&a| if a < 0 { (a + r as i64) as usize } else { a as usize })
                    .collect(),
                None => (0..r).collect(),
            };
            if target.len() != axes.len() || axes.iter().any(|&a| a >= r) {
                return Err(err(format!("shape {target:?} does not match axes {axes:?}")));
            }
            // Crop (Slice) the axes that shrink, then pad (Pad) the ones that grow, both centred as ONNX says:
            // the extra element goes to the end when cropping and to the end when padding.
            let (mut starts, mut ends, mut pads) = (vec![], vec![], vec![0i64; 2 * r]);
            let mut crop_axes = vec![];
            for (i, &a) in axes.iter().enumerate() {
                let (have, want) = (xt.shape[a] as i64, target[i]);
                if want < have {
                    let s = (have - want) / 2;
                    starts.push(s);
                    ends.push(s + want);
                    crop_axes.push(a as i64);
                } else if want > have {
                    let p = want - have;
                    pads[a] = p / 2;
                    pads[a + r] = p - p / 2;
                }
            }
            let mut y = x;
            if !crop_axes.is_empty() {
                let (s, e, ax) = (b.ints(&starts), b.ints(&ends), b.ints(&crop_axes));
                y = b.op(Op::Slice, &[Some(y), Some(s), Some(e), Some(ax)])?;
            }
            if pads.iter().any(|&p| p != 0) {
                let p = b.ints(&pads);
                y = b.op(Op::Pad { mode: wgslc_ir::PadMode::Constant, pads: None, value: 0.0 }, &[Some(y), Some(p)])?;
            }
            vec![Some(b.un(Op::Identity, y)?)]
        }
        Op::OneHot { axis } => {
            let depth_v = node.inputs.get(1).copied().flatten().ok_or_else(|| err("missing depth".into()))?;
            let values = node.inputs.get(2).copied().flatten().ok_or_else(|| err("missing values".into()))?;
            let depth_t = need_const(b.g, depth_v, "depth", &err)?;
            if depth_t.numel() != 1 {
                return Err(err(format!("the depth input must hold one value, not {}", depth_t.numel())));
            }
            let depth = depth_t.to_f64()[0] as i64;
            if depth <= 0 {
                return Err(err(format!("depth {depth} must be positive")));
            }
            let r = xt.rank() as i64 + 1;
            let a = if *axis < 0 { axis + r } else { *axis };
            if !(0..r).contains(&a) {
                return Err(err(format!("axis {axis} is out of range")));
            }
            // Negative indices count from the end: idx + depth where idx < 0.
            let idx = b.op(Op::cast(DType::I64), &[Some(x)])?;
            let zero = b.scalar(DType::I64, 0.0);
            let d = b.scalar(DType::I64, depth as f64);
            let neg = b.bin(BinaryOp::Less, idx, zero)?;
            let wrapped = b.bin(BinaryOp::Add, idx, d)?;
            let idx = b.op(Op::Where, &[Some(neg), Some(wrapped), Some(idx)])?;
            let ax = b.ints(&[a]);
            let idx = b.op(Op::Unsqueeze, &[Some(idx), Some(ax)])?;
            let mut ishape = vec![1usize; r as usize];
            ishape[a as usize] = depth as usize;
            let iota = b.konst(Tensor::i64(ishape, (0..depth).collect()));
            let hit = b.bin(BinaryOp::Equal, idx, iota)?;
            let (s0, s1, e1, e2) = (b.ints(&[0]), b.ints(&[1]), b.ints(&[1]), b.ints(&[2]));
            let off = b.op(Op::Slice, &[Some(values), Some(s0), Some(e1)])?;
            let on = b.op(Op::Slice, &[Some(values), Some(s1), Some(e2)])?;
            vec![Some(b.op(Op::Where, &[Some(hit), Some(on), Some(off)])?)]
        }
        Op::Hardmax { axis, legacy } => {
            let r = xt.rank() as i64;
            let a = if *axis < 0 { axis + r } else { *axis };
            if !(0..r.max(1)).contains(&a) {
                return Err(err(format!("axis {axis} is out of range")));
            }
            let a = a as usize;
            // The opset < 13 form works on the 2-D view [prod(..axis), prod(axis..)].
            let (src, ax) = if *legacy {
                let outer: usize = xt.shape[..a].iter().product();
                (b.reshape(x, &[outer, xt.shape[a..].iter().product()])?, 1)
            } else {
                (x, a)
            };
            let st = if *legacy {
                vec![xt.shape[..a].iter().product(), xt.shape[a..].iter().product()]
            } else {
                xt.shape.clone()
            };
            let am = b.un(Op::ArgReduce { max: true, axis: ax as i64, keepdims: true, select_last: false }, src)?;
            let mut ishape = vec![1usize; st.len()];
            ishape[ax] = st[ax];
            let iota = b.konst(Tensor::i64(ishape, (0..st[ax] as i64).collect()));
            let hit = b.bin(BinaryOp::Equal, am, iota)?;
            let y = b.op(Op::CastLike { saturate: true }, &[Some(hit), Some(src)])?;
            vec![Some(if *legacy { b.reshape(y, &xt.shape)? } else { y })]
        }
        Op::InstanceNorm { epsilon } | Op::GroupNorm { epsilon, .. } => {
            let s = &xt.shape;
            if s.len() < 3 {
                return Err(err("needs rank ≥ 3".into()));
            }
            let groups = if let Op::GroupNorm { groups, .. } = node.op { groups } else { s[1] };
            if s[1] % groups != 0 {
                return Err(err(format!("{} channels do not split into {groups} groups", s[1])));
            }
            let rows = s[0] * groups;
            let len = xt.numel() / rows.max(1);
            let flat = b.reshape(x, &[rows, len])?;
            let ones = b.konst(Tensor::f32(vec![len], vec![1.0; len]));
            let normed = b.op(Op::LayerNorm { axis: 1, epsilon: *epsilon, rms: false }, &[Some(flat), Some(ones)])?;
            let back = b.reshape(normed, s)?;
            // Per-channel scale and bias, shaped [C, 1, …] to broadcast over the spatial dims.
            let mut cshape = vec![s[1]];
            cshape.resize(s.len() - 1, 1);
            let scale = node.inputs.get(1).copied().flatten().ok_or_else(|| err("missing scale".into()))?;
            let bias = node.inputs.get(2).copied().flatten().ok_or_else(|| err("missing bias".into()))?;
            let sc = b.reshape(scale, &cshape)?;
            let bi = b.reshape(bias, &cshape)?;
            let m = b.bin(BinaryOp::Mul, back, sc)?;
            vec![Some(b.bin(BinaryOp::Add, m, bi)?)]
        }
        Op::Attention(attrs) => attention(&mut b, &node.inputs, attrs, &err)?,
        Op::ConvTranspose { window, group, output_padding, output_shape } => {
            let w = node.inputs.get(1).copied().flatten().ok_or_else(|| err("missing W".into()))?;
            let bias = node.inputs.get(2).copied().flatten();
            let wt = ty(b.g, 1)?;
            let attrs = conv_transpose::Attrs { window, group: *group, output_padding, output_shape };
            vec![Some(conv_transpose::expand(&mut b, x, &xt, w, &wt, bias, &attrs, &err)?)]
        }
        Op::Rnn(attrs) => {
            let types: Vec<Option<TensorType>> =
                node.inputs.iter().map(|v| v.and_then(|v| b.g.value(v).ty.clone())).collect();
            rnn::expand(&mut b, &node.inputs, &types, attrs, &err)?
        }
        op @ (Op::QuantizeLinear { .. } | Op::DequantizeLinear { .. } | Op::DynamicQuantizeLinear) => {
            let types: Vec<Option<TensorType>> =
                node.inputs.iter().map(|v| v.and_then(|v| b.g.value(v).ty.clone())).collect();
            quantize::expand(&mut b, op, &node.inputs, &types, &err)?
        }
        Op::Einsum { equation } => {
            let mut operands = Vec::new();
            for (i, v) in node.inputs.iter().enumerate() {
                let v = v.ok_or_else(|| err(format!("operand {i} is missing")))?;
                operands.push((v, ty(b.g, i)?));
            }
            vec![Some(einsum::expand(&mut b, equation, &operands, &err)?)]
        }
        _ => unreachable!("not a composite"),
    };
    let mut nodes = std::mem::take(&mut b.nodes);
    for (i, &o) in node.outputs.iter().enumerate() {
        let Some(Some(r)) = results.get(i) else {
            return Err(err(format!("output {i} is not produced by this form of the op")));
        };
        nodes.push(g.add_node(format!("{}/out{i}", node.name), Op::Identity, vec![Some(*r)], vec![o])?);
    }
    Ok(nodes)
}

/// ONNX Attention, following the reference implementation: 3-D inputs split into heads, Q and K each scaled by
/// √scale, past K/V concatenated, an additive bias from the mask (bool → 0/−inf, padded to the key length) and
/// the causal frontier (offset by the past length), GQA by repeating KV heads, softcap, softmax with
/// fully-masked rows zeroed, and the product with V.
fn attention(
    b: &mut Builder,
    inputs: &[Option<ValueId>],
    at: &AttentionAttrs,
    err: &dyn Fn(String) -> PassError,
) -> Result<Vec<Option<ValueId>>, PassError> {
    let get = |i: usize| inputs.get(i).copied().flatten();
    let (q, k, v) = match (get(0), get(1), get(2)) {
        (Some(q), Some(k), Some(v)) => (q, k, v),
        _ => return Err(err("needs Q, K and V".into())),
    };
    if get(6).is_some() {
        return Err(err("nonpad_kv_seqlen is not supported".into()));
    }
    let tyof = |b: &Builder, v: ValueId| b.g.ty(v).clone();
    let qt = tyof(b, q);
    let dt = qt.dtype;
    let three_d = qt.rank() == 3;
    if [k, v].iter().any(|&x| b.g.ty(x).rank() != qt.rank()) {
        return Err(err(format!("Q, K and V must have one rank (Q is {}-D)", qt.rank())));
    }
    let (mut q4, mut k4, mut v4) = (q, k, v);
    if three_d {
        let (hq, hk) = match (at.q_num_heads, at.kv_num_heads) {
            (Some(a), Some(c)) if a > 0 && c > 0 => (a, c),
            _ => return Err(err("3-D inputs need q_num_heads and kv_num_heads".into())),
        };
        let split = |b: &mut Builder, x: ValueId, h: usize| -> Result<ValueId, PassError> {
            let s = b.g.ty(x).shape.clone();
            if !s[2].is_multiple_of(h) {
                return Err(err(format!("hidden size {} does not split into {h} heads", s[2])));
            }
            let r = b.reshape(x, &[s[0], s[1], h, s[2] / h])?;
            Ok(b.transpose(r, &[0, 2, 1, 3])?)
        };
        q4 = split(b, q, hq)?;
        k4 = split(b, k, hk)?;
        v4 = split(b, v, hk)?;
    } else if qt.rank() != 4 {
        return Err(err("Q must be 3-D or 4-D".into()));
    }
    // Types of the 4-D views, computed here because the builder's nodes are inferred later.
    let qs = if three_d {
        let h = at.q_num_heads.unwrap();
        vec![qt.shape[0], h, qt.shape[1], qt.shape[2] / h]
    } else {
        qt.shape.clone()
    };
    let kv_shape = |b: &Builder, x: ValueId| -> Vec<usize> {
        let s = b.g.ty(x).shape.clone();
        if three_d {
            let h = at.kv_num_heads.unwrap();
            vec![s[0], h, s[1], s[2] / h]
        } else {
            s
        }
    };
    let (mut ks, mut vs) = (kv_shape(b, k), kv_shape(b, v));
    let head = qs[3];
    let scale = at.scale.map(|s| s as f64).unwrap_or(1.0 / (head as f64).sqrt()).sqrt();

    // Past cache.
    let past_len = match (get(4), get(5)) {
        (Some(pk), Some(pv)) => {
            let pl = b.g.ty(pk).shape[2];
            k4 = b.op(Op::Concat { axis: 2 }, &[Some(pk), Some(k4)])?;
            v4 = b.op(Op::Concat { axis: 2 }, &[Some(pv), Some(v4)])?;
            ks[2] += pl;
            vs[2] += b.g.ty(pv).shape[2];
            pl
        }
        (None, None) => 0,
        _ => return Err(err("past_key and past_value go together".into())),
    };
    let (present_k, present_v) = (k4, v4);
    let (sq, sk) = (qs[2], ks[2]);

    // Additive bias [.., sq, sk] from the mask and the causal frontier.
    let neg_inf = f64::NEG_INFINITY;
    let mut bias: Option<ValueId> = None;
    if let Some(mask) = get(3) {
        let mt = b.g.ty(mask).clone();
        let mut m = mask;
        if mt.dtype == DType::Bool {
            let zero = b.scalar(dt, 0.0);
            let ninf = b.scalar(dt, neg_inf);
            m = b.op(Op::Where, &[Some(m), Some(zero), Some(ninf)])?;
        }
        let short = sk.saturating_sub(*mt.shape.last().unwrap_or(&sk));
        if short > 0 {
            let r = mt.rank();
            let mut pads = vec![0i64; 2 * r];
            pads[2 * r - 1] = short as i64;
            let p = b.ints(&pads);
            let fill = b.scalar(dt, neg_inf);
            m = b.op(
                Op::Pad { mode: wgslc_ir::PadMode::Constant, pads: None, value: 0.0 },
                &[Some(m), Some(p), Some(fill)],
            )?;
        }
        bias = Some(m);
    }
    if at.is_causal {
        let c: Vec<f64> = (0..sq * sk)
            .map(|i| if (i % sk) as i64 <= (i / sk) as i64 + past_len as i64 { 0.0 } else { neg_inf })
            .collect();
        let causal = b.konst(Tensor::from_f64(dt, vec![sq, sk], c));
        bias = Some(match bias {
            Some(m) => b.bin(BinaryOp::Add, m, causal)?,
            None => causal,
        });
    }

    // GQA: repeat each KV head (interleaved: h0, h0, h1, h1, …).
    let (hq, hk) = (qs[1], ks[1]);
    if hq != hk {
        if hk == 0 || hq % hk != 0 {
            return Err(err(format!("{hq} query heads do not group over {hk} KV heads")));
        }
        let rep = |b: &mut Builder, x: ValueId, s: &[usize]| -> Result<ValueId, PassError> {
            let u = b.reshape(x, &[s[0], s[1], 1, s[2], s[3]])?;
            let sh = b.ints(&[s[0] as i64, s[1] as i64, (hq / hk) as i64, s[2] as i64, s[3] as i64]);
            let e = b.op(Op::Expand, &[Some(u), Some(sh)])?;
            Ok(b.reshape(e, &[s[0], hq, s[2], s[3]])?)
        };
        k4 = rep(b, k4, &ks)?;
        v4 = rep(b, v4, &vs)?;
    }

    let sc = b.scalar(dt, scale);
    let qs_ = b.bin(BinaryOp::Mul, q4, sc)?;
    let ks_ = b.bin(BinaryOp::Mul, k4, sc)?;
    let kt = b.transpose(ks_, &[0, 1, 3, 2])?;
    let mut qk = b.op(Op::MatMul, &[Some(qs_), Some(kt)])?;
    let raw_qk = qk;
    if at.softcap > 0.0 {
        let c = b.scalar(dt, at.softcap as f64);
        let d = b.bin(BinaryOp::Div, qk, c)?;
        let t = b.un(Op::Unary(UnaryOp::Tanh), d)?;
        qk = b.bin(BinaryOp::Mul, t, c)?;
    }
    let capped = qk;
    let with_bias = match bias {
        Some(m) => b.bin(BinaryOp::Add, qk, m)?,
        None => qk,
    };
    let mut p = b.op(Op::Softmax { axis: -1, legacy: false, log: false }, &[Some(with_bias)])?;
    if let Some(m) = bias {
        // Rows whose bias is -inf everywhere attend to nothing: zero them.
        let ax = b.ints(&[-1]);
        let mx = b.op(
            Op::Reduce { op: ReduceOp::Max, axes: None, keepdims: true, noop_with_empty_axes: false },
            &[Some(m), Some(ax)],
        )?;
        let dead = b.un(Op::Unary(UnaryOp::IsInf(false, true)), mx)?;
        let zero = b.scalar(dt, 0.0);
        p = b.op(Op::Where, &[Some(dead), Some(zero), Some(p)])?;
    }
    let mut y = b.op(Op::MatMul, &[Some(p), Some(v4)])?;
    if three_d {
        let t = b.transpose(y, &[0, 2, 1, 3])?;
        let s = [qs[0], qs[2], qs[1] * vs[3]];
        y = b.reshape(t, &s)?;
    }
    let qk_out = match at.qk_matmul_output_mode {
        0 => raw_qk,
        1 => capped,
        2 => with_bias,
        3 => p,
        m => return Err(err(format!("unknown qk_matmul_output_mode {m}"))),
    };
    Ok(vec![Some(y), Some(present_k), Some(present_v), Some(qk_out)])
}

/// The largest Resize output wgslc tabulates: elements (i32 indexing), and positions along one resized axis.
const MAX_RESIZED_ELEMENTS: usize = 1 << 31;
const MAX_RESIZED_AXIS: usize = 1 << 20;

/// Resize's scale and output size per axis, as ONNX computes them: `floor(n · scale)` from scales; from sizes,
/// scale = size / n, or under keep_aspect_ratio_policy the smallest (not_larger) or largest (not_smaller) of
/// them for every resized axis, with sizes rounded half up.
fn resize_plan(
    shape: &[usize],
    axes: &[usize],
    scales: Option<Vec<f64>>,
    sizes: Option<Vec<f64>>,
    policy: &str,
) -> Result<(Vec<f64>, Vec<usize>), String> {
    let r = shape.len();
    let mut scale = vec![1.0; r];
    let mut out = shape.to_vec();
    match (scales, sizes) {
        (_, Some(sz)) => {
            if sz.len() != axes.len() {
                return Err(format!("sizes has {} values for {} axes", sz.len(), axes.len()));
            }
            for (&a, &s) in axes.iter().zip(&sz) {
                scale[a] = s / shape[a].max(1) as f64;
                out[a] = s as usize;
            }
            if policy != "stretch" {
                let pick = axes.iter().map(|&a| scale[a]);
                let s = match policy {
                    "not_larger" => pick.fold(f64::INFINITY, f64::min),
                    "not_smaller" => pick.fold(0.0, f64::max),
                    p => return Err(format!("unknown keep_aspect_ratio_policy '{p}'")),
                };
                for &a in axes {
                    scale[a] = s;
                    out[a] = (s * shape[a] as f64 + 0.5) as usize;
                }
            }
        }
        (Some(sc), None) => {
            if sc.len() != axes.len() {
                return Err(format!("scales has {} values for {} axes", sc.len(), axes.len()));
            }
            for (&a, &s) in axes.iter().zip(&sc) {
                if !(s > 0.0 && s.is_finite()) {
                    return Err(format!("scale {s} is not positive"));
                }
                scale[a] = s;
                out[a] = (s * shape[a] as f64) as usize;
            }
        }
        (None, None) => return Err("needs scales or sizes".into()),
    }
    // The sampling positions are tabulated per output position at compile time: refuse what no device holds.
    let numel = out.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    if numel.is_none_or(|n| n > MAX_RESIZED_ELEMENTS) || axes.iter().any(|&a| out[a] > MAX_RESIZED_AXIS) {
        return Err(format!(
            "the output {out:?} is too large (at most {MAX_RESIZED_ELEMENTS} elements and {MAX_RESIZED_AXIS} per resized axis)"
        ));
    }
    Ok((scale, out))
}

/// For each output position along one axis: the input positions it reads (clamped to the axis: ONNX pads with the
/// edge values) and their weights.
fn resize_taps(
    attrs: &wgslc_ir::ResizeAttrs,
    n: usize,
    m: usize,
    scale: f64,
    roi: Option<(f64, f64)>,
) -> Result<Taps, String> {
    use wgslc_ir::ResizeMode;
    // An empty input axis has nothing to read (every tap would be clamped into an empty range).
    if n == 0 && m > 0 {
        return Err(format!("resizes an empty axis to {m} positions"));
    }
    let width = scale * n as f64;
    let (mut taps, mut outside) = (Vec::with_capacity(m), Vec::with_capacity(m));
    for j in 0..m {
        let y = j as f64;
        let x = match attrs.coordinates.as_str() {
            "tf_crop_and_resize" => {
                let (start, end) = roi.unwrap_or((0.0, 1.0));
                let last = n as f64 - 1.0;
                if m > 1 {
                    start * last + y * (end - start) * last / (m as f64 - 1.0)
                } else {
                    0.5 * (start + end) * last
                }
            }
            "half_pixel" => (y + 0.5) / scale - 0.5,
            // The resized length here is the integer output size, as onnxruntime takes it (ONNX's reference
            // implementation takes n · scale, which differs when that is not whole).
            "pytorch_half_pixel" if m == 1 => -0.5,
            "pytorch_half_pixel" => (y + 0.5) / scale - 0.5,
            "half_pixel_symmetric" => {
                let adjustment = m as f64 / width;
                let offset = n as f64 / 2.0 * (1.0 - adjustment);
                offset + (y + 0.5) / scale - 0.5
            }
            "align_corners" if m == 1 => 0.0,
            "align_corners" => y * (n as f64 - 1.0) / (m as f64 - 1.0),
            "asymmetric" => y / scale,
            c => return Err(format!("unknown coordinate_transformation_mode '{c}'")),
        };
        // The window starts left of x; at an integer x the left neighbour counts (ratio 1).
        let x0 = x.ceil() as i64 - 1;
        let ratio = x - x0 as f64;
        let (start, weights): (i64, Vec<f64>) = match attrs.mode {
            ResizeMode::Nearest => {
                let right = ratio == 1.0
                    || match attrs.nearest.as_str() {
                        "round_prefer_floor" => ratio > 0.5,
                        "round_prefer_ceil" => ratio >= 0.5,
                        "floor" => false,
                        "ceil" => true,
                        mode => return Err(format!("unknown nearest_mode '{mode}'")),
                    };
                (x0 + right as i64, vec![1.0])
            }
            // Antialiasing stretches the filter by 1 / scale when downscaling (ONNX's reference): the taps
            // x0 + i around x, weighted by the filter at (i − ratio) · scale and normalized.
            ResizeMode::Linear | ResizeMode::Cubic if attrs.antialias => {
                let s = scale.min(1.0);
                let a = attrs.cubic_coeff_a as f64;
                let (first, last) = if attrs.mode == ResizeMode::Linear {
                    let first = (-1.0 / s).floor() as i64 + 1;
                    (first, first + 2 - 2 * first)
                } else {
                    let first = (-2.0 / s).floor() as i64 + 1;
                    (first, 2 - first)
                };
                let filter = |d: f64| {
                    let d = d.abs();
                    match attrs.mode {
                        ResizeMode::Linear => (1.0 - d).clamp(0.0, 1.0),
                        _ if d <= 1.0 => ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0,
                        _ if d < 2.0 => ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a,
                        _ => 0.0,
                    }
                };
                if last - first > 256 {
                    return Err(format!(
                        "antialiasing a downscale by {scale} needs {} taps per output, more than 256",
                        last - first
                    ));
                }
                let w: Vec<f64> = (first..last).map(|i| filter((i as f64 - ratio) * s)).collect();
                let sum: f64 = w.iter().sum();
                (x0 + first, w.into_iter().map(|v| v / sum).collect())
            }
            ResizeMode::Linear => (x0, vec![1.0 - ratio, ratio]),
            ResizeMode::Cubic => {
                let a = attrs.cubic_coeff_a as f64;
                let (r, s) = (ratio, 1.0 - ratio);
                let w = vec![
                    ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a,
                    ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0,
                    ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0,
                    ((a * (s + 1.0) - 5.0 * a) * (s + 1.0) + 8.0 * a) * (s + 1.0) - 4.0 * a,
                ];
                (x0 - 1, w)
            }
        };
        let mut t: Vec<(i64, f64)> = weights.into_iter().enumerate().map(|(i, w)| (start + i as i64, w)).collect();
        if attrs.exclude_outside && attrs.mode != ResizeMode::Nearest {
            for (i, w) in t.iter_mut() {
                if *i < 0 || *i >= n as i64 {
                    *w = 0.0;
                }
            }
            let sum: f64 = t.iter().map(|&(_, w)| w).sum();
            for (_, w) in t.iter_mut() {
                *w /= sum;
            }
        }
        // Outside the input (tf_crop_and_resize): no tap counts; the extrapolation value is added instead.
        let out = !(0.0..=n as f64 - 1.0).contains(&x) && attrs.coordinates == "tf_crop_and_resize";
        if out {
            t.iter_mut().for_each(|(_, w)| *w = 0.0);
        }
        outside.push(out);
        taps.push(t.into_iter().map(|(i, w)| (i.clamp(0, n as i64 - 1) as usize, w)).collect());
    }
    Ok((taps, outside))
}

/// Per output position, its (input index, weight) taps, and whether it lies outside the input.
type Taps = (Vec<Vec<(usize, f64)>>, Vec<bool>);

/// `f` when output position j reads input j / f alone (nearest upsampling by a whole factor).
fn upsample_factor(taps: &[Vec<(usize, f64)>], n: usize) -> Option<usize> {
    let m = taps.len();
    let f = m / n.max(1);
    let whole = f >= 1 && m == f * n;
    (whole && taps.iter().enumerate().all(|(j, t)| t.len() == 1 && t[0].0 == j / f)).then_some(f)
}

/// Output length of one pooled axis (ONNX's rule; as shape inference's `window_out`).
fn out_len(n: usize, k: usize, s: usize, p0: usize, p1: usize, d: usize, ceil: bool) -> Option<usize> {
    let padded = n + p0 + p1;
    let span = (k.max(1) - 1) * d + 1;
    let num = padded.checked_sub(span)?;
    let mut out = if ceil { num.div_ceil(s) + 1 } else { num / s + 1 };
    if ceil && (out - 1) * s >= n + p0 {
        out -= 1;
    }
    Some(out)
}

/// One axis of a resize: one Gather per tap, each weighted and summed (nearest: one Gather), plus `fill` at the
/// positions `outside` marks (tf_crop_and_resize's extrapolation).
fn resize_axis(
    b: &mut Builder,
    x: ValueId,
    shape: &[usize],
    axis: usize,
    taps: &[Vec<(usize, f64)>],
    (fill, outside): (f64, &[bool]),
    dtype: DType,
) -> Result<ValueId, PassError> {
    let k = taps.first().map_or(0, Vec::len);
    if taps.is_empty() {
        // No output positions: an empty axis.
        let none = b.ints(&[]);
        return Ok(b.op(Op::Gather { axis: axis as i64 }, &[Some(x), Some(none)])?);
    }
    let mut wshape = vec![1usize; shape.len()];
    wshape[axis] = taps.len();
    let mut sum: Option<ValueId> = None;
    for t in 0..k {
        let idx: Vec<i64> = taps.iter().map(|tp| tp[t].0 as i64).collect();
        let w: Vec<f64> = taps.iter().map(|tp| tp[t].1).collect();
        if w.iter().any(|w| !w.is_finite()) {
            return Err(PassError::Value {
                value: b.g.value(x).name.clone(),
                reason: "resize weights that are not finite (cubic_coeff_a, exclude_outside)".into(),
            });
        }
        // A tap that weighs nothing anywhere is left out, unless all do (then the first makes the zeros).
        let weighs = |t: usize| taps.iter().any(|tp| tp[t].1 != 0.0);
        if !weighs(t) && (t > 0 || (0..k).any(weighs)) {
            continue;
        }
        let iv = b.ints(&idx);
        let g = b.op(Op::Gather { axis: axis as i64 }, &[Some(x), Some(iv)])?;
        let term = if k == 1 {
            g
        } else {
            let wv = b.konst(Tensor::from_f64(dtype, wshape.clone(), w));
            b.bin(BinaryOp::Mul, g, wv)?
        };
        sum = Some(match sum {
            Some(s) => b.bin(BinaryOp::Add, s, term)?,
            None => term,
        });
    }
    let sum = sum
        .ok_or_else(|| PassError::Value { value: b.g.value(x).name.clone(), reason: "a resize with no taps".into() })?;
    if fill == 0.0 || !outside.contains(&true) {
        return Ok(sum);
    }
    let c: Vec<f64> = outside.iter().map(|&o| if o { fill } else { 0.0 }).collect();
    let cv = b.konst(Tensor::from_f64(dtype, wshape, c));
    Ok(b.bin(BinaryOp::Add, sum, cv)?)
}
