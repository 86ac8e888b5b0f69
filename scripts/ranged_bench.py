#!/usr/bin/env python3
"""What a ranged artifact (`--dim sequence_length=1..MAX`) costs against artifacts compiled for each length, on a
BERT-base-shaped encoder (random weights, fp32: 12 layers, hidden 768, 12 heads, FFN 3072, vocab 30522; the model
of scripts/make_encoders.py at full size), in buckets (`--buckets auto`, the default) and as one tiling
(`--buckets none`), optionally with PyTorch eager and torch.compile on the same GPU.

    python3 scripts/ranged_bench.py --wgslc .bin/wgslc [--max 512] [--lengths 1,16,128,512] [--check 1,16,512]
        [--torch-gpu] [--profile] [--fixed-also "--attention unfused"]

For each length, the artifact compiled for it, the bucketed one and the one-tiling one (`wgslc bench ART --dim
sequence_length=N`) are timed in turn, `--rounds` times (median of 50 replays each; the ratios compare the means of
those medians). For every length in `--check`, the bucketed artifact's outputs are compared with torch's (on the
CPU). Prints one JSON line per ranged artifact (compile time, kernels, buckets, weights, load time) and one per
length: each artifact's medians, the bucketed and one-tiling ratios to the per-length one, dispatches.
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

NAMES = ["input_ids", "attention_mask", "token_type_ids"]


def wgslc(exe, *args):
    r = subprocess.run([exe, "--quiet", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"wgslc {' '.join(args)}: {r.stderr}")
    return r.stdout


def bench_lengths(exe, art, lengths, iterations=50):
    """`wgslc bench --dim`: one load, every length; {length: line}."""
    out = wgslc(exe, "bench", art, "--dim", "sequence_length=" + ",".join(map(str, lengths)), "--iterations",
                str(iterations))
    lines = [json.loads(x) for x in out.strip().splitlines()]
    return {x["dims"]["sequence_length"]: x for x in lines}


def bench_inputs(exe, art, files, iterations=50, profile=False):
    args = ["bench", art, *sum((["--input", f] for f in files), []), "--iterations", str(iterations)]
    out = wgslc(exe, *args, *(["--profile"] if profile else []))
    return [json.loads(x) for x in out.strip().splitlines()]


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


def inputs_at(length):
    g = torch.Generator().manual_seed(length)
    return (torch.randint(0, 30522, (1, length), generator=g), torch.ones(1, length, dtype=torch.int64),
            torch.zeros(1, length, dtype=torch.int64))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wgslc", required=True)
    ap.add_argument("--max", type=int, default=512)
    ap.add_argument("--lengths", default="1,16,128,512")
    ap.add_argument("--check", default="", help="lengths whose bucketed outputs are compared with torch's")
    ap.add_argument("--profile", action="store_true", help="also print each length's slowest kernels (bucketed)")
    ap.add_argument("--torch-gpu", action="store_true", help="also time PyTorch eager and torch.compile on CUDA")
    ap.add_argument("--load-with", help="another wgslc binary whose load of the one-tiling artifact is timed too")
    ap.add_argument("--rounds", type=int, default=2, help="each length's artifacts timed this many times, interleaved")
    ap.add_argument("--fixed-also", default="", help="compile flags of a second per-length artifact timed beside "
                    "the first (e.g. '--attention unfused'), reported as wgslc_fixed_also_ms")
    a = ap.parse_args()
    lengths = [int(x) for x in a.lengths.split(",")]
    torch.manual_seed(0)
    m = Encoder(vocab=30522, h=768, heads=12, ffn=3072, layers=12, max_pos=a.max).eval()
    tmp = tempfile.mkdtemp()
    model = os.path.join(tmp, "model.onnx")
    outs = ["last_hidden_state", "pooler_output", "mean_pooled", "mean"]
    axes = {n: {1: "sequence_length"} for n in NAMES}
    axes["last_hidden_state"] = {1: "sequence_length"}
    torch.onnx.export(m, inputs_at(16), model, dynamo=False, opset_version=17, input_names=NAMES, output_names=outs,
                      dynamic_axes=axes)
    arts = {}
    for kind in ["auto", "none"]:
        art = os.path.join(tmp, f"ranged_{kind}")
        t = time.perf_counter()
        wgslc(a.wgslc, "compile", model, "-o", art, "--dim", f"sequence_length=1..{a.max}", "--buckets", kind)
        compile_s = time.perf_counter() - t
        plan = json.load(open(os.path.join(art, "plan.json")))
        buckets = plan["ranges"].get("buckets", [])
        t = time.perf_counter()
        wgslc(a.wgslc, "bench", art, "--iterations", "1", "--warmup", "0")
        load_s = time.perf_counter() - t
        weights = os.path.getsize(os.path.join(art, "weights.safetensors"))
        line = {"artifact": kind, "compile_s": round(compile_s, 1), "kernels": len(plan["kernels"]),
                "buckets": [[b["min"], b["max"]] for b in buckets], "weights_bytes": weights,
                "load_and_one_replay_s": round(load_s, 2)}
        if a.load_with and kind == "none":
            t = time.perf_counter()
            wgslc(a.load_with, "bench", art, "--iterations", "1", "--warmup", "0")
            line["load_and_one_replay_s_other_binary"] = round(time.perf_counter() - t, 2)
        print(json.dumps(line), flush=True)
        arts[kind] = art
    if a.torch_gpu:
        mc = copy.deepcopy(m).cuda()
        compiled = torch.compile(mc)
    for length in lengths:
        files = []
        for n, x in zip(NAMES, inputs_at(length)):
            f = os.path.join(tmp, f"{n}_{length}.npy")
            np.save(f, x.numpy())
            files.append(f)
        fixed = os.path.join(tmp, f"fixed_{length}")
        wgslc(a.wgslc, "compile", model, "-o", fixed, "--dim", f"sequence_length={length}")
        # Interleaved: the per-length artifact, the buckets, one tiling, then again; the medians' means compared.
        runs = {"fixed": [], "auto": [], "none": []}
        if a.fixed_also:
            wgslc(a.wgslc, "compile", model, "-o", fixed + "_also", "--dim", f"sequence_length={length}",
                  *a.fixed_also.split())
            runs["fixed_also"] = []
        for _ in range(a.rounds):
            runs["fixed"].append(bench_inputs(a.wgslc, fixed, files)[0])
            if a.fixed_also:
                runs["fixed_also"].append(bench_inputs(a.wgslc, fixed + "_also", files)[0])
            for kind in ["auto", "none"]:
                runs[kind].append(bench_lengths(a.wgslc, arts[kind], [length])[length])
        ms = {k: [r["median_ms"] for r in v] for k, v in runs.items()}
        mean = {k: sum(v) / len(v) for k, v in ms.items()}
        fx, b, s = runs["fixed"][0], runs["auto"][0], runs["none"][0]
        line = {
            "length": length, "max": a.max, "bucket": b.get("bucket"),
            "wgslc_fixed_ms": ms["fixed"], "wgslc_buckets_ms": ms["auto"], "wgslc_one_tiling_ms": ms["none"],
            "buckets_vs_fixed": round(mean["auto"] / mean["fixed"], 3),
            "one_tiling_vs_fixed": round(mean["none"] / mean["fixed"], 3),
            "dispatches_fixed": fx["dispatches"], "dispatches_buckets": b["dispatches"],
            "dispatches_one_tiling": s["dispatches"], "adapter": fx["adapter"],
        }
        if a.fixed_also:
            line["wgslc_fixed_also_ms"] = ms["fixed_also"]
            line["dispatches_fixed_also"] = runs["fixed_also"][0]["dispatches"]
        if str(length) in a.check.split(","):
            o = os.path.join(tmp, f"out_{length}")
            wgslc(a.wgslc, "run", arts["auto"], *sum((["--input", f] for f in files), []), "-o", o)
            with torch.no_grad():
                want = [t.numpy() for t in m(*inputs_at(length))]
            line["max_abs_err_vs_torch"] = max(
                float(np.abs(np.load(os.path.join(o, f"output_{i}.npy")) - w).max()) for i, w in enumerate(want))
        if a.torch_gpu:
            cuda_args = tuple(x.cuda() for x in inputs_at(length))
            line["torch_eager_ms"] = round(torch_ms(mc, cuda_args), 3)
            line["torch_compile_ms"] = round(torch_ms(compiled, cuda_args), 3)
        print(json.dumps(line), flush=True)
        if a.profile:
            for x in bench_inputs(a.wgslc, arts["auto"], files, 20, profile=True)[1:8]:
                print(json.dumps(x), flush=True)


if __name__ == "__main__":
    main()
