#!/usr/bin/env python3
"""Two wgslc builds on one decoder export: each compiles it (`--kv-cache`, each `--weights` variant), then their
`wgslc generate` runs alternate for a few rounds; prints per build and variant the decode-step dispatches, the
median tok/s and whether the two builds' tokens are equal. For measuring a decode-speed change in one device run.

    python3 scripts/decode_ab.py OUT_DIR MODEL.onnx PROMPT.npy BIN_A BIN_B [--variants fp32,f16,q4] [--rounds 3]
        [--capacity 512] [--chunk 32] [--new 128] [--steps-per-submit 1[,16]] [--eos ID]

With --eos ID each generate also watches for token ID (one the model does not produce keeps every run the same
length), which reads the tokens back after each batch of steps. The median prefill_ms is printed beside tok/s.

MODEL.onnx and PROMPT.npy as scripts/decode_bench.py writes them (its --out directory).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("model")
    ap.add_argument("prompt")
    ap.add_argument("bin_a")
    ap.add_argument("bin_b")
    ap.add_argument("--variants", default="fp32,f16,q4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--capacity", type=int, default=512)
    ap.add_argument("--chunk", type=int, default=32)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--steps-per-submit", default="1", help="comma-separated: each is measured")
    ap.add_argument("--eos", type=int, help="generate --eos ID (a read-back after each batch of steps)")
    a = ap.parse_args()
    builds = {"A": a.bin_a, "B": a.bin_b}
    variants = [v for v in a.variants.split(",") if v]
    arts, dispatches = {}, {}
    for b, exe in builds.items():
        for v in variants:
            art = os.path.join(a.out, f"{b}_{v}")
            subprocess.run(["rm", "-rf", art], check=True)
            cmd = [exe, "--quiet", "compile", a.model, "-o", art, "--kv-cache", str(a.capacity),
                   "--prefill-chunk", str(a.chunk)] + ([] if v == "fp32" else ["--weights", v])
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"build {b} compile {v} failed: {r.stderr[-2000:]}")
            plan = json.load(open(os.path.join(art, "plan.json")))
            dec = next(s for s in plan["decoder"]["steps"] if s["name"] == "decode")
            arts[b, v], dispatches[b, v] = art, len(dec["dispatches"])
    submits = [int(x) for x in a.steps_per_submit.split(",") if x]
    runs = [(v, n) for v in variants for n in submits]
    speeds = {(b, v, n): [] for b in builds for v, n in runs}
    prefill = {(b, v, n): [] for b in builds for v, n in runs}
    eos = [] if a.eos is None else ["--eos", str(a.eos)]
    tokens = {}
    for _ in range(a.rounds):
        for v, n in runs:
            for b, exe in builds.items():
                outd = os.path.join(a.out, f"gen_{b}_{v}")
                r = subprocess.run([exe, "--quiet", "generate", arts[b, v], "--input-ids", a.prompt,
                                    "--max-new-tokens", str(a.new), "--steps-per-submit", str(n), "-o", outd] + eos,
                                   capture_output=True, text=True)
                if r.returncode:
                    sys.exit(f"build {b} generate {v} failed: {r.stderr[-2000:]}")
                line = json.loads(r.stdout.strip().splitlines()[-1])
                speeds[b, v, n].append(line["tokens_per_s"])
                prefill[b, v, n].append(line["prefill_ms"])
                tokens[b, v, n] = np.load(os.path.join(outd, "tokens.npy"))[0].tolist()
    for v, n in runs:
        for b in builds:
            s = speeds[b, v, n]
            print(f"{v:5} {n:2} steps/submit build {b}: {dispatches[b, v]:4} decode dispatches, median "
                  f"{statistics.median(s):7.1f} tok/s (runs {', '.join(f'{x:.1f}' for x in s)}), prefill "
                  f"{statistics.median(prefill[b, v, n]):.2f} ms")
        same = tokens["A", v, n] == tokens["B", v, n]
        print(f"{v:5} {n:2} steps/submit tokens of A and B {'equal' if same else 'DIFFER'}")

if __name__ == "__main__":
    main()
