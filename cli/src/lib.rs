//! The wgslc library facade: what the `wgslc` binary and `build.rs` scripts call.
//!
//! ```no_run
//! let opts = wgslc::CompileOptions::default();
//! let summary = wgslc::compile(std::path::Path::new("model.onnx"), std::path::Path::new("out"), &opts)?;
//! println!("{} kernels", summary.kernels);
//! # Ok::<(), wgslc::CompileError>(())
//! ```

pub mod conformance;
pub mod npy;

use std::collections::HashMap;
use std::path::Path;

pub use wgslc_artifact as artifact;
pub use wgslc_emit::Limits;
pub use wgslc_runtime as runtime;

/// Everything that can stop a compile, by layer.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error(transparent)]
    Import(#[from] wgslc_onnx::ImportError),
    #[error(transparent)]
    Pass(#[from] wgslc_passes::PassError),
    #[error(transparent)]
    Emit(#[from] wgslc_emit::EmitError),
    #[error("'{0}': unknown model format (expected .onnx)")]
    Format(String),
    #[error("unknown pass '{0}' for --dump-after (passes: {1})")]
    UnknownPass(String, String),
}

#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    /// Values for named symbolic dims (`--dim NAME=N`).
    pub dims: HashMap<String, usize>,
    /// Whole input shapes (`--shape INPUT=AxBxC`).
    pub shapes: HashMap<String, Vec<usize>>,
    /// Inputs specialized to constant values (`--const INPUT=FILE.npy`).
    pub constants: HashMap<String, wgslc_ir::Tensor>,
    /// The device limits to compile for; WebGPU's defaults unless set.
    pub limits: Limits,
    /// `--no-fuse`: one kernel per op, for comparison and debugging.
    pub no_fuse: bool,
    /// `--no-reuse`: one buffer per intermediate instead of the liveness-based plan.
    pub no_reuse: bool,
    /// `--memory-budget RATIO`: how much activation memory, as a multiple of the lower bound, the planner may spend
    /// so that kernels bind their inputs read-only (faster on NVIDIA GPUs). `None`: 1.10.
    pub memory_budget: Option<f64>,
    /// `--attention fused|unfused`: whether Q·Kᵀ → softmax → ·V becomes one kernel (the default).
    pub attention: wgslc_passes::AttentionMode,
    /// `--inverted-residual fused|unfused`: whether MobileNet's expansion → depthwise (→ projection) chains become
    /// one kernel each (the default).
    pub inverted_residual: wgslc_passes::InvertedResidualMode,
}

/// What a compile produced.
#[derive(Clone, Debug)]
pub struct Summary {
    /// ONNX nodes in the model file.
    pub source_nodes: usize,
    /// Kernels written (each dispatched once).
    pub kernels: usize,
    pub plan: artifact::Plan,
    pub report: wgslc_emit::report::Report,
}

/// Imports a model file into the IR.
pub fn import(model: &Path, opts: &CompileOptions) -> Result<wgslc_ir::Graph, CompileError> {
    match model.extension().and_then(|e| e.to_str()) {
        Some("onnx") => Ok(wgslc_onnx::import_file(
            model,
            &wgslc_onnx::ImportOptions {
                dims: opts.dims.clone(),
                shapes: opts.shapes.clone(),
                constants: opts.constants.clone(),
            },
        )?),
        _ => Err(CompileError::Format(model.display().to_string())),
    }
}

/// Compiles a model into an artifact directory: import, graph passes, schedule, memory plan, emission (every
/// kernel naga-validated and checked against the limits), then plan.json, kernels/ and weights.safetensors.
pub fn compile(model: &Path, out_dir: &Path, opts: &CompileOptions) -> Result<Summary, CompileError> {
    let mut g = import(model, opts)?;
    let source_nodes = count_source_nodes(model).unwrap_or_else(|| g.num_nodes());
    wgslc_passes::run_pipeline_with(&mut g, None, !opts.no_fuse)?;
    let fuse = wgslc_passes::FuseOptions {
        fuse: !opts.no_fuse,
        max_storage_buffers: opts.limits.max_storage_buffers_per_shader_stage as usize,
        attention: opts.attention,
        inverted_residual: opts.inverted_residual,
        ..Default::default()
    };
    let sched = wgslc_passes::schedule(&g, &fuse)?;
    let mem_opts = wgslc_passes::MemoryOptions {
        reuse: !opts.no_reuse,
        max_buffer_size: opts.limits.max_buffer_size,
        split_budget: opts.memory_budget.unwrap_or(wgslc_passes::MemoryOptions::default().split_budget),
    };
    let mem = wgslc_passes::plan_memory_with(&g, &sched, &mem_opts)?;
    let kernels = wgslc_emit::emit(&g, &sched, &mem, &opts.limits)?;
    std::fs::create_dir_all(out_dir)
        .map_err(|source| wgslc_emit::EmitError::Io { path: out_dir.display().to_string(), source })?;
    let plan = wgslc_emit::write_artifact(out_dir, &g, &mem, &kernels)?;
    let report = wgslc_emit::report::build(&g, &sched, &mem, &kernels, &plan, source_nodes);
    let rpath = out_dir.join("report.json");
    std::fs::write(&rpath, report.to_json())
        .map_err(|source| wgslc_emit::EmitError::Io { path: rpath.display().to_string(), source })?;
    Ok(Summary { source_nodes, kernels: kernels.len(), plan, report })
}

/// ONNX nodes in the model file's main graph (Constant nodes included), for the report.
fn count_source_nodes(model: &Path) -> Option<usize> {
    let bytes = std::fs::read(model).ok()?;
    wgslc_onnx::op_types(&bytes).ok().map(|ops| ops.len())
}

/// Runs the graph passes up to `pass` and returns the IR as text, for finding which pass broke a model.
pub fn dump_after(model: &Path, opts: &CompileOptions, pass: &str) -> Result<String, CompileError> {
    if !wgslc_passes::PASSES.contains(&pass) && pass != "import" {
        return Err(CompileError::UnknownPass(pass.into(), wgslc_passes::PASSES.join(", ")));
    }
    let mut g = import(model, opts)?;
    if pass != "import" {
        wgslc_passes::run_pipeline(&mut g, Some(pass))?;
    }
    Ok(wgslc_ir::print(&g))
}

/// Converts a host tensor (from a .npy file) into a compile-time constant for `--const`.
pub fn constant_from_host(t: &runtime::HostTensor) -> wgslc_ir::Tensor {
    use runtime::TensorData;
    let shape = t.shape.clone();
    match &t.data {
        TensorData::F32(v) => wgslc_ir::Tensor::f32(shape, v.clone()),
        TensorData::I64(v) => wgslc_ir::Tensor::i64(shape, v.clone()),
        TensorData::I32(v) => wgslc_ir::Tensor {
            dtype: wgslc_ir::DType::I32,
            shape,
            data: wgslc_ir::Data::I64(v.iter().map(|&x| x as i64).collect()),
        },
        TensorData::Bool(v) => wgslc_ir::Tensor::bool(shape, v.clone()),
    }
}
