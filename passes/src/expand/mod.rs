//! Composite ops expanded into simpler ones once shapes are known: Attention (attention.rs), DepthToSpace,
//! SpaceToDepth, LpNormalization, LRN, GatherND, Resize and Upsample (resize.rs), Hardmax, InstanceNormalization,
//! GroupNormalization, ConvTranspose (conv_transpose.rs), 3-D pooling (two separable 2-D pools), LSTM/GRU/RNN
//! (rnn.rs), Einsum (einsum.rs), the Quantize/DequantizeLinear family (quantize.rs) and RotaryEmbedding. Each expansion builds
//! ordinary nodes that shape inference then types and folds like any other.

mod attention;
mod conv_transpose;
mod einsum;
mod quantize;
mod resize;
mod rnn;

use crate::PassError;
use attention::attention;
use resize::{resize_axis, resize_plan, resize_taps, upsample_factor};
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
        Op::RotaryEmbedding { .. } => vec![Some(rotary_embedding(&mut b, &node, &xt, &err)?)],
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

/// RotaryEmbedding (`Op::RotaryEmbedding`) over a 4-D view `[batch, heads, seq, head]` (a 3-D input viewed as
/// `[batch, seq, heads, head]`): each token's cos and sin rows broadcast over the heads; halves rotate as
/// `x·[cos, cos] + rotate_half(x)·[sin, sin]` (one elementwise expression, as exporters write rotary without the
/// op), even and odd elements as `(x1·cos − x2·sin, x1·sin + x2·cos)` put back in place; the rest of each head
/// passed through.
fn rotary_embedding(
    b: &mut Builder<'_>,
    node: &wgslc_ir::Node,
    xt: &TensorType,
    err: &dyn Fn(String) -> PassError,
) -> Result<ValueId, PassError> {
    let Op::RotaryEmbedding { interleaved, rotary_dim, num_heads, doubled } = node.op else {
        unreachable!("a RotaryEmbedding node")
    };
    let input = |i: usize| node.inputs.get(i).copied().flatten();
    if doubled && (interleaved || input(3).is_some()) {
        return Err(err("doubled tables rotate halves, per token".into()));
    }
    let (Some(x), Some(cos), Some(sin)) = (input(0), input(1), input(2)) else {
        return Err(err("needs its input and the cos and sin caches".into()));
    };
    let s = &xt.shape;
    // onnxruntime's contrib form may leave num_heads out of a 3-D input: the heads are then as wide as the cache
    // rows say (two of each row's values per pair).
    let num_heads = match (num_heads, rotary_dim, s.len(), b.g.ty(cos).shape.last()) {
        (0, 0, 3, Some(&w)) if w > 0 && !doubled && s[2].is_multiple_of(2 * w) => s[2] / (2 * w),
        _ => num_heads,
    };
    let (x4, shape4, heads_axis) = match s.len() {
        4 => (x, s.clone(), 1),
        3 if num_heads > 0 && s[2].is_multiple_of(num_heads) => {
            let shape4 = vec![s[0], s[1], num_heads, s[2] / num_heads];
            (b.reshape(x, &shape4)?, shape4, 2)
        }
        3 => return Err(err(format!("a 3-D input {s:?} needs num_heads dividing its last dim"))),
        r => return Err(err(format!("the input has rank {r}; RotaryEmbedding takes 3-D or 4-D"))),
    };
    let (batch, seq, head) = (shape4[0], shape4[3 - heads_axis], shape4[3]);
    let rot = if rotary_dim == 0 { head } else { rotary_dim };
    if rot % 2 != 0 || rot > head {
        return Err(err(format!("rotary_embedding_dim {rot} must be even and at most the head size {head}")));
    }
    let half = rot / 2;
    let width = if doubled { rot } else { half };
    // The positions, [batch, seq] or [1, seq]: as given, or from a one-element position_ids, the first token's
    // position (onnxruntime's contrib form; the others follow it).
    let positions = match input(3) {
        Some(p) if b.g.ty(p).rank() <= 1 && b.g.ty(p).numel() == 1 => {
            let first = b.reshape(p, &[1])?;
            let iota = b.ints(&(0..seq as i64).collect::<Vec<_>>());
            let all = b.bin(BinaryOp::Add, first, iota)?;
            Some((b.reshape(all, &[1, seq])?, 1))
        }
        Some(p) => match b.g.ty(p).shape[..] {
            [pb, ps] if (pb == batch || pb == 1) && ps == seq => Some((p, pb)),
            ref other => return Err(err(format!("position_ids are {other:?}, not [{batch}, {seq}]"))),
        },
        None => None,
    };
    // Each token's rows, [batch or 1, seq, width], then broadcast over the heads axis.
    let rb = positions.map_or(batch, |(_, pb)| pb);
    let rows = |b: &mut Builder<'_>, cache: ValueId| -> Result<ValueId, PassError> {
        let r = match positions {
            Some((p, _)) => b.op(Op::Gather { axis: 0 }, &[Some(cache), Some(p)])?,
            None => cache,
        };
        let mut shape = vec![rb, seq, width];
        shape.insert(heads_axis, 1);
        Ok(b.reshape(r, &shape)?)
    };
    let (cos, sin) = (rows(b, cos)?, rows(b, sin)?);
    let slice = |b: &mut Builder<'_>, v: ValueId, start: usize, end: usize, step: usize| {
        let (st, en, ax, sp) = (b.ints(&[start as i64]), b.ints(&[end as i64]), b.ints(&[3]), b.ints(&[step as i64]));
        b.op(Op::Slice, &[Some(v), Some(st), Some(en), Some(ax), Some(sp)])
    };
    let rotated = if rot < head { slice(b, x4, 0, rot, 1)? } else { x4 };
    // [.., half] rows as [.., rot] = [rows, rows]: a broadcast view (Expand over a new axis), which the elementwise
    // kernel reading it indexes, not a copy.
    let twice = |b: &mut Builder<'_>, rows: ValueId| -> Result<ValueId, PassError> {
        let mut shape = vec![rb, seq];
        shape.insert(heads_axis, 1);
        let pairs: Vec<usize> = shape.iter().copied().chain([1, half]).collect();
        let r = b.reshape(rows, &pairs)?;
        let target: Vec<i64> = shape.iter().map(|&d| d as i64).chain([2, half as i64]).collect();
        let t = b.ints(&target);
        let e = b.op(Op::Expand, &[Some(r), Some(t)])?;
        Ok(b.reshape(e, &shape.iter().copied().chain([2 * half]).collect::<Vec<_>>())?)
    };
    let y = if doubled || !interleaved {
        // x · [cos, cos] + rotate_half(x) · [sin, sin]: one elementwise expression (the halves' tables doubled
        // here, from each token's rows: for a decode step they are part of its position table).
        let (cos, sin) = if doubled { (cos, sin) } else { (twice(b, cos)?, twice(b, sin)?) };
        let turned = b.op(Op::RotateHalf, &[Some(rotated)])?;
        let (xc, ts) = (b.bin(BinaryOp::Mul, rotated, cos)?, b.bin(BinaryOp::Mul, turned, sin)?);
        b.bin(BinaryOp::Add, xc, ts)?
    } else {
        let (x1, x2) = (slice(b, rotated, 0, rot, 2)?, slice(b, rotated, 1, rot, 2)?);
        let (x1c, x2s) = (b.bin(BinaryOp::Mul, x1, cos)?, b.bin(BinaryOp::Mul, x2, sin)?);
        let real = b.bin(BinaryOp::Sub, x1c, x2s)?;
        let (x1s, x2c) = (b.bin(BinaryOp::Mul, x1, sin)?, b.bin(BinaryOp::Mul, x2, cos)?);
        let imag = b.bin(BinaryOp::Add, x1s, x2c)?;
        let mut pair = shape4.clone();
        pair[3] = half;
        pair.push(1);
        let (r, i) = (b.reshape(real, &pair)?, b.reshape(imag, &pair)?);
        let pairs = b.op(Op::Concat { axis: 4 }, &[Some(r), Some(i)])?;
        let mut part = shape4.clone();
        part[3] = rot;
        b.reshape(pairs, &part)?
    };
    let y = if rot < head {
        let passed = slice(b, x4, rot, head, 1)?;
        b.op(Op::Concat { axis: 3 }, &[Some(y), Some(passed)])?
    } else {
        y
    };
    Ok(if s.len() == 3 { b.reshape(y, s)? } else { y })
}
