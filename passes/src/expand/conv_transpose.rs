//! ConvTranspose as a Conv: the input spread out by the strides (zeros between its elements), padded so that
//! every output element sees the taps that reach it, and convolved with the weights flipped in space and regrouped
//! from `[C_in, C_out / group, k…]` to `[C_out, C_in / group, k…]` (constants when W is one). When the kernel
//! equals the stride (no overlap: the 2×2, stride-2 upsampling of U-Nets and detectors), each input element
//! writes its own k×k block, so a 1×1 Conv to `C_out · k…` channels and a depth-to-space rearrangement do the
//! same without multiplying zeros.
//!
//! Output size per spatial axis (ONNX): `stride · (in − 1) + output_padding + dilation · (k − 1) + 1 − pads`,
//! the pads given, or derived from `output_shape` / `auto_pad` as the ONNX reference implementation does.

use crate::PassError;
use wgslc_ir::{AutoPad, Builder, Op, TensorType, ValueId, Window};

pub(super) struct Attrs<'a> {
    pub window: &'a Window,
    pub group: usize,
    pub output_padding: &'a [usize],
    pub output_shape: &'a [usize],
}

/// Attribute `v` for `n` spatial axes, or `default` everywhere when absent.
fn per_axis(
    v: &[usize],
    n: usize,
    default: usize,
    what: &str,
    err: &dyn Fn(String) -> PassError,
) -> Result<Vec<usize>, PassError> {
    match v.len() {
        0 => Ok(vec![default; n]),
        l if l == n => Ok(v.to_vec()),
        l => Err(err(format!("{what} has {l} entries for {n} spatial axes"))),
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn expand(
    b: &mut Builder,
    x: ValueId,
    xt: &TensorType,
    w: ValueId,
    wt: &TensorType,
    bias: Option<ValueId>,
    at: &Attrs,
    err: &dyn Fn(String) -> PassError,
) -> Result<ValueId, PassError> {
    let (s, ws) = (&xt.shape, &wt.shape);
    let r = s.len();
    if r < 3 || ws.len() != r {
        return Err(err(format!("X {s:?} and W {ws:?} must both be [N, C, spatial…] of one rank ≥ 3")));
    }
    let (sp, g, cin) = (r - 2, at.group, s[1]);
    if sp > 2 {
        return Err(err(format!("{sp}-D ConvTranspose is not supported (Conv kernels are 1-D and 2-D)")));
    }
    if ws[0] != cin || cin % g != 0 {
        return Err(err(format!("W {ws:?} must have X's {cin} input channels first, in {g} groups")));
    }
    let cout = ws[1] * g;
    let ks = ws[2..].to_vec();
    if !at.window.kernel.is_empty() && at.window.kernel != ks {
        return Err(err(format!("kernel_shape {:?} differs from W's {ks:?}", at.window.kernel)));
    }
    let strides = per_axis(&at.window.strides, sp, 1, "strides", err)?;
    let dil = per_axis(&at.window.dilations, sp, 1, "dilations", err)?;
    let opad = per_axis(at.output_padding, sp, 0, "output_padding", err)?;
    if strides.iter().chain(&dil).chain(&ks).any(|&v| v == 0) {
        return Err(err("strides, dilations and the kernel must be positive".into()));
    }
    // The full extent before padding is removed, per axis (bounded: every size below derives from it).
    let extent = |i: usize| {
        let spread = strides[i].checked_mul(s[2 + i].max(1))?;
        let reach = dil[i].checked_mul(ks[i] - 1)?;
        spread.checked_add(reach)?.checked_add(opad[i]).filter(|&e| e <= 1 << 31)
    };
    let full = (0..sp)
        .map(|i| {
            let e =
                extent(i).ok_or_else(|| err(format!("spatial axis {i}: strides, dilations or padding too large")))?;
            Ok(e as i64 + 1 - strides[i] as i64)
        })
        .collect::<Result<Vec<i64>, PassError>>()?;
    // Pads (begin, end) per axis; negative ones (from output_shape) extend the output.
    let split = |total: i64, upper: bool| {
        let half = total.div_euclid(2);
        if upper {
            (half, total - half)
        } else {
            (total - half, half)
        }
    };
    let pads: Vec<(i64, i64)> =
        if !at.output_shape.is_empty() || matches!(at.window.auto_pad, AutoPad::SameUpper | AutoPad::SameLower) {
            let out: Vec<usize> = match at.output_shape.len() {
                0 => (0..sp).map(|i| s[2 + i] * strides[i]).collect(),
                l if l == sp => at.output_shape.to_vec(),
                l if l == r => at.output_shape[2..].to_vec(),
                l => return Err(err(format!("output_shape has {l} entries for {sp} spatial axes"))),
            };
            let upper = at.window.auto_pad == AutoPad::SameUpper;
            (0..sp).map(|i| split(full[i] - out[i] as i64, upper)).collect()
        } else if at.window.auto_pad == AutoPad::Valid || at.window.pads.is_empty() {
            vec![(0, 0); sp]
        } else if at.window.pads.len() == 2 * sp {
            (0..sp).map(|i| (at.window.pads[i] as i64, at.window.pads[sp + i] as i64)).collect()
        } else {
            return Err(err(format!("pads has {} entries for {sp} spatial axes", at.window.pads.len())));
        };
    for (i, &(pb, pe)) in pads.iter().enumerate() {
        if full[i] - pb - pe < 1 {
            return Err(err(format!(
                "spatial axis {i}: the pads leave no output (extent {}, pads {pb}, {pe})",
                full[i]
            )));
        }
    }

    let no_overlap = g == 1
        && strides == ks
        && dil.iter().all(|&d| d == 1)
        && opad.iter().all(|&p| p == 0)
        && pads.iter().all(|&p| p == (0, 0));
    if no_overlap {
        return blocks(b, x, s, w, &ks, cout, bias);
    }

    // Weights: [C_in, C_out/g, k…] → [g, C_in/g, C_out/g, k…] → [g, C_out/g, C_in/g, k…] → [C_out, C_in/g, k…],
    // then reversed along every spatial axis.
    let mut grouped = vec![g, cin / g, cout / g];
    grouped.extend(&ks);
    let wr = b.reshape(w, &grouped)?;
    let mut perm = vec![0, 2, 1];
    perm.extend(3..3 + sp);
    let wr = b.transpose(wr, &perm)?;
    let mut conv_w = vec![cout, cin / g];
    conv_w.extend(&ks);
    let wr = b.reshape(wr, &conv_w)?;
    let (starts, ends) = (b.ints(&vec![-1; sp]), b.ints(&vec![i64::MIN; sp]));
    let (axes, steps) = (b.ints(&(2..r as i64).collect::<Vec<_>>()), b.ints(&vec![-1; sp]));
    let flipped = b.op(Op::Slice, &[Some(wr), Some(starts), Some(ends), Some(axes), Some(steps)])?;

    // The input spread out: [N, C, d1, 1, d2, 1, …] padded to [N, C, d1, s1, …] and merged to [N, C, d1·s1, …]
    // (s − 1 zeros after every element, the last ones included).
    let mut y = x;
    let mut len: Vec<usize> = s[2..].to_vec();
    if strides.iter().any(|&st| st > 1) {
        let mut wide = s[..2].to_vec();
        let mut p = vec![0i64; 2 * (2 + 2 * sp)];
        for i in 0..sp {
            wide.extend([s[2 + i], 1]);
            p[2 + 2 * sp + 2 + 2 * i + 1] = strides[i] as i64 - 1;
        }
        let yr = b.reshape(y, &wide)?;
        let pv = b.ints(&p);
        let padded =
            b.op(Op::Pad { mode: wgslc_ir::PadMode::Constant, pads: None, value: 0.0 }, &[Some(yr), Some(pv)])?;
        len = (0..sp).map(|i| s[2 + i] * strides[i]).collect();
        let mut merged = s[..2].to_vec();
        merged.extend(&len);
        y = b.reshape(padded, &merged)?;
    }
    // Conv pads around the spread input: dilation·(k − 1) − pad at the start; at the end the same plus
    // output_padding, less the s − 1 zeros already there. Negative ones crop.
    let mut conv_pads = vec![0usize; 2 * sp];
    let (mut cs, mut ce, mut crop) = (vec![], vec![], false);
    for i in 0..sp {
        let reach = (dil[i] * (ks[i] - 1)) as i64;
        let begin = reach - pads[i].0;
        let end = reach - pads[i].1 + opad[i] as i64 - (strides[i] as i64 - 1);
        conv_pads[i] = begin.max(0) as usize;
        conv_pads[sp + i] = end.max(0) as usize;
        cs.push((-begin).max(0));
        ce.push(len[i] as i64 - (-end).max(0));
        crop |= begin < 0 || end < 0;
    }
    if crop {
        let (st, en, ax) = (b.ints(&cs), b.ints(&ce), b.ints(&(2..r as i64).collect::<Vec<_>>()));
        y = b.op(Op::Slice, &[Some(y), Some(st), Some(en), Some(ax)])?;
    }
    let window = Window {
        kernel: ks,
        strides: vec![1; sp],
        pads: conv_pads,
        dilations: dil,
        auto_pad: AutoPad::NotSet,
        ceil_mode: false,
    };
    Ok(b.op(Op::Conv { window, group: g }, &[Some(y), Some(flipped), bias])?)
}

/// Kernel = stride, no pads, one group: `Y[n, o, h·k + i, …] = Σ_c X[n, c, h, …] · W[c, o, i, …] + B[o]`, a
/// 1×1 Conv to `C_out · Π k` channels (ordered o, i, j, …) and a depth-to-space rearrangement.
fn blocks(
    b: &mut Builder,
    x: ValueId,
    s: &[usize],
    w: ValueId,
    ks: &[usize],
    cout: usize,
    bias: Option<ValueId>,
) -> Result<ValueId, PassError> {
    let (r, sp, cin) = (s.len(), s.len() - 2, s[1]);
    let taps: usize = ks.iter().product();
    // W [C_in, C_out, k…] → [C_out, k…, C_in] → [C_out·Πk, C_in, 1…].
    let mut perm = vec![1];
    perm.extend(2..r);
    perm.push(0);
    let wt = b.transpose(w, &perm)?;
    let mut w1 = vec![cout * taps, cin];
    w1.extend(vec![1; sp]);
    let wt = b.reshape(wt, &w1)?;
    let window = Window {
        kernel: vec![1; sp],
        strides: vec![1; sp],
        pads: vec![0; 2 * sp],
        dilations: vec![1; sp],
        auto_pad: AutoPad::NotSet,
        ceil_mode: false,
    };
    let y = b.op(Op::Conv { window, group: 1 }, &[Some(x), Some(wt), None])?;
    // [N, C_out·Πk, d…] → [N, C_out, k…, d…] → [N, C_out, d1, k1, d2, k2, …] → [N, C_out, d1·k1, …].
    let mut split = vec![s[0], cout];
    split.extend(ks);
    split.extend(&s[2..]);
    let y = b.reshape(y, &split)?;
    let mut perm = vec![0, 1];
    for i in 0..sp {
        perm.extend([2 + sp + i, 2 + i]);
    }
    let y = b.transpose(y, &perm)?;
    let mut out = vec![s[0], cout];
    out.extend((0..sp).map(|i| s[2 + i] * ks[i]));
    let y = b.reshape(y, &out)?;
    match bias {
        None => Ok(y),
        Some(bv) => {
            let mut shape = vec![cout];
            shape.extend(vec![1; sp]);
            let bv = b.reshape(bv, &shape)?;
            Ok(b.bin(wgslc_ir::BinaryOp::Add, y, bv)?)
        }
    }
}
