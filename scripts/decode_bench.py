#!/usr/bin/env python3
"""Decode benchmark: a Qwen2.5-0.5B-shaped decoder (random weights, fp32, batch 1: 24 layers, hidden 896, 14 query /
2 KV heads, head dim 64, FFN 4864 SwiGLU, RMSNorm, rotary, vocab 151936, tied LM head) generating with
`wgslc generate` against PyTorch on the same GPU, in one run:

    python3 scripts/decode_bench.py --wgslc .bin/wgslc [--new 128] [--prompt 16] [--capacity 512] [--layers 24]
        [--weights f16,q4] [--baseline]

- wgslc: the model exported with the dynamo exporter (opset 20, external data), compiled with --kv-cache, then
  `wgslc generate` at several steps per submit;
- torch eager, HF-style: the same module with a growing cache (torch.cat per step), greedy, one step per token;
- torch eager, transformers' Qwen2ForCausalLM.generate with the same shape (its own random weights);
- sampled (`--sample T,K`): wgslc generate with --temperature T --top-k K, and transformers' generate with
  do_sample, the same temperature and top_k;
- gpt-fast style: a static cache (index_copy_ at the position, attention over the whole cache with a mask),
  eager and under torch.compile(mode="reduce-overhead") (Inductor + CUDA graphs);
- narrow weights (`--weights f16,q4`): the same export compiled with `wgslc compile --weights W` (q4: blocks of 32,
  float16 scales), generating at one step per submit; the weight bytes of each artifact;
- the strongest PyTorch baseline (`--baseline`): scripts/torch_decode_baseline.py (a copy of the steering repo's),
  the gpt-fast recipe (the whole step, argmax included, in one torch.compile(mode="reduce-overhead") graph, the
  position on the GPU, coordinate-descent tuning on) in fp32 and bf16, in the same run.
Prints a markdown table (tok/s, ms/token) and whether wgslc's tokens equal torch eager's (greedy over random
weights: a near-tie may flip a token on different hardware; the first difference is reported).
Needs torch, transformers, onnx, onnxscript, onnxruntime (the GPU machine has them).
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
from make_decoders import Decoder, rotate_half  # noqa: E402

QWEN05 = dict(vocab=151936, hidden=896, heads=14, kv_heads=2, head_dim=64, ffn=4864, max_pos=4096, theta=1e6, eps=1e-6)


class ListArgs(torch.nn.Module):
    """The decoder with the cache as one list argument (any number of layers through torch.export)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask, position_ids, past):
        return self.m(input_ids, attention_mask, position_ids, *past)


def export(m, layers, path):
    c = QWEN05
    past = [torch.randn(1, c["kv_heads"], 3, c["head_dim"]) for _ in range(2 * layers)]
    args = (torch.randint(0, 100, (1, 2)), torch.ones(1, 5, dtype=torch.int64), torch.arange(3, 5)[None], past)
    auto = torch.export.Dim.AUTO
    shapes = ({0: auto, 1: auto}, {0: auto, 1: auto}, {0: auto, 1: auto}, [{0: auto, 2: auto}] * (2 * layers))
    names = ["input_ids", "attention_mask", "position_ids"] + [
        f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    outs = ["logits"] + [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    torch.onnx.export(ListArgs(m), args, path, dynamo=True, opset_version=20, external_data=True,
                      input_names=names, output_names=outs, dynamic_shapes=shapes)


class Static(torch.nn.Module):
    """gpt-fast's shape of a decode step: the cache preallocated, written in place at the position, attention
    over all of it with a mask."""

    def __init__(self, m, capacity):
        super().__init__()
        self.m = m
        c = QWEN05
        self.capacity = capacity
        for i in range(len(m.layers)):
            for kv in ("k", "v"):
                self.register_buffer(f"{kv}{i}", torch.zeros(1, c["kv_heads"], capacity, c["head_dim"], device="cuda"))

    def reset(self):
        for i in range(len(self.m.layers)):
            getattr(self, f"k{i}").zero_()
            getattr(self, f"v{i}").zero_()

    def forward(self, ids, pos):
        m = self.m
        x = m.embed(ids)
        cos, sin = m.rotary(pos[None])
        allowed = torch.arange(self.capacity, device=ids.device)[None, :] <= pos[:, None]
        bias = torch.where(allowed, 0.0, torch.finfo(torch.float32).min)[None, None]
        for i, layer in enumerate(m.layers):
            b, s, _ = x.shape
            y = layer.ln1(x)
            q = layer.q(y).view(b, s, layer.h, layer.hd).transpose(1, 2)
            k = layer.k(y).view(b, s, layer.kv, layer.hd).transpose(1, 2)
            v = layer.v(y).view(b, s, layer.kv, layer.hd).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            kc, vc = getattr(self, f"k{i}"), getattr(self, f"v{i}")
            kc.index_copy_(2, pos, k)
            vc.index_copy_(2, pos, v)
            o = torch.nn.functional.scaled_dot_product_attention(q, kc, vc, attn_mask=bias, enable_gqa=True)
            x = x + layer.o(o.transpose(1, 2).reshape(b, s, layer.h * layer.hd))
            y = layer.ln2(x)
            x = x + layer.down(torch.nn.functional.silu(layer.gate(y)) * layer.up(y))
        x = m.norm(x)
        return x @ m.embed.weight.T


def timed_static(step, prompt, new):
    """Prefill token by token (untimed), then `new - 1` timed decode steps with the token chosen on the GPU."""
    tok = None
    for i, t in enumerate(prompt):
        logits = step(torch.tensor([[t]], device="cuda"), torch.tensor([i], device="cuda"))
        tok = logits[0, -1].argmax().view(1, 1)
    out = [int(tok)]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    toks = [tok]
    for i in range(len(prompt), len(prompt) + new - 1):
        logits = step(toks[-1], torch.tensor([i], device="cuda"))
        toks.append(logits[0, -1].argmax().view(1, 1).clone())
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    return out + [int(t) for t in toks[1:]], dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wgslc", required=True)
    ap.add_argument("--out", default="/tmp/decode_bench")
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--capacity", type=int, default=512)
    ap.add_argument("--chunk", type=int, default=32)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--steps-per-submit", default="1,4,16,64")
    ap.add_argument("--skip-compile", action="store_true", help="no torch.compile run")
    ap.add_argument("--sample", default="0.8,50", help="TEMPERATURE,TOP_K of the sampled runs ('' for none)")
    ap.add_argument("--weights", default="", help="narrow-weight variants to compile and time: f16, q8, q4")
    ap.add_argument("--baseline", action="store_true", help="run scripts/torch_decode_baseline.py (fp32, bf16)")
    ap.add_argument("--export-only", action="store_true",
                    help="write OUT/model.onnx and OUT/prompt.npy and stop (for scripts/decode_ab.py)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows, notes = [], []
    torch.manual_seed(0)
    m = Decoder("qwen2", QWEN05, a.layers).eval()
    with torch.no_grad():  # transformers' initialization (normal, std 0.02; zero biases; unit norms)
        for mod in m.modules():
            if isinstance(mod, (torch.nn.Linear, torch.nn.Embedding)):
                torch.nn.init.normal_(mod.weight, std=0.02)
            if isinstance(mod, torch.nn.Linear) and mod.bias is not None:
                torch.nn.init.zeros_(mod.bias)
        for name, p in m.named_parameters():
            if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "norm.weight":
                p.fill_(1.0)
    params = sum(p.numel() for p in m.parameters())
    prompt = np.random.default_rng(0).integers(0, QWEN05["vocab"], (1, a.prompt)).astype(np.int64)
    np.save(os.path.join(a.out, "prompt.npy"), prompt)

    onnx_path = os.path.join(a.out, "model.onnx")
    t0 = time.perf_counter()
    with torch.no_grad():
        export(m, a.layers, onnx_path)
    notes.append(f"export (dynamo, opset 20): {time.perf_counter() - t0:.1f} s")
    if a.export_only:
        print(notes[-1])
        return
    art = os.path.join(a.out, "art")
    subprocess.run(["rm", "-rf", art], check=True)
    t0 = time.perf_counter()
    r = subprocess.run([a.wgslc, "compile", onnx_path, "-o", art, "--kv-cache", str(a.capacity),
                        "--prefill-chunk", str(a.chunk)], capture_output=True, text=True)
    if r.returncode:
        sys.exit("compile failed: " + r.stderr[-2000:])
    notes.append(f"wgslc compile: {time.perf_counter() - t0:.1f} s; {r.stderr.strip()}")
    plan = json.load(open(os.path.join(art, "plan.json")))
    dec = next(s for s in plan["decoder"]["steps"] if s["name"] == "decode")
    pre = next(s for s in plan["decoder"]["steps"] if s["name"] == "prefill")
    state = len(plan["decoder"]["state"])
    kv_heads = QWEN05["kv_heads"]
    # Token ×2, position, mask word, and either the cache row (written in place by the step) or the cache rows
    # per head (copied by the runtime).
    copies = 2 + 1 + 1 + (1 if dec.get("cache_row") is not None else state * kv_heads)
    notes.append(f"decode step: {len(dec['dispatches'])} dispatches ({(len(dec['dispatches'])) / a.layers:.1f} per "
                 f"layer incl. head), {copies} buffer copies; prefill step ({a.chunk} tokens): "
                 f"{len(pre['dispatches'])} dispatches")

    def generate(k, outd, extra=(), art=art):
        best = None
        for _ in range(2):  # the first run also warms the driver's pipeline caches
            r = subprocess.run([a.wgslc, "generate", art, "--input-ids", os.path.join(a.out, "prompt.npy"),
                                "--max-new-tokens", str(a.new), "--steps-per-submit", str(k), "-o", outd, *extra],
                               capture_output=True, text=True)
            if r.returncode:
                sys.exit("generate failed: " + r.stderr[-2000:])
            j = json.loads(r.stdout.strip().splitlines()[-1])
            best = j if best is None or j["tokens_per_s"] > best["tokens_per_s"] else best
        return best, np.load(os.path.join(outd, "tokens.npy"))[0].tolist()

    wg_tokens = None
    for k in [int(x) for x in a.steps_per_submit.split(",")]:
        best, wg_tokens = generate(k, os.path.join(a.out, f"gen{k}"))
        rows.append((f"wgslc generate, {k} step(s)/submit", best["tokens_per_s"],
                     best["decode_ms"] / max(best["decode_tokens"], 1), f"prefill {best['prefill_ms']:.1f} ms"))
    if a.sample:
        temp, top_k = a.sample.split(",")
        k = int(a.steps_per_submit.split(",")[-1])
        best, sampled = generate(k, os.path.join(a.out, "sampled"),
                                 ["--temperature", temp, "--top-k", top_k, "--seed", "1"])
        rows.append((f"wgslc generate, sampled (T {temp}, top-k {top_k}), {k}/submit", best["tokens_per_s"],
                     best["decode_ms"] / max(best["decode_tokens"], 1), f"prefill {best['prefill_ms']:.1f} ms"))
        notes.append(f"wgslc sampled tokens: {sampled[a.prompt:a.prompt + 12]} …")

    fp32_tokens = wg_tokens
    for w in [w for w in a.weights.split(",") if w]:
        art_w = os.path.join(a.out, f"art_{w}")
        subprocess.run(["rm", "-rf", art_w], check=True)
        t0 = time.perf_counter()
        r = subprocess.run([a.wgslc, "compile", onnx_path, "-o", art_w, "--kv-cache", str(a.capacity),
                            "--prefill-chunk", str(a.chunk), "--weights", w], capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"compile --weights {w} failed: " + r.stderr[-2000:])
        wbytes = os.path.getsize(os.path.join(art_w, "weights.safetensors"))
        plan_w = json.load(open(os.path.join(art_w, "plan.json")))
        dec_w = next(s for s in plan_w["decoder"]["steps"] if s["name"] == "decode")
        best, toks = generate(1, os.path.join(a.out, f"gen_{w}"), art=art_w)
        rows.append((f"wgslc generate --weights {w}, 1 step/submit", best["tokens_per_s"],
                     best["decode_ms"] / max(best["decode_tokens"], 1), f"weights {wbytes / 1e9:.3f} GB"))
        same = next((i for i, (u, v) in enumerate(zip(toks, fp32_tokens)) if u != v), None)
        notes.append(f"--weights {w}: compile {time.perf_counter() - t0:.1f} s, weights {wbytes / 1e9:.3f} GB, "
                     f"{len(dec_w['dispatches'])} decode dispatches; tokens "
                     + ("equal the fp32 artifact's" if same is None else
                        f"first differ from the fp32 artifact's at index {same} (prompt {a.prompt})"))

    m = m.cuda()
    p = prompt[0].tolist()
    with torch.no_grad():
        # HF-style eager: growing cache.
        past = [torch.zeros(1, QWEN05["kv_heads"], 0, QWEN05["head_dim"], device="cuda") for _ in range(2 * a.layers)]
        x = torch.tensor(prompt, device="cuda")
        toks = list(p)
        times = []
        for i in range(a.new):  # one step per token; the first is the prefill of the whole prompt
            pl, s = past[0].shape[2], x.shape[1]
            mask = torch.ones(1, pl + s, dtype=torch.int64, device="cuda")
            pos = torch.arange(pl, pl + s, device="cuda")[None]
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = m(x, mask, pos, *past)
            nxt = out[0][0, -1].argmax()
            toks.append(int(nxt))
            times.append(time.perf_counter() - t0)
            past = list(out[1:])
            x = nxt.view(1, 1)
        eager = sum(times[1:])
        rows.append(("torch eager, growing cache (HF-style)", (a.new - 1) / eager, eager * 1e3 / (a.new - 1), ""))
        same = next((i for i, (u, v) in enumerate(zip(wg_tokens, toks)) if u != v), None)
        notes.append(("wgslc tokens == torch eager tokens" if same is None and len(wg_tokens) == len(toks)
                      else f"wgslc tokens first differ from torch eager's at index {same} (prompt {a.prompt})")
                     + f"; generated: {toks[a.prompt:a.prompt + 12]} …")

        st = Static(m, a.capacity)
        got, dt = timed_static(st, p, a.new)
        rows.append(("torch eager, static cache (gpt-fast style)", (a.new - 1) / dt, dt * 1e3 / (a.new - 1), ""))
        same = next((i for i, (u, v) in enumerate(zip(got, toks[a.prompt:])) if u != v), None)
        notes.append("static-cache eager tokens == growing-cache tokens" if same is None
                     else f"static-cache tokens differ at generated index {same}")
        if not a.skip_compile:
            st = Static(m, a.capacity)
            t0 = time.perf_counter()
            cstep = torch.compile(st.forward, mode="reduce-overhead", fullgraph=True)
            timed_static(cstep, p[:4], 8)  # compile and capture
            notes.append(f"torch.compile warm-up: {time.perf_counter() - t0:.1f} s")
            st.reset()
            got, dt = timed_static(cstep, p, a.new)
            rows.append(("torch.compile reduce-overhead, static cache", (a.new - 1) / dt, dt * 1e3 / (a.new - 1), ""))

    try:
        from transformers import Qwen2Config, Qwen2ForCausalLM
        cfg = Qwen2Config(vocab_size=QWEN05["vocab"], hidden_size=896, intermediate_size=4864,
                          num_hidden_layers=a.layers, num_attention_heads=14, num_key_value_heads=2,
                          max_position_embeddings=4096, rope_theta=1e6, tie_word_embeddings=True)
        hf = Qwen2ForCausalLM(cfg).cuda().eval()
        ids = torch.tensor(prompt, device="cuda")
        with torch.no_grad():
            hf.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            hf.generate(ids, max_new_tokens=1, min_new_tokens=1, do_sample=False)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            hf.generate(ids, max_new_tokens=a.new, min_new_tokens=a.new, do_sample=False)
            torch.cuda.synchronize()
            t2 = time.perf_counter()
        dt = (t2 - t1) - (t1 - t0)
        rows.append(("transformers Qwen2ForCausalLM.generate, eager", (a.new - 1) / dt, dt * 1e3 / (a.new - 1), ""))
        if a.sample:
            temp, top_k = a.sample.split(",")
            kw = dict(do_sample=True, temperature=float(temp), top_k=int(top_k), top_p=1.0)
            with torch.no_grad():
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                hf.generate(ids, max_new_tokens=1, min_new_tokens=1, **kw)
                torch.cuda.synchronize()
                t1 = time.perf_counter()
                hf.generate(ids, max_new_tokens=a.new, min_new_tokens=a.new, **kw)
                torch.cuda.synchronize()
                t2 = time.perf_counter()
            dt = (t2 - t1) - (t1 - t0)
            rows.append((f"transformers generate, eager, sampled (T {temp}, top-k {top_k})", (a.new - 1) / dt,
                         dt * 1e3 / (a.new - 1), ""))
    except Exception as e:  # a missing transformers is a note, not a failure
        notes.append(f"transformers: {type(e).__name__}: {e}")

    if a.baseline:
        del m
        torch.cuda.empty_cache()
        here = os.path.dirname(os.path.abspath(__file__))
        r = subprocess.run([sys.executable, os.path.join(here, "torch_decode_baseline.py"), "--dtypes", "fp32,bf16",
                            "--tuning", "1"], capture_output=True, text=True)
        for line in r.stdout.splitlines():
            j = json.loads(line)
            if "tok_s" in j:
                rows.append((f"torch.compile, gpt-fast recipe, {j['dtype']} (coordinate-descent tuning)", j["tok_s"],
                             j["ms_per_token"], f"weights {j['weight_bytes'] / 1e9:.3f} GB"))
            else:
                notes.append(f"baseline: {line}")
        if r.returncode:
            notes.append("baseline failed: " + r.stderr[-1500:])

    print(f"\n{torch.cuda.get_device_name()}; {params / 1e6:.0f} M parameters; prompt {a.prompt}, "
          f"{a.new} new tokens, KV cache {a.capacity}")
    print("| decoder | tok/s | ms/token | |\n| --- | --- | --- | --- |")
    for name, tps, ms, extra in rows:
        print(f"| {name} | {tps:.1f} | {ms:.2f} | {extra} |")
    print("\n" + "\n".join("- " + n for n in notes))


if __name__ == "__main__":
    main()
