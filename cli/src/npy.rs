//! .npy files in and out of [`HostTensor`]s, with errors that say what was expected.

use npyz::{Endianness, TypeChar};
use std::io::Read;
use std::path::Path;
use wgslc_runtime::{HostTensor, TensorData};

#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    #[error("'{path}': {reason}")]
    Read { path: String, reason: String },
    #[error("cannot write '{path}': {reason}")]
    Write { path: String, reason: String },
}

/// The largest .npy input accepted (elements); WebGPU buffers hold at most 64 Mi f32 by default.
const MAX_ELEMENTS: u64 = 1 << 30;

/// Reads float16/32/64 (as f32), int8/16/32 and uint8/16 (as i32), int64, uint32/64 (as i64, range-checked by the
/// runtime where the model narrows them) and bool arrays in C order, little-endian.
pub fn read(path: &Path) -> Result<HostTensor, NpyError> {
    let err = |reason: String| NpyError::Read { path: path.display().to_string(), reason };
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let npy =
        npyz::NpyFile::new(std::io::BufReader::new(file)).map_err(|e| err(format!("not a valid .npy file: {e}")))?;
    if npy.order() != npyz::Order::C {
        return Err(err("Fortran-order arrays are not supported; save with np.ascontiguousarray".into()));
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let n = npy.shape().iter().try_fold(1u64, |a, &d| a.checked_mul(d)).filter(|&n| n <= MAX_ELEMENTS);
    let n = n.ok_or_else(|| err(format!("shape {shape:?} is too large")))? as usize;
    let npyz::DType::Plain(ts) = npy.dtype() else {
        return Err(err("structured arrays are not supported".into()));
    };
    if ts.endianness() == Endianness::Big && ts.size_field() > 1 {
        return Err(err("big-endian arrays are not supported".into()));
    }
    let (tc, size) = (ts.type_char(), ts.size_field() as usize);
    let mut bytes = Vec::new();
    npy.into_inner().take((n * size) as u64 + 1).read_to_end(&mut bytes).map_err(|e| err(e.to_string()))?;
    if bytes.len() != n * size {
        return Err(err(format!("holds {} data bytes, the shape {shape:?} needs {}", bytes.len(), n * size)));
    }
    let data = match (tc, size) {
        (TypeChar::Float, 4) => {
            TensorData::F32(bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect())
        }
        // float64 is computed in f32 (WGSL has no f64): a finite value outside f32's range is refused rather than
        // turned into an infinity.
        (TypeChar::Float, 8) => TensorData::F32(
            bytes
                .chunks_exact(8)
                .enumerate()
                .map(|(i, c)| {
                    let x = f64::from_le_bytes(c.try_into().unwrap());
                    if x.is_finite() && x.abs() > f32::MAX as f64 {
                        return Err(err(format!(
                            "element {i} ({x}) lies outside float32's range; float64 is computed in float32 on WebGPU"
                        )));
                    }
                    Ok(x as f32)
                })
                .collect::<Result<_, _>>()?,
        ),
        (TypeChar::Int, 8) => {
            TensorData::I64(bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect())
        }
        (TypeChar::Int, 4) => {
            TensorData::I32(bytes.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect())
        }
        (TypeChar::Float, 2) => TensorData::F32(
            bytes.chunks_exact(2).map(|c| half::f16::from_le_bytes(c.try_into().unwrap()).to_f32()).collect(),
        ),
        // Narrower integers widen to i32; uint32 and uint64 go in as i64, which the runtime range-checks into i32.
        (TypeChar::Int, 1) => TensorData::I32(bytes.iter().map(|&b| i32::from(b as i8)).collect()),
        (TypeChar::Int, 2) => TensorData::I32(
            bytes.chunks_exact(2).map(|c| i32::from(i16::from_le_bytes(c.try_into().unwrap()))).collect(),
        ),
        (TypeChar::Uint, 1) => TensorData::I32(bytes.iter().map(|&b| i32::from(b)).collect()),
        (TypeChar::Uint, 2) => TensorData::I32(
            bytes.chunks_exact(2).map(|c| i32::from(u16::from_le_bytes(c.try_into().unwrap()))).collect(),
        ),
        (TypeChar::Uint, 4) => TensorData::I64(
            bytes.chunks_exact(4).map(|c| i64::from(u32::from_le_bytes(c.try_into().unwrap()))).collect(),
        ),
        (TypeChar::Uint, 8) => TensorData::I64(
            bytes
                .chunks_exact(8)
                .map(|c| {
                    let v = u64::from_le_bytes(c.try_into().unwrap());
                    i64::try_from(v).map_err(|_| err(format!("uint64 value {v} does not fit in int64")))
                })
                .collect::<Result<_, _>>()?,
        ),
        (TypeChar::Bool, 1) => TensorData::Bool(bytes.iter().map(|&b| b != 0).collect()),
        _ => {
            return Err(err(format!(
                "dtype {ts} is not supported (float16/32/64, int8/16/32/64, uint8/16/32/64 or bool)"
            )))
        }
    };
    Ok(HostTensor { shape, data })
}

/// Writes a tensor as .npy in its own dtype.
pub fn write(path: &Path, t: &HostTensor) -> Result<(), NpyError> {
    write_as(path, t, "")
}

/// Writes a tensor as .npy in the dtype the model declares (`dtype`, the plan's name) where numpy has it:
/// float64 and float16, the narrower and unsigned integers. Types numpy lacks are written in the nearest type
/// that holds every value exactly: bfloat16 and the 8-bit and 4-bit floats as float32, int4/int2 as int8,
/// uint4/uint2 as uint8. Any other name writes the tensor's own dtype.
pub fn write_as(path: &Path, t: &HostTensor, dtype: &str) -> Result<(), NpyError> {
    use npyz::WriterBuilder;
    let err = |reason: String| NpyError::Write { path: path.display().to_string(), reason };
    let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
    let file = std::io::BufWriter::new(std::fs::File::create(path).map_err(|e| err(e.to_string()))?);
    macro_rules! put {
        ($ty:ty, $v:expr) => {{
            let mut w = npyz::WriteOptions::<$ty>::new()
                .default_dtype()
                .shape(&shape)
                .writer(file)
                .begin_nd()
                .map_err(|e| err(e.to_string()))?;
            w.extend($v).map_err(|e| err(e.to_string()))?;
            w.finish().map_err(|e| err(e.to_string()))
        }};
    }
    match (&t.data, dtype) {
        (TensorData::F32(v), "float64") => put!(f64, v.iter().map(|&x| x as f64)),
        (TensorData::F32(v), "float16") => put!(half::f16, v.iter().map(|&x| half::f16::from_f32(x))),
        // Integer outputs lie in their declared type's range: the kernels wrap to it.
        (d @ (TensorData::I32(_) | TensorData::I64(_)), name) if !matches!(name, "int32" | "int64" | "") => {
            let v: Vec<i64> = match d {
                TensorData::I32(v) => v.iter().map(|&x| x as i64).collect(),
                TensorData::I64(v) => v.clone(),
                _ => unreachable!("matched above"),
            };
            match name {
                "int8" | "int4" | "int2" => put!(i8, v.iter().map(|&x| x as i8)),
                "uint8" | "uint4" | "uint2" => put!(u8, v.iter().map(|&x| x as u8)),
                "int16" => put!(i16, v.iter().map(|&x| x as i16)),
                "uint16" => put!(u16, v.iter().map(|&x| x as u16)),
                "uint32" => put!(u32, v.iter().map(|&x| x as u32)),
                "uint64" => put!(u64, v.iter().map(|&x| x as u64)),
                _ => put!(i64, v.iter().copied()),
            }
        }
        (TensorData::F32(v), _) => put!(f32, v.iter().copied()),
        (TensorData::I64(v), _) => put!(i64, v.iter().copied()),
        (TensorData::I32(v), _) => put!(i32, v.iter().copied()),
        (TensorData::Bool(v), _) => put!(bool, v.iter().copied()),
    }
}
