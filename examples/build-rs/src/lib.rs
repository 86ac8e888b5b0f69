//! The models compiled by build.rs: `Mlp` (with `MlpInputs`, `MlpOutputs`) and `TinyLlama`.

include!(concat!(env!("OUT_DIR"), "/mlp.rs"));
include!(concat!(env!("OUT_DIR"), "/tiny_llama.rs"));
