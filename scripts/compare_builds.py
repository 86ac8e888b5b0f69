#!/usr/bin/env python3
"""Two wgslc builds on the benchmark exports: compile time (median of N, interleaved), dispatch counts, whether the artifacts are
byte-identical (report.json aside), and, with --bench, interleaved `wgslc bench` medians. For checking that a
refactor changed nothing it should not, and measuring a fusion rule that should.

    python3 scripts/compare_builds.py OUT_DIR BIN_A BIN_B [--models gpt2,bert,llama,resnet18,mobilenet_v2,squeezenet1_1,shufflenet_v2_x0_5]
        [--compiles 3] [--bench ROUNDS] [--iterations N]

gpt2/bert/llama/resnet18/mobilenet_v2 are scripts/bench_models.py's (128 tokens); squeezenet1_1 and
shufflenet_v2_x0_5 are torchvision's. Every export is torch.onnx.export(dynamo=True, opset 20). Needs torch,
torchvision, transformers, onnx (the GPU machine has them).
"""
import argparse
import filecmp
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models as bm  # noqa: E402


def torchvision_model(name):
    def make(tokens=None):
        import torchvision
        return getattr(torchvision.models, name)(weights=None), (torch.randn(1, 3, 224, 224),)
    return make


MODELS = dict(bm.MODELS, squeezenet1_1=torchvision_model("squeezenet1_1"),
              shufflenet_v2_x0_5=torchvision_model("shufflenet_v2_x0_5"))


def same_artifact(a, b):
    """Whether two artifact directories hold the same plan, kernels and weights (report.json aside)."""
    for f in ["plan.json", "weights.safetensors"]:
        if not filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False):
            return False
    ka, kb = sorted(os.listdir(os.path.join(a, "kernels"))), sorted(os.listdir(os.path.join(b, "kernels")))
    return ka == kb and all(filecmp.cmp(os.path.join(a, "kernels", k), os.path.join(b, "kernels", k), shallow=False)
                            for k in ka)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--compiles", type=int, default=3)
    ap.add_argument("--bench", type=int, default=0, help="interleaved bench rounds per build (0: none)")
    ap.add_argument("--iterations", type=int, default=50)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for name in a.models.split(","):
        torch.manual_seed(0)
        model, args = MODELS[name](128)
        model.eval()
        d = os.path.join(a.out, name)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "model.onnx")
        with torch.no_grad():
            torch.onnx.export(model, args, path, dynamo=True, opset_version=20, external_data=False,
                              input_names=["input_0"])
        inp = os.path.join(d, "input_0.npy")
        np.save(inp, args[0].numpy())
        row = {"model": name}
        # Compiles interleaved (a, b, a, b, …) so that disk and cache state favour neither; the median is kept.
        times = {"a": [], "b": []}
        for _ in range(a.compiles):
            for tag, wgslc in [("a", a.a), ("b", a.b)]:
                t = time.perf_counter()
                subprocess.run([wgslc, "compile", path, "-o", os.path.join(d, tag)], check=True, capture_output=True)
                times[tag].append(time.perf_counter() - t)
        for tag in times:
            report = json.load(open(os.path.join(d, tag, "report.json")))
            row[f"{tag}_compile_s"] = round(statistics.median(times[tag]), 3)
            row[f"{tag}_compile_s_all"] = sorted(round(x, 3) for x in times[tag])
            row[f"{tag}_dispatches"] = report["dispatches"]
        row["identical"] = same_artifact(os.path.join(d, "a"), os.path.join(d, "b"))
        if a.bench:
            ms = {"a": [], "b": []}
            for _ in range(a.bench):
                for tag, wgslc in [("a", a.a), ("b", a.b)]:
                    r = subprocess.run([wgslc, "bench", os.path.join(d, tag), "--iterations", str(a.iterations),
                                        "--input", inp], check=True, capture_output=True, text=True)
                    ms[tag].append(json.loads(r.stdout)["ms_per_inference"])
            for tag in ms:
                row[f"{tag}_ms"] = round(statistics.median(ms[tag]), 3)
                row[f"{tag}_ms_all"] = sorted(round(x, 3) for x in ms[tag])
        print(json.dumps(row), flush=True)
        rows.append(row)
    json.dump(rows, open(os.path.join(a.out, "compare.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
