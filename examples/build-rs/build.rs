// Compiles two bundled models into OUT_DIR, each with a typed module:
// - the MLP (x: float32 [batch, 16] → y: float32 [batch, 8]) at batch 4, as `Mlp` (MlpInputs, MlpOutputs), its
//   artifact also embedded into the binary (`Mlp::from_embedded`);
// - a tiny Llama-style decoder with a KV cache of 48 tokens, as `TinyLlama` (with `generate`);
// - a PyTorch MLP saved by torch.export (x: float32 [4, 32] → addmm_1: float32 [4, 16]), as `TorchMlp`;
// - a BERT-style encoder whose sequence length may be anything in 1..=128 at run time, as `Bert`;
// - a CNN converted to float16 by onnxruntime's converter (float16 input and output, float16 weights kept narrow),
//   as `HalfCnn`;
// - a tiny Qwen2-style decoder with its weights stored as 4-bit codes (`--weights q4`), as `TinyQwenQ4`.
fn main() {
    let testdata = std::path::Path::new("../../testdata");
    wgslc_build::Model::new(testdata.join("models/mlp/model.onnx"))
        .name("Mlp")
        .dim("batch", 4)
        .embed(true)
        .generate()
        .unwrap_or_else(|e| panic!("wgslc-build: {e}"));
    wgslc_build::Model::new(testdata.join("decoders/llama_dynamo20/model.onnx"))
        .name("TinyLlama")
        .kv_cache(48, 4)
        .generate()
        .unwrap_or_else(|e| panic!("wgslc-build: {e}"));
    wgslc_build::Model::new(testdata.join("pt2/mlp/model.pt2"))
        .name("TorchMlp")
        .generate()
        .unwrap_or_else(|e| panic!("wgslc-build: {e}"));
    wgslc_build::Model::new(testdata.join("narrow/cnn_dynamo20_fp16_all/model.onnx"))
        .name("HalfCnn")
        .generate()
        .unwrap_or_else(|e| panic!("wgslc-build: {e}"));
    wgslc_build::Model::new(testdata.join("decoders/qwen2_dynamo20/model.onnx"))
        .name("TinyQwenQ4")
        .kv_cache(48, 4)
        .weights(wgslc_build::WeightFormat::Q4, None)
        .generate()
        .unwrap_or_else(|e| panic!("wgslc-build: {e}"));
    wgslc_build::Model::new(testdata.join("encoders/bert_dynamo20/model.onnx"))
        .name("Bert")
        .dim_range("sequence_length", 1, 128)
        .generate()
        .unwrap_or_else(|e| panic!("wgslc-build: {e}"));
}
