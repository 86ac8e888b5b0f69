//! Reading a `.pt2` archive: finding the program and its payloads in each layout torch has written, and
//! decoding tensors. Nothing is extracted or written: entries are read by name from the memory-mapped file (an
//! uncompressed entry, as torch writes them, is used in place), so no entry name can escape anywhere.
//!
//! Layouts:
//! - torch ≥ 2.9: `<root>/archive_format` = `pt2`, `<root>/models/<model>.json`, weights as raw files
//!   `<root>/data/weights/weight_<i>` indexed by `<root>/data/weights/<model>_weights_config.json` (a
//!   `PayloadConfig`; tied weights name the same file), constants likewise under `data/constants/`.
//! - torch 2.8: the same, with the weights and constants as one `torch.save` pickle each,
//!   `<root>/data/weights/<model>.pt` and `<root>/data/constants/<model>.pt`.
//! - torch 2.6/2.7: a flat ZIP of `serialized_exported_program.json`, `serialized_state_dict.pt` and
//!   `serialized_constants.pt` (pickles).

use crate::pickle;
use crate::schema::{PayloadConfig, SymInt, TensorMeta};
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{Cursor, Read};
use wgslc_ir::{DType, Data, Tensor};

/// The most an entry may inflate to (a compressed entry larger than this is refused before it is read: zip bombs).
const MAX_INFLATED: u64 = 8 << 30;

/// A ZIP over bytes that outlive it.
pub struct Zip<'a> {
    bytes: &'a [u8],
    archive: zip::ZipArchive<Cursor<&'a [u8]>>,
}

impl<'a> Zip<'a> {
    pub fn new(bytes: &'a [u8]) -> Result<Zip<'a>, String> {
        let archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| format!("not a ZIP archive: {e}"))?;
        Ok(Zip { bytes, archive })
    }

    pub fn names(&self) -> Vec<String> {
        self.archive.file_names().filter_map(Result::ok).map(|n| n.into_owned()).collect()
    }

    pub fn has(&self, name: &str) -> bool {
        self.archive.index_for_name(name).is_some()
    }

    /// An entry's bytes: borrowed from the archive when stored uncompressed, inflated (bounded) otherwise.
    pub fn read(&mut self, name: &str) -> Result<Cow<'a, [u8]>, String> {
        let bytes = self.bytes;
        let mut f = self.archive.by_name(name).map_err(|e| format!("entry '{name}': {e}"))?;
        let size = f.size();
        if f.compression() == zip::CompressionMethod::Stored {
            let start = f.data_start().ok_or_else(|| format!("entry '{name}': no data offset"))?;
            let range = usize::try_from(start)
                .ok()
                .zip(usize::try_from(size).ok())
                .and_then(|(s, n)| Some(s..s.checked_add(n)?))
                .filter(|r| r.end <= bytes.len())
                .ok_or_else(|| format!("entry '{name}' lies outside the archive (truncated file?)"))?;
            return Ok(Cow::Borrowed(&bytes[range]));
        }
        if size > MAX_INFLATED {
            return Err(format!("entry '{name}' would inflate to {size} bytes (more than {MAX_INFLATED})"));
        }
        let mut out = Vec::with_capacity(size.min(1 << 26) as usize);
        (&mut f).take(size + 1).read_to_end(&mut out).map_err(|e| format!("entry '{name}': {e}"))?;
        if out.len() as u64 != size {
            return Err(format!("entry '{name}' inflates to {} bytes, its header says {size}", out.len()));
        }
        Ok(Cow::Owned(out))
    }

    pub fn read_string(&mut self, name: &str) -> Result<String, String> {
        let b = self.read(name)?;
        String::from_utf8(b.into_owned()).map_err(|_| format!("entry '{name}' is not UTF-8"))
    }
}

/// A weight, buffer or constant: a strided view of one stored tensor. `storage` names what it views, so tied
/// weights (two names, one storage, the same view) become one value.
#[derive(Clone, Debug)]
pub struct Payload {
    pub storage: String,
    pub dtype: DType,
    pub sizes: Vec<i64>,
    pub strides: Vec<i64>,
    pub offset: i64,
}

/// What a `.pt2` holds: the program's JSON, its payloads by name (parameter, buffer and constant FQNs), and the
/// storages' raw bytes.
pub struct Contents<'a> {
    pub program: Cow<'a, [u8]>,
    pub payloads: HashMap<String, Payload>,
    pub storages: HashMap<String, Cow<'a, [u8]>>,
    /// Which layout was read, for messages: "torch ≥ 2.9", "torch 2.8", "torch 2.6/2.7".
    pub layout: &'static str,
}

pub fn open(bytes: &[u8]) -> Result<Contents<'_>, String> {
    let mut z = Zip::new(bytes)?;
    let names = z.names();
    if let Some(legacy) = names.iter().find(|n| n.ends_with("serialized_exported_program.json")) {
        let prefix = legacy.trim_end_matches("serialized_exported_program.json").to_string();
        let program = z.read(legacy)?;
        let mut c = Contents { program, payloads: HashMap::new(), storages: HashMap::new(), layout: "torch 2.6/2.7" };
        for file in ["serialized_state_dict.pt", "serialized_constants.pt"] {
            let name = format!("{prefix}{file}");
            if z.has(&name) {
                let data = z.read(&name)?;
                read_pickled(&mut c, &name, data)?;
            }
        }
        return Ok(c);
    }
    // torch ≥ 2.8: `<root>/models/<model>.json`.
    let models: Vec<&String> = names
        .iter()
        .filter(|n| n.ends_with(".json") && n.rsplit('/').nth(1) == Some("models") && !n.contains("/models/.."))
        .collect();
    let model_entry = match models.as_slice() {
        [] => {
            return Err("no program in the archive (neither models/<name>.json nor serialized_exported_program.json): \
                 not a torch.export .pt2?"
                .into())
        }
        [one] => (*one).clone(),
        many => match many.iter().find(|n| n.ends_with("/models/model.json")) {
            Some(m) => (*m).clone(),
            None => {
                let list: Vec<&str> = many.iter().map(|s| s.as_str()).collect();
                return Err(format!("the archive holds several programs ({}); wgslc reads one", list.join(", ")));
            }
        },
    };
    let root = model_entry[..model_entry.len() - model_entry.rsplit('/').next().unwrap().len()]
        .trim_end_matches("models/")
        .to_string();
    let model = model_entry.rsplit('/').next().unwrap().trim_end_matches(".json").to_string();
    let format = format!("{root}archive_format");
    if z.has(&format) {
        let f = z.read_string(&format)?;
        if f.trim() != "pt2" {
            return Err(format!("'{format}' says '{}', not 'pt2'", f.trim()));
        }
    }
    let program = z.read(&model_entry)?;
    let mut c = Contents { program, payloads: HashMap::new(), storages: HashMap::new(), layout: "torch ≥ 2.9" };
    for dir in ["weights", "constants"] {
        let legacy = format!("{root}data/{dir}/{model}.pt");
        let config = format!("{root}data/{dir}/{model}_{dir}_config.json");
        if z.has(&config) {
            let text = z.read_string(&config)?;
            let cfg: PayloadConfig =
                serde_json::from_str(&text).map_err(|e| format!("entry '{config}' is not a payload config: {e}"))?;
            for (fqn, meta) in cfg.config {
                if meta.use_pickle {
                    return Err(format!(
                        "'{fqn}' is a pickled tensor subclass ('{}'); wgslc reads plain tensors",
                        meta.path_name
                    ));
                }
                let tm = meta.tensor_meta.ok_or_else(|| format!("'{fqn}' has no tensor_meta in '{config}'"))?;
                let file = format!("{root}data/{dir}/{}", meta.path_name);
                if !c.storages.contains_key(&file) {
                    let data = z.read(&file)?;
                    c.storages.insert(file.clone(), data);
                }
                c.payloads.insert(fqn.clone(), payload_of(&fqn, &tm, file)?);
            }
        } else if z.has(&legacy) {
            c.layout = "torch 2.8";
            let data = z.read(&legacy)?;
            read_pickled(&mut c, &legacy, data)?;
        }
    }
    Ok(c)
}

fn literal(s: &SymInt, what: &str, fqn: &str) -> Result<i64, String> {
    match s {
        SymInt::AsInt(v) => Ok(*v),
        SymInt::AsExpr(e) => Err(format!("'{fqn}' has a symbolic {what} ('{}')", e.expr_str)),
    }
}

fn payload_of(fqn: &str, tm: &TensorMeta, storage: String) -> Result<Payload, String> {
    let dtype = crate::dtype_of(tm.dtype).map_err(|e| format!("'{fqn}': {e}"))?;
    let sizes = tm.sizes.iter().map(|s| literal(s, "size", fqn)).collect::<Result<Vec<_>, _>>()?;
    let mut strides = tm.strides.iter().map(|s| literal(s, "stride", fqn)).collect::<Result<Vec<_>, _>>()?;
    if strides.is_empty() && !sizes.is_empty() {
        strides = contiguous(&sizes);
    }
    let offset = literal(&tm.storage_offset, "storage offset", fqn)?;
    Ok(Payload { storage, dtype, sizes, strides, offset })
}

fn contiguous(sizes: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; sizes.len()];
    for d in (0..sizes.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1].saturating_mul(sizes[d + 1].max(1));
    }
    s
}

/// A `torch.save` file (itself a ZIP) inside the archive: the pickle names each tensor's storage and view.
fn read_pickled<'a>(c: &mut Contents<'a>, entry: &str, data: Cow<'a, [u8]>) -> Result<(), String> {
    if data.is_empty() {
        return Ok(());
    }
    let found = match data {
        Cow::Borrowed(b) => pickled(entry, b)?,
        // A compressed outer entry: what is read from it is copied out before it is dropped.
        Cow::Owned(v) => pickled(entry, &v)?
            .into_iter()
            .map(|(fqn, p, bytes)| (fqn, p, bytes.map(|b| Cow::Owned(b.into_owned()))))
            .collect(),
    };
    for (fqn, p, bytes) in found {
        if let Some(b) = bytes {
            c.storages.insert(p.storage.clone(), b);
        }
        c.payloads.insert(fqn, p);
    }
    Ok(())
}

/// Each tensor of a `torch.save` file with its storage's bytes (the first time that storage is named).
#[allow(clippy::type_complexity)]
fn pickled<'b>(entry: &str, data: &'b [u8]) -> Result<Vec<(String, Payload, Option<Cow<'b, [u8]>>)>, String> {
    let mut inner = Zip::new(data).map_err(|e| format!("'{entry}': {e}"))?;
    let names = inner.names();
    let pkl = names
        .iter()
        .find(|n| n.ends_with("data.pkl"))
        .ok_or_else(|| format!("'{entry}' holds no data.pkl (not a torch.save file)"))?
        .clone();
    let prefix = pkl.trim_end_matches("data.pkl").to_string();
    let program = inner.read(&pkl)?;
    let value = pickle::load(&program).map_err(|e| format!("'{entry}': {e}"))?;
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (fqn, t) in pickle::tensors(&value).map_err(|e| format!("'{entry}': {e}"))? {
        let dtype =
            storage_dtype(&t.class).ok_or_else(|| format!("'{fqn}' in '{entry}': storage type '{}'", t.class))?;
        let file = format!("{prefix}data/{}", t.key);
        let key = format!("{entry}/{file}");
        let bytes = if seen.insert(key.clone()) {
            Some(inner.read(&file).map_err(|e| format!("'{entry}': {e}"))?)
        } else {
            None
        };
        out.push((fqn, Payload { storage: key, dtype, sizes: t.size, strides: t.stride, offset: t.offset }, bytes));
    }
    Ok(out)
}

/// torch's legacy storage class names.
fn storage_dtype(class: &str) -> Option<DType> {
    Some(match class {
        "FloatStorage" => DType::F32,
        "DoubleStorage" => DType::F64,
        "HalfStorage" => DType::F16,
        "BFloat16Storage" => DType::BF16,
        "LongStorage" => DType::I64,
        "IntStorage" => DType::I32,
        "ShortStorage" => DType::I16,
        "CharStorage" => DType::I8,
        "ByteStorage" => DType::U8,
        "BoolStorage" => DType::Bool,
        _ => return None,
    })
}

/// Bytes per element as torch stores them (every type torch saves is at least a byte wide).
pub fn element_size(d: DType) -> Option<usize> {
    let bits = d.onnx_bits();
    (bits >= 8).then_some(bits / 8)
}

/// The tensor a payload views: `as_strided(storage, sizes, strides, offset)`, every index checked against the
/// storage's length.
pub fn decode(p: &Payload, storage: &[u8]) -> Result<Tensor, String> {
    let es = element_size(p.dtype).ok_or_else(|| format!("{} weights are not supported", p.dtype))?;
    let n_storage = storage.len() / es;
    if p.sizes.iter().any(|&s| s < 0) || p.strides.len() != p.sizes.len() || p.offset < 0 {
        return Err(format!("invalid sizes {:?} / strides {:?} / offset {}", p.sizes, p.strides, p.offset));
    }
    let shape: Vec<usize> = p.sizes.iter().map(|&s| s as usize).collect();
    let numel =
        shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or_else(|| "the size overflows".to_string())?;
    if numel == 0 {
        return Ok(Tensor { dtype: p.dtype, shape, data: Data::from_le_bytes(p.dtype, &[], 0) });
    }
    // The last element read: offset + Σ (size − 1) · stride (negative strides are not written by torch.save).
    let mut last = p.offset as i128;
    for (&s, &st) in p.sizes.iter().zip(&p.strides) {
        if st < 0 {
            return Err("a negative stride".into());
        }
        last += (s as i128 - 1) * st as i128;
    }
    if last >= n_storage as i128 {
        return Err(format!(
            "the view {:?} (strides {:?}, offset {}) reads element {last} of a storage of {n_storage} \
             (truncated weights?)",
            p.sizes, p.strides, p.offset
        ));
    }
    let contiguous_view = p.strides == contiguous(&p.sizes);
    let start = p.offset as usize;
    let data = if contiguous_view {
        Data::from_le_bytes(p.dtype, &storage[start * es..(start + numel) * es], numel)
    } else {
        let span = last as usize + 1;
        let flat = Data::from_le_bytes(p.dtype, &storage[..span * es], span);
        let idx = wgslc_ir::strided_indices(&shape, p.offset, &p.strides);
        flat.gather(&idx)
    };
    Ok(Tensor { dtype: p.dtype, shape, data })
}
