//! The models compiled by build.rs: `Mlp` (with `MlpInputs`, `MlpOutputs`), `TinyLlama`, `TorchMlp` (from a
//! `.pt2`) and `Bert` (any sequence length in 1..=128).

include!(concat!(env!("OUT_DIR"), "/mlp.rs"));
include!(concat!(env!("OUT_DIR"), "/tiny_llama.rs"));
include!(concat!(env!("OUT_DIR"), "/torch_mlp.rs"));
include!(concat!(env!("OUT_DIR"), "/bert.rs"));
