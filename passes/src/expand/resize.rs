//! Resize (and Upsample) as Gathers along each resized axis, weighted and summed: the output sizes, and each
//! output position's input taps and weights, as ONNX computes them.

use super::*;

/// The largest Resize output wgslc tabulates: elements (i32 indexing), and positions along one resized axis.
const MAX_RESIZED_ELEMENTS: usize = 1 << 31;
const MAX_RESIZED_AXIS: usize = 1 << 20;

/// Resize's scale and output size per axis, as ONNX computes them: `floor(n · scale)` from scales; from sizes,
/// scale = size / n, or under keep_aspect_ratio_policy the smallest (not_larger) or largest (not_smaller) of
/// them for every resized axis, with sizes rounded half up.
pub(super) fn resize_plan(
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
pub(super) fn resize_taps(
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
pub(super) type Taps = (Vec<Vec<(usize, f64)>>, Vec<bool>);

/// `f` when output position j reads input j / f alone (nearest upsampling by a whole factor).
pub(super) fn upsample_factor(taps: &[Vec<(usize, f64)>], n: usize) -> Option<usize> {
    let m = taps.len();
    let f = m / n.max(1);
    let whole = f >= 1 && m == f * n;
    (whole && taps.iter().enumerate().all(|(j, t)| t.len() == 1 && t[0].0 == j / f)).then_some(f)
}

/// One axis of a resize: one Gather per tap, each weighted and summed (nearest: one Gather), plus `fill` at the
/// positions `outside` marks (tf_crop_and_resize's extrapolation).
pub(super) fn resize_axis(
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
