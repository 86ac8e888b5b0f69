//! Every layout of the product kernel (templates/matmul.wgsl) against onnxruntime, whatever shapes the op cases
//! have: the emitter's `WGSLC_PRODUCT_TILING` knob forces one layout on every product, so small products run the
//! 128x128 tiles the scheduler keeps for large ones (ragged edges included), and every operand form the cases hold
//! (transposed A or B, Gemm's bias, implicit-GEMM convolutions, a summed second convolution, a depthwise input, a
//! folded RMSNorm, batches) runs under each, its operands read four elements a load where their layout allows and,
//! under `WGSLC_PRODUCT_LOADS=scalar`, one. Its own test binary: the knobs are this process's environment.

mod common;

use std::path::Path;

/// TILE,VEC,SLICES[,THREADS]: every layout `ProductTiling::of_threads` accepts.
const TILINGS: [&str; 10] =
    ["16,1,1", "32,1,1", "64,1,1", "64,4,1", "128,4,1", "16,1,4", "32,1,4", "32,4,4", "64,4,1,128", "64,1,1,128"];

/// The WGSL of an artifact's product kernels (those from templates/matmul.wgsl).
fn products(art: &Path) -> Vec<String> {
    let mut files: Vec<_> = std::fs::read_dir(art.join("kernels")).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .filter(|w| w.contains("// Tiled matrix product:"))
        .collect()
}

type Run = (Vec<String>, Vec<wgslc::runtime::HostTensor>);

fn compile_run(case: &common::Case, opts: &wgslc::CompileOptions) -> Result<Run, String> {
    let out = tempfile::tempdir().map_err(|e| e.to_string())?;
    wgslc::compile(&case.model, out.path(), opts).map_err(|e| format!("compile: {e}"))?;
    let session = wgslc::runtime::Session::load_with(out.path(), common::gpu()).map_err(|e| format!("load: {e}"))?;
    let got = session.run(&case.inputs).map_err(|e| format!("run: {e}"))?;
    Ok((products(out.path()), got))
}

#[test]
fn product_tilings_match_onnxruntime() {
    std::env::remove_var("WGSLC_PRODUCT_TILING");
    std::env::remove_var("WGSLC_PRODUCT_LOADS");
    // The op cases with a product kernel, fused or one kernel per op.
    let mut cases = Vec::new();
    for case in common::cases("ops") {
        for no_fuse in [false, true] {
            let opts = wgslc::CompileOptions { no_fuse, ..case.opts.clone() };
            if compile_run(&case, &opts).is_ok_and(|(w, _)| !w.is_empty()) {
                cases.push((case, opts));
                break;
            }
        }
    }
    assert!(cases.len() >= 40, "only {} op cases with a product kernel", cases.len());
    let mut failures = Vec::new();
    // Every tiling with vec4 loads where they apply (tiles of up to 64), then two of those tilings with scalar
    // loads (what the vec4 loads replace; one reads workgroup memory as vec4s, one as floats).
    let mut vec4_kernels = 0;
    let runs = TILINGS.iter().map(|t| (*t, false)).chain([("64,4,1", true), ("32,1,4", true)]);
    for (tiling, scalar) in runs {
        std::env::set_var("WGSLC_PRODUCT_TILING", tiling);
        if scalar {
            std::env::set_var("WGSLC_PRODUCT_LOADS", "scalar");
        }
        let v: Vec<usize> = tiling.split(',').map(|x| x.parse().unwrap()).collect();
        let (tile, vec, slices, threads) = (v[0], v[1], v[2], v.get(3).copied().unwrap_or(256));
        for (case, opts) in &cases {
            let r = compile_run(case, opts).and_then(|(w, got)| {
                // The knob took: the layout's own text is there.
                let marks = [
                    format!("a {tile}x{tile} output tile"),
                    format!("of {threads} threads in {slices} slice(s)"),
                    format!("@workgroup_size({threads})"),
                ];
                let laid = |w: &String| {
                    marks.iter().all(|m| w.contains(m.as_str()))
                        && w.contains("var<workgroup> smem: array<vec4<f32>") == (vec == 4)
                };
                if w.is_empty() || !w.iter().all(laid) {
                    return Err(format!("the kernels do not have the {tiling} layout"));
                }
                let wide = w.iter().filter(|w| w.contains("fn load_a4(") || w.contains("fn load_b4(")).count();
                if scalar && wide > 0 {
                    return Err("vec4 loads under WGSLC_PRODUCT_LOADS=scalar".into());
                }
                vec4_kernels += wide;
                common::compare(&got, &case.expected, case.rtol, case.atol)
            });
            if let Err(e) = r {
                eprintln!("FAIL {tiling} ops/{}: {e}", case.name);
                failures.push(format!("{tiling} {}: {e}", case.name));
            }
        }
        eprintln!("{tiling}{}: {} cases", if scalar { " scalar loads" } else { "" }, cases.len());
    }
    std::env::remove_var("WGSLC_PRODUCT_LOADS");
    // The vec4 loads ran: most op cases' products have operands in whole vec4s.
    assert!(vec4_kernels >= 40, "only {vec4_kernels} product kernels with vec4 loads");
    // A knob that names no tiling is refused (every field a number), never read as another.
    for bad in ["128,x,4", "7,4", "64"] {
        std::env::set_var("WGSLC_PRODUCT_TILING", bad);
        let e = compile_run(&cases[0].0, &cases[0].1).expect_err(bad);
        assert!(e.contains("is not a tiling TILE,VEC[,SLICES[,THREADS]]"), "{bad}: {e}");
    }
    std::env::remove_var("WGSLC_PRODUCT_TILING");
    assert!(failures.is_empty(), "{} failed:\n{}", failures.len(), failures.join("\n"));
}
