//! TensorProto decoding: raw_data, typed fields and external data, with every size checked against what the
//! input can hold before anything is allocated.

use crate::proto::{data_type as dt, TensorProto};
use crate::ImportError;
use std::path::{Component, Path};
use wgslc_ir::{DType, Data, Tensor};

/// Maps an ONNX element type to a logical dtype, or says why it is unsupported.
pub fn dtype_from_onnx(t: i32) -> Result<DType, String> {
    Ok(match t {
        dt::FLOAT => DType::F32,
        dt::FLOAT16 => DType::F16,
        dt::DOUBLE => DType::F64,
        dt::INT64 => DType::I64,
        dt::INT32 => DType::I32,
        dt::INT16 => DType::I16,
        dt::INT8 => DType::I8,
        dt::UINT8 => DType::U8,
        dt::UINT16 => DType::U16,
        dt::UINT32 => DType::U32,
        dt::UINT64 => DType::U64,
        dt::BOOL => DType::Bool,
        dt::STRING => return Err("string tensors are not supported".into()),
        dt::BFLOAT16 => DType::BF16,
        dt::FLOAT8E4M3FN => DType::F8E4M3FN,
        dt::FLOAT8E4M3FNUZ => DType::F8E4M3FNUZ,
        dt::FLOAT8E5M2 => DType::F8E5M2,
        dt::FLOAT8E5M2FNUZ => DType::F8E5M2FNUZ,
        dt::UINT4 => DType::U4,
        dt::INT4 => DType::I4,
        dt::FLOAT4E2M1 => DType::F4E2M1,
        dt::UINT2 => DType::U2,
        dt::INT2 => DType::I2,
        14 | 15 => return Err("complex tensors are not supported".into()),
        dt::FLOAT8E8M0 => return Err("float8e8m0 tensors are not supported".into()),
        other => return Err(format!("unknown element type {other}")),
    })
}

/// The largest tensor wgslc will decode (elements): 2^32, well above WebGPU's 256 MiB buffers.
const MAX_ELEMENTS: usize = 1 << 32;

pub(crate) fn decode(t: &TensorProto, model_dir: Option<&Path>) -> Result<Tensor, ImportError> {
    let err = |reason: String| ImportError::Tensor { name: t.name.clone(), reason };
    let dtype = dtype_from_onnx(t.data_type).map_err(err)?;
    let mut shape = Vec::with_capacity(t.dims.len());
    let mut n: usize = 1;
    for &d in &t.dims {
        let d = usize::try_from(d).map_err(|_| err(format!("negative dimension {d}")))?;
        n = n.checked_mul(d).filter(|&n| n <= MAX_ELEMENTS).ok_or_else(|| err("too many elements".into()))?;
        shape.push(d);
    }
    let bytes_needed = (n * dtype.onnx_bits()).div_ceil(8);

    let external;
    let raw: Option<&[u8]> = if t.data_location == 1 || !t.external_data.is_empty() {
        external = read_external(t, model_dir, bytes_needed).map_err(err)?;
        Some(&external)
    } else if !t.raw_data.is_empty() || n == 0 {
        Some(&t.raw_data)
    } else {
        None
    };

    let data = if let Some(raw) = raw {
        if raw.len() != bytes_needed {
            return Err(err(format!("raw data holds {} bytes, the dims need {bytes_needed}", raw.len())));
        }
        Data::from_le_bytes(dtype, raw, n)
    } else if dtype.onnx_bits() < 8 {
        // 4-bit and 2-bit types: int32_data holds the packed bytes.
        let want = bytes_needed;
        if t.int32_data.len() != want {
            return Err(err(format!("holds {} packed bytes, the dims need {want}", t.int32_data.len())));
        }
        Data::from_le_bytes(dtype, &t.int32_data.iter().map(|&b| b as u8).collect::<Vec<_>>(), n)
    } else {
        let len_err = |have: usize| err(format!("holds {have} values, the dims need {n}"));
        match dtype {
            DType::F32 => {
                (t.float_data.len() == n).then(|| Data::F32(t.float_data.clone())).ok_or(len_err(t.float_data.len()))?
            }
            DType::F64 => (t.double_data.len() == n)
                .then(|| Data::F32(t.double_data.iter().map(|&x| x as f32).collect()))
                .ok_or(len_err(t.double_data.len()))?,
            DType::I64 => {
                (t.int64_data.len() == n).then(|| Data::I64(t.int64_data.clone())).ok_or(len_err(t.int64_data.len()))?
            }
            DType::U64 | DType::U32 => (t.uint64_data.len() == n)
                .then(|| Data::I64(t.uint64_data.iter().map(|&x| x as i64).collect()))
                .ok_or(len_err(t.uint64_data.len()))?,
            d if d.float_format().is_some() => {
                let f = d.float_format().expect("a narrow float");
                (t.int32_data.len() == n)
                    .then(|| Data::F32(t.int32_data.iter().map(|&x| f.decode(x as u32)).collect()))
                    .ok_or(len_err(t.int32_data.len()))?
            }
            DType::Bool => (t.int32_data.len() == n)
                .then(|| Data::Bool(t.int32_data.iter().map(|&x| x != 0).collect()))
                .ok_or(len_err(t.int32_data.len()))?,
            _ => (t.int32_data.len() == n)
                .then(|| Data::I64(t.int32_data.iter().map(|&x| x as i64).collect()))
                .ok_or(len_err(t.int32_data.len()))?,
        }
    };
    Ok(Tensor { dtype, shape, data })
}

/// Reads an external-data tensor. The location must be a relative path that stays inside the model's directory;
/// offset and length must lie inside the file.
fn read_external(t: &TensorProto, model_dir: Option<&Path>, bytes_needed: usize) -> Result<Vec<u8>, String> {
    let dir = model_dir.ok_or("external data needs the model's directory (load the model from a file)")?;
    let get = |k: &str| t.external_data.iter().find(|e| e.key == k).map(|e| e.value.as_str());
    let location = get("location").ok_or("external data without a 'location'")?;
    let rel = Path::new(location);
    if rel.is_absolute() || rel.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(format!("external data location '{location}' escapes the model's directory"));
    }
    let parse = |k: &str| -> Result<Option<u64>, String> {
        get(k).map(|v| v.parse::<u64>().map_err(|_| format!("external data '{k}' is not a number: '{v}'"))).transpose()
    };
    let offset = parse("offset")?.unwrap_or(0);
    let length = parse("length")?.unwrap_or(bytes_needed as u64);
    if length != bytes_needed as u64 {
        return Err(format!("external data length {length} differs from the {bytes_needed} bytes the dims need"));
    }
    let path = dir.join(rel);
    let file_len = std::fs::metadata(&path).map_err(|e| format!("cannot read external data '{location}': {e}"))?.len();
    if offset.checked_add(length).is_none_or(|end| end > file_len) {
        return Err(format!(
            "external data range {offset}..{} lies outside '{location}' ({file_len} bytes)",
            offset.saturating_add(length)
        ));
    }
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(&path).map_err(|e| format!("cannot open '{location}': {e}"))?;
    f.seek(SeekFrom::Start(offset)).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; length as usize];
    f.read_exact(&mut buf).map_err(|e| format!("cannot read '{location}': {e}"))?;
    Ok(buf)
}
