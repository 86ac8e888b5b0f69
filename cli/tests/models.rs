//! The end-to-end suites: every testdata model and op case compiled, run on the Vulkan adapter and compared with
//! onnxruntime's outputs.

mod common;

#[test]
fn models_match_onnxruntime() {
    common::run_suite("models");
}

#[test]
fn ops_match_onnxruntime() {
    common::run_suite("ops");
}

/// Narrow weights (testdata/make_narrow.py): testdata models converted by onnxruntime's float16 converter (both
/// `keep_io_types` settings) and quantized by its `MatMulNBitsQuantizer` (4 and 8 bits, blocks of 16 to 128, with
/// and without zero points, MatMul and Gather, QOperator and QDQ), against onnxruntime's run of the converted
/// graph; and fp32 models compiled with `--weights f16|q8|q4` against their fp32 reference within the tolerance
/// each format's meta.json states.
#[test]
fn narrow_models_match_onnxruntime() {
    common::run_suite("narrow");
}

/// Models exported from PyTorch by `scripts/torch_exports.py` (TorchScript exporter at opset 17, dynamo
/// exporter at opset 20), with onnxruntime's outputs.
#[test]
fn torch_exports_match_onnxruntime() {
    common::run_suite("torch");
}

/// A real export that the `ksplit` stage rewrites: transformers' BertModel with a feed-forward of 2048 over 128
/// (`scripts/torch_exports.py --models bert_wide`, dynamo exporter) at 16 tokens, whose output projection has too
/// few tiles for a GPU. Compiled for a GPU it becomes one batched product of the parts and one kernel summing them
/// with the projection's bias and the residual (the torch suite checks its outputs against onnxruntime's); for a
/// CPU it stays whole.
#[test]
fn a_transformers_export_splits_its_long_product_along_k() {
    let case = common::cases("torch").into_iter().find(|c| c.name == "bert_wide_dynamo20").expect("the case");
    let heads = |target| {
        let out = tempfile::tempdir().unwrap();
        let opts = wgslc::CompileOptions { target, ..case.opts.clone() };
        wgslc::compile(&case.model, out.path(), &opts).unwrap();
        let mut heads = Vec::new();
        for e in std::fs::read_dir(out.path().join("kernels")).unwrap() {
            let w = std::fs::read_to_string(e.unwrap().path()).unwrap();
            heads.push(w.lines().next().unwrap_or_default().to_string());
        }
        heads
    };
    let gpu = heads(wgslc::Target::Gpu);
    let parts = gpu.iter().filter(|h| h.contains("/ksplit/parts: MatMul(float32[4, 16, 512], float32[4, 512, 128])"));
    assert_eq!(parts.count(), 1, "{gpu:#?}");
    let sums = gpu.iter().find(|h| h.contains("/ksplit/sum3+")).expect("the parts' sums");
    assert!(sums.contains("fused Add + Add + Add + Add + Add"), "the bias and residual join the sums: {sums}");
    assert!(heads(wgslc::Target::Cpu).iter().all(|h| !h.contains("/ksplit/")), "split for a CPU");
}

/// Programs saved by `torch.export.save` (`scripts/pt2_exports.py`), compiled from the .pt2 with torch's eager
/// outputs as the reference: torch 2.11's archives in the core ATen dialect, one in the training-IR dialect, one
/// with a dynamic batch bound by `--dim`, and archives written by torch 2.6 and 2.8 themselves (`*_torch26`,
/// `*_torch28`: pickled weights, bare `-Infinity` in torch 2.6's JSON).
#[test]
fn pt2_exports_match_torch() {
    common::run_suite("pt2");
}

/// The frontends only translate: a model saved as .pt2 and exported to ONNX by torch's dynamo exporter
/// (`exported.onnx` beside the case) compiles to the same number of dispatches, or to the numbers its meta.json
/// gives with the reason they differ, and both match torch.
#[test]
fn pt2_and_onnx_exports_compile_alike() {
    let mut compared = 0;
    let mut failures = Vec::new();
    for case in common::cases("pt2") {
        let onnx = case.dir.join("exported.onnx");
        if !onnx.exists() {
            continue;
        }
        let dispatches = |model: &std::path::Path| -> Result<usize, String> {
            let out = tempfile::tempdir().map_err(|e| e.to_string())?;
            let s = wgslc::compile(model, out.path(), &case.opts).map_err(|e| format!("{}: {e}", model.display()))?;
            Ok(s.plan.dispatches.len())
        };
        let as_onnx = common::Case { model: onnx.clone(), ..common::load_case(&case.dir) };
        // A known difference is written down in meta.json with its reason, and held to its numbers.
        let known = std::fs::read_to_string(case.dir.join("meta.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|m| m.get("dispatches_vs_onnx").cloned())
            .map(|d| (d["pt2"].as_u64().unwrap() as usize, d["onnx"].as_u64().unwrap() as usize));
        let r = dispatches(&case.model).and_then(|p| Ok((p, dispatches(&onnx)?))).and_then(|(p, o)| {
            if known.is_some_and(|k| k != (p, o)) || (known.is_none() && p != o) {
                return Err(format!("{p} dispatches from .pt2, {o} from ONNX (meta.json: {known:?})"));
            }
            let got = common::compile_and_run(&as_onnx, &as_onnx.opts)?;
            common::compare(&got, &case.expected, case.rtol, case.atol)
        });
        match r {
            Ok(()) => compared += 1,
            Err(e) => failures.push(format!("{}: {e}", case.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(compared >= 4, "only {compared} cases have exported.onnx");
}
