#!/usr/bin/env python3
"""Runs every bundled testdata case (models, ops, torch, narrow) through the wgslc CLI on whatever adapter the machine has
(a real GPU through the `device` tool; the Rust tests cover lavapipe), fused and with --no-fuse (and with
--inverted-residual unfused where meta.json has "inverted_residual": "unfused"), and compares
with the stored onnxruntime outputs at the tests' tolerances (meta.json may override them).

    python3 scripts/check_testdata.py --wgslc .bin/wgslc [--suites models,ops,torch] [--only CASE,...]

Prints one line per failure and a total; exits 1 if any case fails.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def run_case(wgslc, case, flags, tmp):
    meta = {}
    if os.path.exists(os.path.join(case, "meta.json")):
        meta = json.load(open(os.path.join(case, "meta.json")))
    args = []
    for k, v in meta.get("dims", {}).items():
        args += ["--dim", f"{k}={v}"]
    for k, v in meta.get("const", {}).items():
        args += ["--const", f"{k}={os.path.join(case, v)}"]
    if "weights" in meta:
        args += ["--weights", meta["weights"]]
    art, out = os.path.join(tmp, "art"), os.path.join(tmp, "out")
    model = os.path.join(case, "model.onnx")
    if not os.path.exists(model):
        model = os.path.join(case, "model.pt2")
    subprocess.run([wgslc, "compile", model, "-o", art] + args + flags,
                   check=True, capture_output=True, text=True)
    ins = sorted(glob.glob(os.path.join(case, "input_*.npy")), key=lambda p: int(p.rsplit("_", 1)[1][:-4]))
    cmd = [wgslc, "run", art, "-o", out]
    for p in ins:
        cmd += ["--input", p]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    rtol, atol = meta.get("rtol", 1e-4), meta.get("atol", 1e-5)
    want = sorted(glob.glob(os.path.join(case, "output_*.npy")), key=lambda p: int(p.rsplit("_", 1)[1][:-4]))
    for i, p in enumerate(want):
        e, g = np.load(p), np.load(os.path.join(out, f"output_{i}.npy"))
        if e.shape != g.shape:
            return f"output {i}: shape {g.shape}, expected {e.shape}"
        if e.dtype.kind == "f":
            bad = ~np.isclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
        else:
            bad = g.astype(np.int64) != e.astype(np.int64)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            return f"output {i}[{j}]: got {g.flat[j]}, expected {e.flat[j]}"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wgslc", required=True)
    ap.add_argument("--suites", default="models,ops,torch,pt2,narrow")
    ap.add_argument("--only", default="", help="comma-separated case names (default: all)")
    a = ap.parse_args()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata")
    cases = [c for s in a.suites.split(",") for c in sorted(glob.glob(os.path.join(root, s, "*"))) if os.path.isdir(c)]
    if a.only:
        cases = [c for c in cases if os.path.basename(c) in a.only.split(",")]
    failures = runs = 0
    for case in cases:
        variants = [[], ["--no-fuse"]]
        meta_path = os.path.join(case, "meta.json")
        if os.path.exists(meta_path) and json.load(open(meta_path)).get("inverted_residual") == "unfused":
            variants.append(["--inverted-residual", "unfused"])
        for flags in variants:
            runs += 1
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    err = run_case(a.wgslc, case, flags, tmp)
                except subprocess.CalledProcessError as e:
                    err = (e.stderr or "").strip().splitlines()[-1:] or [str(e)]
                if err:
                    failures += 1
                    print(f"FAIL {os.path.relpath(case, root)} {' '.join(flags)}: {err}", flush=True)
    print(f"{runs - failures} passed, {failures} failed ({len(cases)} cases: fused, --no-fuse, and "
          f"--inverted-residual unfused where meta.json asks)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
