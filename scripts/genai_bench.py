#!/usr/bin/env python3
"""Decode speed of onnxruntime-genai builder models against the transformers export of the same shape, with
`wgslc generate`, in one run:

    PYTHONPATH=<onnxruntime_genai wheel, unpacked> python3 scripts/genai_bench.py --wgslc .bin/wgslc [--layers 24]

The shape is scripts/decode_bench.py's Qwen2.5-0.5B (transformers' Qwen2ForCausalLM, random weights). For each of
`-p fp32` and `-p int4` (`-e webgpu`, the builds onnxruntime's WebGPU provider runs) the builder's model.onnx is
compiled with `--kv-cache CAPACITY --prefill-chunk CHUNK`; decode_bench's dynamo export of the same shape (its own
random weights) is compiled fp32 and with `--weights q4`. Each artifact generates NEW tokens from one prompt at 16
steps per submit, twice (the better run counts). Prints one line per artifact: tok/s, the decode step's dispatches,
compile seconds, the artifact's weight bytes.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_bench import QWEN05, export  # noqa: E402
from make_decoders import Decoder  # noqa: E402
from web_decode_bench import build_models  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wgslc", required=True)
    ap.add_argument("--out", default="/tmp/genai_bench")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--capacity", type=int, default=512)
    ap.add_argument("--chunk", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=128)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    prompt = np.random.default_rng(0).integers(0, 1000, (1, a.prompt)).astype(np.int64)
    np.save(os.path.join(a.out, "prompt.npy"), prompt)

    models = [(f"onnxruntime-genai builder, -p {prec} -e webgpu", os.path.join(d, "model.onnx"), [])
              for prec, d in zip(("fp32", "int4"), build_models(a.out, a.layers, ["fp32", "int4"]))]
    export_dir = os.path.join(a.out, "export")
    os.makedirs(export_dir, exist_ok=True)
    m = Decoder("qwen2", c=QWEN05, layers=a.layers).eval()
    with torch.no_grad():
        export(m, a.layers, os.path.join(export_dir, "model.onnx"))
    models.append(("transformers-style export (decode_bench), fp32", os.path.join(export_dir, "model.onnx"), []))
    models.append(("transformers-style export (decode_bench), --weights q4", os.path.join(export_dir, "model.onnx"),
                   ["--weights", "q4"]))

    for i, (what, path, extra) in enumerate(models):
        art = os.path.join(a.out, f"art{i}")
        t0 = time.perf_counter()
        r = subprocess.run([a.wgslc, "compile", path, "-o", art, "--kv-cache", str(a.capacity), "--prefill-chunk",
                            str(a.chunk), "--quiet", *extra], capture_output=True, text=True)
        secs = time.perf_counter() - t0
        if r.returncode:
            print(f"{what}: compile failed: {r.stderr[-1500:]}")
            continue
        plan = json.load(open(os.path.join(art, "plan.json")))
        steps = {s["name"]: len(s["dispatches"]) for s in plan["decoder"]["steps"]}
        weights = sum(os.path.getsize(os.path.join(art, f)) for f in os.listdir(art) if f.startswith("weights"))
        best = None
        for _ in range(2):
            r = subprocess.run([a.wgslc, "generate", art, "--input-ids", os.path.join(a.out, "prompt.npy"),
                                "--max-new-tokens", str(a.new), "--steps-per-submit", "16", "-o",
                                os.path.join(a.out, f"gen{i}"), "--quiet"], capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"{what}: generate failed: {r.stderr[-1500:]}")
            j = json.loads(r.stdout.strip().splitlines()[-1])
            best = j if best is None or j["tokens_per_s"] > best["tokens_per_s"] else best
        print(f"{what}: {best['tokens_per_s']:.1f} tok/s, prefill {best['prefill_ms']:.1f} ms ({a.prompt} tokens), "
              f"dispatches decode {steps.get('decode')} prefill {steps.get('prefill')}, compile {secs:.1f} s, "
              f"weights {weights / 1e9:.3f} GB")


if __name__ == "__main__":
    main()
