//! The models compiled by build.rs: `Mlp` (with `MlpInputs`, `MlpOutputs`), `TinyLlama`, `TorchMlp` (from a
//! `.pt2`), `Bert` (any sequence length in 1..=128), `HalfCnn` (float16 in and out) and `TinyQwenQ4` (4-bit
//! weights).

include!(concat!(env!("OUT_DIR"), "/mlp.rs"));
include!(concat!(env!("OUT_DIR"), "/tiny_llama.rs"));
include!(concat!(env!("OUT_DIR"), "/torch_mlp.rs"));
include!(concat!(env!("OUT_DIR"), "/bert.rs"));
include!(concat!(env!("OUT_DIR"), "/half_cnn.rs"));
include!(concat!(env!("OUT_DIR"), "/tiny_qwen_q4.rs"));
