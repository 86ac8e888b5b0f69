//! Every testdata case (models, op cases, torch exports; fused, `--no-fuse` and any third mode a case asks for) run
//! through `runtime/web/wgslc.js` in headless Chromium, WebGPU on SwiftShader, and compared with the same references
//! and tolerances as the Rust suites. Loading a session compiles every kernel with Chromium's shader compiler
//! (Tint), so a kernel that naga accepts and Tint rejects fails here with the kernel's name and Tint's message.
//!
//! The test serves the artifacts, the modules (wgslc.js, artifact.js) and the harness page (`runtime/web/test/`)
//! on 127.0.0.1; the page posts each case's outputs back, and they are compared here. No Chromium, or no WebGPU
//! adapter in it, is a failure, never a skip. `WGSLC_CHROMIUM` names the browser binary when it is not
//! `chromium` on PATH; `WGSLC_BROWSER_CASES=models/cnn` runs only the cases whose `suite/name` contains the text;
//! `WGSLC_BROWSER_EXTRA=DIR` adds the cases under DIR (same layout; e.g. `scripts/torch_exports.py --models ...`).

mod common;

use common::Case;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use wgslc::runtime::{HostTensor, TensorData};

/// How long the page may go without reporting a case before the test gives up (a hung pipeline compile).
const STALL: Duration = Duration::from_secs(240);

/// A case whose load (every pipeline compiled, in parallel) takes longer fails: a kernel that takes minutes to
/// compile, as the 32x32 split-K matmul did on SwiftShader, is a defect like a wrong result. The slowest case
/// loads in about 6 s on the 2-core CI machine, so this is a bound on pathology, not a timing test.
const MAX_LOAD_MS: f64 = 60_000.0;

struct Run<'a> {
    id: String,
    case: &'a Case,
}

/// What the page posts.
enum Msg {
    Adapter(serde_json::Value),
    Result(serde_json::Value),
    Fatal(String),
    Done,
}

#[test]
fn every_case_runs_in_chromium_through_wgslc_js() {
    let chromium = find_chromium();
    let root = tempfile::tempdir().unwrap();
    let mut suites: Vec<(&str, Vec<Case>)> =
        ["models", "ops", "torch", "pt2", "narrow"].iter().map(|s| (*s, common::cases(s))).collect();
    if let Some(extra) = std::env::var_os("WGSLC_BROWSER_EXTRA") {
        suites.push(("extra", common::cases_in(Path::new(&extra))));
    }
    // Ranged artifacts (`--dim NAME=MIN..MAX`): one case per length; the lengths of a model share its artifact.
    suites.push(("ranged", common::ranged_cases()));
    let mut compiled: std::collections::HashMap<(PathBuf, &str), String> = Default::default();

    // Compile every case in every mode the Rust suites run, and write its inputs as raw little-endian bytes.
    let mut runs = Vec::new();
    let mut listing = Vec::new();
    let mut failures = Vec::new();
    let only = std::env::var("WGSLC_BROWSER_CASES").unwrap_or_default();
    for (suite, cases) in &suites {
        for case in cases.iter().filter(|c| format!("{suite}/{}", c.name).contains(&only)) {
            let mut modes = vec![("fused", case.opts.clone())];
            modes.push(("unfused", wgslc::CompileOptions { no_fuse: true, ..case.opts.clone() }));
            // Ranged cases of one dim: fused in three buckets (one of one value and two ranges, so the cases have
            // lengths inside and at a bucket's max), unfused as one tiling; each bucket's pipelines cost
            // SwiftShader seconds, so only the wide encoder (its products split along K in every bucket) and the
            // small ranged models run in buckets; the two other encoders, whose kernel kinds the wide one covers,
            // run as one tiling in both modes. (Several dims: one tiling, as `auto` compiles them.)
            if case.opts.ranges.len() == 1 {
                let one_tiling = ["bert_torchscript17@", "bert_dynamo20@"].iter().any(|m| case.name.starts_with(m));
                modes[0].1.buckets = if one_tiling { wgslc::Buckets::None } else { wgslc::Buckets::Ends(vec![1, 8]) };
                modes[1].1.buckets = wgslc::Buckets::None;
            }
            if let Some(also) = &case.also {
                modes.push(("also", also.clone()));
            }
            for (mode, opts) in modes {
                let id = format!("{suite}__{}__{mode}", case.name);
                let shared = (!opts.ranges.is_empty()).then(|| (case.model.clone(), mode));
                let art = match shared.as_ref().and_then(|k| compiled.get(k)) {
                    Some(art) => art.clone(),
                    None => {
                        if let Err(e) = wgslc::compile(&case.model, &root.path().join("cases").join(&id), &opts) {
                            failures.push(format!("{id}: compile: {e}"));
                            continue;
                        }
                        if let Some(k) = shared {
                            compiled.insert(k, id.clone());
                        }
                        id.clone()
                    }
                };
                let dir = root.path().join("cases").join(&art);
                let session_inputs = wgslc::artifact::Plan::read(&dir).unwrap().inputs;
                let mut inputs = Vec::new();
                for (i, (spec, t)) in session_inputs.iter().zip(&case.inputs).enumerate() {
                    let (dtype, bytes) = raw(t);
                    let file = format!("{id}_input_{i}.bin");
                    std::fs::write(dir.join(&file), bytes).unwrap();
                    inputs
                        .push(serde_json::json!({ "name": spec.name, "file": file, "dtype": dtype, "shape": t.shape }));
                }
                // The bundled models also run profiled (a pass per dispatch, timestamps where the adapter has them).
                listing
                    .push(serde_json::json!({ "id": id, "dir": art, "inputs": inputs, "profile": *suite == "models" }));
                runs.push(Run { id, case });
            }
        }
    }
    // The bundled decoders (`--kv-cache`; ONNX exports and torch.export archives): greedy generation through
    // Session.generate must give torch's tokens, and sampling with a seed the Rust runtime's.
    let mut generations = Vec::new();
    // With them the decoders whose masks compare a key's index with its position (testdata/masks; every key at
    // its position in the cache), but for the one no cache layout fits (refused at compile time).
    let mut names: Vec<String> = Vec::new();
    for suite in ["decoders", "masks"] {
        let root = common::testdata().join(suite);
        for e in std::fs::read_dir(&root).unwrap() {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            let meta = std::fs::read_to_string(root.join(&n).join("meta.json")).unwrap_or_default();
            let model = ["model.onnx", "model.pt2"].iter().any(|m| root.join(&n).join(m).exists());
            if model && !meta.contains("\"kv_cache\": \"refused\"") {
                names.push(format!("{suite}/{n}"));
            }
        }
    }
    // Two of onnxruntime-genai's builder models: fp32, and int4 with float16 inputs and outputs.
    names.extend(["genai/qwen2_fp32_webgpu".to_string(), "genai/qwen2_int4_webgpu".to_string()]);
    // And an optimum merged decoder (an If on use_cache_branch, the branch with past inputs compiled).
    names.push("optimum/qwen2_optimum_merged".to_string());
    // And four of transformers' own classes (testdata/hf): Q/K norms, partial rotary, layers without rotary, a
    // sliding window over positions counted from the cache's length.
    names.extend(
        ["hf/qwen3_hf_dynamo18", "hf/phi_hf_dynamo23", "hf/smollm3_hf_torchscript17", "hf/gemma2_hf_torchscript17"]
            .map(String::from),
    );
    names.sort();
    let testdata = common::testdata();
    // One decoder also with bindings too small for its embedding table, LM head and gate/up weight: their blocks
    // are read by one kernel each (GatherBlocks, Fold::Blocks), which Tint must take too.
    let gpu = wgslc::Target::Gpu;
    let mut variants: Vec<(String, Option<u64>, wgslc::Target)> =
        names.iter().map(|n| (n.clone(), None, gpu)).collect();
    if names.iter().any(|n| n == "decoders/qwen2_dynamo20") {
        variants.push(("decoders/qwen2_dynamo20".into(), Some(40000), gpu));
    }
    // Two compiled for a CPU adapter (`--target cpu`): its matrix-vector layouts (a thread per output's K, K-major
    // or not) and unfused attention, over f32 and 4-bit weights, which Tint must take too.
    for name in ["decoders/llama_dynamo20", "genai/qwen2_int4_webgpu"] {
        variants.push((name.into(), None, wgslc::Target::Cpu));
    }
    // Sessions replay kernels' subgroup modules where Chromium's adapter allows (every decoder above); these also
    // load with `subgroups: false`, so that the plain modules of the matrix-vector kernels (f32 and packed, GPU and
    // CPU layouts) and of the one-row attention stay checked in Tint as well.
    let plain = ["decoders__llama_dynamo20", "genai__qwen2_int4_webgpu", "decoders__llama_dynamo20_cpu"];
    for (name, binding, target) in variants.into_iter().filter(|(n, _, _)| n.contains(&only)) {
        let id = match (binding, target) {
            (Some(_), _) => format!("{}_blocks", name.replace('/', "__")),
            (None, wgslc::Target::Cpu) => format!("{}_cpu", name.replace('/', "__")),
            (None, wgslc::Target::Gpu) => name.replace('/', "__"),
        };
        let dir = root.path().join("cases").join(&id);
        let kv_cache = Some(wgslc::KvCache { capacity: 46, chunk: 4, state: vec![], fixed: Default::default() });
        let limits = match binding {
            None => wgslc::Limits::default(),
            Some(b) => wgslc::Limits { max_storage_buffer_binding_size: b, ..Default::default() },
        };
        let opts = wgslc::CompileOptions { kv_cache, limits, target, ..Default::default() };
        let pt2 = testdata.join(&name).join("model.pt2");
        let model = if pt2.exists() { pt2 } else { testdata.join(&name).join("model.onnx") };
        if let Err(e) = wgslc::compile(&model, &dir, &opts) {
            failures.push(format!("{id}: compile: {e}"));
            continue;
        }
        let ids = |file: &str| match wgslc::npy::read(&testdata.join(&name).join(file)).unwrap().data {
            TensorData::I64(v) => v,
            d => panic!("{file}: {d:?}"),
        };
        let mut jobs = Vec::new();
        let mut expected = Vec::new();
        for k in 0..2 {
            let (prompt, want) = (ids(&format!("prompt_{k}.npy")), ids(&format!("tokens_{k}.npy")));
            let new = want.len() - prompt.len();
            jobs.push(
                serde_json::json!({ "prompt": prompt, "max_new_tokens": new, "eos": null, "steps_per_submit": 4 }),
            );
            expected.push(want.clone());
            // Stopping at an end-of-sequence token a few steps in (with one step per submit).
            let eos = want[prompt.len() + 3];
            let stop = prompt.len() + want[prompt.len()..].iter().position(|&t| t == eos).unwrap() + 1;
            jobs.push(
                serde_json::json!({ "prompt": prompt, "max_new_tokens": new, "eos": eos, "steps_per_submit": 1 }),
            );
            expected.push(want[..stop].to_vec());
        }
        // Sampling: top-k 1 draws torch's greedy tokens; a flat draw (temperature 50, seed 2^32 + 7 to check the
        // seed's folding) draws the Rust runtime's tokens on this artifact.
        let (prompt, want) = (ids("prompt_1.npy"), ids("tokens_1.npy"));
        let new = want.len() - prompt.len();
        let job = |t: f32, k: usize, seed: u64| {
            serde_json::json!({ "prompt": prompt, "max_new_tokens": new, "eos": null, "steps_per_submit": 4,
                                "temperature": t, "top_k": k, "seed": seed })
        };
        jobs.push(job(1.0, 1, 5));
        expected.push(want.clone());
        let seed = (1u64 << 32) + 7;
        let rust = wgslc::runtime::Session::load_with(&dir, common::gpu()).expect("the Rust runtime loads it");
        let sampling = Some(wgslc::runtime::Sampling { temperature: 50.0, top_k: 0, seed });
        let opts = wgslc::runtime::GenerateOptions { max_new_tokens: new, sampling, ..Default::default() };
        let drawn = rust.generate(&prompt, &opts).expect("the Rust runtime generates").tokens;
        assert_ne!(drawn, want, "{id}: temperature 50 drew the greedy tokens");
        jobs.push(job(50.0, 0, seed));
        expected.push(drawn);
        if plain.contains(&id.as_str()) {
            let plain_id = format!("{id}__no_subgroups");
            listing.push(serde_json::json!({ "id": plain_id, "dir": id, "generate": jobs, "subgroups": false }));
            generations.push((plain_id, expected.clone()));
        }
        listing.push(serde_json::json!({ "id": id, "generate": jobs }));
        generations.push((id, expected));
    }
    // The malformed artifacts the Rust runtime is tested with, each with the words its error must contain.
    let malformed: Vec<(String, String)> = if only.is_empty() {
        let text = std::fs::read_to_string(common::testdata().join("malformed/cases.json")).unwrap();
        let cases: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
        cases
            .iter()
            .filter(|c| c["kind"] == "artifact")
            .map(|c| (c["file"].as_str().unwrap().to_string(), c["expect"].as_str().unwrap().to_string()))
            .collect()
    } else {
        Vec::new()
    };
    for (file, _) in &malformed {
        listing.push(serde_json::json!({ "id": format!("malformed__{file}"), "malformed": file }));
    }
    std::fs::write(root.path().join("cases.json"), serde_json::to_vec(&listing).unwrap()).unwrap();

    let (tx, rx) = mpsc::channel();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = root.path().to_path_buf();
    std::thread::spawn(move || serve(listener, served, tx));

    let profile = tempfile::tempdir().unwrap();
    let log_path = root.path().join("chromium.log");
    let mut browser = Browser(
        Command::new(&chromium)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--no-first-run",
                "--enable-unsafe-webgpu",
                "--use-webgpu-adapter=swiftshader",
                "--enable-logging=stderr",
                "--v=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("http://127.0.0.1:{port}/harness.html"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start '{}': {e}", chromium.display())),
    );

    let mut results = std::collections::HashMap::new();
    let mut adapter = serde_json::Value::Null;
    let started = Instant::now();
    loop {
        match rx.recv_timeout(STALL) {
            Ok(Msg::Adapter(a)) => {
                eprintln!("chromium's WebGPU adapter: {a}");
                adapter = a;
            }
            Ok(Msg::Result(r)) => {
                let id = r["id"].as_str().unwrap_or_default().to_string();
                results.insert(id, r);
            }
            Ok(Msg::Done) => break,
            Ok(Msg::Fatal(e)) => panic!("{e}\n{}", console_tail(&log_path)),
            Err(_) => panic!(
                "no result from Chromium for {} s after {} of {} cases (a pipeline that does not compile, or a crashed \
                 GPU process)\n{}",
                STALL.as_secs(),
                results.len(),
                runs.len(),
                console_tail(&log_path)
            ),
        }
    }
    browser.0.kill().ok();
    eprintln!(
        "{} runs and {} decoders in Chromium in {:.0} s",
        runs.len(),
        generations.len(),
        started.elapsed().as_secs_f64()
    );

    // artifact.js splits a replay into the submits the Rust runtime does.
    let rust: Vec<Vec<[usize; 2]>> =
        (0..=300).map(|n| wgslc::artifact::submit_ranges(n).iter().map(|r| [r.start, r.end]).collect()).collect();
    if results.get("rules__submit_ranges").map(|r| r["ranges"].clone()) != Some(serde_json::json!(rust)) {
        failures.push(format!(
            "artifact.js's submitRanges differs from submit_ranges: {:?}",
            results.get("rules__submit_ranges")
        ));
    }
    for (file, expect) in &malformed {
        let id = format!("malformed__{file}");
        match results.get(&id).map(|r| (r["refused"].as_str(), r["error"].as_str())) {
            Some((Some(msg), _)) if msg.contains(expect.as_str()) => eprintln!("ok   {id}: {msg}"),
            Some((Some(msg), _)) => failures.push(format!("{id}: refused with '{msg}', which lacks '{expect}'")),
            Some((None, e)) => failures.push(format!("{id}: {}", e.unwrap_or("no error"))),
            None => failures.push(format!("{id}: no result")),
        }
    }
    // Chromium's adapter (SwiftShader) offers subgroups, so Tint compiles and runs the subgroup modules; sessions
    // replay them unless told `subgroups: false`.
    assert_eq!(
        adapter["subgroups"], true,
        "Chromium's adapter offers no subgroups (Tint would not check them): {adapter}"
    );
    for (id, expected) in &generations {
        let used = results.get(id).map(|r| r["subgroups"].clone());
        if used != Some(serde_json::Value::Bool(!id.ends_with("__no_subgroups"))) && results.contains_key(id) {
            failures.push(format!("{id}: replayed subgroup modules: {used:?}"));
            continue;
        }
        match check_generations(results.get(id), expected) {
            Ok(()) => eprintln!("ok   {id}: {} generations", expected.len()),
            Err(e) => failures.push(format!("{id}: {e}")),
        }
    }
    let mut slowest = (0.0f64, String::new());
    for run in &runs {
        let Some(r) = results.get(&run.id) else {
            failures.push(format!("{}: no result", run.id));
            continue;
        };
        if let Some(e) = r["error"].as_str() {
            failures.push(format!("{}: {e}", run.id));
            continue;
        }
        if let Some(p) = r.get("profile").filter(|p| !p.is_null()) {
            if !(p["kernels"] == p["dispatches"] && p["valid"] == true && p["same"] == true) {
                failures.push(format!("{}: profiled run: {p}", run.id));
                continue;
            }
            if let Err(e) = same_input_errors(run, &root.path().join("cases").join(&run.id), r) {
                failures.push(format!("{}: {e}", run.id));
                continue;
            }
        }
        let load_ms = r["load_ms"].as_f64().unwrap_or(0.0);
        if load_ms > MAX_LOAD_MS {
            failures.push(format!(
                "{}: loading took {:.0} s (pipelines that take minutes to compile)",
                run.id,
                load_ms / 1e3
            ));
            continue;
        }
        let ms = r["slowest_pipeline_ms"].as_f64().unwrap_or(0.0);
        if ms > slowest.0 {
            slowest = (ms, run.id.clone());
        }
        match decode_outputs(&r["outputs"])
            .and_then(|got| common::compare(&got, &run.case.expected, run.case.rtol, run.case.atol))
        {
            Ok(()) => eprintln!("ok   {} (load {:.0} ms, run {:.1} ms)", run.id, r["load_ms"], r["run_ms"]),
            Err(e) => failures.push(format!("{}: {e}", run.id)),
        }
    }
    eprintln!("last pipeline ready (all compiled in parallel) after {:.0} ms in {}", slowest.0, slowest.1);
    let total = runs.len() + malformed.len() + generations.len();
    eprintln!("chromium: {} passed, {} failed", total - failures.len(), failures.len());
    assert!(failures.is_empty(), "{} of {total} runs failed in Chromium:\n{}", failures.len(), failures.join("\n"));
}

/// The page's errors for a wrong shape and a wrong dtype of the first input are the Rust runtime's, word for word.
fn same_input_errors(run: &Run, dir: &Path, r: &serde_json::Value) -> Result<(), String> {
    let session = wgslc::runtime::Session::load_with(dir, common::gpu()).map_err(|e| e.to_string())?;
    let mut wrong_shape = run.case.inputs.clone();
    wrong_shape[0].shape.push(1);
    let mut wrong_dtype = run.case.inputs.clone();
    let n = wrong_dtype[0].data.len();
    wrong_dtype[0].data = if matches!(wrong_dtype[0].data, TensorData::F32(_)) {
        TensorData::I32(vec![0; n])
    } else {
        TensorData::F32(vec![0.0; n])
    };
    for (what, inputs) in [("bad_shape", wrong_shape), ("bad_dtype", wrong_dtype)] {
        let rust = session.run(&inputs).err().map(|e| e.to_string()).unwrap_or_else(|| "accepted".into());
        let js = r[what].as_str().unwrap_or("(nothing posted)");
        if js != rust {
            return Err(format!("{what}: wgslc.js says '{js}', the Rust runtime '{rust}'"));
        }
    }
    Ok(())
}

/// The page's generations: the expected tokens (torch's, or the Rust runtime's draw), each new token reported once
/// through onToken in order, and a prompt past the cache's capacity refused with the Rust runtime's words.
fn check_generations(r: Option<&serde_json::Value>, expected: &[Vec<i64>]) -> Result<(), String> {
    let r = r.ok_or("no result")?;
    if let Some(e) = r["error"].as_str() {
        return Err(e.to_string());
    }
    let gens = r["generations"].as_array().ok_or("no generations posted")?;
    for (i, (g, want)) in gens.iter().zip(expected).enumerate() {
        let got: Vec<i64> = g["tokens"].as_array().ok_or("no tokens")?.iter().filter_map(|t| t.as_i64()).collect();
        if got != *want {
            return Err(format!("generation {i}: {got:?}, expected {want:?}"));
        }
        let seen: Vec<(i64, u64)> = g["seen"]
            .as_array()
            .ok_or("no onToken calls")?
            .iter()
            .map(|p| (p[0].as_i64().unwrap_or(-1), p[1].as_u64().unwrap_or(0)))
            .collect();
        let prompt = want.len() - seen.len();
        if seen.iter().enumerate().any(|(j, &(t, at))| at as usize != prompt + j || t != want[prompt + j]) {
            return Err(format!("generation {i}: onToken reported {seen:?}"));
        }
    }
    if gens.len() != expected.len() {
        return Err(format!("{} generations posted, {} expected", gens.len(), expected.len()));
    }
    let too_long = r["too_long"].as_str().unwrap_or("");
    if !too_long.contains("tokens of KV cache this artifact was compiled for") {
        return Err(format!("a prompt past the capacity: '{too_long}'"));
    }
    Ok(())
}

/// Kills the browser when the test ends, also when it panics.
struct Browser(Child);

impl Drop for Browser {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

fn find_chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("WGSLC_CHROMIUM") {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"] {
        if let Some(p) = std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file()) {
            return p;
        }
    }
    panic!("no Chromium found: install Debian's chromium (.ci/run does), or set WGSLC_CHROMIUM to the browser binary");
}

/// A reference input as (dtype, little-endian bytes).
fn raw(t: &HostTensor) -> (&'static str, Vec<u8>) {
    match &t.data {
        TensorData::F32(v) => ("float32", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        TensorData::I64(v) => ("int64", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        TensorData::I32(v) => ("int32", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        TensorData::Bool(v) => ("bool", v.iter().map(|&x| x as u8).collect()),
    }
}

/// The page's outputs (typed arrays as base64, named by kind) as host tensors.
fn decode_outputs(outputs: &serde_json::Value) -> Result<Vec<HostTensor>, String> {
    let outputs = outputs.as_array().ok_or("no outputs posted")?;
    outputs
        .iter()
        .map(|o| {
            let bytes = base64_decode(o["b64"].as_str().ok_or("output without data")?)?;
            let shape: Vec<usize> = o["shape"]
                .as_array()
                .ok_or("output without shape")?
                .iter()
                .filter_map(|d| d.as_u64())
                .map(|d| d as usize)
                .collect();
            let words4 = || bytes.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]);
            let data = match o["kind"].as_str() {
                Some("float32") => TensorData::F32(words4().map(f32::from_le_bytes).collect()),
                // float16 outputs come back as float16 (Float16Array, or its bits where the browser lacks it).
                Some("float16") => TensorData::F32(
                    bytes.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
                ),
                // float64 outputs hold f32 values (computed in f32), widened by wgslc.js.
                Some("float64") => TensorData::F32(
                    bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")) as f32).collect(),
                ),
                Some("int32") => TensorData::I32(words4().map(i32::from_le_bytes).collect()),
                Some("int64") => TensorData::I64(
                    bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect(),
                ),
                Some("bool") => TensorData::Bool(bytes.iter().map(|&b| b != 0).collect()),
                // Narrow integers come back in their own typed arrays; the Rust runtime widens them to int32.
                Some("uint8") => TensorData::I32(bytes.iter().map(|&b| i32::from(b)).collect()),
                Some("int8") => TensorData::I32(bytes.iter().map(|&b| i32::from(b as i8)).collect()),
                Some("int16") => TensorData::I32(
                    bytes.chunks_exact(2).map(|c| i32::from(i16::from_le_bytes([c[0], c[1]]))).collect(),
                ),
                Some("uint16") => TensorData::I32(
                    bytes.chunks_exact(2).map(|c| i32::from(u16::from_le_bytes([c[0], c[1]]))).collect(),
                ),
                k => return Err(format!("output '{}' came back as {k:?}", o["name"])),
            };
            Ok(HostTensor { shape, data })
        })
        .collect()
}

fn base64_decode(s: &str) -> Result<Vec<u8>, String> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => Ok(c - b'A'),
        b'a'..=b'z' => Ok(c - b'a' + 26),
        b'0'..=b'9' => Ok(c - b'0' + 52),
        b'+' => Ok(62),
        b'/' => Ok(63),
        _ => Err(format!("bad base64 byte {c}")),
    };
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= u32::from(val(c)?) << (18 - 6 * i);
        }
        out.extend(&n.to_be_bytes()[1..chunk.len()]);
    }
    Ok(out)
}

/// The last console lines Chromium logged, for a failure message.
fn console_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("CONSOLE") || l.contains("FATAL")).collect();
    format!("chromium's console (last lines):\n{}", lines[lines.len().saturating_sub(20)..].join("\n"))
}

/// Serves the module, the harness and the compiled cases; forwards what the page posts. One thread per connection
/// and `Connection: close` on every response: tiny_http's keep-alive connections left Chromium's parallel kernel
/// fetches unanswered in about one run of three, and a test server needs nothing more than this.
fn serve(listener: TcpListener, root: PathBuf, tx: mpsc::Sender<Msg>) {
    for stream in listener.incoming().flatten() {
        let (root, tx) = (root.clone(), tx.clone());
        std::thread::spawn(move || {
            let _ = handle(stream, &root, &tx);
        });
    }
}

fn handle(mut stream: TcpStream, root: &Path, tx: &mpsc::Sender<Msg>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let url = target.split('?').next().unwrap_or("");
    let respond = |stream: &mut TcpStream, status: &str, ty: &str, body: &[u8]| {
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {ty}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes())?;
        stream.write_all(body)
    };
    if method == "POST" {
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
        let msg = match url {
            "/adapter" => Msg::Adapter(v),
            "/result" => Msg::Result(v),
            "/done" => Msg::Done,
            _ => Msg::Fatal(
                v["error"].as_str().map_or_else(|| String::from_utf8_lossy(&body).into_owned(), str::to_string),
            ),
        };
        respond(&mut stream, "204 No Content", "text/plain", b"")?;
        let _ = tx.send(msg);
        return Ok(());
    }
    let web = Path::new(env!("CARGO_MANIFEST_DIR")).join("../runtime/web");
    let path = match url {
        "/wgslc.js" | "/artifact.js" => Some(web.join(&url[1..])),
        "/harness.html" | "/harness.js" => Some(web.join("test").join(&url[1..])),
        "/cases.json" => Some(root.join("cases.json")),
        u if u.starts_with("/cases/") && !u.split('/').any(|c| c == "..") => Some(root.join(&u[1..])),
        u if u.starts_with("/malformed/") && !u.split('/').any(|c| c == "..") => Some(common::testdata().join(&u[1..])),
        _ => None,
    };
    match path.and_then(|p| std::fs::read(&p).ok().map(|b| (p, b))) {
        Some((p, bytes)) => {
            let ty = match p.extension().and_then(|e| e.to_str()) {
                Some("js") => "text/javascript",
                Some("html") => "text/html; charset=utf-8",
                Some("json") => "application/json",
                Some("wgsl") => "text/plain; charset=utf-8",
                _ => "application/octet-stream",
            };
            respond(&mut stream, "200 OK", ty, &bytes)
        }
        None => respond(&mut stream, "404 Not Found", "text/plain", b"not found"),
    }
}

/// The artifacts bundled with the example page (`examples/web/artifacts/`) are exactly what the compiler writes
/// today, so the page never shows a stale compiler's kernels. Compiles are deterministic, byte for byte.
#[test]
fn bundled_example_artifacts_are_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut stale = Vec::new();
    for name in ["transformer", "cnn", "mlp"] {
        let case = common::load_case(&root.join("testdata/models").join(name));
        let fresh = tempfile::tempdir().unwrap();
        wgslc::compile(&case.dir.join("model.onnx"), fresh.path(), &case.opts).unwrap();
        let bundled = root.join("examples/web/artifacts").join(name);
        let mut files = vec!["plan.json".to_string(), "report.json".into(), "weights.safetensors".into()];
        let plan = wgslc::artifact::Plan::read(fresh.path()).unwrap();
        files.extend(plan.kernels.iter().map(|k| k.wgsl.clone()));
        let listed = |dir: &Path| {
            let mut names: Vec<String> = std::fs::read_dir(dir.join("kernels"))
                .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            names.sort();
            names
        };
        let same = listed(fresh.path()) == listed(&bundled)
            && files.iter().all(|f| std::fs::read(fresh.path().join(f)).ok() == std::fs::read(bundled.join(f)).ok());
        if !same {
            let dims = case.opts.dims.iter().map(|(k, v)| format!(" --dim {k}={v}")).collect::<String>();
            stale.push(format!(
                "rm -rf examples/web/artifacts/{name} && cargo run --release -- compile testdata/models/{name}/model.onnx -o examples/web/artifacts/{name}{dims}"
            ));
        }
    }
    assert!(stale.is_empty(), "the example page's artifacts are stale; regenerate them:\n{}", stale.join("\n"));
}
