//! Ranged dims (`--dim NAME=MIN..MAX`, the plan's `ranges`): each dim's value from the inputs' shapes, and the
//! moves between a run's dense tensors and their place in buffers laid out for each dim's max.

use crate::{HostTensor, RuntimeError};
use wgslc_artifact::{Ranges, TensorSpec};

/// Each ranged dim's value, from the inputs' shapes: every ranged axis must be `factor · n` with `n` in the dim's
/// range, one `n` per dim across the inputs.
pub(crate) fn dim_values(r: &Ranges, specs: &[TensorSpec], inputs: &[HostTensor]) -> Result<Vec<usize>, RuntimeError> {
    let mut values: Vec<Option<(usize, &str)>> = vec![None; r.dims.len()];
    for (spec, t) in specs.iter().zip(inputs) {
        let err = |reason: String| RuntimeError::Input { name: spec.name.clone(), reason };
        if t.shape.len() != spec.shape.len() {
            return Err(err(format!(
                "expected {} dims (shape {}), got shape {:?}",
                spec.shape.len(),
                shape_text(spec, r),
                t.shape
            )));
        }
        for a in &spec.ranged {
            let d = &r.dims[a.dim];
            let e = t.shape[a.axis];
            let n = e / a.factor;
            if e % a.factor != 0 || n < d.min || n > d.max {
                let scaled = if a.factor == 1 { String::new() } else { format!(" times {}", a.factor) };
                return Err(err(format!(
                    "axis {} is {e}: it must be {}{scaled}, in {}..{} (shape {}, got {:?})",
                    a.axis,
                    d.name,
                    d.min,
                    d.max,
                    shape_text(spec, r),
                    t.shape
                )));
            }
            match values[a.dim] {
                Some((m, other)) if m != n => {
                    return Err(err(format!("axis {} gives {} = {n}, but input '{other}' gives {m}", a.axis, d.name)))
                }
                Some(_) => {}
                None => values[a.dim] = Some((n, &spec.name)),
            }
        }
    }
    values
        .iter()
        .zip(&r.dims)
        .map(|(v, d)| {
            v.map(|(n, _)| n).ok_or_else(|| RuntimeError::Invalid(format!("no input gives dim '{}'", d.name)))
        })
        .collect()
}

/// A spec's shape with its ranged axes named: `[1, sequence_length, 64]`.
fn shape_text(spec: &TensorSpec, r: &Ranges) -> String {
    let dims: Vec<String> = (0..spec.shape.len())
        .map(|i| match spec.ranged.iter().find(|a| a.axis == i) {
            Some(a) if a.factor == 1 => r.dims[a.dim].name.clone(),
            Some(a) => format!("{}*{}", a.factor, r.dims[a.dim].name),
            None => spec.shape[i].to_string(),
        })
        .collect();
    format!("[{}]", dims.join(", "))
}

/// The spec of a tensor at the run's dim values (its ranged axes at `factor · n`).
pub(crate) fn at_values(spec: &TensorSpec, values: &[usize]) -> TensorSpec {
    let mut s = spec.clone();
    for a in &spec.ranged {
        s.shape[a.axis] = a.factor * values[a.dim];
    }
    s
}

/// The dims' values as the i32 words the plan's ranges buffer holds.
pub(crate) fn dim_words(values: &[usize]) -> Vec<u8> {
    values.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect()
}

/// Moves a tensor of shape `small` (4-byte entries) between its dense layout and its place in a buffer laid out
/// for `big` (every axis at least as long): into `big` (the rest zero) when `pad`, out of it otherwise.
pub(crate) fn relayout(bytes: &[u8], small: &[usize], big: &[usize], pad: bool) -> Vec<u8> {
    if small == big || small.is_empty() {
        return bytes.to_vec();
    }
    let rank = small.len();
    let row = small[rank - 1] * 4;
    let mut strides = vec![1usize; rank];
    for i in (0..rank - 1).rev() {
        strides[i] = strides[i + 1] * big[i + 1];
    }
    let rows: usize = small[..rank - 1].iter().product();
    let mut out = vec![0u8; if pad { big.iter().product::<usize>() * 4 } else { rows * row }];
    let mut idx = vec![0usize; rank - 1];
    for r in 0..rows {
        let at = idx.iter().zip(&strides).map(|(i, s)| i * s).sum::<usize>() * 4;
        if pad {
            out[at..at + row].copy_from_slice(&bytes[r * row..(r + 1) * row]);
        } else {
            out[r * row..(r + 1) * row].copy_from_slice(&bytes[at..at + row]);
        }
        for a in (0..rank - 1).rev() {
            idx[a] += 1;
            if idx[a] < small[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    out
}
