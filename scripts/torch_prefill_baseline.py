#!/usr/bin/env python3
"""The PyTorch prefill baseline for the Qwen2.5-0.5B shape: the model of scripts/torch_decode_baseline.py (24
layers, hidden 896, 14/2 heads, FFN 4864, tied head, static KV cache), its forward written for a chunk of T prompt
tokens (the chunk's K/V rows written into the cache, causal attention over the cache, the head over the last row
and its argmax), the whole step in one torch.compile(mode="reduce-overhead") graph (CUDA graphs) with
coordinate-descent tuning on, the start position on the GPU. Times one prefill of T tokens from position 0:
median over --iterations replays (CUDA events), fp32 with PyTorch's default matmul precision (TF32 off) and bf16.

    python3 scripts/torch_prefill_baseline.py [--tokens 32,512] [--dtypes fp32,bf16] [--capacity 512] [--profile]

Compare with `wgslc bench ART --step prefill` of the same shape compiled with `--kv-cache CAPACITY
--prefill-chunk T` (scripts/decode_bench.py --export-only writes the transformers export).
"""
import argparse, json, os, sys
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_decode_baseline as tdb  # noqa: E402
from torch_profile import torch_kernels  # noqa: E402


def prefill(s, tok, pos0):
    """tok [1, T] int64, pos0 [1] int64 on the GPU -> the next token [1, 1]."""
    t = tok.shape[1]
    cap = s.layers[0].kc.shape[2]
    pos = pos0 + torch.arange(t, device=tok.device)
    x = s.emb(tok)
    cos = s.cos[pos].view(1, 1, t, tdb.HD).to(x.dtype)
    sin = s.sin[pos].view(1, 1, t, tdb.HD).to(x.dtype)
    mask = (torch.arange(cap, device=tok.device).view(1, cap) <= pos.view(t, 1)).view(1, 1, t, cap)
    for lyr in s.layers:
        h = tdb.rms(x, lyr.ln1)
        q, k, v = lyr.qkv(h).split([tdb.NH * tdb.HD, tdb.NKV * tdb.HD, tdb.NKV * tdb.HD], -1)
        q = tdb.rope(q.view(1, t, tdb.NH, tdb.HD).transpose(1, 2), cos, sin)
        k = tdb.rope(k.view(1, t, tdb.NKV, tdb.HD).transpose(1, 2), cos, sin)
        v = v.view(1, t, tdb.NKV, tdb.HD).transpose(1, 2)
        lyr.kc.index_copy_(2, pos, k)
        lyr.vc.index_copy_(2, pos, v)
        a = F.scaled_dot_product_attention(q, lyr.kc, lyr.vc, attn_mask=mask, enable_gqa=True)
        x = x + lyr.o(a.transpose(1, 2).reshape(1, t, tdb.NH * tdb.HD))
        h = tdb.rms(x, lyr.ln2)
        g, u = lyr.gu(h).chunk(2, -1)
        x = x + lyr.down(F.silu(g) * u)
    logits = F.linear(tdb.rms(x[:, -1:], s.norm), s.emb.weight)
    return logits[:, -1].argmax(-1, keepdim=True)


def run(dtype, tokens, capacity, iterations, kernels=False):
    import torch._inductor.config as ic
    torch._dynamo.reset()
    ic.coordinate_descent_tuning = True
    tdb.CAP = capacity
    torch.manual_seed(0)
    m = tdb.M().to("cuda", dtype).eval()
    step = torch.compile(lambda tok, pos0: prefill(m, tok, pos0), mode="reduce-overhead", fullgraph=True)
    tok = torch.randint(0, tdb.V, (1, tokens), device="cuda")
    pos0 = torch.zeros(1, dtype=torch.long, device="cuda")
    ts = []
    with torch.no_grad():
        for _ in range(3):  # compile, record, replay
            step(tok, pos0)
        for _ in range(iterations):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            step(tok, pos0)
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
        if kernels:  # the same Inductor kernels without the CUDA graph
            plain = torch.compile(lambda tok, pos0: prefill(m, tok, pos0), fullgraph=True)
            torch_kernels(plain, (tok, pos0), iterations)
    return dict(dtype=str(dtype).replace("torch.", ""), tokens=tokens, capacity=capacity,
                median_ms=round(float(np.median(ts)), 3), min_ms=round(float(np.min(ts)), 3))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="32,512")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--capacity", type=int, default=512)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--profile", action="store_true", help="also list the kernels and their GPU time per prefill")
    a = ap.parse_args()
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__}), flush=True)
    for d in a.dtypes.split(","):
        for t in a.tokens.split(","):
            r = run({"fp32": torch.float32, "bf16": torch.bfloat16}[d], int(t), a.capacity, a.iterations, a.profile)
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
