#!/usr/bin/env python3
"""Timing-only bounds for kernel fusions not built yet: what a decode step would gain if some of its per-layer
dispatches were gone. Compiles the decoder once per weight variant (A), then copies the artifact with dispatches
dropped from the decode step's list:

  O  the o-projection after every attention kernel (the bound of computing it inside the attention kernel),
  Q  the RMSNorm + QKV before every attention kernel,
  OQ both,
  P  the step's kernels before its first layer but the embedding lookup (the bound of one prelude kernel),
  K  no dropped dispatch, but every one-row attention kernel scores and sums only its first key (what the work per
     key costs at these context lengths: the bound of splitting a row's keys over several workgroups).

The dropped kernels' outputs keep stale values, so the tokens of O, Q, OQ, P and K are wrong: only the time counts.
Every variant runs `wgslc generate` at one step a submit; rounds interleave the variants, after one round that
is not counted.

    python3 scripts/decode_bounds.py OUT model.onnx prompt.npy WGSLC --variants q4,f16 --rounds 3
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys


def attention_positions(art, plan, ds):
    """The positions in dispatch list `ds` of the artifact's one-row attention kernels."""
    wgsl = lambda d: open(os.path.join(art, plan["kernels"][d]["wgsl"])).read()
    return [i for i, d in enumerate(ds) if "templates/attention_row.wgsl" in wgsl(d)]


def drop(src, dst, which):
    shutil.copytree(src, dst)
    path = os.path.join(dst, "plan.json")
    plan = json.load(open(path))
    step = next(s for s in plan["decoder"]["steps"] if s["name"] == "decode")
    ds = step["dispatches"]
    att = attention_positions(dst, plan, ds)
    gone = set()
    if "O" in which:
        gone |= {i + 1 for i in att}
    if "Q" in which:
        gone |= {i - 1 for i in att}
    if "P" in which:
        gone |= set(range(1, att[0] - 1))
    if "K" in which:
        for i in att:
            f = os.path.join(dst, plan["kernels"][ds[i]]["wgsl"])
            text = open(f).read()
            if "key_end = new_row + 1u;" not in text:
                sys.exit(f"{f}: no key_end to shorten")
            open(f, "w").write(text.replace("key_end = new_row + 1u;", "key_end = 1u;"))
    keep = [d for i, d in enumerate(ds) if i not in gone]
    for s in [step, *([step["sample"]] if step.get("sample") else [])]:
        s["dispatches"] = [d for d in s["dispatches"] if d in keep or d not in ds]
    json.dump(plan, open(path, "w"))
    return len(ds), len(step["dispatches"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("model")
    ap.add_argument("prompt")
    ap.add_argument("wgslc")
    ap.add_argument("--variants", default="q4,f16")
    ap.add_argument("--bounds", default="O,Q,OQ,P")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new", type=int, default=128)
    a = ap.parse_args()
    arts = {}
    for v in a.variants.split(","):
        base = os.path.join(a.out, f"A_{v}")
        shutil.rmtree(base, ignore_errors=True)
        flags = [] if v == "fp32" else ["--weights", v]
        subprocess.run([a.wgslc, "--quiet", "compile", a.model, "-o", base, "--kv-cache", "512", "--prefill-chunk", "32"]
                       + flags, check=True)
        arts["A", v] = base
        for b in a.bounds.split(","):
            d = os.path.join(a.out, f"{b}_{v}")
            shutil.rmtree(d, ignore_errors=True)
            before, after = drop(base, d, b)
            print(f"{v} {b}: decode dispatches {before} -> {after}", flush=True)
            arts[b, v] = d
    speeds = {k: [] for k in arts}
    # A first round, not counted, warms the GPU and the driver's pipeline cache.
    for rnd in range(a.rounds + 1):
        for k, art in arts.items():
            r = subprocess.run([a.wgslc, "--quiet", "generate", art, "--input-ids", a.prompt, "--max-new-tokens",
                                str(a.new), "--steps-per-submit", "1", "-o", os.path.join(a.out, "gen")],
                               capture_output=True, text=True)
            if r.returncode:
                sys.exit(r.stderr[-2000:])
            if rnd:
                speeds[k].append(json.loads(r.stdout.strip().splitlines()[-1])["tokens_per_s"])
    for (b, v), s in speeds.items():
        print(f"{v} {b}: median {statistics.median(s):.1f} tok/s (runs {', '.join(f'{x:.1f}' for x in s)})")


if __name__ == "__main__":
    main()
