//! Windows (Conv, pools), Slice and Split: the ops whose resolution is index arithmetic.

use super::{alias, one_input, Ctx, Resolved};
use crate::PassError;
use wgslc_ir::{contiguous_strides, AutoPad, Graph, NodeId, Op, TensorType, Window};

pub(super) fn resolve_window(
    cx: &Ctx,
    mut w: Window,
    kernel: &[usize],
    spatial: &[usize],
) -> Result<Window, PassError> {
    let r = spatial.len();
    if w.kernel.is_empty() {
        w.kernel = kernel.to_vec();
    } else if w.kernel != kernel {
        return Err(cx.err(format!("kernel_shape {:?} does not match W {:?}", w.kernel, kernel)));
    }
    if w.strides.is_empty() {
        w.strides = vec![1; r];
    }
    if w.dilations.is_empty() {
        w.dilations = vec![1; r];
    }
    if w.strides.len() != r || w.dilations.len() != r || w.strides.contains(&0) || w.dilations.contains(&0) {
        return Err(cx.err("strides and dilations must be positive and match the spatial rank"));
    }
    match w.auto_pad {
        AutoPad::NotSet => {
            if w.pads.is_empty() {
                w.pads = vec![0; 2 * r];
            }
            if w.pads.len() != 2 * r {
                return Err(cx.err(format!("pads {:?} must have {} entries", w.pads, 2 * r)));
            }
        }
        AutoPad::Valid => w.pads = vec![0; 2 * r],
        AutoPad::SameUpper | AutoPad::SameLower => {
            let mut pads = vec![0; 2 * r];
            for d in 0..r {
                let out = spatial[d].div_ceil(w.strides[d]);
                let span = (w.kernel[d] - 1) * w.dilations[d] + 1;
                let total = ((out.max(1) - 1) * w.strides[d] + span).saturating_sub(spatial[d]);
                let small = total / 2;
                let (b, e) =
                    if w.auto_pad == AutoPad::SameUpper { (small, total - small) } else { (total - small, small) };
                pads[d] = b;
                pads[d + r] = e;
            }
            w.pads = pads;
        }
    }
    w.auto_pad = AutoPad::NotSet;
    Ok(w)
}

pub(super) fn window_out(cx: &Ctx, w: &Window, spatial: &[usize]) -> Result<Vec<usize>, PassError> {
    let r = spatial.len();
    (0..r)
        .map(|d| {
            let padded = spatial[d] + w.pads[d] + w.pads[d + r];
            let span = (w.kernel[d].max(1) - 1) * w.dilations[d] + 1;
            if padded < span {
                return Err(cx.err(format!("window {span} is larger than the padded input {padded}")));
            }
            let num = padded - span;
            let mut out = if w.ceil_mode { num.div_ceil(w.strides[d]) + 1 } else { num / w.strides[d] + 1 };
            // ONNX: the last window must start inside the input or the begin padding.
            if w.ceil_mode && (out - 1) * w.strides[d] >= spatial[d] + w.pads[d] {
                out -= 1;
            }
            Ok(out)
        })
        .collect()
}

pub(super) fn slice(cx: &Ctx) -> Result<Resolved, PassError> {
    let x = cx.ty(0)?.clone();
    let starts = cx.const_input(1, "starts")?.ok_or_else(|| cx.err("missing starts"))?.to_i64();
    let ends = cx.const_input(2, "ends")?.ok_or_else(|| cx.err("missing ends"))?.to_i64();
    let axes: Vec<i64> =
        cx.const_input(3, "axes")?.map(|t| t.to_i64()).unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps: Vec<i64> = cx.const_input(4, "steps")?.map(|t| t.to_i64()).unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(cx.err("starts, ends, axes and steps differ in length"));
    }
    let cs = contiguous_strides(&x.shape);
    let mut shape = x.shape.clone();
    let mut strides: Vec<i64> = cs.iter().map(|&s| s as i64).collect();
    let mut offset = 0i64;
    let mut seen = vec![false; x.rank()];
    for i in 0..starts.len() {
        let a = cx.axis(axes[i], x.rank())?;
        if std::mem::replace(&mut seen[a], true) {
            return Err(cx.err(format!("axis {a} appears twice")));
        }
        let dim = x.shape[a] as i64;
        let step = steps[i];
        if step == 0 {
            return Err(cx.err("step is zero"));
        }
        let norm = |v: i64| if v < 0 { v.saturating_add(dim) } else { v };
        let (s, e) = if step > 0 {
            (norm(starts[i]).clamp(0, dim), norm(ends[i]).clamp(0, dim))
        } else {
            (norm(starts[i]).clamp(0, dim - 1), norm(ends[i]).clamp(-1, dim - 1))
        };
        let len = if step > 0 { (e - s).max(0).div_euclid(1) } else { (s - e).max(0) };
        let n = (len + step.abs() - 1) / step.abs();
        shape[a] = n as usize;
        if n > 0 {
            offset += s * cs[a] as i64;
        }
        strides[a] = step * cs[a] as i64;
    }
    let out = TensorType::new(x.dtype, shape);
    if out.numel() == x.numel() && offset == 0 && strides.iter().zip(&cs).all(|(&s, &c)| s == c as i64) {
        return alias(cx, out.shape);
    }
    one_input(cx, Op::StridedCopy { offset, strides }, out)
}

/// Split becomes one StridedCopy node per output (they are independent kernels).
pub(super) fn split(cx: &Ctx, axis: i64) -> Result<Resolved, PassError> {
    let x = cx.ty(0)?.clone();
    let axis = cx.axis(axis, x.rank())?;
    let nout = cx.g.node(cx.n).outputs.len();
    let dim = x.shape[axis];
    let sizes: Vec<usize> = match cx.const_input(1, "split")? {
        Some(t) => t.to_i64().iter().map(|&s| s.max(0) as usize).collect(),
        None => {
            let part = dim.div_ceil(nout.max(1));
            (0..nout).map(|i| part.min(dim.saturating_sub(i * part))).collect()
        }
    };
    if sizes.len() != nout || sizes.iter().sum::<usize>() != dim {
        return Err(cx.err(format!("split sizes {sizes:?} do not cover axis {axis} of size {dim} in {nout} parts")));
    }
    let outputs = sizes
        .iter()
        .map(|&s| {
            let mut sh = x.shape.clone();
            sh[axis] = s;
            TensorType::new(x.dtype, sh)
        })
        .collect();
    Ok(Resolved { op: Op::Split { axis: axis as i64 }, inputs: vec![Some(cx.input(0)?)], outputs, folded: None })
}

/// Replaces a typed Split node by one StridedCopy node per output.
pub(super) fn expand_split(g: &mut Graph, n: NodeId, axis: usize) -> Result<Vec<NodeId>, PassError> {
    let node = g.remove_node(n);
    let x = node.inputs[0].expect("split input");
    let cs = contiguous_strides(&g.ty(x).shape);
    let mut start = 0usize;
    let mut parts = Vec::new();
    for (i, &o) in node.outputs.iter().enumerate() {
        let op = Op::StridedCopy { offset: (start * cs[axis]) as i64, strides: cs.iter().map(|&s| s as i64).collect() };
        start += g.ty(o).shape[axis];
        parts.push(g.add_node(format!("{}/{i}", node.name), op, vec![Some(x)], vec![o])?);
    }
    Ok(parts)
}
