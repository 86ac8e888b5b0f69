#!/usr/bin/env python3
"""Recurrence benchmark: an ONNX LSTM compiled by wgslc (the time loop in one dispatch per direction and batch
element) against the same LSTM unrolled into per-step ops (X_t·Wᵀ + H·Rᵀ + b, gates, cell update: the shape a
per-step implementation dispatches), both checked against onnxruntime first, timed with `wgslc bench` on whatever
adapter the binary finds (lavapipe here, a GPU through `device`):

    python3 scripts/rnn_bench.py --wgslc target/release/wgslc [--configs 128x64,512x32,64x256] [--iterations 20]

Each config is HIDDENxSTEPS (batch 1, 64 inputs, forward). Prints a markdown table: dispatches and median ms of
both, and the speedup. Needs numpy, onnx, onnxruntime.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def lstm_models(h, t, i, rng):
    w = (rng.uniform(-1, 1, (1, 4 * h, i)) / np.sqrt(i)).astype(np.float32)
    r = (rng.uniform(-1, 1, (1, 4 * h, h)) / np.sqrt(h)).astype(np.float32)
    b = (rng.uniform(-1, 1, (1, 8 * h)) * 0.1).astype(np.float32)
    x_info = helper.make_tensor_value_info("x", F, [t, 1, i])
    inits = [numpy_helper.from_array(a, n) for a, n in [(w, "w"), (r, "r"), (b, "b")]]
    fused = helper.make_model(helper.make_graph(
        [helper.make_node("LSTM", ["x", "w", "r", "b"], ["y"], hidden_size=h)], "lstm", [x_info],
        [helper.make_tensor_value_info("y", F, None)], inits), opset_imports=[helper.make_opsetid("", 14)])
    # Unrolled: per step, gates = x_t·Wᵀ + h·Rᵀ + (Wb + Rb), split i, o, f, c; c = f·c + i·tanh(c~); h = o·tanh(c).
    wt = w[0].T.copy()
    rt = r[0].T.copy()
    bias = (b[0, :4 * h] + b[0, 4 * h:]).reshape(1, 4 * h)
    nodes, consts = [], [numpy_helper.from_array(wt, "wt"), numpy_helper.from_array(rt, "rt"),
                         numpy_helper.from_array(bias, "bias"), numpy_helper.from_array(np.zeros((1, h), np.float32), "z"),
                         numpy_helper.from_array(np.array([1, 1, h], np.int64), "row_shape")]
    hp, cp = "z", "z"
    xs = [f"x{k}" for k in range(t)]
    nodes.append(helper.make_node("Split", ["x"], xs, axis=0, num_outputs=t))
    rows = []
    for k in range(t):
        p = f"s{k}_"
        nodes += [
            helper.make_node("Squeeze", [xs[k], "ax0"], [p + "x"]),
            helper.make_node("MatMul", [p + "x", "wt"], [p + "xw"]),
            helper.make_node("MatMul", [hp, "rt"], [p + "hr"]),
            helper.make_node("Add", [p + "xw", p + "hr"], [p + "s"]),
            helper.make_node("Add", [p + "s", "bias"], [p + "g"]),
            helper.make_node("Split", [p + "g"], [p + "i", p + "o", p + "f", p + "c"], axis=1, num_outputs=4),
            helper.make_node("Sigmoid", [p + "i"], [p + "si"]),
            helper.make_node("Sigmoid", [p + "o"], [p + "so"]),
            helper.make_node("Sigmoid", [p + "f"], [p + "sf"]),
            helper.make_node("Tanh", [p + "c"], [p + "tc"]),
            helper.make_node("Mul", [p + "sf", cp], [p + "fc"]),
            helper.make_node("Mul", [p + "si", p + "tc"], [p + "it"]),
            helper.make_node("Add", [p + "fc", p + "it"], [p + "cn"]),
            helper.make_node("Tanh", [p + "cn"], [p + "tcn"]),
            helper.make_node("Mul", [p + "so", p + "tcn"], [p + "h"]),
            helper.make_node("Reshape", [p + "h", "row_shape"], [p + "row"]),
        ]
        hp, cp = p + "h", p + "cn"
        rows.append(p + "row")
    nodes.append(helper.make_node("Concat", rows, ["y3"], axis=0))
    nodes.append(helper.make_node("Unsqueeze", ["y3", "ax1"], ["y"]))
    consts += [numpy_helper.from_array(np.array([0], np.int64), "ax0"),
               numpy_helper.from_array(np.array([1], np.int64), "ax1")]
    unrolled = helper.make_model(helper.make_graph(nodes, "unrolled", [x_info],
                                                   [helper.make_tensor_value_info("y", F, None)], consts),
                                 opset_imports=[helper.make_opsetid("", 18)])
    fused.ir_version = unrolled.ir_version = 8
    return fused, unrolled


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wgslc", required=True)
    ap.add_argument("--configs", default="128x64,512x32,64x256")
    ap.add_argument("--iterations", type=int, default=20)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    adapter = None
    with tempfile.TemporaryDirectory() as tmp:
        for cfg in a.configs.split(","):
            h, t = (int(v) for v in cfg.split("x"))
            x = rng.uniform(-1, 1, (t, 1, 64)).astype(np.float32)
            np.save(os.path.join(tmp, "x.npy"), x)
            fused, unrolled = lstm_models(h, t, 64, rng)
            want = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"]).run(
                None, {"x": x})[0]
            got_unrolled = ort.InferenceSession(unrolled.SerializeToString(), providers=["CPUExecutionProvider"]).run(
                None, {"x": x})[0]
            assert np.allclose(want, got_unrolled, atol=1e-4), "the unrolled model is not the LSTM"
            res = {}
            for name, m in [("lstm", fused), ("unrolled", unrolled)]:
                path, art, out = (os.path.join(tmp, f"{name}.onnx"), os.path.join(tmp, f"art_{name}_{cfg}"),
                                  os.path.join(tmp, f"out_{name}_{cfg}"))
                open(path, "wb").write(m.SerializeToString())
                subprocess.run([a.wgslc, "--quiet", "compile", path, "-o", art], check=True)
                subprocess.run([a.wgslc, "--quiet", "run", art, "--input", os.path.join(tmp, "x.npy"), "-o", out],
                               check=True, capture_output=True)
                got = np.load(os.path.join(out, sorted(f for f in os.listdir(out) if f.endswith(".npy"))[0]))
                err = float(np.abs(got - want).max())
                assert err < 1e-3, f"{name} {cfg}: max error {err} against onnxruntime"
                r = subprocess.run([a.wgslc, "--quiet", "bench", art, "--input", os.path.join(tmp, "x.npy"),
                                    "--iterations", str(a.iterations)], check=True, capture_output=True, text=True)
                j = json.loads(r.stdout.strip().splitlines()[-1])
                adapter = j["adapter"]
                res[name] = (j["dispatches"], j["median_ms"], err)
            rows.append((h, t, res))
    print(f"\n{adapter}; LSTM, batch 1, 64 inputs, forward; medians of {a.iterations} replays")
    print("| hidden × steps | one dispatch: dispatches, ms | unrolled per step: dispatches, ms | speedup | max err |")
    print("| --- | --- | --- | --- | --- |")
    for h, t, res in rows:
        (d1, m1, e1), (d2, m2, e2) = res["lstm"], res["unrolled"]
        print(f"| {h} × {t} | {d1}, {m1:.3f} | {d2}, {m2:.3f} | {m2 / m1:.1f}× | {max(e1, e2):.1e} |")


if __name__ == "__main__":
    sys.exit(main())
