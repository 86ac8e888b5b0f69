//! The models compiled by build.rs: `Mlp` (with `MlpInputs`, `MlpOutputs`), `TinyLlama` and `TorchMlp` (from a
//! `.pt2`).

include!(concat!(env!("OUT_DIR"), "/mlp.rs"));
include!(concat!(env!("OUT_DIR"), "/tiny_llama.rs"));
include!(concat!(env!("OUT_DIR"), "/torch_mlp.rs"));
