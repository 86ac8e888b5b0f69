//! Narrow weights end to end: decoders converted and quantized by onnxruntime's tools generate onnxruntime's tokens
//! (testdata/decoders/*, meta.json `"reference": "onnxruntime"`, made by testdata/make_narrow.py), `--weights`
//! decoders generate torch's, and narrow weights stay narrow in the artifact with their cost in the report.

mod common;

use std::path::Path;
use wgslc::runtime::{GenerateOptions, Session, TensorData};
use wgslc::WeightFormat;

fn ids(path: &Path) -> Vec<i64> {
    match wgslc::npy::read(path).unwrap_or_else(|e| panic!("{e}")).data {
        TensorData::I64(v) => v,
        d => panic!("{}: expected int64 token ids, got {d:?}", path.display()),
    }
}

fn kv_cache() -> Option<wgslc::KvCache> {
    Some(wgslc::KvCache { capacity: 46, chunk: 4, state: vec![], fixed: Default::default() })
}

/// Greedy generation from both prompts of a decoder case, at 16 steps per submit and at one; the failures.
fn generate_all(dir: &Path, opts: &wgslc::CompileOptions, what: &str) -> Vec<String> {
    let out = tempfile::tempdir().unwrap();
    if let Err(e) = wgslc::compile(&dir.join("model.onnx"), out.path(), opts) {
        return vec![format!("{what}: {e}")];
    }
    let session = Session::load_with(out.path(), common::gpu()).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut failures = Vec::new();
    for k in 0..2 {
        let prompt = ids(&dir.join(format!("prompt_{k}.npy")));
        let want = ids(&dir.join(format!("tokens_{k}.npy")));
        for steps_per_submit in [16, 1] {
            let opts =
                GenerateOptions { max_new_tokens: want.len() - prompt.len(), steps_per_submit, ..Default::default() };
            let got = session.generate(&prompt, &opts).unwrap_or_else(|e| panic!("{what}: {e}"));
            if got.tokens != want {
                failures.push(format!(
                    "{what} prompt {k}, {steps_per_submit}/submit: {:?}\n  expected {want:?}",
                    got.tokens
                ));
            }
        }
    }
    failures
}

/// float16 (both `keep_io_types` settings), 4-bit (MatMulNBits, GatherBlockQuantized with zero points) and 8-bit
/// decoders generate onnxruntime's greedy tokens on the same converted graph.
#[test]
fn converted_decoders_give_onnxruntimes_tokens() {
    let root = common::testdata().join("decoders");
    let mut names: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| {
            let meta = std::fs::read_to_string(root.join(n).join("meta.json")).unwrap_or_default();
            meta.contains("\"reference\": \"onnxruntime\"")
        })
        .collect();
    names.sort();
    assert!(names.len() >= 5, "only {names:?} converted decoders");
    let mut failures = Vec::new();
    for name in &names {
        let opts = wgslc::CompileOptions { kv_cache: kv_cache(), ..Default::default() };
        failures.extend(generate_all(&root.join(name), &opts, name));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// An fp32 decoder compiled with `--weights f16|q8|q4` (its products' weights and tied embedding table stored
/// narrow) still generates torch's greedy tokens (the decoder's top-2 logit gaps are wide), its narrowed weights
/// taking the format's share of float32's bytes (float16 a half; 8 and 4 bits in blocks of 32 with a float16 scale,
/// 8.5 and 4.5 bits an element), and no weight stored twice.
#[test]
fn weight_formats_generate_torchs_tokens_in_fewer_bytes() {
    let dir = common::testdata().join("decoders").join("qwen2_dynamo20");
    let mut failures = Vec::new();
    for (weights, most) in [(WeightFormat::F16, 0.5), (WeightFormat::Q8, 0.27), (WeightFormat::Q4, 0.15)] {
        let opts = wgslc::CompileOptions { kv_cache: kv_cache(), weights, ..Default::default() };
        failures.extend(generate_all(&dir, &opts, weights.name()));
        let out = tempfile::tempdir().unwrap();
        let summary = wgslc::compile(&dir.join("model.onnx"), out.path(), &opts).unwrap();
        let w = summary.report.weights.expect("a weights section");
        let ratio = w.bytes_after as f64 / w.bytes_before as f64;
        if ratio > most {
            failures.push(format!("--weights {}: narrowed weights take {ratio:.3} of float32's", weights.name()));
        }
        // The tied table: one constant read by the lookup and (transposed) by the LM head.
        let tables = summary.plan.weights.iter().filter(|s| s.name.contains("embed") || s.name.contains("permute"));
        if tables.count() != 1 {
            failures.push(format!("--weights {}: the tied table is stored more than once", weights.name()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A model's narrow weights stay narrow in the artifact: the weights file of a 4-bit model and of a float16 one is
/// about the size of the model file (float32 weights would be about 4 and 2 times it).
#[test]
fn narrow_models_keep_their_size() {
    for (case, most) in
        [("transformer_q4_b32_sym", 1.05), ("transformer_fp16_all", 1.05), ("transformer_q4_b32_gather", 1.05)]
    {
        let dir = common::testdata().join("narrow").join(case);
        let out = tempfile::tempdir().unwrap();
        wgslc::compile(&dir.join("model.onnx"), out.path(), &Default::default()).unwrap();
        let weights = std::fs::metadata(out.path().join("weights.safetensors")).unwrap().len() as f64;
        let model = std::fs::metadata(dir.join("model.onnx")).unwrap().len() as f64;
        assert!(weights <= most * model, "{case}: weights {weights} bytes, model {model}");
    }
}

/// `--weights q4`: report.json lists every weight stored narrower with its bytes and error; the text report says
/// the totals; a block size that is not a power of two from 16 to 256 is refused.
#[test]
fn weights_report_and_block_size() {
    let model = common::testdata().join("models").join("transformer").join("model.onnx");
    let out = tempfile::tempdir().unwrap();
    let opts = wgslc::CompileOptions { weights: WeightFormat::Q4, ..Default::default() };
    let summary = wgslc::compile(&model, out.path(), &opts).unwrap();
    let w = summary.report.weights.as_ref().expect("a weights section");
    assert_eq!((w.format.as_str(), w.block), ("q4", 32));
    // The embedding table (read by a Gather: 32 wide, not a weight), the position table and the norms stay.
    let names: Vec<&str> = w.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names.len(), 4, "{names:?}");
    for t in &w.tensors {
        assert!(t.bytes_after * 5 < t.bytes_before, "{t:?}");
        assert!(t.rel_rms_error > 0.01 && t.rel_rms_error < 0.12, "{t:?}");
    }
    assert_eq!(w.bytes_before, w.tensors.iter().map(|t| t.bytes_before).sum::<u64>());
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("report.json")).unwrap()).unwrap();
    assert_eq!(json["weights"]["tensors"].as_array().map(Vec::len), Some(4));
    assert!(summary.report.to_text().contains("as q4, blocks of 32"), "{}", summary.report.to_text());
    let bad = wgslc::CompileOptions { weight_block: Some(24), ..opts };
    let e = wgslc::compile(&model, tempfile::tempdir().unwrap().path(), &bad).unwrap_err().to_string();
    assert!(e.contains("--block 24") && e.contains("power of two"), "{e}");
}
