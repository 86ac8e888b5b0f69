//! The wgslc library facade: what the `wgslc` binary and `build.rs` scripts call. The pipeline itself is
//! `wgslc-driver` (re-exported here); this crate adds the runtime, `.npy` files and the conformance harness.
//!
//! ```no_run
//! let opts = wgslc::CompileOptions::default();
//! let summary = wgslc::compile(std::path::Path::new("model.onnx"), std::path::Path::new("out"), &opts)?;
//! println!("{} kernels", summary.kernels);
//! # Ok::<(), wgslc::CompileError>(())
//! ```

pub mod bandwidth;
pub mod conformance;
pub mod npy;
pub mod profile;

pub use wgslc_artifact as artifact;
pub use wgslc_driver::{
    compile, dump_after, import, stages, Buckets, CompileError, CompileOptions, DimRange, KvCache, Progress, Summary,
    Target, WeightFormat,
};
pub use wgslc_emit::Limits;
pub use wgslc_runtime as runtime;

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
