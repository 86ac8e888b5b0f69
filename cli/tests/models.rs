//! The end-to-end suites: every testdata model and op case compiled, run on the Vulkan adapter and compared with
//! onnxruntime's outputs.

mod common;

#[test]
fn models_match_onnxruntime() {
    common::run_suite("models");
}

#[test]
fn ops_match_onnxruntime() {
    common::run_suite("ops");
}

/// Models exported from PyTorch by `scripts/torch_exports.py` (TorchScript exporter at opset 17, dynamo
/// exporter at opset 20), with onnxruntime's outputs.
#[test]
fn torch_exports_match_onnxruntime() {
    common::run_suite("torch");
}
