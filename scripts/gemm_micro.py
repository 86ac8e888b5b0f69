#!/usr/bin/env python3
"""Times single fp32 products of a [M, K] input by a constant [K, N] weight (a MatMul node, random std 0.02), with
GPU timestamps (`wgslc bench --profile`, the product kernel alone), under the scheduler's tiling and under tilings
forced with the emitter's WGSLC_PRODUCT_TILING knob (TILE,VEC[,SLICES[,THREADS]]: TILExTILE tiles, VEC neighbouring
outputs a side per thread, in one slice of 16x16 threads or four of 8x8 that each take a quarter of K, or with
THREADS 128 one slice of 8x16 threads that each hold twice the rows; written here TILExVEC[xSLICES[xTHREADS]]; a `:scalar` suffix, as in `default:scalar`, also sets WGSLC_PRODUCT_LOADS=scalar, the operands
read one element a load instead of four), against `torch.mm` on the same shapes in the same run (fp32, TF32 off, CUDA events around one
call, median):

    python3 scripts/gemm_micro.py --wgslc .bin/wgslc [--shapes 4096x4096x4096,128x3072x768] [--tilings default,64x4,128x4,32x4x4]
        [--forms kn,nk,rms]

Shapes are MxKxN. Prints one JSON line a shape: µs and TFLOP/s for each tiling and for torch.mm. Each wgslc
output is checked against numpy (float64) first; a tiling whose result is off reports the error instead of a time.
"""
import argparse, json, os, subprocess, sys
import numpy as np
import onnx
from onnx import TensorProto as T, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemv_micro import rms_product  # noqa: E402

SHAPES = "4096x4096x4096,2048x2048x2048,128x3072x768,128x768x3072,128x768x768,32x896x4864,32x4864x896,512x896x4864"


def model(path, m, k, n, form="kn"):
    """form: `kn` MatMul(x, W[K, N]); `nk` Gemm(x, W[N, K], transB=1), a Linear's weight as exporters write it;
    `rms` MatMul(RMSNorm(x) · gamma, W[K, N]), the norm as Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul, Mul
    (folded into the product, as in a decoder's prefill); `splitS` (S a divisor of K) the product as S products
    over K / S each, batched ([S, M, K/S] a view of x, the weight stored [S, K/S, N]), summed by Split and Adds
    (one elementwise kernel): split-K across workgroups written as a graph, to measure what it would give."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((k, n)) * 0.02).astype(np.float32)
    inits = [numpy_helper.from_array(w.T.copy() if form == "nk" else w, "w")]
    if form.startswith("split"):
        sp = int(form[5:])
        inits = [numpy_helper.from_array(w.reshape(sp, k // sp, n), "w"),
                 numpy_helper.from_array(np.array([m, sp, k // sp], np.int64), "xs"),
                 ]
        nodes = [helper.make_node("Reshape", ["x", "xs"], ["x3"]),
                 helper.make_node("Transpose", ["x3"], ["xt"], perm=[1, 0, 2]),
                 helper.make_node("MatMul", ["xt", "w"], ["p"]),
                 helper.make_node("Split", ["p"], [f"p{i}" for i in range(sp)], axis=0, num_outputs=sp)]
        acc = "p0"
        for i in range(1, sp):
            nodes.append(helper.make_node("Add", [acc, f"p{i}"], [f"s{i}"]))
            acc = f"s{i}"
        inits.append(numpy_helper.from_array(np.array([m, n], np.int64), "ys"))
        nodes.append(helper.make_node("Reshape", [acc, "ys"], ["y"]))
    elif form == "nk":
        nodes = [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)]
    elif form == "rms":
        # Weights away from one, so that the check sees them applied (and applied to the right k).
        gamma = (1.0 + 0.1 * rng.standard_normal(k)).astype(np.float32)
        nodes, consts = rms_product(gamma)
        inits += consts
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [m, n])], initializer=inits)
    # rms_product writes ReduceMean's axes as an attribute: opset 17 (18 made it an input; Split's num_outputs needs 18).
    mo = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17 if form == "rms" else 18)])
    mo.ir_version = 8
    onnx.save(mo, path, save_as_external_data=True, location=os.path.basename(path) + ".data")
    x = rng.standard_normal((m, k)).astype(np.float32)
    np.save(path + ".x.npy", x)
    if form == "rms":
        x = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * gamma
    return x, w


def torch_mm_us(m, k, n, iters=50):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(k, n, device="cuda")
    for _ in range(10):
        torch.mm(a, b)
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.mm(a, b)
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    return float(np.median(ts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wgslc", required=True)
    ap.add_argument("--out", default="/tmp/gemm_micro")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--tilings", default="default,64x1,64x4,128x4")
    ap.add_argument("--iterations", default="50")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--forms", default="kn", help="kn, nk (Gemm transB=1) and/or rms (see model())")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for shape, form in [(s, f) for s in a.shapes.split(",") for f in a.forms.split(",")]:
        m, k, n = map(int, shape.split("x"))
        flop = 2.0 * m * k * n
        path = os.path.join(a.out, f"{shape}_{form}.onnx")
        x, w = model(path, m, k, n, form)
        want = x.astype(np.float64) @ w.astype(np.float64)
        row = {"shape": shape, "form": form}
        if not a.no_torch and form == a.forms.split(",")[0]:
            us = torch_mm_us(m, k, n)
            row["torch_mm"] = {"us": round(us, 1), "tflops": round(flop / us / 1e6, 2)}
        for t in a.tilings.split(","):
            env = dict(os.environ)
            tiling, _, loads = t.partition(":")
            if tiling != "default":
                env["WGSLC_PRODUCT_TILING"] = tiling.replace("x", ",")
            if loads:
                env["WGSLC_PRODUCT_LOADS"] = loads
            art = os.path.join(a.out, f"{shape}_{form}_{t.replace(':', '_')}")
            subprocess.run(["rm", "-rf", art, art + "_out"], check=True)
            r = subprocess.run([a.wgslc, "compile", path, "-o", art, "--quiet"], env=env, capture_output=True, text=True)
            if r.returncode:
                row[t] = "compile: " + r.stderr.strip()[-200:]
                continue
            r = subprocess.run([a.wgslc, "run", art, "--input", f"x={path}.x.npy", "-o", art + "_out"],
                               capture_output=True, text=True)
            if r.returncode:
                row[t] = "run: " + r.stderr.strip()[-200:]
                continue
            got = np.load(os.path.join(art + "_out", "output_0.npy"))
            err = float(np.max(np.abs(got - want)))
            if not err <= 1e-3 * float(np.max(np.abs(want))):
                row[t] = f"wrong: max error {err}"
                continue
            r = subprocess.run([a.wgslc, "bench", art, "--profile", "--iterations", a.iterations],
                               capture_output=True, text=True)
            if r.returncode:
                row[t] = "bench: " + r.stderr.strip()[-200:]
                continue
            lines = [json.loads(l) for l in r.stdout.strip().splitlines()]
            us = sum(l["ms"] for l in lines if "kernel" in l) * 1e3
            row[t] = {"us": round(us, 1), "tflops": round(flop / us / 1e6, 2), "replay_ms": lines[0].get("median_ms")}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
