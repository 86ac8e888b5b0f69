//! The typed API against onnxruntime's reference outputs of the bundled MLP, through both ways of loading.

use wgslc_example_build_rs::{Mlp, MlpInputs};
use wgslc_runtime::TensorData;

fn npy(name: &str) -> Vec<f32> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/models/mlp").join(name);
    match wgslc::npy::read(&path).unwrap().data {
        TensorData::F32(v) => v,
        d => panic!("{name}: {d:?}"),
    }
}

#[test]
fn the_typed_model_matches_onnxruntime() {
    let gpu = wgslc_runtime::Gpu::new().expect("a Vulkan adapter");
    let (x, want) = (npy("input_0.npy"), npy("output_0.npy"));
    for mlp in [Mlp::from_embedded(gpu.clone()).unwrap(), Mlp::load(gpu).unwrap()] {
        let y = mlp.run(MlpInputs { x: x.clone() }).unwrap().y;
        assert_eq!(y.len(), want.len());
        for (i, (a, b)) in y.iter().zip(&want).enumerate() {
            assert!((a - b).abs() <= 1e-5 + 1e-4 * b.abs(), "y[{i}] = {a}, onnxruntime {b}");
        }
    }
    // A wrong length is refused by the runtime, not read out of bounds.
    let mlp = Mlp::load(wgslc_runtime::Gpu::new().unwrap()).unwrap();
    let e = mlp.run(MlpInputs { x: vec![0.0; 3] }).unwrap_err().to_string();
    assert!(e.contains("expected shape") || e.contains("elements"), "{e}");
}

/// The decoder's typed `generate` gives torch's greedy tokens (testdata/decoders, made by scripts/make_decoders.py).
#[test]
fn the_typed_decoder_generates_torchs_tokens() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/decoders/llama_dynamo20");
    let ids = |f: &str| match wgslc::npy::read(&dir.join(f)).unwrap().data {
        TensorData::I64(v) => v,
        d => panic!("{f}: {d:?}"),
    };
    let (prompt, want) = (ids("prompt_1.npy"), ids("tokens_1.npy"));
    let llama = wgslc_example_build_rs::TinyLlama::load(wgslc_runtime::Gpu::new().unwrap()).unwrap();
    let opts = wgslc_runtime::GenerateOptions { max_new_tokens: 30, ..Default::default() };
    assert_eq!(llama.generate(&prompt, &opts).unwrap().tokens, want[..prompt.len() + 30]);
}

/// A model compiled in build.rs from a `.pt2` (torch.export), against torch's own outputs.
#[test]
fn the_typed_pt2_model_matches_torch() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/pt2/mlp");
    let read = |f: &str| match wgslc::npy::read(&dir.join(f)).unwrap().data {
        TensorData::F32(v) => v,
        d => panic!("{f}: {d:?}"),
    };
    let (x, want) = (read("input_0.npy"), read("output_0.npy"));
    let mlp = wgslc_example_build_rs::TorchMlp::load(wgslc_runtime::Gpu::new().unwrap()).unwrap();
    let y = mlp.run(wgslc_example_build_rs::TorchMlpInputs { x }).unwrap().addmm_1;
    assert_eq!(y.len(), want.len());
    for (i, (a, b)) in y.iter().zip(&want).enumerate() {
        assert!((a - b).abs() <= 1e-5 + 1e-4 * b.abs(), "y[{i}] = {a}, torch {b}");
    }
}

/// A model compiled in build.rs with a ranged dim runs at several lengths through one artifact, against
/// onnxruntime (testdata/encoders, made by scripts/make_encoders.py).
#[test]
fn the_typed_ranged_model_runs_at_every_length() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/encoders/bert_dynamo20");
    let bert = wgslc_example_build_rs::Bert::load(wgslc_runtime::Gpu::new().unwrap()).unwrap();
    for l in [1, 7, 128] {
        let read = |f: &str| wgslc::npy::read(&dir.join(format!("len_{l}")).join(f)).unwrap().data;
        let ids = |f: &str| match read(f) {
            TensorData::I64(v) => v,
            d => panic!("{f}: {d:?}"),
        };
        let inputs = wgslc_example_build_rs::BertInputs {
            input_ids: ids("input_0.npy"),
            attention_mask: ids("input_1.npy"),
            token_type_ids: ids("input_2.npy"),
        };
        let out = bert.run(inputs).unwrap();
        let TensorData::F32(want) = read("output_0.npy") else { panic!("float output") };
        assert_eq!(out.last_hidden_state.len(), l * 64);
        for (i, (a, b)) in out.last_hidden_state.iter().zip(&want).enumerate() {
            assert!((a - b).abs() <= 1e-4 + 1e-4 * b.abs(), "length {l}: [{i}] = {a}, onnxruntime {b}");
        }
    }
}

/// A float16 model (onnxruntime's converter, float16 input and output) through its typed module: float16 values in
/// and out as f32, against onnxruntime's run of the same graph (which rounds every intermediate to float16).
#[test]
fn the_typed_float16_model_matches_onnxruntime() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/narrow/cnn_dynamo20_fp16_all");
    let read = |f: &str| match wgslc::npy::read(&dir.join(f)).unwrap().data {
        TensorData::F32(v) => v,
        d => panic!("{f}: {d:?}"),
    };
    let (x, want) = (read("input_0.npy"), read("output_0.npy"));
    let cnn = wgslc_example_build_rs::HalfCnn::load(wgslc_runtime::Gpu::new().unwrap()).unwrap();
    let spec = &cnn.session().plan().inputs[0];
    assert_eq!(spec.dtype.name(), "float16");
    let y = cnn.run(wgslc_example_build_rs::HalfCnnInputs { input_0: x }).unwrap().output_0;
    assert_eq!(y.len(), want.len());
    for (i, (a, b)) in y.iter().zip(&want).enumerate() {
        assert!((a - b).abs() <= 2e-2 + 2e-2 * b.abs(), "y[{i}] = {a}, onnxruntime {b}");
    }
}

/// A decoder compiled with 4-bit weights in build.rs generates torch's greedy tokens.
#[test]
fn the_typed_q4_decoder_generates_torchs_tokens() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/decoders/qwen2_dynamo20");
    let ids = |f: &str| match wgslc::npy::read(&dir.join(f)).unwrap().data {
        TensorData::I64(v) => v,
        d => panic!("{f}: {d:?}"),
    };
    let (prompt, want) = (ids("prompt_1.npy"), ids("tokens_1.npy"));
    let qwen = wgslc_example_build_rs::TinyQwenQ4::load(wgslc_runtime::Gpu::new().unwrap()).unwrap();
    let opts = wgslc_runtime::GenerateOptions { max_new_tokens: 30, ..Default::default() };
    assert_eq!(qwen.generate(&prompt, &opts).unwrap().tokens, want[..prompt.len() + 30]);
}
