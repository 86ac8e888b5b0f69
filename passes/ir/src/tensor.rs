//! Host tensors: weights, folded constants and reference data.

use crate::{Blocks, DType, TensorType};
use std::sync::Arc;

/// Element storage of a host tensor. Integer types narrower than 64 bits and unsigned types are widened to
/// `I64` on import where their values fit (the IR keeps the logical dtype in [`Tensor::dtype`]). A
/// block-quantized float constant keeps its codes and scales (`Blocks`, see [`crate::Blocks`]): the kernels
/// that read it decode it, and host code that needs its values decodes them ([`Data::as_f64`], [`Data::gather`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    F32(Vec<f32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    Blocks(Arc<Blocks>),
}

impl Data {
    pub fn len(&self) -> usize {
        match self {
            Data::F32(v) => v.len(),
            Data::I64(v) => v.len(),
            Data::Bool(v) => v.len(),
            Data::Blocks(b) => b.numel(),
        }
    }

    /// The block-quantized form, if this is one.
    pub fn blocks(&self) -> Option<&Blocks> {
        match self {
            Data::Blocks(b) => Some(b),
            _ => None,
        }
    }

    /// `n` elements of `dtype` from little-endian bytes; 4-bit and 2-bit elements are packed, low bits first. `raw`
    /// must hold them (the frontends check sizes first).
    pub fn from_le_bytes(dtype: DType, raw: &[u8], n: usize) -> Data {
        macro_rules! conv {
            ($ty:ty, $n:expr, $map:expr) => {
                raw.chunks_exact($n).map(|c| $map(<$ty>::from_le_bytes(c.try_into().unwrap()))).collect()
            };
        }
        let bits = dtype.onnx_bits();
        // The bits of element i, for the types narrower than a byte or not native to Rust.
        let element = |i: usize| -> u32 {
            match bits {
                16 => u16::from_le_bytes([raw[2 * i], raw[2 * i + 1]]) as u32,
                8 => raw[i] as u32,
                _ => (raw[i * bits / 8] as u32 >> (i * bits % 8)) & ((1 << bits) - 1),
            }
        };
        match dtype {
            DType::F32 => Data::F32(conv!(f32, 4, |x| x)),
            DType::F64 => Data::F32(conv!(f64, 8, |x: f64| x as f32)),
            DType::I64 => Data::I64(conv!(i64, 8, |x| x)),
            DType::U64 => Data::I64(conv!(u64, 8, |x: u64| x as i64)),
            DType::I32 => Data::I64(conv!(i32, 4, |x: i32| x as i64)),
            DType::U32 => Data::I64(conv!(u32, 4, |x: u32| x as i64)),
            DType::I16 => Data::I64(conv!(i16, 2, |x: i16| x as i64)),
            DType::U16 => Data::I64(conv!(u16, 2, |x: u16| x as i64)),
            DType::I8 => Data::I64(raw.iter().map(|&x| x as i8 as i64).collect()),
            DType::U8 => Data::I64(raw.iter().map(|&x| x as i64).collect()),
            DType::Bool => Data::Bool(raw.iter().map(|&x| x != 0).collect()),
            DType::I4 | DType::U4 | DType::I2 | DType::U2 => {
                Data::I64((0..n).map(|i| dtype.wrap(element(i) as i64)).collect())
            }
            DType::F16
            | DType::BF16
            | DType::F8E4M3FN
            | DType::F8E4M3FNUZ
            | DType::F8E5M2
            | DType::F8E5M2FNUZ
            | DType::F4E2M1 => {
                let f = dtype.float_format().expect("a narrow float");
                Data::F32((0..n).map(|i| f.decode(element(i))).collect())
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Picks elements by flat index: the one primitive every host layout op is written in.
    pub fn gather(&self, idx: &[usize]) -> Data {
        match self {
            Data::F32(v) => Data::F32(idx.iter().map(|&i| v[i]).collect()),
            Data::I64(v) => Data::I64(idx.iter().map(|&i| v[i]).collect()),
            Data::Bool(v) => Data::Bool(idx.iter().map(|&i| v[i]).collect()),
            Data::Blocks(b) => Data::F32(idx.iter().map(|&i| b.value(i)).collect()),
        }
    }

    /// Concatenates storage of the same kind (block-quantized parts stay so when they share a format and hold
    /// whole rows; otherwise they are decoded).
    pub fn concat(parts: &[&Data]) -> Data {
        let blocks: Option<Vec<&Blocks>> = parts.iter().map(|p| p.blocks()).collect();
        if let Some(b) = blocks.and_then(|b| Blocks::concat_rows(&b)) {
            return Data::Blocks(Arc::new(b));
        }
        match parts.first() {
            Some(Data::F32(_)) => Data::F32(parts.iter().flat_map(|p| p.as_f64()).map(|x| x as f32).collect()),
            Some(Data::Bool(_)) => Data::Bool(parts.iter().flat_map(|p| p.as_f64()).map(|x| x != 0.0).collect()),
            Some(Data::Blocks(_)) => Data::F32(parts.iter().flat_map(|p| p.as_f64()).map(|x| x as f32).collect()),
            _ => Data::I64(parts.iter().flat_map(|p| p.as_i64()).collect()),
        }
    }

    pub fn as_f64(&self) -> Vec<f64> {
        match self {
            Data::F32(v) => v.iter().map(|&x| x as f64).collect(),
            Data::I64(v) => v.iter().map(|&x| x as f64).collect(),
            Data::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
            Data::Blocks(b) => b.decode().into_iter().map(|x| x as f64).collect(),
        }
    }

    pub fn as_i64(&self) -> Vec<i64> {
        match self {
            Data::F32(v) => v.iter().map(|&x| x as i64).collect(),
            Data::I64(v) => v.clone(),
            Data::Bool(v) => v.iter().map(|&x| x as i64).collect(),
            Data::Blocks(b) => b.decode().into_iter().map(|x| x as i64).collect(),
        }
    }
}

/// A host tensor with a logical dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Data,
}

impl Tensor {
    pub fn f32(shape: Vec<usize>, v: Vec<f32>) -> Tensor {
        Tensor { dtype: DType::F32, shape, data: Data::F32(v) }
    }

    pub fn i64(shape: Vec<usize>, v: Vec<i64>) -> Tensor {
        Tensor { dtype: DType::I64, shape, data: Data::I64(v) }
    }

    pub fn bool(shape: Vec<usize>, v: Vec<bool>) -> Tensor {
        Tensor { dtype: DType::Bool, shape, data: Data::Bool(v) }
    }

    /// Builds a tensor of `dtype` from f64 values, rounding as a cast would.
    pub fn from_f64(dtype: DType, shape: Vec<usize>, v: Vec<f64>) -> Tensor {
        let data = if dtype.is_float() {
            Data::F32(v.into_iter().map(|x| x as f32).collect())
        } else if dtype == DType::Bool {
            Data::Bool(v.into_iter().map(|x| x != 0.0).collect())
        } else {
            Data::I64(v.into_iter().map(|x| x as i64).collect())
        };
        Tensor { dtype, shape, data }
    }

    pub fn ty(&self) -> TensorType {
        TensorType::new(self.dtype, self.shape.clone())
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Integer view of the values (floats truncate); for shape-like constants.
    pub fn to_i64(&self) -> Vec<i64> {
        self.data.as_i64()
    }

    pub fn to_f64(&self) -> Vec<f64> {
        self.data.as_f64()
    }

    /// The same data under another shape with as many elements.
    pub fn reshaped(&self, shape: Vec<usize>) -> Tensor {
        debug_assert_eq!(shape.iter().product::<usize>(), self.numel());
        Tensor { dtype: self.dtype, shape, data: self.data.clone() }
    }
}

/// ONNX Reshape's output shape for an input of shape `input` and the shape input `spec`: a 0 copies the input's
/// dim at that index (unless `allowzero`), one -1 takes what the others leave.
pub fn reshape_target(input: &[usize], spec: &[i64], allowzero: bool) -> Result<Vec<usize>, String> {
    let mut shape = Vec::with_capacity(spec.len());
    let mut infer_at = None;
    for (i, &s) in spec.iter().enumerate() {
        match s {
            -1 if infer_at.is_none() => {
                infer_at = Some(i);
                shape.push(1);
            }
            0 if !allowzero => {
                shape.push(*input.get(i).ok_or_else(|| format!("shape[{i}] = 0 copies a dim the input lacks"))?)
            }
            s if s >= 0 => shape.push(s as usize),
            _ => return Err(format!("invalid shape {spec:?}")),
        }
    }
    let numel: usize = input.iter().product();
    if let Some(i) = infer_at {
        let known: usize = shape.iter().product();
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(format!("cannot reshape {input:?} to {spec:?}"));
        }
        shape[i] = numel / known;
    }
    Ok(shape)
}

/// Row-major strides of a shape, in elements.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Numpy broadcasting of two shapes; `None` if they are incompatible.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for i in 0..r {
        let da = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
        let db = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// Strides that read a tensor of `shape` broadcast to `out` (0 on broadcast axes), in elements.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<i64> {
    let cs = contiguous_strides(shape);
    let off = out.len() - shape.len();
    (0..out.len()).map(|d| if d < off || shape[d - off] == 1 { 0 } else { cs[d - off] as i64 }).collect()
}

/// Flat source indices for a strided read of `out_shape` elements.
pub fn strided_indices(out_shape: &[usize], offset: i64, strides: &[i64]) -> Vec<usize> {
    let n: usize = out_shape.iter().product();
    let mut idx = Vec::with_capacity(n);
    let mut coord = vec![0usize; out_shape.len()];
    for _ in 0..n {
        let mut src = offset;
        for (d, &c) in coord.iter().enumerate() {
            src += c as i64 * strides[d];
        }
        idx.push(src as usize);
        for d in (0..coord.len()).rev() {
            coord[d] += 1;
            if coord[d] < out_shape[d] {
                break;
            }
            coord[d] = 0;
        }
    }
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(broadcast_shapes(&[2, 1, 3], &[4, 1]), Some(vec![2, 4, 3]));
        assert_eq!(broadcast_shapes(&[], &[5]), Some(vec![5]));
        assert_eq!(broadcast_shapes(&[2], &[3]), None);
        assert_eq!(broadcast_strides(&[4, 1], &[2, 4, 3]), vec![0, 1, 0]);
    }

    #[test]
    fn strided_indices_transpose() {
        // A 2x3 tensor read transposed: out[j][i] = in[i][j].
        assert_eq!(strided_indices(&[3, 2], 0, &[1, 3]), vec![0, 3, 1, 4, 2, 5]);
    }
}
