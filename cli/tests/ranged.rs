//! Ranged dims (`--dim NAME=MIN..MAX`): one artifact, compiled once, run at several values of the dim, must match
//! onnxruntime's outputs at each (testdata/encoders: a BERT-style encoder from both exporters, made by
//! scripts/make_encoders.py; testdata/ranged/reductions: every masked read across a ranged axis, made by
//! testdata/ranged/make_ranged.py); shapes outside the range are refused at run time, and graphs a range cannot
//! compile are refused at compile time, naming the node.

mod common;

use std::path::{Path, PathBuf};
use wgslc::runtime::{HostTensor, Session};
use wgslc::Buckets;

/// Default options with one dim ranged.
fn ranged(name: &str, min: usize, max: usize) -> wgslc::CompileOptions {
    wgslc::CompileOptions { ranges: vec![wgslc::DimRange { name: name.into(), min, max }], ..Default::default() }
}

fn compile(model: &Path, opts: &wgslc::CompileOptions) -> Result<(tempfile::TempDir, Session), String> {
    let out = tempfile::tempdir().map_err(|e| e.to_string())?;
    wgslc::compile(model, out.path(), opts).map_err(|e| format!("compile: {e}"))?;
    let s = Session::load_with(out.path(), common::gpu()).map_err(|e| format!("load: {e}"))?;
    Ok((out, s))
}

/// In buckets (the default) fused and one kernel per op, and as one tiling for the whole range, each artifact
/// compiled once and run at every length its case holds (MIN, values between, MAX), against onnxruntime.
#[test]
fn ranged_artifacts_match_onnxruntime_at_every_length() {
    let cases = common::ranged_cases();
    let mut failures = Vec::new();
    let mut runs = 0;
    for (no_fuse, buckets) in [(false, Buckets::Auto), (true, Buckets::Auto), (false, Buckets::None)] {
        let mut session: Option<(PathBuf, tempfile::TempDir, Session)> = None;
        for case in &cases {
            if session.as_ref().is_none_or(|(m, ..)| *m != case.model) {
                let opts = wgslc::CompileOptions { no_fuse, buckets: buckets.clone(), ..case.opts.clone() };
                match compile(&case.model, &opts) {
                    Ok((dir, s)) => session = Some((case.model.clone(), dir, s)),
                    Err(e) => {
                        failures.push(format!("{} (no_fuse {no_fuse}): {e}", case.name));
                        session = None;
                        continue;
                    }
                }
            }
            let (.., s) = session.as_ref().unwrap();
            assert!(s.plan().ranges.is_some(), "{}: the plan has no ranges section", case.name);
            let r = s
                .run(&case.inputs)
                .map_err(|e| e.to_string())
                .and_then(|got| common::compare(&got, &case.expected, case.rtol, case.atol));
            runs += 1;
            match r {
                Ok(()) => eprintln!("ok   {} (no_fuse {no_fuse}, buckets {buckets:?})", case.name),
                Err(e) => failures.push(format!("{} (no_fuse {no_fuse}, buckets {buckets:?}): {e}", case.name)),
            }
        }
    }
    eprintln!("ranged: {runs} runs, {} failed", failures.len());
    assert!(runs >= 60 && failures.is_empty(), "{runs} runs\n{}", failures.join("\n"));
}

/// A ranged dim in buckets (the default): the range cut at the powers of two, the buckets of one value compiled
/// at it (no scaled kernels), attention one kernel in the buckets of up to 64 keys, and the weights shared: the
/// buckets add only what is per length (position-table slices, index rows), not a copy of a product's weight, so
/// the artifact's weights stay within a tenth of one tiling's. The report lists the buckets as the plan has them.
/// (Their outputs: the test above.)
#[test]
fn buckets_cut_the_range_and_share_the_weights() {
    let cases = common::ranged_cases();
    let case = cases.iter().find(|c| c.name == "bert_dynamo20@128").expect("case");
    let (dir, session) = compile(&case.model, &case.opts).unwrap();
    let (one, _) =
        compile(&case.model, &wgslc::CompileOptions { buckets: Buckets::None, ..case.opts.clone() }).unwrap();
    let r = session.plan().ranges.as_ref().expect("ranges");
    let spans: Vec<(usize, usize)> = r.buckets.iter().map(|b| (b.min, b.max)).collect();
    assert_eq!(spans, [(1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 32), (33, 64), (65, 128)]);
    for b in &r.buckets {
        let scaled = b.dispatches.iter().filter(|&&k| session.plan().kernels[k].scale.is_some()).count();
        assert_eq!(scaled == 0, b.min == b.max, "bucket {}..{}: {scaled} scaled kernels", b.min, b.max);
    }
    // Attention is one kernel in the buckets of up to 64 keys (`RANGED_FUSED_ATTENTION_MAX_KEYS`): the softmax's
    // probabilities are not masked again (V is), so no softmax has a kernel of its own; in longer buckets they
    // are, and attention is three kernels (faster there on an H200).
    for b in &r.buckets {
        let kernels: Vec<&str> = b.dispatches.iter().map(|&k| session.plan().kernels[k].name.as_str()).collect();
        let alone = kernels.iter().filter(|k| k.contains("softmax") && !k.contains("matmul")).count();
        assert_eq!(alone == 0, b.max <= 64, "bucket {}..{}: {alone} softmax kernels: {kernels:?}", b.min, b.max);
    }
    let bytes = |d: &Path| std::fs::metadata(d.join("weights.safetensors")).unwrap().len();
    let (shared, single) = (bytes(dir.path()), bytes(one.path()));
    assert!(shared < single + single / 10, "weights: {shared} bytes in buckets, {single} as one tiling");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap()).unwrap();
    let listed: Vec<(u64, u64)> = report["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["min"].as_u64().unwrap(), b["max"].as_u64().unwrap()))
        .collect();
    assert_eq!(listed, spans.iter().map(|&(a, b)| (a as u64, b as u64)).collect::<Vec<_>>());
    assert_eq!(report["dispatches"].as_u64().unwrap() as usize, session.plan().dispatches.len());
}

/// A product whose K follows no dim is split along K in a ranged compile as at a fixed length, its probe split the
/// same way: testdata/encoders/bert_wide_dynamo20's down projection (K = 1024 over 64 outputs, too few tiles) is
/// computed in parts in every bucket compiled for a range, and the parts' product dispatches fewer workgroups at
/// shorter lengths. (Its outputs at 1, 3, 40, 100 and 128 tokens: the test above.)
#[test]
fn ranged_products_split_along_k_and_scale() {
    let cases = common::ranged_cases();
    let case = cases.iter().find(|c| c.name == "bert_wide_dynamo20@100").expect("case");
    let (_dir, session) = compile(&case.model, &case.opts).unwrap();
    let plan = session.plan();
    let r = plan.ranges.as_ref().expect("ranges");
    for b in r.buckets.iter().filter(|b| b.min < b.max) {
        let parts = b.dispatches.iter().map(|&k| &plan.kernels[k]).find(|k| k.name.ends_with("/ksplit/parts"));
        let parts = parts.unwrap_or_else(|| panic!("bucket {}..{}: no product split along K", b.min, b.max));
        assert!(parts.scale.is_some(), "bucket {}..{}: '{}' does not scale", b.min, b.max, parts.name);
    }
    let one = wgslc::CompileOptions { buckets: Buckets::None, ..case.opts.clone() };
    let (_d, single) = compile(&case.model, &one).unwrap();
    let split = single.plan().kernels.iter().find(|k| k.name.ends_with("/ksplit/parts")).expect("split at 1..128");
    assert!(split.scale.is_some(), "'{}' does not scale", split.name);
}

#[test]
fn ranged_runs_refuse_lengths_outside_the_range_or_disagreeing() {
    let cases = common::ranged_cases();
    let case = |name: &str| cases.iter().find(|c| c.name == name).expect("case");
    let (_dir, session) = compile(&case("bert_dynamo20@7").model, &case("bert_dynamo20@7").opts).unwrap();
    let seven = case("bert_dynamo20@7").inputs.clone();
    let long = case("bert_dynamo20@128").inputs.clone();
    let pad = |t: &HostTensor| {
        let wgslc::runtime::TensorData::I64(v) = &t.data else { panic!("int64 inputs") };
        HostTensor { shape: vec![1, 129], data: wgslc::runtime::TensorData::I64([&v[..], &[0]].concat()) }
    };
    let too_long: Vec<HostTensor> = long.iter().map(pad).collect();
    let e = session.run(&too_long).unwrap_err().to_string();
    assert!(e.contains("input 'input_ids'") && e.contains("in 1..128") && e.contains("sequence_length"), "{e}");
    let mixed = vec![seven[0].clone(), long[1].clone(), seven[2].clone()];
    let e = session.run(&mixed).unwrap_err().to_string();
    assert!(e.contains("attention_mask") && e.contains("sequence_length = 128") && e.contains("gives 7"), "{e}");
}

#[test]
fn ranged_compiles_refuse_what_moves_with_the_dim() {
    let dir = common::testdata().join("ranged/refused");
    let opts = ranged("S", 1, 32);
    for (file, want) in [
        ("last_row.onnx", "node 'last_row'"),
        ("concat.onnx", "node 'twice' (Concat): concatenates along an axis that grows with S"),
        ("merge_front.onnx", "node 'flatten_channels_first'"),
    ] {
        let out = tempfile::tempdir().unwrap();
        let e = wgslc::compile(&dir.join(file), &out.path().join("a"), &opts).unwrap_err().to_string();
        assert!(e.contains(want), "{file}: {e}");
        assert!(!out.path().join("a").exists(), "{file}: a failed compile wrote its directory");
    }
    // A range of one value is a plain binding; MIN above MAX and binding a dim twice are errors.
    let model = common::testdata().join("ranged/reductions/model.onnx");
    for (ranges, dims, want) in [
        (vec![("S", 5, 4)], vec![], "1 <= MIN <= MAX"),
        (vec![("S", 0, 4)], vec![], "1 <= MIN <= MAX"),
        (vec![("S", 1, 4)], vec![("S", 2)], "bound twice"),
    ] {
        let opts = wgslc::CompileOptions {
            ranges: ranges.iter().map(|&(n, min, max)| wgslc::DimRange { name: n.into(), min, max }).collect(),
            dims: dims.iter().map(|&(n, v)| (n.to_string(), v)).collect(),
            ..Default::default()
        };
        let out = tempfile::tempdir().unwrap();
        let e = wgslc::compile(&model, &out.path().join("a"), &opts).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    }
    let (_dir, session) = compile(&model, &ranged("S", 5, 5)).unwrap();
    assert!(session.plan().ranges.is_none() && session.inputs()[0].shape == [1, 5, 8]);
}

/// A `.pt2` program's symbols take ranges too: testdata/pt2/mlp_dynamic (batch `s77`, torch's outputs at batch 4)
/// compiled with `s77=1..16` runs at 4 and at 2 and 1, whose rows are the first rows of torch's (an MLP's rows are
/// independent).
#[test]
fn pt2_symbols_take_ranges_too() {
    let dir = common::testdata().join("pt2/mlp_dynamic");
    let (_dir, session) = compile(&dir.join("model.pt2"), &ranged("s77", 1, 16)).unwrap();
    let x = wgslc::npy::read(&dir.join("input_0.npy")).unwrap();
    let y = wgslc::npy::read(&dir.join("output_0.npy")).unwrap();
    let rows = |t: &HostTensor, n: usize| {
        let wgslc::runtime::TensorData::F32(v) = &t.data else { panic!("float32") };
        let width = t.shape[1];
        HostTensor { shape: vec![n, width], data: wgslc::runtime::TensorData::F32(v[..n * width].to_vec()) }
    };
    for n in [4, 2, 1] {
        let got = session.run(&[rows(&x, n)]).unwrap();
        common::compare(&got, &[rows(&y, n)], 1e-4, 1e-5).unwrap_or_else(|e| panic!("batch {n}: {e}"));
    }
}
