//! Host tensors and their storage bytes: what a run's inputs become in the plan's buffers and what its outputs
//! are read back as, and, for ranged dims (`--dim NAME=MIN..MAX`, the plan's `ranges`), each dim's value from the
//! inputs' shapes and the moves between a run's dense tensors and buffers laid out for each dim's max.
//!
//! This is the contract's meaning on the host, with no GPU in it: every runtime writes and reads these bytes
//! (runtime/web/artifact.js mirrors it line for line), so it lives with the schema and is tested without a device.

use crate::{ArtifactError, Dtype, Ranges, StorageType, TensorSpec};

/// A host tensor: a runtime's input and output type.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: TensorData,
}

#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    F32(Vec<f32>),
    I64(Vec<i64>),
    I32(Vec<i32>),
    Bool(Vec<bool>),
}

impl TensorData {
    pub fn len(&self) -> usize {
        match self {
            TensorData::F32(v) => v.len(),
            TensorData::I64(v) => v.len(),
            TensorData::I32(v) => v.len(),
            TensorData::Bool(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn type_name(&self) -> &'static str {
        match self {
            TensorData::F32(_) => "float32",
            TensorData::I64(_) => "int64",
            TensorData::I32(_) => "int32",
            TensorData::Bool(_) => "bool",
        }
    }
}

impl TensorSpec {
    fn input_error(&self, reason: String) -> ArtifactError {
        ArtifactError::Input { name: self.name.clone(), reason }
    }

    /// One input's storage bytes, its shape, element count, dtype and (for narrowed integers) range checked.
    pub fn input_bytes(&self, t: &HostTensor) -> Result<Vec<u8>, ArtifactError> {
        if t.shape != self.shape {
            return Err(self.input_error(format!("expected shape {:?}, got {:?}", self.shape, t.shape)));
        }
        let n: usize = self.shape.iter().product();
        if t.data.len() != n {
            return Err(self.input_error(format!("expected {n} elements, got {}", t.data.len())));
        }
        Ok(match (self.storage, &t.data) {
            (StorageType::F32, TensorData::F32(v)) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            (StorageType::I32, TensorData::I32(v)) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            (StorageType::I32, TensorData::I64(v)) => {
                let mut out = Vec::with_capacity(v.len() * 4);
                for &x in v {
                    let y = i32::try_from(x).map_err(|_| {
                        self.input_error(format!(
                            "value {x} does not fit in i32 (int64 inputs are narrowed on the GPU)"
                        ))
                    })?;
                    out.extend(y.to_le_bytes());
                }
                out
            }
            (StorageType::U32, TensorData::Bool(v)) => v.iter().flat_map(|&x| (x as u32).to_le_bytes()).collect(),
            (_, d) => return Err(self.input_error(format!("expected {} data, got {}", self.dtype, d.type_name()))),
        })
    }

    /// An output read back from its storage bytes, in its declared dtype (int64 widened from i32, bool from u32).
    pub fn output_tensor(&self, bytes: &[u8]) -> HostTensor {
        let words = bytes.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]);
        let data = match self.storage {
            StorageType::F32 => TensorData::F32(words.map(f32::from_le_bytes).collect()),
            StorageType::I32 if self.dtype == Dtype::Int64 => {
                TensorData::I64(words.map(|w| i32::from_le_bytes(w) as i64).collect())
            }
            StorageType::I32 => TensorData::I32(words.map(i32::from_le_bytes).collect()),
            StorageType::U32 => TensorData::Bool(words.map(|w| u32::from_le_bytes(w) != 0).collect()),
        };
        HostTensor { shape: self.shape.clone(), data }
    }

    /// Integer values (token ids, positions, mask words) as this tensor's storage words.
    pub fn words(&self, values: impl IntoIterator<Item = i64>) -> Vec<u8> {
        let word = |v: i64| match self.storage {
            StorageType::F32 => (v as f32).to_le_bytes(),
            StorageType::I32 => (v as i32).to_le_bytes(),
            StorageType::U32 => (v as u32).to_le_bytes(),
        };
        values.into_iter().flat_map(word).collect()
    }

    /// The spec at the run's dim values (its ranged axes at `factor · n`).
    pub fn at_values(&self, values: &[usize]) -> TensorSpec {
        let mut s = self.clone();
        for a in &self.ranged {
            s.shape[a.axis] = a.factor * values[a.dim];
        }
        s
    }

    /// The shape with its ranged axes named: `[1, sequence_length, 64]`.
    fn shape_text(&self, r: &Ranges) -> String {
        let dims: Vec<String> = (0..self.shape.len())
            .map(|i| match self.ranged.iter().find(|a| a.axis == i) {
                Some(a) if a.factor == 1 => r.dims[a.dim].name.clone(),
                Some(a) => format!("{}*{}", a.factor, r.dims[a.dim].name),
                None => self.shape[i].to_string(),
            })
            .collect();
        format!("[{}]", dims.join(", "))
    }
}

impl Ranges {
    /// Each dim's value, from the inputs' shapes: every ranged axis must be `factor · n` with `n` in the dim's
    /// range, one `n` per dim across the inputs.
    pub fn dim_values(&self, specs: &[TensorSpec], inputs: &[HostTensor]) -> Result<Vec<usize>, ArtifactError> {
        let mut values: Vec<Option<(usize, &str)>> = vec![None; self.dims.len()];
        for (spec, t) in specs.iter().zip(inputs) {
            if t.shape.len() != spec.shape.len() {
                return Err(spec.input_error(format!(
                    "expected {} dims (shape {}), got shape {:?}",
                    spec.shape.len(),
                    spec.shape_text(self),
                    t.shape
                )));
            }
            for a in &spec.ranged {
                let d = &self.dims[a.dim];
                let e = t.shape[a.axis];
                let n = e / a.factor;
                if e % a.factor != 0 || n < d.min || n > d.max {
                    let scaled = if a.factor == 1 { String::new() } else { format!(" times {}", a.factor) };
                    return Err(spec.input_error(format!(
                        "axis {} is {e}: it must be {}{scaled}, in {}..{} (shape {}, got {:?})",
                        a.axis,
                        d.name,
                        d.min,
                        d.max,
                        spec.shape_text(self),
                        t.shape
                    )));
                }
                match values[a.dim] {
                    Some((m, other)) if m != n => {
                        return Err(spec.input_error(format!(
                            "axis {} gives {} = {n}, but input '{other}' gives {m}",
                            a.axis, d.name
                        )))
                    }
                    Some(_) => {}
                    None => values[a.dim] = Some((n, &spec.name)),
                }
            }
        }
        values
            .iter()
            .zip(&self.dims)
            .map(|(v, d)| {
                v.map(|(n, _)| n).ok_or_else(|| ArtifactError::Invalid(format!("no input gives dim '{}'", d.name)))
            })
            .collect()
    }

    /// Where a run at the dims' `values` goes: the bucket that holds them (none in an artifact without buckets)
    /// and the values its tensors are laid out at and its scaled kernels count workgroups against (the bucket's
    /// max, else each dim's).
    pub fn layout(&self, values: &[usize]) -> RunLayout {
        let bucket = self.buckets.iter().position(|b| values.first().is_some_and(|v| (b.min..=b.max).contains(v)));
        let at = match bucket {
            Some(b) => vec![self.buckets[b].max],
            None => self.dims.iter().map(|d| d.max).collect(),
        };
        RunLayout { bucket, at }
    }

    /// The dims' values as the i32 words the plan's ranges buffer holds.
    pub fn dim_words(values: &[usize]) -> Vec<u8> {
        values.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect()
    }
}

/// See [`Ranges::layout`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunLayout {
    /// Index into `Ranges::buckets`.
    pub bucket: Option<usize>,
    /// Per dim: the value the run's tensors are laid out at (their buffers hold `factor · at` along each ranged
    /// axis) and its scaled kernels' workgroup counts were compiled for.
    pub at: Vec<usize>,
}

impl RunLayout {
    /// A kernel's workgroups at the run's `values`: along the axis a [`crate::GridScale`] names,
    /// `ceil(W · n / at)`, at least 1 and at most W.
    pub fn workgroups(&self, k: &crate::Kernel, values: &[usize]) -> [u32; 3] {
        let mut w = k.workgroups;
        if let Some(s) = k.scale {
            let (n, at) = (values[s.dim] as u64, self.at[s.dim].max(1) as u64);
            w[s.axis] = (w[s.axis] as u64 * n).div_ceil(at).clamp(1, w[s.axis].max(1) as u64) as u32;
        }
        w
    }
}

/// Moves a tensor of shape `small` (4-byte entries) between its dense layout and its place in a buffer laid out
/// for `big` (every axis at least as long): into `big` (the rest zero) when `pad`, out of it otherwise.
pub fn relayout(bytes: &[u8], small: &[usize], big: &[usize], pad: bool) -> Vec<u8> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DimRange, RangedAxis};

    fn spec(name: &str, shape: &[usize], dtype: Dtype, storage: StorageType) -> TensorSpec {
        TensorSpec { name: name.into(), dtype, shape: shape.to_vec(), storage, buffer: 0, ranged: vec![] }
    }

    /// int64 inputs are narrowed to i32 with a range check, and read back widened; bools travel as u32 words.
    #[test]
    fn inputs_become_storage_words_and_outputs_come_back() {
        let ids = spec("ids", &[2], Dtype::Int64, StorageType::I32);
        let t = HostTensor { shape: vec![2], data: TensorData::I64(vec![-3, 7]) };
        let bytes = ids.input_bytes(&t).unwrap();
        assert_eq!(bytes, [(-3i32).to_le_bytes(), 7i32.to_le_bytes()].concat());
        assert_eq!(ids.output_tensor(&bytes), t);
        let big = HostTensor { shape: vec![2], data: TensorData::I64(vec![0, 1 << 40]) };
        let e = ids.input_bytes(&big).unwrap_err().to_string();
        assert!(e.starts_with("input 'ids': value 1099511627776 does not fit in i32"), "{e}");
        let f = HostTensor { shape: vec![2], data: TensorData::F32(vec![0.0, 1.0]) };
        assert_eq!(ids.input_bytes(&f).unwrap_err().to_string(), "input 'ids': expected int64 data, got float32");
        let m = spec("mask", &[3], Dtype::Bool, StorageType::U32);
        let b = HostTensor { shape: vec![3], data: TensorData::Bool(vec![true, false, true]) };
        assert_eq!(m.output_tensor(&m.input_bytes(&b).unwrap()), b);
    }

    /// A ranged input's dim comes from its shape; a padded write and the read back of the same region agree.
    #[test]
    fn ranged_inputs_give_their_dims_and_round_trip_through_the_max_layout() {
        let r = Ranges { buffer: 0, dims: vec![DimRange { name: "n".into(), min: 1, max: 4 }], buckets: vec![] };
        let mut x = spec("x", &[4, 3], Dtype::Float32, StorageType::F32);
        x.ranged = vec![RangedAxis { axis: 0, dim: 0, factor: 1 }];
        let t = HostTensor { shape: vec![2, 3], data: TensorData::F32((0..6).map(|i| i as f32).collect()) };
        assert_eq!(r.dim_values(std::slice::from_ref(&x), std::slice::from_ref(&t)).unwrap(), vec![2]);
        let at = x.at_values(&[2]);
        assert_eq!(at.shape, vec![2, 3]);
        let dense = at.input_bytes(&t).unwrap();
        let padded = relayout(&dense, &at.shape, &x.shape, true);
        assert_eq!(padded.len(), 4 * 12);
        assert_eq!(relayout(&padded, &at.shape, &x.shape, false), dense);
        let long = HostTensor { shape: vec![5, 3], data: TensorData::F32(vec![0.0; 15]) };
        let e = r.dim_values(std::slice::from_ref(&x), std::slice::from_ref(&long)).unwrap_err().to_string();
        assert_eq!(e, "input 'x': axis 0 is 5: it must be n, in 1..4 (shape [n, 3], got [5, 3])");
    }

    /// A bucketed dim: each value runs the bucket that holds it, laid out and scaled at that bucket's max.
    #[test]
    fn runs_go_to_the_bucket_that_holds_their_value() {
        let b = |min, max, k| crate::Bucket { min, max, dispatches: vec![k] };
        let dims = vec![DimRange { name: "n".into(), min: 1, max: 16 }];
        let r = Ranges { buffer: 0, dims, buckets: vec![b(1, 1, 0), b(2, 8, 1), b(9, 16, 2)] };
        assert_eq!(r.layout(&[1]), RunLayout { bucket: Some(0), at: vec![1] });
        assert_eq!(r.layout(&[5]), RunLayout { bucket: Some(1), at: vec![8] });
        assert_eq!(r.layout(&[9]), RunLayout { bucket: Some(2), at: vec![16] });
        let plain = Ranges { buckets: vec![], ..r.clone() };
        assert_eq!(plain.layout(&[5]), RunLayout { bucket: None, at: vec![16] });
        let k = crate::Kernel {
            name: "k".into(),
            wgsl: "kernels/k.wgsl".into(),
            subgroups: None,
            entry_point: "main".into(),
            bindings: vec![],
            workgroups: [4, 6, 1],
            scale: Some(crate::GridScale { axis: 1, dim: 0 }),
        };
        assert_eq!(r.layout(&[5]).workgroups(&k, &[5]), [4, 4, 1]);
        assert_eq!(r.layout(&[2]).workgroups(&k, &[2]), [4, 2, 1]);
        assert_eq!(plain.layout(&[2]).workgroups(&k, &[2]), [4, 1, 1]);
    }
}
