//! The command-line contract (README.md): subcommands, files written, exit codes and one-line errors.

mod common;

use prost::Message;
use std::path::Path;
use std::process::{Command, Output};
use wgslc_onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TypeProto, TypeProtoTensor, ValueInfoProto,
};

fn wgslc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wgslc")).args(args).output().expect("run wgslc")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The last stderr line, which is the error line (drivers may print noise before it).
fn error_line(o: &Output) -> String {
    stderr(o).lines().rfind(|l| l.starts_with("wgslc: error:")).unwrap_or_default().to_string()
}

fn tensor_input(name: &str, dims: &[i64]) -> ValueInfoProto {
    use wgslc_onnx::proto::{Dimension, TensorShapeProto};
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: 1,
                shape: Some(TensorShapeProto {
                    dim: dims.iter().map(|&d| Dimension { dim_value: Some(d), dim_param: None }).collect(),
                }),
            }),
            ..Default::default()
        }),
    }
}

fn one_node_model(op: &str, attrs: Vec<AttributeProto>) -> Vec<u8> {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: 17 }],
        graph: Some(GraphProto {
            node: vec![NodeProto {
                input: vec!["x".into()],
                output: vec!["y".into()],
                name: "the_node".into(),
                op_type: op.into(),
                attribute: attrs,
                ..Default::default()
            }],
            input: vec![tensor_input("x", &[2, 3])],
            output: vec![ValueInfoProto { name: "y".into(), r#type: None }],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

#[test]
fn compile_then_run_reproduces_onnxruntime() {
    let case = common::load_case(&common::testdata().join("models/mlp"));
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("art");
    let out = tmp.path().join("out");
    let model = case.dir.join("model.onnx");
    let o = wgslc(&["compile", model.to_str().unwrap(), "-o", art.to_str().unwrap(), "--dim", "batch=4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for f in ["plan.json", "weights.safetensors"] {
        assert!(art.join(f).exists(), "{f} missing");
    }
    // Gemm+Gelu, LayerNormalization, Gemm: three kernels fused; one per op (four) with --no-fuse. The
    // LayerNormalization also comes as a subgroup module.
    let mut files: Vec<String> = std::fs::read_dir(art.join("kernels"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(files.len(), 4, "{files:?}");
    assert_eq!(files.iter().filter(|f| f.ends_with(".subgroups.wgsl")).count(), 1, "{files:?}");
    assert!(files.iter().any(|f| f.ends_with("_layernorm.subgroups.wgsl")), "{files:?}");
    let unfused = tmp.path().join("unfused");
    let o =
        wgslc(&["compile", model.to_str().unwrap(), "-o", unfused.to_str().unwrap(), "--dim", "batch=4", "--no-fuse"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(unfused.join("kernels")).unwrap().count(), 5);

    // Positional input, then the NAME=FILE form: the same outputs.
    let input = case.dir.join("input_0.npy");
    for arg in [input.display().to_string(), format!("x={}", input.display())] {
        let o = wgslc(&["run", art.to_str().unwrap(), "--input", &arg, "-o", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let got = wgslc::npy::read(&out.join("output_0.npy")).unwrap();
        common::compare(&[got], &case.expected, case.rtol, case.atol).unwrap();
        let names: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("outputs.json")).unwrap()).unwrap();
        assert_eq!(names, serde_json::json!({"0": "y"}));
    }
}

#[test]
fn int64_outputs_are_written_as_int64() {
    cli_output_matches("ops/cast_f32_i64", |d| matches!(d, wgslc::runtime::TensorData::I64(_)));
}

#[test]
fn bool_outputs_are_written_as_bool() {
    // `wgslc run` once refused to write bool .npy files ('|b1'); the in-memory suites never saw it.
    cli_output_matches("ops/equal", |d| matches!(d, wgslc::runtime::TensorData::Bool(_)));
}

/// Compiles and runs a one-input testdata case through the CLI and checks the written output's type and values.
fn cli_output_matches(case: &str, dtype_ok: fn(&wgslc::runtime::TensorData) -> bool) {
    let case = common::load_case(&common::testdata().join(case));
    let tmp = tempfile::tempdir().unwrap();
    let (art, out) = (tmp.path().join("a"), tmp.path().join("o"));
    assert!(wgslc(&["compile", case.dir.join("model.onnx").to_str().unwrap(), "-o", art.to_str().unwrap()])
        .status
        .success());
    let mut args = vec!["run".to_string(), art.to_str().unwrap().into(), "-o".into(), out.to_str().unwrap().into()];
    for i in 0..case.inputs.len() {
        args.push("--input".into());
        args.push(case.dir.join(format!("input_{i}.npy")).to_str().unwrap().into());
    }
    let o = wgslc(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(o.status.success(), "{}", stderr(&o));
    let got = wgslc::npy::read(&out.join("output_0.npy")).unwrap();
    assert!(dtype_ok(&got.data), "{:?}", got.shape);
    common::compare(&[got], &case.expected, 0.0, 0.0).unwrap();
}

#[test]
fn missing_dim_binding_is_a_one_line_error_naming_the_dim() {
    let model = common::testdata().join("models/mlp/model.onnx");
    let tmp = tempfile::tempdir().unwrap();
    let o = wgslc(&["compile", model.to_str().unwrap(), "-o", tmp.path().to_str().unwrap()]);
    assert!(!o.status.success());
    let line = error_line(&o);
    assert!(line.contains("'batch'") && line.contains("--dim"), "{line}");

    // --shape binds it too.
    let o = wgslc(&["compile", model.to_str().unwrap(), "-o", tmp.path().to_str().unwrap(), "--shape", "x=4x16"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn bad_models_fail_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("art");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("garbage.onnx", b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x12".to_vec(), "not a valid ONNX model"),
        ("unknown.onnx", one_node_model("FancyOp", vec![]), "node 'the_node': unsupported op 'FancyOp'"),
        (
            "badattr.onnx",
            one_node_model(
                "Gelu",
                vec![AttributeProto { name: "approximate".into(), s: b"cubic".to_vec(), ..Default::default() }],
            ),
            "node 'the_node' (Gelu): unknown approximate='cubic'",
        ),
        (
            "badaxis.onnx",
            one_node_model("Softmax", vec![AttributeProto { name: "axis".into(), i: 7, ..Default::default() }]),
            "axis 7",
        ),
    ];
    for (name, bytes, want) in cases {
        let path = tmp.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let o = wgslc(&["compile", path.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert!(!o.status.success(), "{name} compiled");
        assert!(error_line(&o).contains(want), "{name}: {}", stderr(&o));
    }
    let o = wgslc(&["compile", "/nonexistent/model.onnx", "-o", out.to_str().unwrap()]);
    assert!(!o.status.success() && error_line(&o).contains("cannot read"), "{}", stderr(&o));
}

#[test]
fn wrong_inputs_are_named() {
    let case = common::testdata().join("ops/add_broadcast");
    let tmp = tempfile::tempdir().unwrap();
    let (art, out) = (tmp.path().join("a"), tmp.path().join("o"));
    assert!(wgslc(&["compile", case.join("model.onnx").to_str().unwrap(), "-o", art.to_str().unwrap()])
        .status
        .success());
    // input_1 has shape [4]; giving it as input a (shape [2, 3, 4]) is a shape error naming 'a'.
    let i1 = case.join("input_1.npy");
    let o = wgslc(&[
        "run",
        art.to_str().unwrap(),
        "--input",
        i1.to_str().unwrap(),
        "--input",
        i1.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(error_line(&o).contains("input 'a'") && error_line(&o).contains("shape"), "{}", stderr(&o));
    let o = wgslc(&["run", art.to_str().unwrap(), "--input", i1.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(!o.status.success() && error_line(&o).contains("missing input 1 'b'"), "{}", stderr(&o));
    let o = wgslc(&["run", art.to_str().unwrap(), "--input", "nope=x.npy", "-o", out.to_str().unwrap()]);
    assert!(!o.status.success() && error_line(&o).contains("no input 'nope'"), "{}", stderr(&o));
    let truncated = tmp.path().join("t.npy");
    let bytes = std::fs::read(&i1).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() - 3]).unwrap();
    let o = wgslc(&[
        "run",
        art.to_str().unwrap(),
        "--input",
        case.join("input_0.npy").to_str().unwrap(),
        "--input",
        truncated.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success() && error_line(&o).contains("data bytes"), "{}", stderr(&o));
}

#[test]
fn help_and_version() {
    for args in [&["--help"][..], &["compile", "--help"], &["run", "--help"], &["bench", "--help"], &["--version"]] {
        let o = wgslc(args);
        assert!(o.status.success(), "{args:?}");
        assert!(!o.stdout.is_empty());
    }
    let o = wgslc(&["--version"]);
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("wgslc "));
}

#[test]
fn compiling_twice_gives_identical_artifacts() {
    let model = common::testdata().join("models/transformer/model.onnx");
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for d in [&a, &b] {
        assert!(wgslc(&["compile", model.to_str().unwrap(), "-o", d.to_str().unwrap()]).status.success());
    }
    let files = |d: &Path| {
        let mut v = vec![d.join("plan.json"), d.join("weights.safetensors")];
        let mut k: Vec<_> = std::fs::read_dir(d.join("kernels")).unwrap().map(|e| e.unwrap().path()).collect();
        k.sort();
        v.extend(k);
        v.iter().map(|p| (p.strip_prefix(d).unwrap().to_owned(), std::fs::read(p).unwrap())).collect::<Vec<_>>()
    };
    assert!(files(&a) == files(&b), "artifacts differ");
}

#[test]
fn buffer_reuse_gives_bitwise_identical_outputs() {
    // The memory plan (arenas, in-place writes) must not change a single bit of any output compared with a buffer
    // per value, fused and unfused (where most in-place kernels are).
    for model in ["models/transformer", "torch/gpt2_dynamo20", "models/cnn"] {
        let case = common::load_case(&common::testdata().join(model));
        for no_fuse in [false, true] {
            let opts = wgslc::CompileOptions { no_fuse, ..case.opts.clone() };
            let reuse = common::compile_and_run(&case, &opts).unwrap();
            let apart = common::compile_and_run(&case, &wgslc::CompileOptions { no_reuse: true, ..opts }).unwrap();
            assert_eq!(reuse, apart, "{model} no_fuse={no_fuse}");
            common::compare(&reuse, &case.expected, case.rtol, case.atol).unwrap();
        }
    }
}

#[test]
fn a_session_shared_by_threads_matches_sequential_runs_bitwise() {
    use std::sync::Arc;
    let case = common::load_case(&common::testdata().join("models/transformer"));
    let dir = tempfile::tempdir().unwrap();
    wgslc::compile(&case.dir.join("model.onnx"), dir.path(), &case.opts).unwrap();
    let session = Arc::new(wgslc::runtime::Session::load_with(dir.path(), common::gpu()).unwrap());
    let sequential = session.run(&case.inputs).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (s, inputs) = (session.clone(), case.inputs.clone());
            std::thread::spawn(move || (0..5).map(|_| s.run(&inputs).unwrap()).collect::<Vec<_>>())
        })
        .collect();
    for t in threads {
        for out in t.join().unwrap() {
            assert_eq!(out, sequential);
        }
    }
    common::compare(&sequential, &case.expected, case.rtol, case.atol).unwrap();
}

#[test]
fn a_lost_device_gives_an_error_not_a_panic() {
    // Its own device: destroying it must not disturb the other tests' shared one.
    let case = common::load_case(&common::testdata().join("models/transformer"));
    let dir = tempfile::tempdir().unwrap();
    wgslc::compile(&case.dir.join("model.onnx"), dir.path(), &case.opts).unwrap();
    let gpu = wgslc::runtime::Gpu::new().unwrap();
    let session = wgslc::runtime::Session::load_with(dir.path(), gpu.clone()).unwrap();
    session.run(&case.inputs).unwrap();
    gpu.device.destroy();
    let err = session.run(&case.inputs).unwrap_err().to_string();
    assert!(err.contains("device lost") || err.contains("GPU error"), "{err}");
    let err = wgslc::runtime::Session::load_with(dir.path(), gpu).err().expect("loading on a lost device fails");
    assert!(err.to_string().contains("device lost") || err.to_string().contains("GPU error"), "{err}");
}

/// The kernels compute the same bits whether wgpu adds its runtime checks (index clamps, loop bounds) or not
/// (`ShaderChecks::Trusted`, the default, which every other test runs): the compiler's indices stay in bounds and
/// its loops end, so the checks never fire. The library on the testdata transformer (products, attention,
/// normalizations), and `--shader-checks` on the command line.
#[test]
fn kernels_give_the_same_bits_with_and_without_wgpus_shader_checks() {
    use wgslc::runtime::{Gpu, Session, ShaderChecks};
    let case = common::load_case(&common::testdata().join("models/transformer"));
    let dir = tempfile::tempdir().unwrap();
    let art = dir.path().join("art");
    wgslc::compile(&case.dir.join("model.onnx"), &art, &case.opts).unwrap();
    let outputs = |checks| {
        let gpu = Gpu::with_shader_checks(checks).unwrap();
        assert_eq!(gpu.shader_checks, checks);
        let out = Session::load_with(&art, gpu).unwrap().run(&case.inputs).unwrap();
        common::compare(&out, &case.expected, case.rtol, case.atol).unwrap();
        out
    };
    assert_eq!(ShaderChecks::default(), ShaderChecks::Trusted);
    let (trusted, checked) = (outputs(ShaderChecks::Trusted), outputs(ShaderChecks::Checked));
    for (t, c) in trusted.iter().zip(&checked) {
        assert_eq!(t.data, c.data);
    }

    let out = dir.path().join("out");
    let mut args = vec!["--shader-checks", "run", art.to_str().unwrap(), "-o", out.to_str().unwrap()];
    let inputs: Vec<String> =
        (0..case.inputs.len()).map(|i| case.dir.join(format!("input_{i}.npy")).display().to_string()).collect();
    for i in &inputs {
        args.extend(["--input", i.as_str()]);
    }
    let o = wgslc(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = wgslc::npy::read(&out.join("output_0.npy")).unwrap();
    assert_eq!(got.data, checked[0].data);
}

/// `--target cpu` unfuses attention unless `--attention` says otherwise (the CLI, on the testdata transformer).
#[test]
fn a_cpu_target_unfuses_attention_unless_told() {
    let model = common::testdata().join("models/transformer/model.onnx");
    let attention_kernels = |extra: &[&str]| {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("art");
        let mut args = vec!["--quiet", "compile", model.to_str().unwrap(), "-o", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = wgslc(&args);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        std::fs::read_dir(out.join("kernels"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with("_attention.wgsl"))
            .count()
    };
    assert_eq!(attention_kernels(&[]), 1);
    assert_eq!(attention_kernels(&["--target", "cpu"]), 0);
    assert_eq!(attention_kernels(&["--target", "cpu", "--attention", "fused"]), 1);
    assert_eq!(attention_kernels(&["--attention", "unfused"]), 0);
}

#[test]
fn the_attention_kernel_reproduces_the_reference() {
    // Stated rather than left to the default, so the test keeps covering the kernel if the default changes.
    let models = [
        "models/transformer",
        "ops/attention_masked",
        "ops/attention_many_heads",
        // Heads 64 wide (a thread's value columns one vec4) and 128 wide over rows of 80 (two vec4s, five steps).
        "ops/attention_head64",
        "ops/attention_dv128",
        "ops/attention_gqa",
        "ops/attention_gqa_scaled",
        // One query row: the one-row kernel, K and V read as vec4s and (strided) four scalars at a time.
        "ops/attention_one_row",
        "ops/attention_one_row_strided",
        "torch/gpt2_dynamo20",
        "torch/nanogpt_dynamo20",
        "torch/nanogpt_torchscript17",
    ];
    for model in models {
        let case = common::load_case(&common::testdata().join(model));
        let opts = wgslc::CompileOptions { attention: Some(wgslc_passes::AttentionMode::Fused), ..case.opts.clone() };
        let dir = tempfile::tempdir().unwrap();
        let summary = wgslc::compile(&case.dir.join("model.onnx"), dir.path(), &opts).unwrap();
        assert!(
            summary.plan.kernels.iter().any(|k| k.wgsl.ends_with("_attention.wgsl")),
            "{model}: no attention kernel"
        );
        let got = common::compile_and_run(&case, &opts).unwrap();
        common::compare(&got, &case.expected, case.rtol, case.atol).unwrap_or_else(|e| panic!("{model}: {e}"));
    }
}

#[test]
fn gqa_expansion_folds_into_the_products() {
    // K and V of 2 heads expanded to 4 (Unsqueeze → Expand → Reshape): the Expands fold into the products' batch
    // strides over finer batch coordinates, fused into one attention kernel or as three kernels, never copied.
    let case = common::load_case(&common::testdata().join("ops/attention_gqa"));
    for (attention, kernels) in [(wgslc_passes::AttentionMode::Fused, 1), (wgslc_passes::AttentionMode::Unfused, 3)] {
        let opts = wgslc::CompileOptions { attention: Some(attention), ..case.opts.clone() };
        let dir = tempfile::tempdir().unwrap();
        let summary = wgslc::compile(&case.dir.join("model.onnx"), dir.path(), &opts).unwrap();
        let names: Vec<&str> = summary.plan.kernels.iter().map(|k| k.wgsl.as_str()).collect();
        assert_eq!(names.len(), kernels, "{attention:?}: {names:?}");
        let got = common::compile_and_run(&case, &opts).unwrap();
        common::compare(&got, &case.expected, case.rtol, case.atol).unwrap_or_else(|e| panic!("{attention:?}: {e}"));
    }
}

#[test]
fn no_adapter_is_a_clear_error() {
    // Linux has no DirectX 12: asking wgpu for that backend alone finds no adapter.
    let case = common::load_case(&common::testdata().join("models/transformer"));
    let dir = tempfile::tempdir().unwrap();
    wgslc::compile(&case.dir.join("model.onnx"), dir.path(), &case.opts).unwrap();
    let input = case.dir.join("input_0.npy");
    let out = Command::new(env!("CARGO_BIN_EXE_wgslc"))
        .args(["run", dir.path().to_str().unwrap(), "--input", input.to_str().unwrap(), "-o"])
        .arg(dir.path().join("outputs"))
        .env("WGPU_BACKEND", "dx12")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no GPU adapter found"), "{err}");
}

#[test]
fn bench_profile_times_every_dispatch() {
    let model = common::testdata().join("models/cnn/model.onnx");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a");
    assert!(wgslc(&["compile", model.to_str().unwrap(), "-o", dir.to_str().unwrap()]).status.success());
    let o = wgslc(&["bench", dir.to_str().unwrap(), "--iterations", "2", "--warmup", "1", "--profile"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> =
        String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let dispatches = lines[0]["dispatches"].as_u64().unwrap() as usize;
    // The summary: mean, min ≤ median ≤ max over the timed replays.
    let ms = |k: &str| lines[0][k].as_f64().unwrap_or_else(|| panic!("{k} in {}", lines[0]));
    assert!(ms("min_ms") <= ms("median_ms") && ms("median_ms") <= ms("max_ms") && ms("ms_per_inference") > 0.0);
    assert_eq!(lines[0]["iterations"], 2);
    // Zero iterations would time nothing.
    let o0 = wgslc(&["bench", dir.to_str().unwrap(), "--iterations", "0"]);
    assert!(!o0.status.success() && stderr(&o0).contains("--iterations"), "{}", stderr(&o0));
    // lavapipe has timestamp queries: one pass, a timestamp around every dispatch.
    assert_eq!(lines[1]["profile"], "gpu timestamps in one pass");
    // Every dispatch in replay order, named, its times summing to the line's total.
    let each = lines[1]["kernels"].as_array().unwrap();
    assert_eq!(each.len(), dispatches);
    let sum: f64 = each.iter().map(|k| k[1].as_f64().unwrap()).sum();
    assert!((sum - lines[1]["kernels_ms"].as_f64().unwrap()).abs() < 1e-3 * dispatches as f64, "{sum} {}", lines[1]);
    // The kinds (names without their numbers; the CNN's two Conv+Relu kernels are one kind), then the kernels.
    let kinds: Vec<&serde_json::Value> = lines[2..].iter().take_while(|l| l.get("kind").is_some()).collect();
    let kernels = &lines[2 + kinds.len()..];
    let count = |k: &str| kinds.iter().find(|l| l["kind"] == k).map(|l| l["count"].as_u64().unwrap());
    assert_eq!(count("Conv_+Relu_"), Some(2), "{kinds:?}");
    assert_eq!(kinds.iter().map(|l| l["count"].as_u64().unwrap() as usize).sum::<usize>(), dispatches);
    let kind_share: f64 = kinds.iter().map(|k| k["share"].as_f64().unwrap()).sum();
    assert!((kind_share - 1.0).abs() < 0.01, "{kind_share}");
    assert_eq!(kernels.len(), dispatches.min(15));
    let mut seen: Vec<u64> = kernels.iter().map(|k| k["dispatch"].as_u64().unwrap()).collect();
    seen.sort();
    assert_eq!(seen, (0..dispatches as u64).collect::<Vec<_>>());
    let plan: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("plan.json")).unwrap()).unwrap();
    let names: Vec<&str> = plan["kernels"].as_array().unwrap().iter().map(|k| k["name"].as_str().unwrap()).collect();
    let share: f64 = kernels.iter().map(|k| k["share"].as_f64().unwrap()).sum();
    assert!((share - 1.0).abs() < 0.01, "{share}");
    assert!(each.iter().all(|k| names.contains(&k[0].as_str().unwrap())), "{each:?}");
    for k in kernels {
        assert!(names.contains(&k["kernel"].as_str().unwrap()), "{k}");
        assert!(k["ms"].as_f64().unwrap() > 0.0, "{k}");
    }
}

/// `--dump-after` reaches every stage: the IR after a graph pass, the kernels with their folds and boundaries
/// after `schedule`, the buffer plan after `memory`, the WGSL after `emit`; an unknown stage names them all.
#[test]
fn dump_after_reaches_schedule_and_memory() {
    let model = common::testdata().join("models/transformer/model.onnx");
    let model = model.to_str().unwrap();
    let dump = |stage: &str| {
        let o = wgslc(&["compile", model, "-o", "/nonexistent/never-written", "--dump-after", stage]);
        assert!(o.status.success(), "{stage}: {}", stderr(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    let infer = dump("infer");
    assert!(infer.contains("output ") && !infer.contains("schedule:"), "{infer}");
    let sched = dump("schedule");
    assert!(sched.contains("schedule: ") && sched.contains("boundary "), "{sched}");
    assert!(sched.lines().any(|l| l.starts_with("k000 ")), "{sched}");
    assert!(!sched.contains("memory: "), "{sched}");
    let mem = dump("memory");
    assert!(mem.contains("memory: ") && mem.contains("buffer 0 "), "{mem}");
    let emit = dump("emit");
    assert!(emit.contains("@compute"), "{emit}");
    let weights = dump("weights");
    assert!(weights.contains("output ") && !weights.contains("schedule:"), "{weights}");
    let o = wgslc(&["compile", model, "-o", "/nonexistent/never-written", "--dump-after", "fusion"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(error_line(&o).contains(
        "stages: import, layout, infer, last_row, lower, dce, ranges, merge, legalize, kmajor, narrow, weights, \
         tabulate, split, ksplit, schedule, memory, emit"
    ));
    // A decoder's position tables appear at `tabulate`, not before it.
    let decoder = common::testdata().join("decoders/qwen2_dynamo20/model.onnx");
    let decoder_dump = |stage: &str| {
        let args = ["compile", decoder.to_str().unwrap(), "-o", "/nonexistent/never-written", "--kv-cache", "64"];
        let o = wgslc(&[&args[..], &["--dump-after", stage]].concat());
        assert!(o.status.success(), "{stage}: {}", stderr(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    assert!(decoder_dump("tabulate").contains("/lookup"));
    assert!(!decoder_dump("weights").contains("/lookup"));
    assert!(decoder_dump("layout").contains("output "));
}

/// Nothing a user owns is deleted or overwritten by `compile -o`: a non-empty directory without an artifact is
/// refused (unless --force, which still touches none of its files), an earlier artifact is replaced file by file
/// with the user's files beside it kept, and a failed compile leaves the directory as it was.
#[test]
fn compile_never_deletes_or_overwrites_a_users_files() {
    let tmp = tempfile::tempdir().unwrap();
    let (cnn, mlp) =
        (common::testdata().join("models/cnn/model.onnx"), common::testdata().join("models/mlp/model.onnx"));
    let (cnn, mlp) = (cnn.to_str().unwrap(), mlp.to_str().unwrap());
    // A directory with the user's own kernels/ and no plan.json.
    let dir = tmp.path().join("project");
    std::fs::create_dir_all(dir.join("kernels")).unwrap();
    std::fs::write(dir.join("kernels/my_kernel.cu"), "mine").unwrap();
    let out = dir.to_str().unwrap();
    let o = wgslc(&["compile", cnn, "-o", out]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(error_line(&o).contains("is not empty and holds no wgslc artifact"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(dir.join("kernels/my_kernel.cu")).unwrap(), "mine");
    assert!(!dir.join("plan.json").exists());
    // --force adds the artifact beside them.
    let o = wgslc(&["compile", cnn, "-o", out, "--force"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(dir.join("kernels/my_kernel.cu")).unwrap(), "mine");
    let cnn_kernels = std::fs::read_dir(dir.join("kernels")).unwrap().count() - 1;
    assert_eq!(cnn_kernels, 5);
    // Recompiling another model replaces the artifact: its stale kernels go, the user's files stay.
    std::fs::write(dir.join("notes.txt"), "notes").unwrap();
    let o = wgslc(&["compile", mlp, "-o", out, "--dim", "batch=2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut names: Vec<String> = std::fs::read_dir(dir.join("kernels"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    // The MLP's three kernels, its LayerNormalization's subgroup module and the user's file.
    assert!(names.contains(&"my_kernel.cu".to_string()) && names.len() == 5, "{names:?}");
    assert_eq!(std::fs::read_to_string(dir.join("notes.txt")).unwrap(), "notes");
    // A failed compile (an unbound dim) leaves the artifact as it was.
    let plan = std::fs::read(dir.join("plan.json")).unwrap();
    let o = wgslc(&["compile", cnn, "-o", out, "--dim", "nonsense=3"]);
    assert_eq!(o.status.code(), Some(1));
    let o = wgslc(&["compile", mlp, "-o", out]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(std::fs::read(dir.join("plan.json")).unwrap(), plan);
    assert!(std::fs::read_dir(tmp.path()).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .contains("wgslc-new")));
    // A user's file where a new artifact file would go is not replaced, and nothing changes.
    let fresh = tmp.path().join("fresh");
    std::fs::create_dir_all(fresh.join("kernels")).unwrap();
    std::fs::write(fresh.join("kernels/k000_conv.wgsl"), "mine").unwrap();
    let o = wgslc(&["compile", cnn, "-o", fresh.to_str().unwrap(), "--force"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(error_line(&o).contains("is not part of the previous artifact"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(fresh.join("kernels/k000_conv.wgsl")).unwrap(), "mine");
    assert!(!fresh.join("plan.json").exists());
    // An artifact's subgroup modules are its files too: recompiling a decoder over itself replaces them, and over
    // another model removes them.
    let dec = common::testdata().join("decoders/llama_dynamo20/model.onnx");
    let dec = dec.to_str().unwrap();
    let sg_dir = tmp.path().join("decoder");
    let sg_out = sg_dir.to_str().unwrap();
    for _ in 0..2 {
        let o = wgslc(&["compile", dec, "-o", sg_out, "--kv-cache", "16"]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let subgroup_files = |d: &Path| {
        std::fs::read_dir(d.join("kernels"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().to_string_lossy().ends_with(".subgroups.wgsl"))
            .count()
    };
    assert!(subgroup_files(&sg_dir) > 0);
    let o = wgslc(&["compile", mlp, "-o", sg_out, "--dim", "batch=2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The decoder's subgroup modules go; the MLP's LayerNormalization brings its own one.
    assert_eq!(subgroup_files(&sg_dir), 1);
    // Every artifact file gets the same permissions (the weights were written private to their owner).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |f: &str| std::fs::metadata(dir.join(f)).unwrap().permissions().mode();
        assert_eq!(mode("weights.safetensors"), mode("plan.json"));
    }
}

/// Weights larger than one binding are split into blocks their readers address: with the binding limit made tiny,
/// embedding lookups (negative indices too), products, a Gemm and a tied LM head (a transposed embedding) still
/// reproduce onnxruntime, and no kernel binds more than the limit (emission checks every binding).
#[test]
fn weights_larger_than_one_binding_are_split() {
    // Embedding tables in blocks: GPT-2's in 2 (one GatherBlocks kernel), BERT's in 8 (more than one kernel's
    // bindings hold: a Gather per block, summed).
    let cases = [
        ("torch/gpt2_dynamo20", 65536),
        ("torch/bert_dynamo20", 65536),
        ("models/transformer", 16384),
        ("models/mlp", 1024),
        // Negative indices over a table in 2 blocks.
        ("ops/gather_runtime_indices", 100),
    ];
    for (name, bytes) in cases {
        let case = common::load_case(&common::testdata().join(name));
        let limits = wgslc::Limits { max_storage_buffer_binding_size: bytes, ..Default::default() };
        let opts = wgslc::CompileOptions { limits, ..case.opts.clone() };
        let got = common::compile_and_run(&case, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
        common::compare(&got, &case.expected, case.rtol, case.atol).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // A weight whose reader cannot address blocks is refused by name.
    let case = common::load_case(&common::testdata().join("models/cnn"));
    let limits = wgslc::Limits { max_storage_buffer_binding_size: 256, ..Default::default() };
    let opts = wgslc::CompileOptions { limits, ..case.opts.clone() };
    let err = common::compile_and_run(&case, &opts).unwrap_err();
    assert!(err.contains("more than one binding holds (256 bytes)") && err.contains("Conv"), "{err}");
    // --limits takes a JSON file of WebGPU limit names.
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("limits.json");
    std::fs::write(&file, r#"{"maxStorageBufferBindingSize": 65536}"#).unwrap();
    let model = common::testdata().join("torch/gpt2_dynamo20/model.onnx");
    let out = tmp.path().join("a");
    let o =
        wgslc(&["compile", model.to_str().unwrap(), "-o", out.to_str().unwrap(), "--limits", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(&file, r#"{"maxStorageBufferBindingSize": 0}"#).unwrap();
    let o = wgslc(&[
        "compile",
        model.to_str().unwrap(),
        "-o",
        tmp.path().join("b").to_str().unwrap(),
        "--limits",
        file.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(error_line(&o).contains("maxStorageBufferBindingSize must be at least 1"), "{}", stderr(&o));
}

/// `wgslc report` renders report.json as text, JSON and HTML, and refuses a report it cannot read by name.
#[test]
fn report_renders_and_checks_its_version() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a");
    let model = common::testdata().join("models/cnn/model.onnx");
    assert!(wgslc(&["compile", model.to_str().unwrap(), "-o", dir.to_str().unwrap()]).status.success());
    let d = dir.to_str().unwrap();
    let text = wgslc(&["report", d, "--format", "text"]);
    assert!(text.status.success() && String::from_utf8_lossy(&text.stdout).contains("dispatches         5"));
    let json = wgslc(&["report", d, "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!((v["format"].as_str(), v["version"].as_u64()), (Some("wgslc-report"), Some(1)));
    let html = wgslc(&["report", d, "--format", "html"]);
    assert!(html.status.success() && String::from_utf8_lossy(&html.stdout).contains("<svg"));
    let mut newer = v.clone();
    newer["version"] = 2.into();
    std::fs::write(dir.join("report.json"), newer.to_string()).unwrap();
    let o = wgslc(&["report", d]);
    assert_eq!(o.status.code(), Some(1));
    assert!(error_line(&o).contains("reads wgslc-report up to version 1"), "{}", stderr(&o));
}

/// `--dim NAME=MIN..MAX` on the command line: one artifact, run at two lengths by `wgslc run`, each output of its
/// run's shape and onnxruntime's values; a length outside the range and a malformed range are one-line errors.
#[test]
fn ranged_dims_on_the_command_line() {
    let case = common::testdata().join("ranged/reductions");
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("art");
    let model = case.join("model.onnx");
    let o = wgslc(&["compile", model.to_str().unwrap(), "-o", art.to_str().unwrap(), "--dim", "S=1..32"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for l in [5, 32] {
        let dir = case.join(format!("len_{l}"));
        let out = tmp.path().join(format!("out{l}"));
        let input = dir.join("input_0.npy");
        let o = wgslc(&["run", art.to_str().unwrap(), "--input", input.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        for i in 0..11 {
            let got = wgslc::npy::read(&out.join(format!("output_{i}.npy"))).unwrap();
            let want = wgslc::npy::read(&dir.join(format!("output_{i}.npy"))).unwrap();
            common::compare(&[got], &[want], 1e-4, 1e-4).unwrap_or_else(|e| panic!("length {l}, output {i}: {e}"));
        }
    }
    let long = tmp.path().join("long.npy");
    wgslc::npy::write(
        &long,
        &wgslc::runtime::HostTensor { shape: vec![1, 33, 8], data: wgslc::runtime::TensorData::F32(vec![0.0; 264]) },
    )
    .unwrap();
    let o = wgslc(&[
        "run",
        art.to_str().unwrap(),
        "--input",
        long.to_str().unwrap(),
        "-o",
        tmp.path().join("x").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(error_line(&o).contains("input 'x_in': axis 1 is 33: it must be S, in 1..32"), "{}", error_line(&o));
    let o =
        wgslc(&["compile", model.to_str().unwrap(), "-o", tmp.path().join("b").to_str().unwrap(), "--dim", "S=1..x"]);
    assert!(!o.status.success());
    assert!(error_line(&o).contains("--dim S: 'x' is not a non-negative integer"), "{}", error_line(&o));
}

/// `--buckets` on the command line: the bucket ends a user gives, each bucket's artifact picked by a run's length
/// (`bench --dim` says which), and ends outside the range or out of order refused by value.
#[test]
fn buckets_on_the_command_line() {
    let case = common::testdata().join("ranged/reductions");
    let tmp = tempfile::tempdir().unwrap();
    let (art, model) = (tmp.path().join("art"), case.join("model.onnx"));
    let (art_s, model_s) = (art.to_str().unwrap(), model.to_str().unwrap());
    let o = wgslc(&["compile", model_s, "-o", art_s, "--dim", "S=1..32", "--buckets", "1,5"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("(3 buckets, "), "{}", stderr(&o));
    let plan = wgslc::artifact::Plan::read(&art).unwrap();
    let spans: Vec<(usize, usize)> = plan.ranges.unwrap().buckets.iter().map(|b| (b.min, b.max)).collect();
    assert_eq!(spans, [(1, 1), (2, 5), (6, 32)]);
    let o = wgslc(&["bench", art_s, "--dim", "S=1,5,32", "--iterations", "1", "--warmup", "0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> =
        String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let picked: Vec<(u64, serde_json::Value)> =
        lines.iter().map(|l| (l["dims"]["S"].as_u64().unwrap(), l["bucket"].clone())).collect();
    let want = [(1, serde_json::json!([1, 1])), (5, serde_json::json!([2, 5])), (32, serde_json::json!([6, 32]))];
    assert_eq!(picked, want);
    let o = wgslc(&["bench", art_s, "--dim", "S=33", "--iterations", "1"]);
    assert!(error_line(&o).contains("--dim S: 33 is outside its range 1..32"), "{}", error_line(&o));
    for (ends, want) in [
        ("32", "32: each bucket's end must lie in 1..31"),
        ("5,3", "3: each bucket's end must lie in 1..31 (the last bucket ends at MAX), in increasing order"),
        ("x", "--buckets: 'x' is not a bucket's end"),
    ] {
        let o = wgslc(&[
            "compile",
            model_s,
            "-o",
            tmp.path().join("b").to_str().unwrap(),
            "--dim",
            "S=1..32",
            "--buckets",
            ends,
        ]);
        assert!(!o.status.success() && error_line(&o).contains(want), "{ends}: {}", error_line(&o));
    }
    let o =
        wgslc(&["compile", model_s, "-o", tmp.path().join("c").to_str().unwrap(), "--dim", "S=4", "--buckets", "2"]);
    assert!(error_line(&o).contains("--buckets: there is no ranged dim to cut"), "{}", error_line(&o));
}
