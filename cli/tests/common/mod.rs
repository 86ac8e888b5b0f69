//! Shared helpers of the integration tests: one GPU per test binary, case loading and the comparison rule.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use wgslc::runtime::{Gpu, HostTensor, Session, ShaderChecks, TensorData};

/// The GPU every test in a binary shares. No adapter is a failure, never a skip.
pub fn gpu() -> Arc<Gpu> {
    static GPU: OnceLock<Arc<Gpu>> = OnceLock::new();
    GPU.get_or_init(|| {
        let g = Gpu::new().expect("a Vulkan adapter is required (install mesa-vulkan-drivers for lavapipe)");
        eprintln!("tests run on {}", g.describe());
        g
    })
    .clone()
}

/// A second device on the same adapter whose sessions replay every kernel's plain module, never its subgroup
/// module: the suites run an artifact with subgroup modules on both, so that both forms stay checked.
pub fn gpu_without_subgroups() -> Arc<Gpu> {
    static GPU: OnceLock<Arc<Gpu>> = OnceLock::new();
    GPU.get_or_init(|| Gpu::with_options(ShaderChecks::Trusted, false).expect("a Vulkan adapter")).clone()
}

/// The GPUs an artifact runs on in the suites: [`gpu`], and where it has subgroup modules that [`gpu`] replays,
/// [`gpu_without_subgroups`] too, each with a label for failures.
pub fn gpus_for(plan: &wgslc::artifact::Plan) -> Vec<(&'static str, Arc<Gpu>)> {
    let mut gpus = vec![("", gpu())];
    if gpu().subgroups && plan.kernels.iter().any(|k| k.subgroups.is_some()) {
        gpus.push(("without subgroups: ", gpu_without_subgroups()));
    }
    gpus
}

pub fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

/// A case directory: model.onnx (or model.pt2), input_i.npy, output_i.npy and an optional meta.json.
pub struct Case {
    pub name: String,
    pub dir: PathBuf,
    /// The model file: `model.onnx`, or `model.pt2` for a torch.export case.
    pub model: PathBuf,
    pub inputs: Vec<HostTensor>,
    pub expected: Vec<HostTensor>,
    pub opts: wgslc::CompileOptions,
    /// Options of a third run besides the default and `--no-fuse` (meta.json `"inverted_residual": "unfused"`).
    pub also: Option<wgslc::CompileOptions>,
    pub rtol: f64,
    pub atol: f64,
}

fn numbered(dir: &Path, prefix: &str) -> Vec<HostTensor> {
    (0..)
        .map(|i| dir.join(format!("{prefix}_{i}.npy")))
        .take_while(|p| p.exists())
        .map(|p| wgslc::npy::read(&p).unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

pub fn load_case(dir: &Path) -> Case {
    let mut opts = wgslc::CompileOptions::default();
    let (mut rtol, mut atol) = (1e-4, 1e-5);
    let mut also = None;
    if let Ok(text) = std::fs::read_to_string(dir.join("meta.json")) {
        let meta: serde_json::Value = serde_json::from_str(&text).expect("meta.json");
        if let Some(dims) = meta.get("dims").and_then(|d| d.as_object()) {
            for (k, v) in dims {
                opts.dims.insert(k.clone(), v.as_u64().expect("dim value") as usize);
            }
        }
        if meta.get("inverted_residual").and_then(|v| v.as_str()) == Some("unfused") {
            let inverted_residual = Some(wgslc_passes::InvertedResidualMode::Unfused);
            also = Some(wgslc::CompileOptions { inverted_residual, ..opts.clone() });
        }
        // Inputs bound at compile time: `--const NAME=FILE.npy`.
        if let Some(consts) = meta.get("const").and_then(|d| d.as_object()) {
            for (k, v) in consts {
                let t = wgslc::npy::read(&dir.join(v.as_str().expect("a .npy file name")))
                    .unwrap_or_else(|e| panic!("{e}"));
                opts.constants.insert(k.clone(), wgslc::constant_from_host(&t));
            }
        }
        // Weights stored narrower than the model has them: `--weights f16|q8|q4`.
        if let Some(w) = meta.get("weights").and_then(|v| v.as_str()) {
            opts.weights = match w {
                "f16" => wgslc::WeightFormat::F16,
                "q8" => wgslc::WeightFormat::Q8,
                "q4" => wgslc::WeightFormat::Q4,
                other => panic!("meta.json: unknown weights '{other}'"),
            };
        }
        rtol = meta.get("rtol").and_then(|v| v.as_f64()).unwrap_or(rtol);
        atol = meta.get("atol").and_then(|v| v.as_f64()).unwrap_or(atol);
    }
    Case {
        name: dir.file_name().unwrap().to_string_lossy().into_owned(),
        dir: dir.to_path_buf(),
        model: ["model.onnx", "model.pt2"]
            .iter()
            .map(|m| dir.join(m))
            .find(|p| p.exists())
            .unwrap_or(dir.join("model.onnx")),
        inputs: numbered(dir, "input"),
        expected: numbered(dir, "output"),
        opts,
        also,
        rtol,
        atol,
    }
}

pub fn cases(suite: &str) -> Vec<Case> {
    cases_in(&testdata().join(suite))
}

/// Every case directory (one holding model.onnx or model.pt2) directly under `root`, sorted by name.
pub fn cases_in(root: &Path) -> Vec<Case> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("model.onnx").exists() || p.join("model.pt2").exists())
        .collect();
    dirs.sort();
    dirs.iter().map(|d| load_case(d)).collect()
}

/// The ranged-dims cases (`--dim NAME=MIN..MAX`: testdata/encoders and testdata/ranged/reductions, whose meta.json
/// names the `ranges`, the `dims` bound to one value and the `lengths` run): one [`Case`] per length, named
/// `<case>@<length>`, with that length's inputs and onnxruntime's outputs, longest first; every length of a case
/// compiles alike.
pub fn ranged_cases() -> Vec<Case> {
    let mut out = Vec::new();
    for c in [
        "encoders/bert_torchscript17",
        "encoders/bert_dynamo20",
        "encoders/bert_wide_dynamo20",
        "ranged/reductions",
        "ranged/batch2",
        "ranged/tied",
    ] {
        let dir = testdata().join(c);
        let text = std::fs::read_to_string(dir.join("meta.json")).expect("meta.json");
        let meta: serde_json::Value = serde_json::from_str(&text).expect("meta.json");
        let mut opts = wgslc::CompileOptions::default();
        for (k, v) in meta["ranges"].as_object().expect("ranges") {
            let (min, max) = (v[0].as_u64().expect("min") as usize, v[1].as_u64().expect("max") as usize);
            opts.ranges.push(wgslc::DimRange { name: k.clone(), min, max });
        }
        for (k, v) in meta.get("dims").and_then(|d| d.as_object()).into_iter().flatten() {
            opts.dims.insert(k.clone(), v.as_u64().expect("dim value") as usize);
        }
        // Longest first: a later, shorter run then finds the longer run's values in its padding, which nothing may
        // read unmasked.
        for l in meta["lengths"].as_array().expect("lengths").iter().rev() {
            let len = dir.join(format!("len_{l}"));
            out.push(Case {
                name: format!("{}@{l}", dir.file_name().unwrap().to_string_lossy()),
                dir: dir.clone(),
                model: dir.join("model.onnx"),
                inputs: numbered(&len, "input"),
                expected: numbered(&len, "output"),
                opts: opts.clone(),
                also: None,
                rtol: 1e-4,
                atol: 1e-4,
            });
        }
    }
    out
}

/// Compiles a case into a fresh directory and runs it on the shared GPU.
pub fn compile_and_run(case: &Case, opts: &wgslc::CompileOptions) -> Result<Vec<HostTensor>, String> {
    let out = tempfile::tempdir().map_err(|e| e.to_string())?;
    wgslc::compile(&case.model, out.path(), opts).map_err(|e| format!("compile: {e}"))?;
    let session = Session::load_with(out.path(), gpu()).map_err(|e| format!("load: {e}"))?;
    bound_once(session.plan())?;
    session.run(&case.inputs).map_err(|e| format!("run: {e}"))
}

/// A kernel binds each buffer range once: a second binding of what it reads becomes an aliasing writable binding
/// when the memory plan puts its output in the same buffer.
fn bound_once(plan: &wgslc::artifact::Plan) -> Result<(), String> {
    for k in &plan.kernels {
        for (i, a) in k.bindings.iter().enumerate() {
            if k.bindings[i + 1..].iter().any(|b| (b.buffer, b.offset, b.size) == (a.buffer, a.offset, a.size)) {
                return Err(format!("kernel '{}' binds buffer {} at {} twice", k.name, a.buffer, a.offset));
            }
        }
    }
    Ok(())
}

/// Compiles a case into a fresh directory and compares its outputs with the case's on every GPU of [`gpus_for`]
/// (its subgroup modules and its plain ones).
pub fn compile_and_check(case: &Case, opts: &wgslc::CompileOptions) -> Result<(), String> {
    let out = tempfile::tempdir().map_err(|e| e.to_string())?;
    wgslc::compile(&case.model, out.path(), opts).map_err(|e| format!("compile: {e}"))?;
    let plan = wgslc::artifact::Plan::read(out.path()).map_err(|e| e.to_string())?;
    bound_once(&plan)?;
    for (what, gpu) in gpus_for(&plan) {
        let session = Session::load_with(out.path(), gpu).map_err(|e| format!("{what}load: {e}"))?;
        let got = session.run(&case.inputs).map_err(|e| format!("{what}run: {e}"))?;
        compare(&got, &case.expected, case.rtol, case.atol).map_err(|e| format!("{what}{e}"))?;
    }
    Ok(())
}

/// ONNX's comparison: |got - want| <= atol + rtol * |want| elementwise, NaN only where NaN is expected, equal
/// shapes and dtype classes; integers and bools exactly.
pub fn compare(got: &[HostTensor], want: &[HostTensor], rtol: f64, atol: f64) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} outputs, expected {}", got.len(), want.len()));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g.shape != w.shape {
            return Err(format!("output {i}: shape {:?}, expected {:?}", g.shape, w.shape));
        }
        match (&g.data, &w.data) {
            (TensorData::F32(a), TensorData::F32(b)) => {
                let mut worst = (0.0f64, 0usize);
                for (j, (&x, &y)) in a.iter().zip(b).enumerate() {
                    let (x, y) = (x as f64, y as f64);
                    if !wgslc::conformance::within_tolerance(x, y, rtol, atol) {
                        return Err(format!("output {i}[{j}]: got {x}, expected {y} (rtol {rtol}, atol {atol})"));
                    }
                    if y.is_finite() && (x - y).abs() > worst.0 {
                        worst = ((x - y).abs(), j);
                    }
                }
            }
            (TensorData::I64(a), TensorData::I64(b)) if a == b => {}
            (TensorData::I32(a), TensorData::I32(b)) if a == b => {}
            (TensorData::Bool(a), TensorData::Bool(b)) if a == b => {}
            (x, y) => {
                let kind = |d: &TensorData| match d {
                    TensorData::F32(_) => "float32",
                    TensorData::I64(_) => "int64",
                    TensorData::I32(_) => "int32",
                    TensorData::Bool(_) => "bool",
                };
                if kind(x) != kind(y) {
                    return Err(format!("output {i}: dtype {}, expected {}", kind(x), kind(y)));
                }
                return Err(format!("output {i}: {x:?} differs from {y:?}"));
            }
        }
    }
    Ok(())
}

/// Runs every case of a suite and fails with the list of failures (every case runs, one failure does not hide
/// the next).
pub fn run_suite(suite: &str) {
    let cases = cases(suite);
    assert!(!cases.is_empty(), "no cases in testdata/{suite}");
    let mut failures = Vec::new();
    for case in &cases {
        // Fused (the default), one kernel per op and the CPU target must all reproduce the reference; unfused
        // graphs are where most elementwise kernels write in place. (A buffer per value is compared bitwise in
        // tests/cli.rs.)
        let unfused = wgslc::CompileOptions { no_fuse: true, ..case.opts.clone() };
        // And shaped for a CPU adapter (`--target cpu`): its matrix-vector layouts, attention unfused, weights in
        // their stored layout.
        let cpu = wgslc::CompileOptions { target: wgslc::Target::Cpu, ..case.opts.clone() };
        let run =
            |opts: &wgslc::CompileOptions, what: &str| compile_and_check(case, opts).map_err(|e| format!("{what}{e}"));
        let r = run(&case.opts, "")
            .and_then(|()| run(&unfused, "--no-fuse: "))
            .and_then(|()| run(&cpu, "--target cpu: "))
            .and_then(|()| case.also.as_ref().map_or(Ok(()), |o| run(o, "--inverted-residual unfused: ")));
        match r {
            Ok(()) => eprintln!("ok   {suite}/{}", case.name),
            Err(e) => {
                eprintln!("FAIL {suite}/{}: {e}", case.name);
                failures.push(format!("{}: {e}", case.name));
            }
        }
    }
    eprintln!("{suite}: {} passed, {} failed", cases.len() - failures.len(), failures.len());
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}
