//! Decoders with a KV cache (`--kv-cache`, `Session::generate`, `wgslc generate`) on the bundled tiny decoders
//! (testdata/decoders, made by scripts/make_decoders.py with both exporters; `neox_*` with partial rotary, whose
//! key and value cache writes share one kernel that reads two materialized new-row tensors): greedy generation
//! must give torch's token ids exactly, and one cached step's logits and new cache rows must match onnxruntime's.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use wgslc::runtime::{GenerateOptions, HostTensor, Sampling, Session, TensorData};

const CASES: [&str; 6] = [
    "qwen2_torchscript17",
    "qwen2_dynamo20",
    "llama_torchscript17",
    "llama_dynamo20",
    "neox_torchscript17",
    "neox_dynamo20",
];

/// The same decoders as torch.export archives (`scripts/make_decoders.py --pt2`): the core ATen dialect, the
/// outputs paired with the cache inputs by position.
const PT2_CASES: [&str; 2] = ["qwen2_export", "llama_export"];

/// transformers' own Qwen2 and Llama classes exported by torch.onnx's dynamo exporter at opset 23
/// (`scripts/make_hf_decoders.py`), which writes the ONNX-domain Attention, RotaryEmbedding and RMSNormalization,
/// with transformers' greedy tokens.
const HF_CASES: [&str; 2] = ["qwen2_hf_dynamo23", "llama_hf_dynamo23"];

/// onnxruntime-genai's model builder (`scripts/make_genai.py`): GroupQueryAttention with packed QKV and rotary
/// inside, the Skip/Simplified norms, no position_ids, the caches' head size a symbolic dim given by
/// genai_config.json; fp32 for five architectures (and the CPU build of one; Gemma 2 with softcapped scores and
/// logits and an 8-token window on alternate layers, shorter than the generation), fp16 and int4 (MatMulNBits, the
/// tied embedding through GatherBlockQuantized, float16 inputs and outputs).
const GENAI_CASES: [&str; 8] = [
    "genai/qwen2_fp32_webgpu",
    "genai/qwen2_fp32_cpu",
    "genai/llama_fp32_webgpu",
    "genai/mistral_fp32_webgpu",
    "genai/phi3_fp32_webgpu",
    "genai/gemma2_fp32_webgpu",
    "genai/qwen2_fp16_webgpu",
    "genai/qwen2_int4_webgpu",
];

/// A case by name: `suite/name`, or a name in testdata/decoders.
fn case(name: &str) -> PathBuf {
    match name.split_once('/') {
        Some((suite, n)) => common::testdata().join(suite).join(n),
        None => common::testdata().join("decoders").join(name),
    }
}

/// A case's model: its `.pt2` where it has one, else its ONNX file.
fn model_of(dir: &Path) -> PathBuf {
    let pt2 = dir.join("model.pt2");
    if pt2.exists() {
        pt2
    } else {
        dir.join("model.onnx")
    }
}

fn ids(t: &HostTensor) -> Vec<i64> {
    match &t.data {
        TensorData::I64(v) => v.clone(),
        d => panic!("expected int64 token ids, got {d:?}"),
    }
}

fn npy(path: &Path) -> HostTensor {
    wgslc::npy::read(path).unwrap_or_else(|e| panic!("{e}"))
}

fn compile(name: &str, capacity: usize, chunk: usize) -> (tempfile::TempDir, Session) {
    compile_for(name, capacity, chunk, wgslc::Target::Gpu)
}

fn compile_for(name: &str, capacity: usize, chunk: usize, target: wgslc::Target) -> (tempfile::TempDir, Session) {
    let out = tempfile::tempdir().unwrap();
    let opts = wgslc::CompileOptions {
        kv_cache: Some(wgslc::KvCache { capacity, chunk, state: vec![], fixed: Default::default() }),
        target,
        ..Default::default()
    };
    wgslc::compile(&model_of(&case(name)), out.path(), &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
    let session = Session::load_with(out.path(), common::gpu()).unwrap_or_else(|e| panic!("{name}: {e}"));
    (out, session)
}

/// Prompts of 1 and 5 tokens (the 5-token one in two prefill chunks, the second padded), 40 new tokens, several
/// steps per submit and one; with an end-of-sequence token, generation stops right after it. ONNX exports (opsets
/// 17, 20 and 23) and torch.export archives alike.
#[test]
fn generation_gives_torchs_greedy_tokens() {
    let failures: Vec<String> = CASES.into_iter().chain(PT2_CASES).chain(HF_CASES).flat_map(greedy_failures).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// transformers' own classes for every architecture `scripts/make_hf_decoders.py` makes (Qwen3's Q/K norms, Phi,
/// GPT-NeoX and StableLM's partial rotary, GPT-2's learned positions, OLMo2's norms after the projections, SmolLM3's layers without rotary,
/// Gemma 2's and Gemma 3's 8-token sliding windows over positions counted from the cache's length, Mistral, Phi-3,
/// Qwen2 and Llama), each through the dynamo exporter at opsets 18 and 23 and the TorchScript exporter at 17
/// (testdata/hf; TorchScript reads each cache through a one-input Concat): transformers' greedy tokens, as above.
#[test]
fn transformers_classes_give_transformers_tokens() {
    let root = common::testdata().join("hf");
    let mut names: Vec<String> =
        std::fs::read_dir(&root).unwrap().map(|e| format!("hf/{}", e.unwrap().file_name().to_string_lossy())).collect();
    names.sort();
    assert!(names.len() >= 37, "testdata/hf holds {} cases", names.len());
    let failures: Vec<String> = names.iter().flat_map(|n| greedy_failures(n)).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A decoder whose first cache is also an output of its own (`testdata/make_narrow.py window`) can't have its decode
/// step write in place: the step writes `present` rows and the runtime copies them into the cache, the token into
/// the next step's input, the position and the mask word (the runtimes' other decode path). It still generates
/// onnxruntime's tokens, one step a submit and several, and stops at an end-of-sequence token.
#[test]
fn a_decode_step_that_cannot_write_in_place_copies_its_rows() {
    let name = "llama_dynamo20_cache_read";
    let (_dir, session) = compile(name, 46, 4);
    let decoder = session.plan().decoder.as_ref().unwrap();
    let decode = decoder.steps.iter().find(|st| st.name == "decode").unwrap();
    assert!(decode.cache_row.is_none() && decode.advance.is_none(), "{name}: the decode step copies its rows");
    assert_eq!(decode.present.len(), decoder.state.len());
    let prompt = ids(&npy(&case(name).join("prompt_1.npy")));
    let opts = GenerateOptions { max_new_tokens: 8, steps_per_submit: 4, ..Default::default() };
    let g = session.generate(&prompt, &opts).unwrap();
    assert!(g.copies >= 7 * (decoder.state.len() + 3), "{name}: {} copies for 7 decode steps", g.copies);
    let failures = greedy_failures(name);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Decoders compiled for a CPU adapter (`--target cpu`: matrix-vector products whose sums over K stay in at most
/// 4 threads, attention unfused, weights in their stored layout) generate the reference tokens too: torch's,
/// transformers' and onnxruntime's (fp32, float16 and 4-bit weights; ONNX's Attention op; GroupQueryAttention).
#[test]
fn decoders_compiled_for_a_cpu_give_the_same_tokens() {
    let names = [
        "llama_dynamo20",
        "qwen2_torchscript17",
        "qwen2_dynamo20_fp16",
        "qwen2_dynamo20_q4",
        "qwen2_hf_dynamo23",
        "genai/llama_fp32_webgpu",
        "genai/qwen2_int4_webgpu",
    ];
    let mut failures = Vec::new();
    for name in names {
        failures.extend(greedy_failures_for(name, wgslc::Target::Cpu));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The layouts `--target cpu` gives a decoder's one-row products: every plain matrix-vector kernel keeps each
/// output's sum in at most 4 threads (the GPU layouts split it across 32 to 256), and no weight is stored K-major.
#[test]
fn a_cpu_target_keeps_matrix_vector_sums_in_few_threads() {
    let splits = |target| {
        let (dir, session) = compile_for("llama_dynamo20", 46, 4, target);
        let mut splits = Vec::new();
        for e in std::fs::read_dir(dir.path().join("kernels")).unwrap() {
            let w = std::fs::read_to_string(e.unwrap().path()).unwrap();
            if !w.contains("// Matrix-vector product (one row of A)") {
                continue;
            }
            // "// G groups of L lanes; …": K-major lanes split each output's K, row-major groups do.
            let line = w.lines().find(|l| l.contains(" groups of ") && l.contains(" lanes;")).unwrap();
            let n: Vec<usize> = line.split(' ').filter_map(|x| x.parse().ok()).collect();
            splits.push(if w.contains("(K-major)") { n[1] } else { n[0] });
        }
        let kmajor = session.plan().weights.iter().any(|w| w.name.ends_with(".kmajor"));
        (splits, kmajor)
    };
    let (cpu, cpu_kmajor) = splits(wgslc::Target::Cpu);
    let (gpu, gpu_kmajor) = splits(wgslc::Target::Gpu);
    assert!(cpu.len() >= 4 && cpu.iter().all(|&s| s <= 4), "CPU: each sum over K in {cpu:?} threads");
    assert!(gpu.iter().any(|&s| s >= 32), "GPU: each sum over K in {gpu:?} threads");
    assert!(gpu_kmajor && !cpu_kmajor, "K-major weights: GPU {gpu_kmajor}, CPU {cpu_kmajor}");
}

/// Over a cache of two 64-key tiles (capacity 128, chunks of 8) a prefill chunk's attention skips the tiles its
/// mask hides (the window's stale rows: all of them in the first chunk) and the generation still gives torch's
/// tokens, both prompts, both exporters' masks.
#[test]
fn prefill_attention_skips_the_masked_window_and_gives_torchs_tokens() {
    for name in ["llama_dynamo20", "qwen2_torchscript17"] {
        let (dir, session) = compile(name, 128, 8);
        let skips = std::fs::read_dir(dir.path().join("kernels"))
            .unwrap()
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .filter(|w| w.contains("prefill/") && w.contains("var<workgroup> live_bits"))
            .count();
        assert!(skips >= 2, "{name}: {skips} prefill attention kernels skip masked key tiles");
        for k in 0..2 {
            let prompt = ids(&npy(&case(name).join(format!("prompt_{k}.npy"))));
            let want = ids(&npy(&case(name).join(format!("tokens_{k}.npy"))));
            let opts = GenerateOptions { max_new_tokens: want.len() - prompt.len(), ..Default::default() };
            let got = session.generate(&prompt, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(got.tokens, want, "{name} prompt {k}");
        }
    }
}

/// Where a case's greedy generation differs from its tokens (prompts 0 and 1, 16 steps a submit and one, and
/// stopping at an end-of-sequence token); `decode_steps` is asserted.
fn greedy_failures(name: &str) -> Vec<String> {
    greedy_failures_for(name, wgslc::Target::Gpu)
}

/// [`greedy_failures`] of the case compiled for `target`, replayed with its subgroup modules and with its plain
/// ones (`common::gpus_for`).
fn greedy_failures_for(name: &str, target: wgslc::Target) -> Vec<String> {
    let (dir, session) = compile_for(name, 46, 4, target);
    let mut failures = greedy_failures_of(name, &session);
    for (what, gpu) in common::gpus_for(session.plan()).into_iter().skip(1) {
        let plain = Session::load_with(dir.path(), gpu).unwrap_or_else(|e| panic!("{name}: {e}"));
        failures.extend(greedy_failures_of(name, &plain).into_iter().map(|f| format!("{what}{f}")));
    }
    failures
}

/// [`greedy_failures`] of a loaded case.
fn greedy_failures_of(name: &str, session: &Session) -> Vec<String> {
    let mut failures = Vec::new();
    for k in 0..2 {
        let prompt = ids(&npy(&case(name).join(format!("prompt_{k}.npy"))));
        let want = ids(&npy(&case(name).join(format!("tokens_{k}.npy"))));
        let new = want.len() - prompt.len();
        for steps_per_submit in [16, 1] {
            let opts = GenerateOptions { max_new_tokens: new, steps_per_submit, ..Default::default() };
            let got = session.generate(&prompt, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
            if got.tokens != want {
                failures
                    .push(format!("{name} prompt {k}, {steps_per_submit}/submit: {:?}\n  torch {want:?}", got.tokens));
            }
            assert_eq!(got.decode_steps, new - 1, "{name}: one decode step per token after the first");
        }
        // Stop at the first occurrence of a token that comes a few steps in.
        let eos = want[prompt.len() + 3];
        let stop = prompt.len() + want[prompt.len()..].iter().position(|&t| t == eos).unwrap() + 1;
        let opts = GenerateOptions { max_new_tokens: new, eos: Some(eos), steps_per_submit: 2, sampling: None };
        let got = session.generate(&prompt, &opts).unwrap();
        if got.tokens != want[..stop] {
            failures.push(format!("{name} prompt {k}, eos {eos}: {:?}, expected {:?}", got.tokens, &want[..stop]));
        }
    }
    failures
}

/// The builder's models generate onnxruntime's greedy tokens (prompts of 1 and 5 tokens, the second in two prefill
/// chunks, the last padded): the positions GroupQueryAttention derives from the attention mask's sum put every key
/// at its position, which the layout proof accepts for the cache at positions (and refuses for the window).
#[test]
fn genai_builder_models_give_onnxruntimes_tokens() {
    let mut failures = Vec::new();
    for name in GENAI_CASES {
        let (_dir, session) = compile(name, 46, 4);
        let prefill = session.plan().decoder.as_ref().unwrap().steps.iter().find(|st| st.name == "prefill");
        assert!(prefill.unwrap().cache_row.is_some(), "{name}: the prefill step writes its rows in place");
        for k in 0..2 {
            let prompt = ids(&npy(&case(name).join(format!("prompt_{k}.npy"))));
            let want = ids(&npy(&case(name).join(format!("tokens_{k}.npy"))));
            let opts = GenerateOptions { max_new_tokens: want.len() - prompt.len(), ..Default::default() };
            let got = session.generate(&prompt, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
            if got.tokens != want {
                failures.push(format!("{name} prompt {k}: {:?}\n  onnxruntime {want:?}", got.tokens));
            }
        }
    }
    // Bindings too small for the fp32 build's 64 KiB table: the lookup reads a transposed copy of the LM head's
    // [hidden, vocab] weight (how the builder ties them) in blocks, the head reads the weight's column blocks.
    let name = "genai/qwen2_fp32_webgpu";
    let out = tempfile::tempdir().unwrap();
    let opts = wgslc::CompileOptions {
        kv_cache: Some(wgslc::KvCache { capacity: 46, chunk: 4, state: vec![], fixed: Default::default() }),
        limits: wgslc::Limits { max_storage_buffer_binding_size: 40000, ..Default::default() },
        ..Default::default()
    };
    wgslc::compile(&case(name).join("model.onnx"), out.path(), &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
    let session = Session::load_with(out.path(), common::gpu()).unwrap();
    for k in 0..2 {
        let prompt = ids(&npy(&case(name).join(format!("prompt_{k}.npy"))));
        let want = ids(&npy(&case(name).join(format!("tokens_{k}.npy"))));
        let opts = GenerateOptions { max_new_tokens: want.len() - prompt.len(), ..Default::default() };
        if session.generate(&prompt, &opts).unwrap().tokens != want {
            failures.push(format!("{name} in blocks, prompt {k}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// optimum's merged decoders (`scripts/make_optimum.py`: `decoder_model_merged.onnx`, one `If` on
/// `use_cache_branch` between the exports with and without past inputs) generate onnxruntime's greedy tokens (run
/// as optimum runs them: the prompt's step without past, then with) without the user binding `use_cache_branch`:
/// the in-place cache always gives a past, so the branch with past inputs is compiled (and written in place, as the
/// export with past alone is: the If's outputs, Identities of the branch's Concats, are seen through). The `--legacy`
/// export has no `position_ids`: it counts positions from the past's length, which the decoder pass takes from the
/// step's cache row (it was refused before, and wrong before the layout proof compared constants).
#[test]
fn optimum_merged_decoders_give_onnxruntimes_tokens() {
    let root = common::testdata().join("optimum");
    let mut names: Vec<String> =
        std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["llama_optimum_merged", "qwen2_optimum_legacy", "qwen2_optimum_merged"]);
    let mut failures = Vec::new();
    for name in &names {
        let dir = root.join(name);
        let (_out, session) = compile(&format!("optimum/{name}"), 46, 4);
        // The If's outputs are Identities of its branch's Concats: the decode step still writes in place.
        let decode = session.plan().decoder.as_ref().unwrap().steps.iter().find(|st| st.name == "decode");
        assert!(decode.unwrap().cache_row.is_some(), "{name}: the decode step writes its rows in place");
        for k in 0..2 {
            let prompt = ids(&npy(&dir.join(format!("prompt_{k}.npy"))));
            let want = ids(&npy(&dir.join(format!("tokens_{k}.npy"))));
            let opts = GenerateOptions { max_new_tokens: want.len() - prompt.len(), ..Default::default() };
            let got = session.generate(&prompt, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
            if got.tokens != want {
                failures.push(format!("{name} prompt {k}: {:?}\n  onnxruntime {want:?}", got.tokens));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Bindings too small for the 64 KiB embedding table and the merged gate/up weight: split into blocks, the decode
/// step looks the token up in one kernel over the table's blocks and runs the tied LM head and the gate/up
/// product each as one kernel over their blocks, and the tokens are still torch's.
#[test]
fn decoding_over_weights_in_blocks_gives_torchs_tokens() {
    let name = "qwen2_dynamo20";
    let out = tempfile::tempdir().unwrap();
    let opts = wgslc::CompileOptions {
        kv_cache: Some(wgslc::KvCache { capacity: 46, chunk: 4, state: vec![], fixed: Default::default() }),
        limits: wgslc::Limits { max_storage_buffer_binding_size: 40000, ..Default::default() },
        ..Default::default()
    };
    let summary = wgslc::compile(&case(name).join("model.onnx"), out.path(), &opts).unwrap();
    let plan = &summary.plan;
    let steps = &plan.decoder.as_ref().expect("a decoder").steps;
    let decode = steps.iter().find(|s| s.name == "decode").expect("a decode step");
    let names: Vec<&str> = decode.dispatches.iter().map(|&i| plan.kernels[i].name.as_str()).collect();
    assert_eq!(names.iter().filter(|n| n.contains("embedding")).count(), 1, "{names:?}");
    let head: Vec<&&str> = names.iter().filter(|n| n.contains("matmul_4")).collect();
    assert!(head.len() == 1 && head[0].contains("block1"), "{names:?}");
    let session = Session::load_with(out.path(), common::gpu()).unwrap();
    for k in 0..2 {
        let prompt = ids(&npy(&case(name).join(format!("prompt_{k}.npy"))));
        let want = ids(&npy(&case(name).join(format!("tokens_{k}.npy"))));
        let opts = GenerateOptions { max_new_tokens: want.len() - prompt.len(), ..Default::default() };
        assert_eq!(session.generate(&prompt, &opts).unwrap().tokens, want, "prompt {k}");
    }
}

/// Prompt plus new tokens may fill the cache exactly; one more is refused with the capacity named.
#[test]
fn generation_fills_the_cache_and_refuses_more() {
    let name = "llama_dynamo20";
    let (_dir, session) = compile(name, 12, 3);
    let prompt = ids(&npy(&case(name).join("prompt_1.npy")));
    let want = ids(&npy(&case(name).join("tokens_1.npy")));
    let opts = GenerateOptions { max_new_tokens: 12 - prompt.len(), steps_per_submit: 4, ..Default::default() };
    assert_eq!(session.generate(&prompt, &opts).unwrap().tokens, want[..12]);
    let opts = GenerateOptions { max_new_tokens: 13 - prompt.len(), ..opts };
    let e = session.generate(&prompt, &opts).unwrap_err().to_string();
    assert!(e.contains("more than the 12 tokens of KV cache") && e.contains("--kv-cache 12"), "{e}");
    let e = session.generate(&[], &opts).unwrap_err().to_string();
    assert!(e.contains("prompt is empty"), "{e}");
}

/// One cached step (3 past rows, 2 new tokens; testdata's step/ case) through both compiled steps at once: the
/// prefill step (chunk 2) takes both tokens (its logits are the second token's, its rows both), the decode step the
/// first (causal: its logits and rows are the first token's of the 2-token step). The cache inputs hold the 3 rows
/// in a cache of 10 (the prefill step's window is its first 9), the rest masked; the decode step writes its token's rows at row 3 in place, so its
/// rows are checked through its logits (attention reads them back from the cache).
#[test]
fn cached_steps_match_onnxruntime() {
    let mut failures = Vec::new();
    for name in CASES {
        let (_dir, session) = compile(name, 10, 2);
        let dir = case(name).join("step");
        let input = |i: usize| npy(&dir.join(format!("input_{i}.npy")));
        let want: Vec<HostTensor> = (0..5).map(|i| npy(&dir.join(format!("output_{i}.npy")))).collect();
        let (step_ids, past_len, rows) = (ids(&input(0)), 3usize, 9usize);
        let int = |v: Vec<i64>| HostTensor { shape: vec![1, v.len()], data: TensorData::I64(v) };
        let mask = |new: usize| int((0..rows + new).map(|j| i64::from(j < past_len || j >= rows)).collect());
        let in_place = session.inputs().iter().any(|s| s.name == "wgslc.cache_row");
        assert!(in_place, "{name}: the decode step writes its cache in place");
        let mut feeds = Vec::new();
        for spec in session.inputs() {
            let t = match spec.name.as_str() {
                "input_ids" => int(vec![step_ids[0]]),
                "attention_mask" => int((0..rows + 1).map(|j| i64::from(j <= past_len)).collect()),
                "wgslc.cache_row" => HostTensor { shape: vec![1], data: TensorData::I64(vec![past_len as i64]) },
                "position_ids" => int(vec![3]),
                "prefill/input_ids" => int(step_ids.clone()),
                "prefill/attention_mask" => mask(2),
                "prefill/position_ids" => int(vec![3, 4]),
                "prefill/wgslc.last_index" => HostTensor { shape: vec![1], data: TensorData::I64(vec![1]) },
                "wgslc.temperature" => HostTensor { shape: vec![1], data: TensorData::F32(vec![0.0]) },
                "wgslc.sampling" => HostTensor { shape: vec![2], data: TensorData::I64(vec![0, 0]) },
                "wgslc.tokens" => HostTensor { shape: vec![rows + 1], data: TensorData::I64(vec![0; rows + 1]) },
                past => {
                    // past_key_values.N.key|value: input 3 + 2N (+1), [1, 2, 3, 16] into [1, 2, 10, 16].
                    let i = 3 + ["0.key", "0.value", "1.key", "1.value"]
                        .iter()
                        .position(|s| past.ends_with(s))
                        .unwrap_or_else(|| panic!("unexpected input {past}"));
                    let TensorData::F32(src) = input(i).data else { panic!("float cache") };
                    let cache = rows + 1;
                    assert_eq!(spec.shape, [1, 2, cache, 16], "{name}: {past}");
                    let mut win = vec![0.0f32; 2 * cache * 16];
                    for h in 0..2 {
                        let n = past_len * 16;
                        win[h * cache * 16..h * cache * 16 + n].copy_from_slice(&src[h * n..(h + 1) * n]);
                    }
                    HostTensor { shape: vec![1, 2, cache, 16], data: TensorData::F32(win) }
                }
            };
            feeds.push(t);
        }
        let got = session.run(&feeds).unwrap_or_else(|e| panic!("{name}: {e}"));
        let out = |n: &str| &got[session.outputs().iter().position(|o| o.name == n).unwrap()];
        // ORT's outputs restricted to new tokens `first..first+count` along the sequence axis.
        let rows_of = |t: &HostTensor, axis: usize, first: usize, count: usize| {
            let TensorData::F32(v) = &t.data else { panic!() };
            let outer: usize = t.shape[..axis].iter().product();
            let inner: usize = t.shape[axis + 1..].iter().product();
            let mut r = Vec::new();
            for o in 0..outer {
                let base = (o * t.shape[axis] + first) * inner;
                r.extend_from_slice(&v[base..base + count * inner]);
            }
            let mut shape = t.shape.clone();
            shape[axis] = count;
            HostTensor { shape, data: TensorData::F32(r) }
        };
        let mut check = |what: &str, got: &HostTensor, want: HostTensor| {
            if let Err(e) = common::compare(std::slice::from_ref(got), &[want], 1e-3, 1e-4) {
                failures.push(format!("{name} {what}: {e}"));
            }
        };
        // The prefill step's logits are its last real token's row (`last_row`: the head multiplies that row only).
        check("prefill logits", out("prefill/logits"), rows_of(&want[0], 1, 1, 1));
        check("decode logits", out("logits"), rows_of(&want[0], 1, 0, 1));
        for (i, p) in ["present.0.key", "present.0.value", "present.1.key", "present.1.value"].iter().enumerate() {
            check(&format!("prefill {p}"), out(&format!("prefill/{p}")), rows_of(&want[i + 1], 2, past_len, 2));
            assert!(!session.outputs().iter().any(|o| o.name == *p), "{name}: the decode step has no present outputs");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Decoders whose causal mask compares each key's index in the concatenated cache with the query's position,
/// `(arange(total) <= position_ids[0][:, None]) & (attention_mask[0] > 0)` (testdata/masks, made by
/// scripts/make_decoders.py --mask positions, both exporters and torch.export (`llama_posmask_export`, a .pt2);
/// and with `--mask sliding`, also only the last 6 positions, as Mistral's sliding window: `_sliding` cases). The
/// window puts a prefill step's own keys at rows
/// that are not their positions, where this mask hides them (the 1-token prompt of the Llama-style model generated
/// other tokens than torch's); the cache-layout proof finds that and compiles them with every key at its position:
/// both prompts (1 token; 5 tokens over two chunks, the second padded) give torch's greedy tokens, with chunks of 4,
/// 3 and 1 (capacities rounded up to a multiple of the chunk), up to the capacity. The same graphs at the cached
/// step's fixed shapes (3 past rows, 2 new tokens) match onnxruntime. Their float16 conversion (`keep_io_types`:
/// its caches float32 behind Casts, made float16 caches) gives onnxruntime's tokens on it; with its first cache
/// also an output of its own (nothing may write that cache in place) it fits neither layout and is refused by the
/// node that applies its mask, before anything is written.
#[test]
fn position_compared_masks_put_every_key_at_its_position() {
    let root = common::testdata().join("masks");
    let mut names: Vec<String> =
        std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names.len(), 11, "{names:?}");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let mut failures = Vec::new();
    for name in &names {
        let dir = root.join(name);
        let tmp = tempfile::tempdir().unwrap();
        let art = tmp.path().join("art");
        let model = model_of(&dir);
        if std::fs::read_to_string(dir.join("meta.json")).unwrap().contains("\"kv_cache\": \"refused\"") {
            let r = wgslc(&["compile", &s(&model), "-o", &s(&art), "--kv-cache", "46", "--prefill-chunk", "4"]);
            let err = String::from_utf8_lossy(&r.stderr);
            let node = err.split("the attention mask applied at node '").nth(1).and_then(|t| t.split('\'').next());
            let why = "and with every key at its position: input 'past_key_values.0.key'";
            if r.status.success() || !node.is_some_and(|n| n.to_lowercase().contains("add")) || !err.contains(why) {
                failures.push(format!("{name}: not refused by its mask's Add: {err}"));
            }
            assert!(!art.exists(), "{name}: a refused compile wrote {}", art.display());
            continue;
        }
        for (capacity, chunk) in [(46, 4), (45, 3), (45, 1)] {
            let opts = wgslc::CompileOptions {
                kv_cache: Some(wgslc::KvCache { capacity, chunk, state: vec![], fixed: Default::default() }),
                ..Default::default()
            };
            let out = tmp.path().join(format!("kv{capacity}_{chunk}"));
            wgslc::compile(&model, &out, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
            let session = Session::load_with(&out, common::gpu()).unwrap_or_else(|e| panic!("{name}: {e}"));
            let prefill = session.plan().decoder.as_ref().unwrap().steps.iter().find(|st| st.name == "prefill");
            assert!(prefill.unwrap().cache_row.is_some(), "{name}: the prefill step writes its rows in place");
            for k in 0..2 {
                let prompt = ids(&npy(&dir.join(format!("prompt_{k}.npy"))));
                let want = ids(&npy(&dir.join(format!("tokens_{k}.npy"))));
                for steps_per_submit in [16, 1] {
                    let opts = GenerateOptions {
                        max_new_tokens: want.len() - prompt.len(),
                        steps_per_submit,
                        ..Default::default()
                    };
                    let got = session.generate(&prompt, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
                    if got.tokens != want {
                        failures.push(format!(
                            "{name} --kv-cache {capacity} --prefill-chunk {chunk}, prompt {k}, {steps_per_submit}/submit: \
                             {:?}\n  torch {want:?}",
                            got.tokens
                        ));
                    }
                }
            }
        }

        let step = dir.join("step");
        if !step.exists() {
            continue; // a converted graph (onnxruntime's tokens on it are the reference), or a .pt2 (torch's)
        }
        let input = |i: usize| npy(&step.join(format!("input_{i}.npy")));
        let names = ["input_ids", "attention_mask", "position_ids"]
            .into_iter()
            .map(String::from)
            .chain((0..2).flat_map(|l| ["key", "value"].map(|kv| format!("past_key_values.{l}.{kv}"))));
        let shapes = names.enumerate().map(|(i, n)| (n, input(i).shape)).collect();
        let opts = wgslc::CompileOptions { shapes, ..Default::default() };
        wgslc::compile(&model, &art, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
        let session = Session::load_with(&art, common::gpu()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let feeds: Vec<HostTensor> = (0..7).map(input).collect();
        let got = session.run(&feeds).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want: Vec<HostTensor> = (0..5).map(|i| npy(&step.join(format!("output_{i}.npy")))).collect();
        if let Err(e) = common::compare(&got, &want, 1e-3, 1e-4) {
            failures.push(format!("{name} at fixed shapes against onnxruntime: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Sampled generation: top-k 1 and a temperature far below the logits' gaps (meta.json `min_top2_gap` ≥ 32) give
/// torch's greedy tokens; a seed gives the same tokens at any steps per submit, another seed others.
#[test]
fn sampled_generation_is_reproducible_and_top_1_is_greedy() {
    let mut failures = Vec::new();
    for name in ["qwen2_torchscript17", "llama_dynamo20"] {
        let (_dir, session) = compile(name, 46, 4);
        let prompt = ids(&npy(&case(name).join("prompt_1.npy")));
        let want = ids(&npy(&case(name).join("tokens_1.npy")));
        let new = want.len() - prompt.len();
        let run = |temperature: f32, top_k: usize, seed: u64, steps_per_submit: usize| {
            let sampling = Some(Sampling { temperature, top_k, seed });
            let opts = GenerateOptions { max_new_tokens: new, eos: None, steps_per_submit, sampling };
            session.generate(&prompt, &opts).unwrap_or_else(|e| panic!("{name}: {e}")).tokens
        };
        for (t, k) in [(1.0, 1), (1000.0, 1), (1e-3, 0), (0.0, 0)] {
            let got = run(t, k, 5, 16);
            if got != want {
                failures.push(format!("{name} temperature {t} top-k {k}: {got:?}\n  torch greedy {want:?}"));
            }
        }
        // Flat enough to draw other tokens than the greedy ones.
        let a = run(50.0, 0, 1, 16);
        assert_eq!(a, run(50.0, 0, 1, 1), "{name}: one seed, other steps per submit");
        assert_eq!(a[..prompt.len()], prompt[..]);
        let b = run(50.0, 0, 2, 16);
        let differ = |x: &[i64], y: &[i64]| x.iter().zip(y).filter(|(p, q)| p != q).count();
        assert!(differ(&a, &want) > new / 2, "{name}: temperature 50 drew the greedy tokens {a:?}");
        assert!(differ(&a, &b) > new / 2, "{name}: seeds 1 and 2 drew {a:?} and {b:?}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One `wgslc.Sample` node over `rows` rows of `v` logits, with its temperature, params and counter as inputs.
fn sample_session(rows: usize, v: usize) -> (tempfile::TempDir, Session) {
    use prost::Message;
    use wgslc_onnx::proto::{
        Dimension, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto, TypeProtoTensor,
        ValueInfoProto,
    };
    let input = |name: &str, elem_type: i32, dims: &[usize]| ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type,
                shape: Some(TensorShapeProto {
                    dim: dims.iter().map(|&d| Dimension { dim_value: Some(d as i64), dim_param: None }).collect(),
                }),
            }),
            ..Default::default()
        }),
    };
    let model = ModelProto {
        ir_version: 8,
        opset_import: vec![
            OperatorSetIdProto { domain: String::new(), version: 17 },
            OperatorSetIdProto { domain: "wgslc".into(), version: 1 },
        ],
        graph: Some(GraphProto {
            node: vec![NodeProto {
                input: ["logits", "temperature", "params", "counter"].map(String::from).to_vec(),
                output: vec!["token".into()],
                name: "sample".into(),
                op_type: "Sample".into(),
                domain: "wgslc".into(),
                ..Default::default()
            }],
            input: vec![
                input("logits", 1, &[rows, v]),
                input("temperature", 1, &[1]),
                input("params", 7, &[2]),
                input("counter", 7, &[1, 3]),
            ],
            output: vec![ValueInfoProto { name: "token".into(), r#type: None }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sample.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    let art = dir.path().join("art");
    wgslc::compile(&path, &art, &Default::default()).unwrap_or_else(|e| panic!("{e}"));
    let session = Session::load_with(&art, common::gpu()).unwrap_or_else(|e| panic!("{e}"));
    (dir, session)
}

fn draw(session: &Session, logits: &[f32], rows: usize, t: f32, k: i64, seed: i64, counter: i64) -> Vec<i64> {
    let v = logits.len() / rows;
    let feeds = [
        HostTensor { shape: vec![rows, v], data: TensorData::F32(logits.to_vec()) },
        HostTensor { shape: vec![1], data: TensorData::F32(vec![t]) },
        HostTensor { shape: vec![2], data: TensorData::I64(vec![k, seed]) },
        HostTensor { shape: vec![1, 3], data: TensorData::I64(vec![0, 0, counter]) },
    ];
    ids(&session.run(&feeds).unwrap_or_else(|e| panic!("{e}"))[0])
}

/// `Sample` against the distribution it must draw from, computed here: 20,000 rows of the same 10 logits (each
/// row its own draw) give every token's frequency within 5 standard errors of softmax(kept / temperature), where
/// top-k keeps the logits at or above the k-th largest (a tie with it kept, as transformers' top-k does).
#[test]
fn sample_draws_from_the_softmax_of_the_top_k() {
    let row = [2.0f32, 1.0, 0.5, 0.5, 0.0, -1.0, -3.0, 1.0, 3.0, 0.2];
    let (v, rows) = (row.len(), 20_000);
    let (_dir, session) = sample_session(rows, v);
    let logits: Vec<f32> = row.iter().copied().cycle().take(rows * v).collect();
    for (t, k) in [(1.0f32, 0usize), (0.5, 3), (2.0, 5), (1.0, 10), (3.0, 1), (0.25, 2)] {
        let mut sorted = row.to_vec();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let floor = if k > 0 && k < v { sorted[k - 1] } else { f32::NEG_INFINITY };
        let w: Vec<f64> =
            row.iter().map(|&l| if l >= floor { (f64::from(l) / f64::from(t)).exp() } else { 0.0 }).collect();
        let sum: f64 = w.iter().sum();
        let got = draw(&session, &logits, rows, t, k as i64, 42, 7);
        let mut count = vec![0usize; v];
        for &g in &got {
            count[usize::try_from(g).expect("a token id")] += 1;
        }
        for i in 0..v {
            let p = w[i] / sum;
            let f = count[i] as f64 / rows as f64;
            let se = (p * (1.0 - p) / rows as f64).sqrt();
            assert!(
                (f - p).abs() <= 5.0 * se + 1e-12,
                "temperature {t} top-k {k}: token {i} drawn {f:.4} of the time, softmax gives {p:.4} ({count:?})"
            );
        }
    }
    // Temperature 0: the largest logit; seeds and counters key the draws.
    assert!(draw(&session, &logits, rows, 0.0, 0, 1, 1).iter().all(|&g| g == 8));
    let a = draw(&session, &logits, rows, 1.0, 0, 42, 7);
    assert_eq!(a, draw(&session, &logits, rows, 1.0, 0, 42, 7), "the same seed and counter draw the same");
    for other in [draw(&session, &logits, rows, 1.0, 0, 43, 7), draw(&session, &logits, rows, 1.0, 0, 42, 8)] {
        let same = a.iter().zip(&other).filter(|(x, y)| x == y).count() as f64 / rows as f64;
        // Independent draws agree with probability Σp² (0.32 here).
        assert!(same < 0.4, "another seed or counter agrees on {same:.3} of the draws");
    }
}

/// Long rows (a vocabulary of 5,000; the top-k threshold found bit by bit): every draw among its row's k largest,
/// with ties at the boundary and negative logits, and more than the largest drawn.
#[test]
fn sample_top_k_on_long_rows() {
    let (v, rows) = (5000, 64);
    let (_dir, session) = sample_session(rows, v);
    let mut state = 12345u32;
    let mut next = || {
        state = state.wrapping_mul(1664525).wrapping_add(1013904223);
        (state >> 8) as f32 / (1 << 24) as f32
    };
    // Values on a coarse grid so that rows hold ties, from -20 to 20.
    let logits: Vec<f32> = (0..rows * v).map(|_| ((next() * 40.0 - 20.0) * 4.0).round() / 4.0).collect();
    for k in [1usize, 7, 100, 4999] {
        let got = draw(&session, &logits, rows, 100.0, k as i64, 9, 3);
        let mut ranks = std::collections::HashSet::new();
        for (r, &g) in got.iter().enumerate() {
            let row = &logits[r * v..(r + 1) * v];
            let mut sorted = row.to_vec();
            sorted.sort_by(|a, b| b.total_cmp(a));
            let value = row[usize::try_from(g).expect("a token id")];
            assert!(value >= sorted[k - 1], "top-k {k}, row {r}: drew {value}, the k-th largest is {}", sorted[k - 1]);
            ranks.insert(sorted.iter().position(|&x| x == value).unwrap());
        }
        if k > 1 {
            assert!(ranks.len() > 1, "top-k {k} at temperature 100 drew only the largest logits");
        } else {
            assert!(got.iter().enumerate().all(|(r, &g)| {
                let row = &logits[r * v..(r + 1) * v];
                row[g as usize] == row.iter().copied().fold(f32::MIN, f32::max)
            }));
        }
    }
}

fn wgslc(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_wgslc")).args(args).output().expect("run wgslc")
}

/// Subgroup modules: a decoder's matrix-vector kernels (f32 and packed) and its one-row attention have one; the
/// test adapter (lavapipe) replays them, so every GPU suite runs them, and `common::gpus_for` the plain modules
/// too; `--no-subgroups` keeps the CLI on the plain ones, with the same tokens.
#[test]
fn decoders_have_subgroup_modules_that_the_test_adapter_replays() {
    assert!(
        common::gpu().subgroups,
        "{} replays no subgroup module: the suites would not check them",
        common::gpu().describe()
    );
    for (name, weights) in [("llama_dynamo20", wgslc::WeightFormat::Keep), ("llama_dynamo20", wgslc::WeightFormat::Q4)]
    {
        let out = tempfile::tempdir().unwrap();
        let kv_cache = Some(wgslc::KvCache { capacity: 46, chunk: 4, state: vec![], fixed: Default::default() });
        let opts = wgslc::CompileOptions { kv_cache, weights, ..Default::default() };
        wgslc::compile(&model_of(&case(name)), out.path(), &opts).unwrap();
        let plan = wgslc::artifact::Plan::read(out.path()).unwrap();
        let gemv: Vec<_> = plan.kernels.iter().filter(|k| k.wgsl.ends_with("_gemv.wgsl")).collect();
        assert!(gemv.len() >= 4 && gemv.iter().all(|k| k.subgroups.is_some()), "{name} {weights:?}: {gemv:?}");
        let with: Vec<&str> = plan.kernels.iter().filter_map(|k| k.subgroups.as_deref()).collect();
        assert!(with.iter().any(|p| p.ends_with("_attention.subgroups.wgsl")), "{name}: {with:?}");
        for p in &with {
            let text = std::fs::read_to_string(out.path().join(p)).unwrap();
            assert!(text.starts_with("enable subgroups;"), "{p}");
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let art = tmp.path().join("art");
    let r = wgslc(&["compile", &s(&case("qwen2_dynamo20").join("model.onnx")), "-o", &s(&art), "--kv-cache", "24"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let prompt = case("qwen2_dynamo20").join("prompt_1.npy");
    let want = ids(&npy(&case("qwen2_dynamo20").join("tokens_1.npy")));
    for flags in [&[][..], &["--no-subgroups"][..]] {
        let out = tmp.path().join(format!("out{}", flags.len()));
        let args = ["generate", &s(&art), "--input-ids", &s(&prompt), "--max-new-tokens", "7", "-o", &s(&out)];
        let r = wgslc(&[flags, &args[..]].concat());
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let line: serde_json::Value = serde_json::from_slice(&r.stdout).expect("one JSON line");
        let adapter = line["adapter"].as_str().unwrap();
        assert_eq!(adapter.ends_with(", subgroups)"), flags.is_empty(), "{flags:?}: {adapter}");
        assert_eq!(ids(&npy(&out.join("tokens.npy"))), want[..12], "{flags:?}");
    }
}

/// The CLI contract: `wgslc generate DIR --input-ids FILE.npy --max-new-tokens N [--eos ID] -o OUTDIR` writes
/// OUTDIR/tokens.npy (int64 [1, prompt + generated]) and prints one JSON line with the timings.
#[test]
fn cli_generate_writes_tokens_and_prints_timings() {
    let tmp = tempfile::tempdir().unwrap();
    let (art, out) = (tmp.path().join("art"), tmp.path().join("out"));
    let model = case("qwen2_torchscript17").join("model.onnx");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let r = wgslc(&["compile", &s(&model), "-o", &s(&art), "--kv-cache", "24"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let prompt = case("qwen2_torchscript17").join("prompt_1.npy");
    let r = wgslc(&["generate", &s(&art), "--input-ids", &s(&prompt), "--max-new-tokens", "7", "-o", &s(&out)]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let line: serde_json::Value = serde_json::from_slice(&r.stdout).expect("one JSON line");
    for key in ["prefill_ms", "decode_tokens", "decode_ms", "tokens_per_s"] {
        assert!(line.get(key).is_some_and(|v| v.is_number()), "{key} missing in {line}");
    }
    assert_eq!(line["decode_tokens"], 6);
    let want = ids(&npy(&case("qwen2_torchscript17").join("tokens_1.npy")));
    let got = npy(&out.join("tokens.npy"));
    assert_eq!(got.shape, vec![1, 12]);
    assert_eq!(ids(&got), want[..12]);
    // Sampling: top-k 1 is greedy; the JSON line names the seed; a negative temperature is refused.
    let sampled = tmp.path().join("sampled");
    let args = ["generate", &s(&art), "--input-ids", &s(&prompt), "--max-new-tokens", "7", "-o", &s(&sampled)];
    let r = wgslc(&[&args[..], &["--top-k", "1", "--seed", "3"]].concat());
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let line: serde_json::Value = serde_json::from_slice(&r.stdout).expect("one JSON line");
    assert_eq!((line["seed"].as_u64(), line["top_k"].as_u64()), (Some(3), Some(1)), "{line}");
    assert_eq!(ids(&npy(&sampled.join("tokens.npy"))), want[..12]);
    let r = wgslc(&[&args[..], &["--temperature", "-1"]].concat());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("--temperature must be 0 or more"), "{err}");

    // `bench --decode`: one JSON line of decode timings whose counts are the plan's, then, with --profile, one
    // line per kernel of the decode step.
    let r = wgslc(&["bench", &s(&art), "--decode", "--prompt", "5", "--tokens", "6", "--iterations", "1", "--profile"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let text = String::from_utf8_lossy(&r.stdout);
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).expect("JSON lines")).collect();
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(art.join("plan.json")).unwrap()).unwrap();
    let step = plan["decoder"]["steps"].as_array().unwrap().iter().find(|s| s["name"] == "decode").unwrap();
    let dispatches = step["dispatches"].as_array().unwrap().len();
    // The decode step writes its cache rows in place and its advance kernel prepares the next step: one dispatch
    // more a token, and no copies.
    assert!(step["advance"].is_object(), "{step}");
    assert_eq!(lines[0]["dispatches_per_token"].as_u64(), Some(dispatches as u64 + 1), "{}", lines[0]);
    assert_eq!(lines[0]["copies_per_token"].as_f64(), Some(0.0), "{}", lines[0]);
    for key in ["tokens_per_s", "ms_per_token", "host_ms_per_token", "gpu_ms_per_token", "floor_share"] {
        assert!(lines[0][key].as_f64().is_some_and(|x| x > 0.0), "{key} missing in {}", lines[0]);
    }
    assert_eq!(lines.len(), 1 + dispatches, "one line per kernel of the decode step");
    assert!(lines[1..].iter().all(|l| l["us"].is_number() && l["gb_per_s"].is_number()));
    let r = wgslc(&["bench", &s(&plain_dir(&tmp)), "--decode"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("no decoder section"), "{err}");

    // Past the capacity, and on an artifact compiled without --kv-cache: clear errors, no panic.
    let r = wgslc(&["generate", &s(&art), "--input-ids", &s(&prompt), "--max-new-tokens", "20", "-o", &s(&out)]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("tokens of KV cache"), "{err}");
    let plain = plain_dir(&tmp);
    let mlp = common::testdata().join("models/mlp/model.onnx");
    let r = wgslc(&["generate", &s(&plain), "--input-ids", &s(&prompt), "--max-new-tokens", "2", "-o", &s(&out)]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("compile the model with --kv-cache"), "{err}");
    // A model without a cache: --kv-cache says what it looks for.
    let r = wgslc(&["compile", &s(&mlp), "-o", &s(&tmp.path().join("x")), "--kv-cache", "8"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("past_key_values.N.key"), "{err}");
}

/// An artifact of a model without a KV cache, compiled once under `tmp`.
fn plain_dir(tmp: &tempfile::TempDir) -> PathBuf {
    let plain = tmp.path().join("plain");
    if !plain.join("plan.json").exists() {
        let mlp = common::testdata().join("models/mlp/model.onnx");
        let r = wgslc(&["compile", mlp.to_str().unwrap(), "-o", plain.to_str().unwrap(), "--dim", "batch=1"]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    }
    plain
}
