//! Bytes in → ONNX decode, import, every graph pass, fusion, memory planning and WGSL emission with naga
//! validation (no GPU). Any panic is a bug: bad input must come back as an error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut g) = wgslc_onnx::import_bytes(data, None, &wgslc_onnx::ImportOptions::default()) else { return };
    if wgslc_passes::run_pipeline(&mut g, None).is_err() {
        return;
    }
    // The default schedule, and the one without the inverted-residual folds.
    for inverted_residual in [wgslc_passes::InvertedResidualMode::Fused, wgslc_passes::InvertedResidualMode::Unfused] {
        let opts = wgslc_passes::FuseOptions { inverted_residual, ..Default::default() };
        let Ok(sched) = wgslc_passes::schedule(&g, &opts) else { return };
        let Ok(plan) = wgslc_passes::plan_memory(&g, &sched) else { return };
        let _ = wgslc_emit::emit(&g, &sched, &plan, &wgslc_emit::Limits::default());
    }
});
