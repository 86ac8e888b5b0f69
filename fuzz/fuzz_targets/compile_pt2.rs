//! Bytes in → .pt2 archive reading (ZIP, program JSON, payload configs, torch.save pickles), ATen import, every
//! graph pass, fusion, memory planning and WGSL emission with naga validation (no GPU). Any panic is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let opts = wgslc_ir::ImportOptions::default();
    let Ok(mut g) = wgslc_pt2::import_bytes(data, &opts) else { return };
    if wgslc_passes::run_pipeline(&mut g, None).is_err() {
        return;
    }
    let Ok(sched) = wgslc_passes::schedule(&g, &wgslc_passes::FuseOptions::default()) else { return };
    let Ok(plan) = wgslc_passes::plan_memory(&g, &sched) else { return };
    let _ = wgslc_emit::emit(&g, &sched, &plan, &wgslc_emit::Limits::default());
});
