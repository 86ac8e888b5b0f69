#!/usr/bin/env python3
"""Makes testdata/decoders: tiny decoder-only LLMs with a KV cache, exported with both ONNX exporters, with torch's
greedy token ids and an onnxruntime reference of one cached step.

    python3 scripts/make_decoders.py OUT_DIR [--mask positions|sliding] [--style neox] [--pt2]   # the GPU machine has torch

Two models, written in plain torch the way HF's Qwen2 and Llama modelling code computes them (random weights, two
layers, fp32):
- `qwen2`: grouped-query attention (4 query / 2 KV heads) with QKV bias, RMSNorm, rotary computed from
  position_ids (inv_freq outer product, as HF does), SwiGLU, LM head tied to the embedding;
- `llama`: the same without QKV bias, rotary read from cos/sin tables indexed by position_ids (which the dynamo
  exporter writes as GatherND), an untied LM head;
- `neox` (only with `--style neox`): llama's layers with partial rotary as HF's GPT-NeoX, Phi and StableLM apply
  it: the first ROTARY of each head's 16 dims rotated (`cat(rot * cos + rotate_half(rot) * sin, pass)`), rotary
  computed from position_ids with inv_freq over those dims.
The attention mask is built as HF's legacy `_prepare_4d_causal_attention_mask` does: causal from the shapes (the
past length is the cache input's dim 2), combined with the 2-D `attention_mask`, masked scores at finfo.min.
With `--mask positions` (testdata/masks, cases `<model>_posmask_<exporter>`) it compares each key's index in the
concatenated cache with the query's position instead:
`allowed = (arange(total)[None, :] <= position_ids[0][:, None]) & (attention_mask[0] > 0)`; with `--mask sliding`
(`<model>_sliding_<exporter>`) also only the last 6 positions, as Mistral's sliding window does:
`& (arange(total)[None, :] > position_ids[0][:, None] - 6)`.

Each model is exported twice, as OUT_DIR/<model>_<exporter>/model.onnx:
- `torchscript17`: torch.onnx.export(dynamo=False, opset 17) with HF/optimum's named dynamic axes (batch_size,
  sequence_length, past_sequence_length, total_sequence_length);
- `dynamo20`: torch.onnx.export(dynamo=True, opset 20) with `Dim.AUTO` everywhere, which names dims s0, s1, ….
Inputs: input_ids, attention_mask, position_ids, past_key_values.N.key/value ([batch, kv_heads, past, head_dim]);
outputs: logits, present.N.key/value.

With `--pt2` each model is written instead as OUT_DIR/<model>_export/model.pt2: `torch.export.export` with
named dims (new tokens 1.., past 0..) and `Dim.AUTO` on the mask, then `.run_decompositions()` (the core ATen dialect) and `torch.export.save`; its
outputs carry no names of the model's (`--kv-cache` pairs them with the cache inputs by position). The script
checks that the saved program, loaded back, gives torch's greedy tokens.

Besides model.onnx each case holds:
- prompt_<k>.npy (int64 [1, L]) and tokens_<k>.npy: torch's greedy generation from that prompt (int64
  [1, L + NEW]), run with a growing cache (prefill of the whole prompt, then one token per step), for L = 1 and 5;
- step/input_<i>.npy, step/output_<i>.npy: one cached step (past 3, 2 new tokens) and onnxruntime's outputs of it;
- meta.json: the model's shape, the smallest gap between the two best logits along every greedy path (so a
  reader knows how much numerical slack the token comparison has) and the exporter's versions.
The script also checks that onnxruntime's greedy path through the exported model gives torch's tokens.
"""

import json
import os
import shutil
import sys

import numpy as np
import onnxruntime as ort
import torch

NEW = 40
LAYERS = 2
WINDOW = 6  # the sliding window of `--mask sliding`
ROTARY = 8  # the rotated dims of each head in `neox`
CFG = dict(vocab=256, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=128, max_pos=128, theta=10000.0, eps=1e-6)


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(1.0 + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Layer(torch.nn.Module):
    def __init__(self, c, qkv_bias):
        super().__init__()
        d, hd = c["hidden"], c["head_dim"]
        self.h, self.kv, self.hd = c["heads"], c["kv_heads"], hd
        self.q = torch.nn.Linear(d, self.h * hd, bias=qkv_bias)
        self.k = torch.nn.Linear(d, self.kv * hd, bias=qkv_bias)
        self.v = torch.nn.Linear(d, self.kv * hd, bias=qkv_bias)
        self.o = torch.nn.Linear(self.h * hd, d, bias=False)
        self.gate = torch.nn.Linear(d, c["ffn"], bias=False)
        self.up = torch.nn.Linear(d, c["ffn"], bias=False)
        self.down = torch.nn.Linear(c["ffn"], d, bias=False)
        self.ln1 = RMSNorm(d, c["eps"])
        self.ln2 = RMSNorm(d, c["eps"])

    def forward(self, x, cos, sin, bias, past_k, past_v):
        b, s, _ = x.shape
        y = self.ln1(x)
        q = self.q(y).view(b, s, self.h, self.hd).transpose(1, 2)
        k = self.k(y).view(b, s, self.kv, self.hd).transpose(1, 2)
        v = self.v(y).view(b, s, self.kv, self.hd).transpose(1, 2)
        if cos.shape[-1] < self.hd:
            # Partial rotary (GPT-NeoX, Phi, StableLM): the first dims rotated, the rest passed through.
            r = cos.shape[-1]
            q = torch.cat((q[..., :r] * cos + rotate_half(q[..., :r]) * sin, q[..., r:]), dim=-1)
            k = torch.cat((k[..., :r] * cos + rotate_half(k[..., :r]) * sin, k[..., r:]), dim=-1)
        else:
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        t = k.shape[2]
        rep = self.h // self.kv
        kr = k[:, :, None].expand(b, self.kv, rep, t, self.hd).reshape(b, self.h, t, self.hd)
        vr = v[:, :, None].expand(b, self.kv, rep, t, self.hd).reshape(b, self.h, t, self.hd)
        att = torch.matmul(q, kr.transpose(2, 3)) / (self.hd ** 0.5) + bias
        att = torch.softmax(att, dim=-1)
        o = torch.matmul(att, vr).transpose(1, 2).reshape(b, s, self.h * self.hd)
        x = x + self.o(o)
        y = self.ln2(x)
        x = x + self.down(torch.nn.functional.silu(self.gate(y)) * self.up(y))
        return x, k, v


class Decoder(torch.nn.Module):
    def __init__(self, style, c=CFG, layers=LAYERS, mask="shapes"):
        super().__init__()
        self.style = style
        self.mask = mask
        self.embed = torch.nn.Embedding(c["vocab"], c["hidden"])
        self.layers = torch.nn.ModuleList([Layer(c, qkv_bias=style == "qwen2") for _ in range(layers)])

        self.norm = RMSNorm(c["hidden"], c["eps"])
        if style in ("llama", "neox"):
            self.head = torch.nn.Linear(c["hidden"], c["vocab"], bias=False)
            torch.nn.init.normal_(self.head.weight)  # logits as spread as the tied head's: no near-ties
        hd = ROTARY if style == "neox" else c["head_dim"]
        inv_freq = 1.0 / (c["theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        freqs = torch.outer(torch.arange(c["max_pos"], dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def rotary(self, position_ids):
        if self.style == "llama":
            return self.cos_cached[position_ids][:, None], self.sin_cached[position_ids][:, None]
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[:, None], emb.sin()[:, None]

    def forward(self, input_ids, attention_mask, position_ids, *past):
        b, s = input_ids.shape
        p = past[0].shape[2]
        t = p + s
        x = self.embed(input_ids)
        cos, sin = self.rotary(position_ids)
        cols = torch.arange(t, device=input_ids.device)[None, :]
        if self.mask in ("positions", "sliding"):
            # Each key's index in the concatenated cache against the query's position.
            pos = position_ids[0][:, None]
            allowed = cols <= pos
            if self.mask == "sliding":
                # Mistral-style: only the last WINDOW positions.
                allowed = allowed & (cols > pos - WINDOW)
            allowed = allowed[None, None] & (attention_mask[0] > 0)[None, None, None, :]
        else:
            rows = torch.arange(s, device=input_ids.device)[:, None] + p
            allowed = (cols <= rows)[None, None] & attention_mask[:, None, None, :].bool()
        bias = torch.where(allowed, 0.0, torch.finfo(torch.float32).min)
        present = []
        for i, layer in enumerate(self.layers):
            x, k, v = layer(x, cos, sin, bias, past[2 * i], past[2 * i + 1])
            present += [k, v]
        x = self.norm(x)
        logits = x @ self.embed.weight.T if self.style == "qwen2" else self.head(x)
        return (logits, *present)


class Fixed(torch.nn.Module):
    """The decoder with a fixed signature for two layers (torch.export takes no *args with names)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask, position_ids, pk0, pv0, pk1, pv1):
        return self.m(input_ids, attention_mask, position_ids, pk0, pv0, pk1, pv1)


def names():
    past = [f"past_key_values.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]
    present = [f"present.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]
    return ["input_ids", "attention_mask", "position_ids"] + past, ["logits"] + present


def step_args(m, past_len, new):
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, CFG["vocab"], (1, new), generator=g)
    mask = torch.ones(1, past_len + new, dtype=torch.int64)
    pos = torch.arange(past_len, past_len + new)[None]
    past = [torch.randn(1, CFG["kv_heads"], past_len, CFG["head_dim"], generator=g) for _ in range(2 * LAYERS)]
    return (ids, mask, pos, *past)


def export(m, path, dynamo):
    ins, outs = names()
    args = step_args(m, 3, 2)
    if dynamo:
        auto = torch.export.Dim.AUTO
        shapes = ({0: auto, 1: auto}, {0: auto, 1: auto}, {0: auto, 1: auto}) + ({0: auto, 2: auto},) * (2 * LAYERS)
        torch.onnx.export(Fixed(m), args, path, dynamo=True, opset_version=20, external_data=False,
                          input_names=ins, output_names=outs, dynamic_shapes=shapes)
    else:
        axes = {"input_ids": {0: "batch_size", 1: "sequence_length"},
                "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
                "position_ids": {0: "batch_size", 1: "sequence_length"},
                "logits": {0: "batch_size", 1: "sequence_length"}}
        for n in ins[3:]:
            axes[n] = {0: "batch_size", 2: "past_sequence_length"}
        for n in outs[1:]:
            axes[n] = {0: "batch_size", 2: "total_sequence_length"}
        torch.onnx.export(Fixed(m), args, path, dynamo=False, opset_version=17, input_names=ins, output_names=outs,
                          dynamic_axes=axes)


def module_step(module):
    """A greedy `step` (numpy in, numpy out) over a torch module taking (ids, mask, pos, *past)."""
    def step(x, mask, pos, past):
        with torch.no_grad():
            r = module(torch.from_numpy(x), torch.from_numpy(mask), torch.from_numpy(pos),
                       *[torch.from_numpy(t) for t in past])
        return r[0].numpy(), [t.numpy() for t in r[1:]]
    return step


def check_and_save(d, step, who, prompts, refs):
    """Greedy tokens of `step` from each prompt must be torch's (`refs`); writes prompt_k/tokens_k into `d` and
    returns the smallest top-2 gap along torch's paths."""
    gaps = []
    for k, (p, (tokens, gap)) in enumerate(zip(prompts, refs)):
        got, _ = greedy(step, p, NEW)
        if not np.array_equal(got, tokens):
            raise SystemExit(f"{d}: {who} greedy tokens differ from torch's: {got} vs {tokens}")
        np.save(os.path.join(d, f"prompt_{k}.npy"), p)
        np.save(os.path.join(d, f"tokens_{k}.npy"), tokens)
        gaps.append(gap)
    return min(gaps)


def greedy(step, prompt, new):
    """Greedy decoding with a growing cache: prefill of the whole prompt, then one token per step. `step` maps
    (ids, mask, pos, past) to (logits, present) as numpy. Returns the tokens and the smallest top-2 logit gap."""
    past = [np.zeros((1, CFG["kv_heads"], 0, CFG["head_dim"]), np.float32) for _ in range(2 * LAYERS)]
    tokens = list(prompt[0])
    x = prompt
    gap = float("inf")
    for _ in range(new):
        p, s = past[0].shape[2], x.shape[1]
        mask = np.ones((1, p + s), np.int64)
        pos = np.arange(p, p + s, dtype=np.int64)[None]
        logits, past = step(x, mask, pos, past)
        last = logits[0, -1].astype(np.float64)
        top = np.sort(last)[-2:]
        gap = min(gap, float(top[1] - top[0]))
        nxt = int(np.argmax(last))
        tokens.append(nxt)
        x = np.array([[nxt]], np.int64)
    return np.array([tokens], np.int64), gap


def export_pt2(m, d, style, mask, prompts, refs):
    """torch.export's archive of the decoder at `d`/model.pt2 with torch's greedy tokens; checked by loading it."""
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    # Named ranges that reach a first step (no cache, one token): Dim.AUTO would take the sample's sizes (>= 2) as
    # the ranges' floor. The mask's length (past + new) follows from the code.
    seq = torch.export.Dim("seq", min=1, max=CFG["max_pos"])
    past = torch.export.Dim("past", min=0, max=CFG["max_pos"])
    auto = torch.export.Dim.AUTO
    shapes = ({1: seq}, {1: auto}, {1: seq}) + ({2: past},) * (2 * LAYERS)
    with torch.no_grad():
        ep = torch.export.export(Fixed(m), step_args(m, 3, 2), dynamic_shapes=shapes).run_decompositions()
    path = os.path.join(d, "model.pt2")
    torch.export.save(ep, path)
    # The program's range for the mask's length (past + new) starts above a first step's (torch floors it at the
    # sample's): the saved graph computes every length alike, so its guards are not checked here.
    loaded = torch.export.load(path).module(check_guards=False)
    gap = check_and_save(d, module_step(loaded), "the saved program's", prompts, refs)
    sig = ep.graph_signature
    meta = dict(CFG, layers=LAYERS, style=style, mask=mask, exporter="torch.export", new_tokens=NEW,
                min_top2_gap=gap, torch=torch.__version__,
                pt2_inputs=[s.arg.name for s in sig.input_specs if s.kind.name == "USER_INPUT"],
                pt2_outputs=[s.arg.name for s in sig.output_specs if s.kind.name == "USER_OUTPUT"])
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return f"{os.path.basename(d)}: ok, min top-2 gap {gap:.3f}, inputs {meta['pt2_inputs']}"


def main():
    out = sys.argv[1]
    # `--mask positions`: the position-compared masks of testdata/masks instead of the shape-built ones.
    mask = sys.argv[sys.argv.index("--mask") + 1] if "--mask" in sys.argv else "shapes"
    suffix = {"shapes": "", "positions": "_posmask", "sliding": "_sliding"}[mask]
    # `--style neox`: the partial-rotary decoder alone.
    styles = [sys.argv[sys.argv.index("--style") + 1]] if "--style" in sys.argv else ["qwen2", "llama"]
    rows = []
    for style in styles:
        torch.manual_seed({"qwen2": 1, "llama": 2, "neox": 3}[style])
        m = Decoder(style, mask=mask).eval()

        prompts = [np.array([[17]], np.int64), np.array([[3, 141, 59, 26, 53]], np.int64)]
        refs = [greedy(module_step(m), p, NEW) for p in prompts]
        if "--pt2" in sys.argv:
            rows.append(export_pt2(m, os.path.join(out, f"{style}{suffix}_export"), style, mask, prompts, refs))
            continue
        for exporter, dynamo in [("torchscript17", False), ("dynamo20", True)]:
            d = os.path.join(out, f"{style}{suffix}_{exporter}")
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(os.path.join(d, "step"))
            with torch.no_grad():
                export(m, os.path.join(d, "model.onnx"), dynamo)
            sess = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
            ins = [i.name for i in sess.get_inputs()]

            def ort_step(x, mask, pos, past):
                r = sess.run(None, dict(zip(ins, [x, mask, pos, *past])))
                return r[0], r[1:]

            gap = check_and_save(d, ort_step, "onnxruntime's", prompts, refs)
            args = [a.numpy() for a in step_args(m, 3, 2)]
            for i, a in enumerate(args):
                np.save(os.path.join(d, "step", f"input_{i}.npy"), a)
            for i, y in enumerate(sess.run(None, dict(zip(ins, args)))):
                np.save(os.path.join(d, "step", f"output_{i}.npy"), y)
            meta = dict(CFG, layers=LAYERS, style=style, mask=mask, exporter=exporter, new_tokens=NEW,
                        min_top2_gap=gap, torch=torch.__version__, onnx_inputs=ins,
                        onnx_dims={i.name: i.shape for i in sess.get_inputs()})
            with open(os.path.join(d, "meta.json"), "w") as f:
                json.dump(meta, f, indent=1)
            rows.append(f"{style}_{exporter}: ok, min top-2 gap {gap:.3f}, inputs {meta['onnx_dims']}")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
