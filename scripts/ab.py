#!/usr/bin/env python3
"""Interleaved A/B timing: every wgslc binary × every compile mode on one export, three `wgslc bench` runs each
in turn, sorted times printed per combination (docs/performance.md quotes medians from it).

    python3 scripts/ab.py MODEL:TOKENS[,MODEL:TOKENS...] [BIN[,BIN...]] [MODE[,MODE...]]

MODEL is one of scripts/bench_models.py's (gpt2, bert, llama, resnet18); MODE one of default, attn_unfused,
budget2, budget2_unfused. Needs torch, transformers, onnx (the GPU machine has them).
"""
import json, os, subprocess, sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models as bm
bins = sys.argv[2].split(",") if len(sys.argv) > 2 else [".bin/wgslc"]
allm = {"default": [], "attn_unfused": ["--attention", "unfused"], "budget2": ["--memory-budget", "2"],
        "budget2_unfused": ["--memory-budget", "2", "--attention", "unfused"]}
names = sys.argv[3].split(",") if len(sys.argv) > 3 else list(allm)
modes = {f"{b}|{m}": (b, allm[m]) for b in bins for m in names}
for spec in sys.argv[1].split(","):
    name, tokens = spec.split(":")
    torch.manual_seed(0)
    model, args = bm.MODELS[name](int(tokens))
    model.eval()
    p = f"/tmp/m_{name}{tokens}.onnx"
    with torch.no_grad():
        torch.onnx.export(model, args, p, dynamo=True, opset_version=20, external_data=False, input_names=["input_0"])
    np.save(f"/tmp/m_{name}{tokens}_in.npy", args[0].numpy())
    res = {m: [] for m in modes}
    art = lambda m: f"/tmp/m_{name}{tokens}_" + m.replace("/", "_").replace("|", "_")
    for m, (b, flags) in modes.items():
        subprocess.run([b, "compile", p, "-o", art(m)] + flags, check=True, capture_output=True)
    for rep in range(3):
        for m in modes:
            r = subprocess.run([modes[m][0], "bench", art(m), "--input", f"/tmp/m_{name}{tokens}_in.npy",
                                "--iterations", "50"], capture_output=True, text=True)
            res[m].append(json.loads(r.stdout.strip().splitlines()[-1])["ms_per_inference"])
    for m in modes:
        print(name, tokens, m, sorted(res[m]), flush=True)
