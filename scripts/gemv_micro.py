#!/usr/bin/env python3
"""Times the one-row products of the Qwen2.5-0.5B decode step alone, over narrow weights, under several layouts of
the packed matrix-vector kernel (the emitter's WGSLC_PACKED_TILING knob: LANES,COLUMNS[,TILES], or N:LANES,COLUMNS
entries separated by ';' for the products of N outputs alone; here LANESxCOLUMNS[xTILES]), with GPU timestamps
(`--weights fp32`: the model's own f32 weights, the plain matrix-vector kernel, whose loads in flight
WGSLC_GEMV_UNROLL sets):

    python3 scripts/gemv_micro.py --wgslc .bin/wgslc [--weights q4,f16,fp32] [--tilings default,32x1,32x2,16x4]

Each shape is a MatMul of a [1, K] input by a constant [K, N] (random, std 0.02), compiled with --weights W (no
flag for fp32); the down projection's input is SiLU(gate)·up, computed in the product's staging as in the decoder,
and `head_norm`'s is the final RMSNorm (Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul, Mul), folded into the product
as in the decoder.
"""
import argparse, json, os, subprocess, sys
import numpy as np
import onnx
from onnx import TensorProto as T, helper, numpy_helper

SHAPES = {"gateup": (896, 9728, False), "down": (4864, 896, True), "qkv": (896, 1152, False),
          "oproj": (896, 896, False), "head": (896, 151936, False), "head_norm": (896, 151936, "rms")}


def rms_product(gamma):
    """MatMul(RMSNorm(x) · gamma, w) as exporters write the norm (Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul, Mul):
    its nodes and constants."""
    c = lambda name, v: numpy_helper.from_array(np.array(v, dtype=np.float32), name)
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["mse"]), helper.make_node("Sqrt", ["mse"], ["rms"]),
             helper.make_node("Reciprocal", ["rms"], ["inv"]), helper.make_node("Mul", ["x", "inv"], ["xn"]),
             helper.make_node("Mul", ["xn", "gamma"], ["xg"]), helper.make_node("MatMul", ["xg", "w"], ["y"])]
    return nodes, [c("two", 2.0), c("eps", 1e-6), c("gamma", gamma)]


def model(path, k, n, glu):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((k, n)) * 0.02).astype(np.float32)
    if glu == "rms":
        nodes, consts = rms_product(1.0 + 0.1 * rng.standard_normal(k))
        ins = [helper.make_tensor_value_info("x", T.FLOAT, [1, k])]
    elif glu:
        nodes = [helper.make_node("Sigmoid", ["g"], ["sg"]), helper.make_node("Mul", ["g", "sg"], ["silu"]),
                 helper.make_node("Mul", ["silu", "u"], ["x"]), helper.make_node("MatMul", ["x", "w"], ["y"])]
        ins = [helper.make_tensor_value_info("g", T.FLOAT, [1, k]), helper.make_tensor_value_info("u", T.FLOAT, [1, k])]
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
        ins = [helper.make_tensor_value_info("x", T.FLOAT, [1, k])]
    if glu != "rms":
        consts = []
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", T.FLOAT, [1, n])],
                          initializer=[numpy_helper.from_array(w, "w")] + consts)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path, save_as_external_data=True, location=os.path.basename(path) + ".data")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wgslc", required=True)
    ap.add_argument("--out", default="/tmp/gemv_micro")
    ap.add_argument("--weights", default="q4,f16")
    ap.add_argument("--tilings", default="default,32x1,32x2,32x4,16x4,64x1")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name in a.shapes.split(","):
        k, n, glu = SHAPES[name]
        path = os.path.join(a.out, f"{name}.onnx")
        model(path, k, n, glu)
        for w in a.weights.split(","):
            row = {"shape": name, "K": k, "N": n, "weights": w}
            for t in a.tilings.split(","):
                env = dict(os.environ)
                if t != "default":
                    env["WGSLC_PACKED_TILING"] = t.replace("x", ",")
                art = os.path.join(a.out, f"{name}_{w}_{t}")
                subprocess.run(["rm", "-rf", art], check=True)
                narrow = [] if w == "fp32" else ["--weights", w]
                r = subprocess.run([a.wgslc, "compile", path, "-o", art, "--quiet"] + narrow, env=env,
                                   capture_output=True, text=True)
                if r.returncode:
                    row[t] = "compile: " + r.stderr.strip()[-200:]
                    continue
                r = subprocess.run([a.wgslc, "bench", art, "--profile", "--iterations", "200"], capture_output=True,
                                   text=True)
                if r.returncode:
                    row[t] = "bench: " + r.stderr.strip()[-200:]
                    continue
                lines = [json.loads(x) for x in r.stdout.strip().splitlines()]
                kernels = [x for x in lines if "kernel" in x]
                row[t] = {"replay_ms": lines[0].get("median_ms"), "dispatches": lines[0].get("dispatches"),
                          "kernel_us": [round(x["ms"] * 1e3, 1) for x in kernels]}
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
