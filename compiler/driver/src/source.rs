//! The model file as the stages that import it more than once read it (`--kv-cache`: each step at its shapes, and
//! the cache-layout proof at its probes' shapes): its signature, and its import at given shapes, whichever
//! frontend reads it.

use crate::CompileError;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use wgslc_ir::{Graph, ImportOptions, Signature};

pub(crate) enum Source {
    Onnx {
        proto: Box<wgslc_onnx::proto::ModelProto>,
        dir: PathBuf,
        /// The model with its large weights as unknown inputs ([`Source::import_opaque`]), made once.
        opaque: Box<OnceLock<(wgslc_onnx::proto::ModelProto, HashSet<String>)>>,
    },
    Pt2 {
        path: PathBuf,
    },
}

impl Source {
    pub(crate) fn open(model: &Path) -> Result<Source, CompileError> {
        match model.extension().and_then(|e| e.to_str()) {
            Some("onnx") => {
                let bytes = std::fs::read(model)
                    .map_err(|source| wgslc_onnx::ImportError::Io { path: model.to_owned(), source })?;
                let proto = wgslc_onnx::decode_model(&bytes)?;
                let dir = model.parent().map(Path::to_path_buf).unwrap_or_else(|| ".".into());
                Ok(Source::Onnx { proto: Box::new(proto), dir, opaque: Box::default() })
            }
            Some("pt2") => Ok(Source::Pt2 { path: model.to_owned() }),
            _ => Err(CompileError::Format(model.display().to_string())),
        }
    }

    /// The model's run-time inputs (each dim its size, or `None` where symbolic and not bound in `dims`) and
    /// outputs.
    pub(crate) fn signature(&self, dims: &HashMap<String, usize>) -> Result<Signature, CompileError> {
        Ok(match self {
            Source::Onnx { proto, .. } => wgslc_onnx::signature(proto, dims)?,
            Source::Pt2 { path } => wgslc_pt2::signature_file(path)?,
        })
    }

    /// onnxruntime-genai's convention: a model beside its `genai_config.json` declares the caches' head size as a
    /// symbolic dim (`[batch_size, kv_heads, past_sequence_length, kv_cache_dim]`) and gives it in the config as
    /// `model.decoder.head_size`. Returns that dim's binding where the config gives it and `dims` does not.
    pub(crate) fn genai_dims(&self, dims: &HashMap<String, usize>) -> HashMap<String, usize> {
        let Source::Onnx { proto, dir, .. } = self else { return HashMap::new() };
        let Ok(text) = std::fs::read_to_string(dir.join("genai_config.json")) else { return HashMap::new() };
        let config: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let decoder = &config["model"]["decoder"];
        let Some(head) = decoder["head_size"].as_u64() else { return HashMap::new() };
        let pattern = decoder["inputs"]["past_key_names"].as_str().unwrap_or("past_key_values.%d.key");
        let prefix = pattern.split("%d").next().unwrap_or_default();
        let graph_inputs = proto.graph.as_ref().map(|g| g.input.as_slice()).unwrap_or_default();
        let mut bound = HashMap::new();
        for input in graph_inputs.iter().filter(|i| !prefix.is_empty() && i.name.starts_with(prefix)) {
            if let Some(Some(name)) = wgslc_onnx::dim_names(proto, &input.name).last() {
                if !dims.contains_key(name) {
                    bound.insert(name.clone(), head as usize);
                }
            }
        }
        bound
    }

    pub(crate) fn import(&self, io: &ImportOptions) -> Result<Graph, CompileError> {
        Ok(match self {
            Source::Onnx { proto, dir, .. } => wgslc_onnx::import_model(proto, Some(dir), io)?,
            Source::Pt2 { path } => wgslc_pt2::import_file(path, io)?,
        })
    }

    /// The names of the weights [`Source::import_opaque`] leaves out: every weight of `min_elements` or more that
    /// only products and lookups read (none for a `.pt2`, which is imported whole: its weights are memory-mapped,
    /// not copied).
    pub(crate) fn opaque_names(&self, min_elements: u64) -> HashSet<String> {
        match self {
            Source::Onnx { proto, opaque, .. } => Self::opaque_model(proto, opaque, min_elements).1.clone(),
            Source::Pt2 { .. } => HashSet::new(),
        }
    }

    /// The import with the weights of [`Source::opaque_names`] as run-time inputs of their shapes (what the
    /// cache-layout proof needs: nothing it computes reads them).
    pub(crate) fn import_opaque(&self, io: &ImportOptions, min_elements: u64) -> Result<Graph, CompileError> {
        match self {
            Source::Onnx { proto, dir, opaque } => {
                let (p, _) = Self::opaque_model(proto, opaque, min_elements);
                Ok(wgslc_onnx::import_model(p, Some(dir), io)?)
            }
            Source::Pt2 { path } => Ok(wgslc_pt2::import_file(path, io)?),
        }
    }

    fn opaque_model<'a>(
        proto: &wgslc_onnx::proto::ModelProto,
        opaque: &'a OnceLock<(wgslc_onnx::proto::ModelProto, HashSet<String>)>,
        min_elements: u64,
    ) -> &'a (wgslc_onnx::proto::ModelProto, HashSet<String>) {
        opaque.get_or_init(|| {
            let mut p = proto.clone();
            let names = wgslc_onnx::without_large_weights(&mut p, min_elements);
            (p, names)
        })
    }
}
