//! Compile ONNX models in `build.rs`: a wgslc artifact in `OUT_DIR` and a typed Rust module that runs it with
//! `wgslc-runtime`, as prost-build generates types from .proto files.
//!
//! ```no_run
//! // build.rs ([build-dependencies] wgslc-build)
//! wgslc_build::Model::new("models/mlp.onnx").name("Mlp").dim("batch", 4).embed(true).generate().unwrap();
//! ```
//! ```ignore
//! // main.rs ([dependencies] wgslc-runtime)
//! include!(concat!(env!("OUT_DIR"), "/mlp.rs"));
//! let mlp = Mlp::from_embedded(wgslc_runtime::Gpu::new()?)?;
//! let out = mlp.run(MlpInputs { x: vec![0.0; 4 * 16] })?;   // out.y: Vec<f32>, [4, 8]
//! ```
//!
//! The generated module holds a struct named as the model (`Mlp`) with `load(gpu)` (the artifact directory this
//! build wrote), `from_embedded(gpu)` with `embed(true)` (plan, kernels and weights compiled into the binary with
//! `include_bytes!`), `run(inputs)` over `MlpInputs`/`MlpOutputs` structs whose fields are the graph's inputs
//! and outputs by sanitized name, typed by dtype and documented with their shapes, and `generate` for a decoder
//! compiled with `kv_cache`. This crate pulls in the compiler only: no CLI parser, no GPU runtime.

use std::path::{Path, PathBuf};
use wgslc_artifact::{Dtype, Plan, StorageType, TensorSpec};
pub use wgslc_driver::{CompileOptions, WeightFormat};

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Compile(#[from] wgslc_driver::CompileError),
    #[error("OUT_DIR is not set: call generate() from a build script, or give out_dir()")]
    NoOutDir,
    #[error("cannot write '{path}': {source}")]
    Io { path: String, source: std::io::Error },
    #[error("'{0}': {1}")]
    Model(String, String),
}

/// One model to compile; see the crate docs.
#[derive(Clone, Debug)]
pub struct Model {
    path: PathBuf,
    name: Option<String>,
    opts: CompileOptions,
    out_dir: Option<PathBuf>,
    embed: bool,
}

/// What [`Model::generate`] wrote.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The struct's name in the module.
    pub struct_name: String,
    /// The artifact directory (under `OUT_DIR/wgslc/`).
    pub artifact_dir: PathBuf,
    /// The Rust module to `include!` (`OUT_DIR/<snake_case name>.rs`).
    pub module: PathBuf,
    pub plan: Plan,
}

impl Model {
    pub fn new(path: impl Into<PathBuf>) -> Model {
        Model { path: path.into(), name: None, opts: CompileOptions::default(), out_dir: None, embed: false }
    }

    /// The struct's name (default: the model file's stem in CamelCase); the module file is its snake_case.
    pub fn name(mut self, name: &str) -> Model {
        self.name = Some(name.to_string());
        self
    }

    /// Binds a named symbolic dim (`--dim NAME=N`).
    pub fn dim(mut self, name: &str, value: usize) -> Model {
        self.opts.dims.insert(name.to_string(), value);
        self
    }

    /// Lets a named symbolic dim take any value in `min..=max` at run time (`--dim NAME=MIN..MAX`): `run` takes
    /// inputs of any length in the range (the length of an input with one ranged axis gives its shape).
    pub fn dim_range(mut self, name: &str, min: usize, max: usize) -> Model {
        self.opts.ranges.push(wgslc_driver::DimRange { name: name.to_string(), min, max });
        self
    }

    /// Sets an input's whole shape (`--shape INPUT=AxB`).
    pub fn shape(mut self, input: &str, dims: &[usize]) -> Model {
        self.opts.shapes.insert(input.to_string(), dims.to_vec());
        self
    }

    /// Compiles a decoder for generation with a KV cache of `capacity` tokens (`--kv-cache`); the struct gets a
    /// `generate` method.
    pub fn kv_cache(mut self, capacity: usize, prefill_chunk: usize) -> Model {
        let chunk = prefill_chunk.min(capacity.saturating_sub(1)).max(1);
        self.opts.kv_cache = Some(wgslc_driver::KvCache { capacity, chunk, state: vec![], fixed: Default::default() });
        self
    }

    /// Every other compile option (limits, fusion modes…); bindings given before are kept.
    /// Stores the products' weights and embedding tables as `format` (`wgslc compile --weights`), in blocks of
    /// `block` elements along K for the quantized formats (`None`: 32).
    pub fn weights(mut self, format: WeightFormat, block: Option<usize>) -> Model {
        self.opts.weights = format;
        self.opts.weight_block = block;
        self
    }

    pub fn options(mut self, f: impl FnOnce(&mut CompileOptions)) -> Model {
        f(&mut self.opts);
        self
    }

    /// Also generate `from_embedded`, which compiles the artifact into the binary (for models of a few MB).
    pub fn embed(mut self, yes: bool) -> Model {
        self.embed = yes;
        self
    }

    /// Where to write (default: `OUT_DIR`).
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Model {
        self.out_dir = Some(dir.into());
        self
    }

    /// Compiles the model (`.onnx` or `.pt2`), writes the module and prints `cargo:rerun-if-changed` for the
    /// model and its external data files.
    pub fn generate(self) -> Result<Generated, BuildError> {
        let out = match &self.out_dir {
            Some(d) => d.clone(),
            None => PathBuf::from(std::env::var_os("OUT_DIR").ok_or(BuildError::NoOutDir)?),
        };
        let shown = self.path.display().to_string();
        let bytes = std::fs::read(&self.path).map_err(|e| BuildError::Model(shown.clone(), e.to_string()))?;
        println!("cargo:rerun-if-changed={}", self.path.display());
        let dir = self.path.parent().unwrap_or(Path::new("."));
        // A .pt2 holds its weights; an ONNX model may keep them in files beside it.
        if self.path.extension().is_none_or(|e| e != "pt2") {
            let files =
                wgslc_onnx::external_data_files(&bytes).map_err(|e| BuildError::Model(shown.clone(), e.to_string()))?;
            for f in files {
                println!("cargo:rerun-if-changed={}", dir.join(f).display());
            }
        }
        let stem = self.path.file_stem().and_then(|s| s.to_str()).unwrap_or("model");
        let struct_name = camel(self.name.as_deref().unwrap_or(stem));
        let snake = snake(&struct_name);
        let artifact_dir = out.join("wgslc").join(&snake);
        wgslc_driver::compile(&self.path, &artifact_dir, &self.opts)?;
        let plan = Plan::read(&artifact_dir).map_err(|e| BuildError::Model(shown.clone(), e.to_string()))?;
        let artifact_dir = artifact_dir.canonicalize().unwrap_or(artifact_dir);
        let code = module(&struct_name, &shown, &artifact_dir, &plan, self.embed);
        let module = out.join(format!("{snake}.rs"));
        std::fs::write(&module, code)
            .map_err(|source| BuildError::Io { path: module.display().to_string(), source })?;
        Ok(Generated { struct_name, artifact_dir, module, plan })
    }
}

/// `my-model_v2` → `MyModelV2`; a leading digit gets `M`.
fn camel(s: &str) -> String {
    let mut out = String::new();
    let mut up = true;
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(if up { c.to_ascii_uppercase() } else { c });
            up = false;
        } else {
            up = true;
        }
    }
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, 'M');
    }
    out
}

/// `MyModelV2` → `my_model_v2`.
fn snake(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

const KEYWORDS: &[&str] = &[
    "as", "async", "await", "box", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern", "false",
    "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return",
    "self", "static", "struct", "super", "trait", "true", "try", "type", "unsafe", "use", "where", "while", "yield",
];

/// Field names for tensor names: lowercase, `_` for anything else, unique (`_2`, `_3`…), never a keyword.
fn fields(names: &[String]) -> Vec<String> {
    let mut used: Vec<String> = Vec::new();
    names
        .iter()
        .map(|n| {
            let mut f: String = n
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
                .collect::<String>()
                .split('_')
                .filter(|p| !p.is_empty())
                .collect::<Vec<_>>()
                .join("_");
            if f.is_empty() || f.starts_with(|c: char| c.is_ascii_digit()) {
                f.insert_str(0, "t_");
            }
            if KEYWORDS.contains(&f.as_str()) {
                f.push('_');
            }
            let base = f.clone();
            let mut k = 2;
            while used.contains(&f) {
                f = format!("{base}_{k}");
                k += 1;
            }
            used.push(f.clone());
            f
        })
        .collect()
}

/// The Rust element type and `TensorData` variant for a tensor, as the runtime converts it.
fn rust_type(t: &TensorSpec) -> (&'static str, &'static str) {
    match t.storage {
        StorageType::F32 => ("f32", "F32"),
        StorageType::I32 if t.dtype == Dtype::Int64 => ("i64", "I64"),
        StorageType::I32 => ("i32", "I32"),
        StorageType::U32 => ("bool", "Bool"),
    }
}

fn lit(s: &str) -> String {
    format!("{s:?}")
}

fn module(name: &str, model: &str, dir: &Path, plan: &Plan, embed: bool) -> String {
    let rt = "::wgslc_runtime";
    let dir_s = dir.display().to_string();
    let file = |rel: &str| lit(&dir.join(rel).display().to_string());
    let ins = fields(&plan.inputs.iter().map(|t| t.name.clone()).collect::<Vec<_>>());
    let outs = fields(&plan.outputs.iter().map(|t| t.name.clone()).collect::<Vec<_>>());
    let doc = |t: &TensorSpec| {
        let ranged = t.ranged.iter().map(|a| {
            let d = &plan.ranges.as_ref().expect("ranged axes come with ranges").dims[a.dim];
            format!(" (axis {}: {}·{} for {} in {}..={})", a.axis, a.factor, d.name, d.name, d.min, d.max)
        });
        format!("`{}`: {} {:?}{}, row-major", t.name, t.dtype, t.shape, ranged.collect::<String>())
    };
    let mut s = format!(
        "// Generated by wgslc-build from {model:?}; rewritten on every build, do not edit.\n\n\
         /// {model:?} compiled by wgslc: {} kernels in {} dispatches.\n\
         pub struct {name} {{\n    session: {rt}::Session,\n}}\n\n",
        plan.kernels.len(),
        plan.dispatches.len()
    );
    for (what, specs, names) in [("Inputs", &plan.inputs, &ins), ("Outputs", &plan.outputs, &outs)] {
        s += &format!(
            "/// The {} of [`{name}`], by graph name.\n#[derive(Clone, Debug, Default, PartialEq)]\npub struct {name}{what} {{\n",
            what.to_lowercase()
        );
        for (t, f) in specs.iter().zip(names) {
            s += &format!("    /// {}\n    pub {f}: Vec<{}>,\n", doc(t), rust_type(t).0);
        }
        s += "}\n\n";
    }
    s += &format!(
        "impl {name} {{\n    /// The artifact directory the build script wrote.\n    pub const ARTIFACT_DIR: &'static str = {};\n\n\
         \x20   /// Loads the artifact from [`Self::ARTIFACT_DIR`].\n\
         \x20   pub fn load(gpu: ::std::sync::Arc<{rt}::Gpu>) -> Result<Self, {rt}::RuntimeError> {{\n\
         \x20       Ok(Self {{ session: {rt}::Session::load_with(::std::path::Path::new(Self::ARTIFACT_DIR), gpu)? }})\n    }}\n\n",
        lit(&dir_s)
    );
    if embed {
        let kernels: Vec<String> = plan
            .kernels
            .iter()
            .flat_map(|k| std::iter::once(&k.wgsl).chain(&k.subgroups))
            .map(|w| format!("            ({}, include_str!({})),\n", lit(w), file(w)))
            .collect();
        s += &format!(
            "    /// Loads the artifact compiled into this binary.\n\
             \x20   pub fn from_embedded(gpu: ::std::sync::Arc<{rt}::Gpu>) -> Result<Self, {rt}::RuntimeError> {{\n\
             \x20       const PLAN: &str = include_str!({});\n\
             \x20       const KERNELS: &[(&str, &str)] = &[\n{}        ];\n\
             \x20       static WEIGHTS: &[u8] = include_bytes!({});\n\
             \x20       Ok(Self {{ session: {rt}::Session::from_parts(PLAN, KERNELS, WEIGHTS, gpu)? }})\n    }}\n\n",
            file("plan.json"),
            kernels.concat(),
            file("weights.safetensors")
        );
    }
    s += &format!(
        "    /// The loaded session (inputs, outputs, plan, profiling).\n    pub fn session(&self) -> &{rt}::Session {{\n        &self.session\n    }}\n\n\
         \x20   /// Runs the model once.\n\
         \x20   pub fn run(&self, inputs: {name}Inputs) -> Result<{name}Outputs, {rt}::RuntimeError> {{\n\
         \x20       let tensors = vec![\n"
    );
    for (t, f) in plan.inputs.iter().zip(&ins) {
        // One ranged axis: its extent follows from the data's length (the runtime checks it against the range).
        let shape = match t.ranged[..] {
            [a] => {
                let rest: usize = t.shape.iter().enumerate().filter(|&(i, _)| i != a.axis).map(|(_, &e)| e).product();
                let dims: Vec<String> = (0..t.shape.len())
                    .map(|i| match i == a.axis {
                        true if rest == 1 => format!("inputs.{f}.len()"),
                        true => format!("inputs.{f}.len() / {rest}"),
                        false => t.shape[i].to_string(),
                    })
                    .collect();
                format!("vec![{}]", dims.join(", "))
            }
            _ => format!("vec!{:?}", t.shape),
        };
        s += &format!(
            "            {rt}::HostTensor {{ shape: {shape}, data: {rt}::TensorData::{}(inputs.{f}) }},\n",
            rust_type(t).1
        );
    }
    s += "        ];\n        let mut out = self.session.run(&tensors)?.into_iter();\n";
    s += &format!("        Ok({name}Outputs {{\n");
    for (t, f) in plan.outputs.iter().zip(&outs) {
        s += &format!(
            "            {f}: match out.next().map(|t| t.data) {{\n                Some({rt}::TensorData::{}(v)) => v,\n                other => return Err({rt}::RuntimeError::Invalid(format!(\"output {}: {{other:?}}\"))),\n            }},\n",
            rust_type(t).1,
            t.name.escape_default().to_string().replace('{', "{{").replace('}', "}}")
        );
    }
    s += "        })\n    }\n";
    if plan.decoder.is_some() {
        s += &format!(
            "\n    /// Greedy generation with the KV cache on the GPU (the model was compiled with `kv_cache`): the prompt \
             and the new tokens.\n\
             \x20   pub fn generate(&self, prompt: &[i64], opts: &{rt}::GenerateOptions) -> Result<{rt}::Generation, {rt}::RuntimeError> {{\n\
             \x20       self.session.generate(prompt, opts)\n    }}\n"
        );
    }
    s += "}\n";
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_rust_identifiers() {
        assert_eq!(camel("my-model_v2"), "MyModelV2");
        assert_eq!(camel("2nd"), "M2nd");
        assert_eq!(snake("MyModelV2"), "my_model_v2");
        let names: Vec<String> =
            ["input_ids", "past_key_values.0.key", "Past-Key-Values.0.Key", "type", "0", ""].map(String::from).into();
        assert_eq!(
            fields(&names),
            ["input_ids", "past_key_values_0_key", "past_key_values_0_key_2", "type_", "t_0", "t_"]
        );
    }
}
