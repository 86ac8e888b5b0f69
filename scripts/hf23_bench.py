#!/usr/bin/env python3
"""Decode speed of an opset-23 export of transformers' own Qwen2 class at the Qwen2.5-0.5B shape (random weights),
two wgslc builds in one run:

    python3 scripts/hf23_bench.py --out OUT --wgslc BIN_A [BIN_B ...] [--layers 24] [--rounds 3]

The model (transformers >= 5, torch >= 2.9: `torch.onnx.export(dynamo=True, opset_version=23)`, which writes the
ONNX-domain Attention, RotaryEmbedding and RMSNormalization as scripts/make_hf_decoders.py's test decoders have
them) is compiled by each build with `--kv-cache 512 --prefill-chunk 32`; then each generates 128 tokens from a
32-token prompt at one step a submit, the builds alternating for ROUNDS rounds. Prints per build the decode and
prefill dispatches, the compile seconds, the median tok/s and whether every build's tokens are the same.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import transformers
from transformers import DynamicCache


class Step(torch.nn.Module):
    """One step over a DynamicCache, the cache as one list argument (any number of layers)."""

    def __init__(self, m, layers):
        super().__init__()
        self.m, self.layers = m, layers

    def forward(self, input_ids, attention_mask, position_ids, past):
        cache = DynamicCache()
        for layer in range(self.layers):
            cache.update(past[2 * layer], past[2 * layer + 1], layer)
        o = self.m(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   past_key_values=cache, use_cache=True)
        kv = o.past_key_values
        return (o.logits,) + tuple(t for l in range(self.layers) for t in (kv.layers[l].keys, kv.layers[l].values))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/hf23_bench")
    ap.add_argument("--wgslc", nargs="+", required=True)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                                   num_hidden_layers=a.layers, num_attention_heads=14, num_key_value_heads=2,
                                   max_position_embeddings=4096, rope_theta=1e6, tie_word_embeddings=True)
    m = transformers.Qwen2ForCausalLM(cfg).eval()
    past = [torch.randn(1, 2, 3, 64) for _ in range(2 * a.layers)]
    args = (torch.randint(0, 100, (1, 2)), torch.ones(1, 5, dtype=torch.int64), torch.arange(3, 5)[None], past)
    auto = torch.export.Dim.AUTO
    names = ["input_ids", "attention_mask", "position_ids"] + [
        f"past_key_values.{i}.{kv}" for i in range(a.layers) for kv in ("key", "value")]
    outs = ["logits"] + [f"present.{i}.{kv}" for i in range(a.layers) for kv in ("key", "value")]
    model = os.path.join(a.out, "model.onnx")
    t0 = time.perf_counter()
    with torch.no_grad():
        torch.onnx.export(Step(m, a.layers), args, model, dynamo=True, opset_version=23, external_data=True,
                          input_names=names, output_names=outs,
                          dynamic_shapes=({1: auto}, {1: auto}, {1: auto}, [{2: auto}] * (2 * a.layers)))
    print(f"export (dynamo, opset 23): {time.perf_counter() - t0:.1f} s")
    prompt = os.path.join(a.out, "prompt.npy")
    np.save(prompt, np.random.default_rng(0).integers(0, 1000, (1, 32)).astype(np.int64))
    arts, speeds, tokens = {}, {}, {}
    for i, exe in enumerate(a.wgslc):
        art = os.path.join(a.out, f"art{i}")
        subprocess.run(["rm", "-rf", art], check=True)
        t0 = time.perf_counter()
        r = subprocess.run([exe, "--quiet", "compile", model, "-o", art, "--kv-cache", "512", "--prefill-chunk", "32"],
                           capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"{exe}: compile failed: {r.stderr[-2000:]}")
        steps = {s["name"]: len(s["dispatches"]) for s in json.load(open(os.path.join(art, "plan.json")))["decoder"]["steps"]}
        arts[i], speeds[i] = (art, steps, time.perf_counter() - t0), []
    for _ in range(a.rounds):
        for i, exe in enumerate(a.wgslc):
            o = os.path.join(a.out, f"gen{i}")
            r = subprocess.run([exe, "--quiet", "generate", arts[i][0], "--input-ids", prompt, "--max-new-tokens", "128",
                                "--steps-per-submit", "1", "-o", o], capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"{exe}: generate failed: {r.stderr[-2000:]}")
            speeds[i].append(json.loads(r.stdout.strip().splitlines()[-1])["tokens_per_s"])
            tokens[i] = np.load(os.path.join(o, "tokens.npy"))
    for i, exe in enumerate(a.wgslc):
        print(f"{exe}: dispatches {arts[i][1]}, compile {arts[i][2]:.1f} s, tok/s {statistics.median(speeds[i]):.1f} "
              f"({', '.join(f'{s:.1f}' for s in speeds[i])})")
    print("tokens equal across builds:", all(np.array_equal(tokens[0], t) for t in tokens.values()))


if __name__ == "__main__":
    main()
