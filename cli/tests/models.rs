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
