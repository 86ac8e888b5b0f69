#!/usr/bin/env python3
"""What a ranged artifact (`--dim sequence_length=1..MAX`) costs against artifacts compiled for each length, on a
BERT-base-shaped encoder (random weights, fp32: 12 layers, hidden 768, 12 heads, FFN 3072, vocab 30522; the model
of scripts/make_encoders.py at full size), with PyTorch eager and torch.compile on the same GPU.

    python3 scripts/ranged_bench.py --wgslc .bin/wgslc [--max 512] [--lengths 1,16,128,512] [--profile]

For each length: `wgslc bench` of the ranged artifact and of one compiled for that length (median ms), the ranged
artifact's outputs against torch's (max abs error), and torch's median ms. Prints one JSON line per length.
"""

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_encoders import Encoder  # noqa: E402


def wgslc(exe, *args):
    r = subprocess.run([exe, "--quiet", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"wgslc {' '.join(args)}: {r.stderr}")
    return r.stdout


def bench(exe, art, files, iterations=50):
    out = wgslc(exe, "bench", art, *sum((["--input", f] for f in files), []), "--iterations", str(iterations))
    return json.loads(out.strip().splitlines()[0])


def torch_ms(f, args, n=50):
    with torch.no_grad():
        for _ in range(5):
            f(*args)
        torch.cuda.synchronize()
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            f(*args)
            torch.cuda.synchronize()
            ts.append((time.perf_counter() - t) * 1e3)
    return sorted(ts)[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wgslc", required=True)
    ap.add_argument("--max", type=int, default=512)
    ap.add_argument("--lengths", default="1,16,128,512")
    ap.add_argument("--profile", action="store_true", help="also print the ranged artifact's slowest kernels")
    a = ap.parse_args()
    torch.manual_seed(0)
    m = Encoder(vocab=30522, h=768, heads=12, ffn=3072, layers=12, max_pos=a.max).eval()
    tmp = tempfile.mkdtemp()
    model = os.path.join(tmp, "model.onnx")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    outs = ["last_hidden_state", "pooler_output", "mean_pooled", "mean"]
    ex = (torch.randint(0, 30522, (1, 16)), torch.ones(1, 16, dtype=torch.int64), torch.zeros(1, 16, dtype=torch.int64))
    axes = {n: {1: "sequence_length"} for n in names}
    axes["last_hidden_state"] = {1: "sequence_length"}
    torch.onnx.export(m, ex, model, dynamo=False, opset_version=17, input_names=names, output_names=outs,
                      dynamic_axes=axes)
    ranged = os.path.join(tmp, "ranged")
    t = time.perf_counter()
    wgslc(a.wgslc, "compile", model, "-o", ranged, "--dim", f"sequence_length=1..{a.max}")
    compile_s = time.perf_counter() - t
    plan = json.load(open(os.path.join(ranged, "plan.json")))
    scaled = sum(1 for k in plan["kernels"] if k.get("scale"))
    print(json.dumps({"ranged_compile_s": round(compile_s, 1), "kernels": len(plan["kernels"]), "scaled": scaled}))
    mc = copy.deepcopy(m).cuda()
    compiled = torch.compile(mc)
    for length in [int(x) for x in a.lengths.split(",")]:
        g = torch.Generator().manual_seed(length)
        args = (torch.randint(0, 30522, (1, length), generator=g), torch.ones(1, length, dtype=torch.int64),
                torch.zeros(1, length, dtype=torch.int64))
        files = []
        for n, x in zip(names, args):
            f = os.path.join(tmp, f"{n}_{length}.npy")
            np.save(f, x.numpy())
            files.append(f)
        fixed = os.path.join(tmp, f"fixed_{length}")
        wgslc(a.wgslc, "compile", model, "-o", fixed, "--dim", f"sequence_length={length}")
        r = bench(a.wgslc, ranged, files)
        fx = bench(a.wgslc, fixed, files)
        o = os.path.join(tmp, f"out_{length}")
        wgslc(a.wgslc, "run", ranged, *sum((["--input", f] for f in files), []), "-o", o)
        with torch.no_grad():
            want = [t.numpy() for t in m(*args)]
        err = max(float(np.abs(np.load(os.path.join(o, f"output_{i}.npy")) - w).max()) for i, w in enumerate(want))
        cuda_args = tuple(x.cuda() for x in args)
        line = {
            "length": length, "max": a.max, "max_abs_err_vs_torch": err,
            "wgslc_ranged_ms": r["median_ms"], "wgslc_fixed_ms": fx["median_ms"],
            "dispatches_ranged": r["dispatches"], "dispatches_fixed": fx["dispatches"],
            "torch_eager_ms": round(torch_ms(mc, cuda_args), 3), "torch_compile_ms": round(torch_ms(compiled, cuda_args), 3),
            "adapter": r["adapter"],
        }
        print(json.dumps(line), flush=True)
        if a.profile:
            out = wgslc(a.wgslc, "bench", ranged, *sum((["--input", f] for f in files), []), "--iterations", "20",
                        "--profile")
            print("\n".join(out.strip().splitlines()[1:12]), flush=True)


if __name__ == "__main__":
    main()
