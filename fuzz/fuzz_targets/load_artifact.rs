//! Bytes in → the artifact parsers the runtime runs before any GPU work: plan.json (parse and structural
//! checks) and weights.safetensors.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = wgslc_artifact::Plan::parse(text);
    }
    if let Ok(st) = safetensors::SafeTensors::deserialize(data) {
        for (_, t) in st.tensors() {
            let _ = t.data().len();
        }
    }
});
