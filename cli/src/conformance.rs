//! The ONNX backend node test suite runner: compiles every case, runs it on one shared device, compares with
//! the expected outputs by ONNX's rule and classifies the result. One case never takes the suite down: each runs
//! on its own thread, panics are caught and a case that exceeds its time is abandoned.

use crate::runtime::{Gpu, HostTensor, Session, TensorData};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use wgslc_ir::Tensor;

/// How one case ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Pass,
    /// Ran, but an output differs.
    Wrong(String),
    /// The compiler refused the model (unsupported op, attribute or type), with its message.
    Compile(String),
    /// Loading or running failed.
    Runtime(String),
    Timeout,
    Panic(String),
}

impl Outcome {
    pub fn class(&self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Wrong(_) => "wrong result",
            Outcome::Compile(_) => "compile error",
            Outcome::Runtime(_) => "runtime error",
            Outcome::Timeout => "time-out",
            Outcome::Panic(_) => "panic",
        }
    }

    pub fn message(&self) -> String {
        match self {
            Outcome::Pass => String::new(),
            Outcome::Timeout => "time-out".into(),
            Outcome::Wrong(m) | Outcome::Compile(m) | Outcome::Runtime(m) | Outcome::Panic(m) => m.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct CaseResult {
    pub name: String,
    /// The op the case exercises.
    pub op: String,
    pub outcome: Outcome,
}

/// Case directories under `suite`, sorted by name.
pub fn case_dirs(suite: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(suite)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.onnx").exists())
        .collect();
    v.sort();
    Ok(v)
}

/// Runs one case with a time bound, catching panics.
pub fn run_case_bounded(dir: &Path, gpu: &Arc<Gpu>, timeout: Duration) -> Outcome {
    let (tx, rx) = std::sync::mpsc::channel();
    let (dir2, gpu2) = (dir.to_path_buf(), gpu.clone());
    let spawned = std::thread::Builder::new().name("case".into()).spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_case(&dir2, &gpu2)));
        let _ = tx.send(r.unwrap_or_else(|p| {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            Outcome::Panic(msg.unwrap_or_else(|| "panic".into()))
        }));
    });
    if let Err(e) = spawned {
        return Outcome::Runtime(format!("cannot start a thread: {e}"));
    }
    rx.recv_timeout(timeout).unwrap_or(Outcome::Timeout)
}

/// Compiles, loads and runs every data set of one case.
///
/// Where the compiler needs a graph input's value at compile time (axes, shapes, pads that the case passes as
/// inputs), that input is bound to the data set's value (`--const`) and the case is compiled per data set.
pub fn run_case(dir: &Path, gpu: &Arc<Gpu>) -> Outcome {
    let meta: serde_json::Value = std::fs::read_to_string(dir.join("meta.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let rtol = meta.get("rtol").and_then(|v| v.as_f64()).unwrap_or(1e-3);
    let atol = meta.get("atol").and_then(|v| v.as_f64()).unwrap_or(1e-7);
    let model = dir.join("model.onnx");
    let names = match std::fs::read(&model)
        .map_err(|e| e.to_string())
        .and_then(|b| wgslc_onnx::input_names(&b).map_err(|e| e.to_string()))
    {
        Ok(n) => n,
        Err(e) => return Outcome::Compile(e),
    };
    let mut bound: Vec<String> = Vec::new();
    for set in 0.. {
        let sd = dir.join(format!("test_data_set_{set}"));
        if !sd.exists() {
            break;
        }
        let read = |kind: &str, i: usize| -> Result<Option<Tensor>, String> {
            if sd.join(format!("{kind}_{i}.pb.unsupported")).exists() {
                return Err(format!("{kind} {i} is a sequence, optional or map, which wgslc does not support"));
            }
            match std::fs::read(sd.join(format!("{kind}_{i}.pb"))) {
                Ok(b) => wgslc_onnx::decode_tensor(&b).map(Some).map_err(|e| e.to_string()),
                Err(_) => Ok(None),
            }
        };
        let mut data = Vec::new();
        for i in 0..names.len() {
            match read("input", i) {
                Ok(Some(t)) => data.push(t),
                Ok(None) => return Outcome::Runtime(format!("data set {set} lacks input {i}")),
                Err(e) => return Outcome::Compile(e),
            }
        }
        let Ok(art) = tempfile::tempdir() else {
            return Outcome::Runtime("no temporary directory".into());
        };
        loop {
            let mut opts = crate::CompileOptions::default();
            for b in &bound {
                let i = names.iter().position(|n| n == b).expect("bound names are inputs");
                opts.constants.insert(b.clone(), data[i].clone());
            }
            match crate::compile(&model, art.path(), &opts) {
                Ok(_) => break,
                Err(e) => {
                    let msg = e.to_string();
                    let named = msg
                        .split_once("input '")
                        .and_then(|(_, rest)| rest.split_once("' must be known at compile time"))
                        .map(|(n, _)| n.to_string());
                    match named {
                        Some(n) if names.contains(&n) && !bound.contains(&n) => bound.push(n),
                        // A value computed from inputs: specialize every integer input (they are shape-like
                        // parameters in these cases), once.
                        Some(_) => {
                            let ints: Vec<String> = names
                                .iter()
                                .zip(&data)
                                .filter(|(n, t)| t.dtype.is_int() && !bound.contains(n))
                                .map(|(n, _)| n.clone())
                                .collect();
                            if ints.is_empty() {
                                return Outcome::Compile(msg);
                            }
                            bound.extend(ints);
                        }
                        None => return Outcome::Compile(msg),
                    }
                }
            }
        }
        let session = match Session::load_with(art.path(), gpu.clone()) {
            Ok(s) => s,
            Err(e) => return Outcome::Runtime(e.to_string()),
        };
        let mut inputs = Vec::new();
        for spec in session.inputs() {
            let i = names.iter().position(|n| *n == spec.name).expect("session inputs are model inputs");
            inputs.push(to_host(&data[i], spec));
        }
        let got = match session.run(&inputs) {
            Ok(o) => o,
            Err(e) => return Outcome::Runtime(e.to_string()),
        };
        for (i, g) in got.iter().enumerate() {
            let want = match read("output", i) {
                Ok(Some(t)) => t,
                Ok(None) => return Outcome::Wrong(format!("the model has more outputs than data set {set}")),
                Err(e) => return Outcome::Compile(e),
            };
            if let Err(e) = compare(g, &want, rtol, atol) {
                return Outcome::Wrong(format!("data set {set}, output {i}: {e}"));
            }
        }
    }
    Outcome::Pass
}

fn to_host(t: &Tensor, spec: &wgslc_artifact::TensorSpec) -> HostTensor {
    use wgslc_artifact::{Dtype, StorageType};
    let data = match spec.storage {
        StorageType::F32 => TensorData::F32(t.to_f64().into_iter().map(|x| x as f32).collect()),
        StorageType::I32 if spec.dtype == Dtype::Int64 => TensorData::I64(t.to_i64()),
        // Values outside i32 are caught by the runtime's range check when given as i64.
        StorageType::I32 => TensorData::I64(t.to_i64()),
        StorageType::U32 => TensorData::Bool(t.to_f64().into_iter().map(|x| x != 0.0).collect()),
    };
    HostTensor { shape: t.shape.clone(), data }
}

/// ONNX's rule (numpy's assert_allclose): |got − want| ≤ atol + rtol·|want|, NaN where NaN is expected;
/// integers and bools exactly.
pub fn compare(got: &HostTensor, want: &Tensor, rtol: f64, atol: f64) -> Result<(), String> {
    if got.shape != want.shape {
        return Err(format!("shape {:?}, expected {:?}", got.shape, want.shape));
    }
    let w = want.to_f64();
    let g: Vec<f64> = match &got.data {
        TensorData::F32(v) => v.iter().map(|&x| x as f64).collect(),
        TensorData::I64(v) => v.iter().map(|&x| x as f64).collect(),
        TensorData::I32(v) => v.iter().map(|&x| x as f64).collect(),
        TensorData::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
    };
    let exact = !want.dtype.is_float();
    for (j, (&x, &y)) in g.iter().zip(&w).enumerate() {
        let ok = if exact { x == y } else { within_tolerance(x, y, rtol, atol) };
        if !ok {
            return Err(format!("element {j}: got {x}, expected {y}"));
        }
    }
    Ok(())
}

/// The op a case exercises: the one node's op, or for multi-node (function-expanded) cases the known op whose
/// name is the longest prefix of the case name.
pub fn case_op(name: &str, ops: &[String], known: &[String]) -> String {
    let mut distinct: Vec<&String> = ops.iter().collect();
    distinct.dedup();
    if distinct.len() == 1 {
        return distinct[0].clone();
    }
    let stem: String = name.trim_start_matches("test_").chars().filter(|&c| c != '_').collect();
    known
        .iter()
        .filter(|k| stem.starts_with(&k.to_lowercase()))
        .max_by_key(|k| k.len())
        .cloned()
        .unwrap_or_else(|| "(multi-node)".into())
}

/// The per-op markdown table: cases, passed and the most common failure of each op, and the total.
pub fn table(results: &[CaseResult]) -> String {
    use std::collections::BTreeMap;
    let mut by_op: BTreeMap<&str, Vec<&CaseResult>> = BTreeMap::new();
    for r in results {
        by_op.entry(&r.op).or_default().push(r);
    }
    let passed = results.iter().filter(|r| r.outcome == Outcome::Pass).count();
    let mut s = format!(
        "**{passed} of {} cases pass ({:.1} %).**\n\n| op | cases | passed | main failure |\n| --- | --- | --- | --- |\n",
        results.len(),
        100.0 * passed as f64 / results.len().max(1) as f64
    );
    for (op, rs) in by_op {
        let p = rs.iter().filter(|r| r.outcome == Outcome::Pass).count();
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        for r in rs.iter().filter(|r| r.outcome != Outcome::Pass) {
            *reasons.entry(short_reason(&r.outcome)).or_default() += 1;
        }
        let main = reasons.into_iter().max_by_key(|(_, n)| *n).map(|(r, _)| r).unwrap_or_default();
        s += &format!("| {op} | {} | {p} | {} |\n", rs.len(), main.replace('|', "\\|"));
    }
    s
}

/// A failure message without the case-specific parts (node names, values), for grouping.
fn short_reason(o: &Outcome) -> String {
    let mut m = o.message();
    // "node 'Name_0' (Op): reason" and "node 'Name_0': reason" → "reason".
    if let Some(rest) = m.strip_prefix("node '") {
        if let Some(i) = rest.find("): ").or_else(|| rest.find("': ")) {
            m = rest[i + 3..].to_string();
        } else if let Some(i) = rest.find("' ") {
            m = rest[i + 2..].to_string();
        }
    }
    let cut: String = m.chars().take(100).collect();
    format!("{}: {}", o.class(), cut.trim_end())
}

/// ONNX's comparison of one float: |got − want| ≤ atol + rtol·|want|, NaN only where NaN is expected, an infinity
/// only where the same infinity is. The conformance runner and the test suites share it.
pub fn within_tolerance(got: f64, want: f64, rtol: f64, atol: f64) -> bool {
    if want.is_nan() {
        got.is_nan()
    } else if want.is_infinite() {
        got == want
    } else {
        (got - want).abs() <= atol + rtol * want.abs()
    }
}
