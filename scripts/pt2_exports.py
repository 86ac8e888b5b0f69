#!/usr/bin/env python3
"""Exports small PyTorch models with torch.export into .pt2 archives, with torch's own outputs, and (optionally)
checks wgslc against them.

    python3 scripts/pt2_exports.py OUT_DIR [--wgslc PATH] [--models NAME,...] [--onnx]

Each model is exported the way the PyTorch docs say to: `ep = torch.export.export(model.eval(), args)
.run_decompositions(); torch.export.save(ep, "model.pt2")` (the core ATen dialect). Some are also saved
- without `run_decompositions()` (`*_training_ir`: the default training-IR dialect, aten.linear, aten.layer_norm,
  aten.softmax.int, ...);
- with a dynamic batch dim (`mlp_dynamic`: meta.json binds the symbol torch names, e.g. `s77`).

`--versioned` names each case after the torch that runs the script (`mlp_torch26`, ...) and writes only the core
ATen cases and `mlp_dynamic`: run it under each torch version users have, so that the archives are the ones that
version writes (torch 2.6/2.7: a flat ZIP of `serialized_exported_program.json` and `torch.save` pickles, non-finite
floats as bare `-Infinity` in the JSON; torch 2.8: `<root>/models/model.json` with the weights as one pickle; torch
≥ 2.9: one raw file per weight). testdata/pt2's `*_torch26` and `*_torch28` cases were written by torch 2.6.0 and
2.8.0 from PyPI on CPU, `--models mlp,cnn,nanogpt,llama_block` (transformers 4.57's GPT-2 and Llama do not
export under those versions).

OUT_DIR/<case>/ gets testdata's case layout: model.pt2, input_<i>.npy, output_<i>.npy (torch's eager outputs, fp32),
and meta.json where a dim must be bound (or where the .pt2 and ONNX dispatch counts are known to differ: that
entry is written by hand, with its reason, and kept). testdata/pt2 holds the default models' cases. `--onnx` also writes
`exported.onnx` (the dynamo exporter, opset 20) beside each ATen-dialect case, for the dispatch-count comparison.
With --wgslc it compiles and runs each case with that binary and prints a table (max abs error, rtol 1e-4 /
atol 1e-5 verdict, dispatches from .pt2 and from ONNX). The defaults include transformers' GPT-2 (tied LM head)
and Llama; `--models` adds torchvision resnet18/mobilenet_v2 and transformers bert (random weights; nothing is
downloaded). Needs torch (≥ 2.9 for the current layout),
and torchvision/transformers/onnxruntime for those; the GPU machine has them.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import traceback

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_exports  # noqa: E402
from torch_exports import TORCHVISION  # noqa: E402


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(1.0 + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class LlamaBlock(torch.nn.Module):
    """A Llama-style decoder block in plain torch: RMSNorm, grouped-query attention (4 query heads, 2 KV heads)
    with rotary embeddings from cos/sin buffers, causal scaled_dot_product_attention, SwiGLU MLP, no biases."""

    def __init__(self, d=64, heads=4, kv_heads=2, ffn=128, seq=16):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.q = torch.nn.Linear(d, heads * self.hd, bias=False)
        self.k = torch.nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v = torch.nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o = torch.nn.Linear(heads * self.hd, d, bias=False)
        self.gate = torch.nn.Linear(d, ffn, bias=False)
        self.up = torch.nn.Linear(d, ffn, bias=False)
        self.down = torch.nn.Linear(ffn, d, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        ang = torch.outer(torch.arange(seq).float(), inv)
        ang = torch.cat([ang, ang], dim=-1)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    @staticmethod
    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat([-x[..., h:], x[..., :h]], dim=-1)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        cos, sin = self.cos[:t], self.sin[:t]
        q = q * cos + self.rotate_half(q) * sin
        k = k * cos + self.rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, -1))
        h = self.norm2(x)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, use_cache=False)
    m = LlamaForCausalLM(cfg)

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).logits

    return Wrap(m)


# (case name, model name, variants): the default cases, which testdata/pt2 holds.
DEFAULT = ["mlp", "cnn", "nanogpt", "llama_block", "gpt2", "llama"]
EXTRA = ["resnet18", "mobilenet_v2", "bert"]


def models(names):
    """The models and example inputs: the ones torch_exports.py also exports come from there (each seeded alike),
    the Llama-style ones from here."""
    for name in names:
        torch.manual_seed(0)
        if name == "llama_block":
            yield name, LlamaBlock(), (torch.randn(1, 16, 64),)
        elif name == "llama":
            yield name, llama(), (torch.randint(0, 512, (1, 16)),)
        elif name in ["mlp", "cnn", "nanogpt", "gpt2", "bert"] + TORCHVISION:
            yield next(torch_exports.models([name]))
        else:
            raise SystemExit(f"unknown model '{name}' (known: {', '.join(DEFAULT + EXTRA)})")


def write_case(d, path_writer, args, ref, meta=None):
    # A known .pt2-vs-ONNX dispatch difference, written into meta.json by hand with its reason, is kept.
    try:
        known = json.load(open(os.path.join(d, "meta.json"))).get("dispatches_vs_onnx")
    except (OSError, ValueError):
        known = None
    if known:
        meta = dict(meta or {}, dispatches_vs_onnx=known)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    path_writer(os.path.join(d, "model.pt2"))
    for i, t in enumerate(args):
        np.save(os.path.join(d, f"input_{i}.npy"), t.numpy())
    outs = ref if isinstance(ref, (tuple, list)) else [ref]
    for i, y in enumerate(outs):
        np.save(os.path.join(d, f"output_{i}.npy"), y.detach().numpy())
    if meta:
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1)


def cases(names, onnx, versioned):
    """Yields (case dir name, writer, args, reference outputs, meta, onnx writer or None)."""
    tag = "_torch" + "".join(torch.__version__.split("+")[0].split(".")[:2]) if versioned else ""
    for name, model, args in models(names):
        model.eval()
        with torch.no_grad():
            ref = model(*args)
        ep_train = torch.export.export(model, args)
        ep = ep_train.run_decompositions()

        def onnx_writer(path, model=model, args=args):
            torch.onnx.export(model, args, path, dynamo=True, opset_version=20, external_data=False,
                              input_names=[f"input_{i}" for i in range(len(args))], output_names=["output_0"])

        onnx_writer = onnx_writer if onnx and not versioned else None
        yield name + tag, (lambda p, ep=ep: torch.export.save(ep, p)), args, ref, None, onnx_writer
        if name in ("nanogpt", "llama") and not versioned:
            yield f"{name}_training_ir", (lambda p, ep=ep_train: torch.export.save(ep, p)), args, ref, None, None
        if name == "mlp":
            batch = torch.export.Dim("batch", min=1, max=64)
            ep_dyn = torch.export.export(model, args, dynamic_shapes=({0: batch},)).run_decompositions()
            syms = sorted(ep_dyn.range_constraints, key=str)
            meta = {"dims": {getattr(s, "name", str(s)): int(args[0].shape[0]) for s in syms}}
            yield f"{name}_dynamic{tag}", (lambda p, ep=ep_dyn: torch.export.save(ep, p)), args, ref, meta, None


def dispatches(wgslc, model, art, dims):
    cmd = [wgslc, "compile", model, "-o", art]
    for k, v in (dims or {}).items():
        cmd += ["--dim", f"{k}={v}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        return None, r.stderr.strip()[-300:]
    with open(os.path.join(art, "plan.json")) as f:
        return len(json.load(f)["dispatches"]), ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--wgslc")
    ap.add_argument("--models", default=",".join(DEFAULT), help="comma-separated model names")
    ap.add_argument("--onnx", action="store_true", help="also export each model to ONNX (dynamo, opset 20)")
    ap.add_argument("--versioned", action="store_true",
                    help="name the cases after this torch (mlp_torch26, ...): the archives this version writes")
    a = ap.parse_args()
    print("torch", torch.__version__)
    rows = []
    for case, writer, args, ref, meta, onnx_writer in cases(a.models.split(","), a.onnx or bool(a.wgslc), a.versioned):
        d = os.path.join(a.out, case)
        try:
            write_case(d, writer, args, ref, meta)
        except Exception as e:  # an export failing is a result to report, not a crash
            traceback.print_exc()
            rows.append((case, f"export failed: {type(e).__name__}: {e}"[:200], "", ""))
            continue
        onnx_path = os.path.join(d, "exported.onnx")
        if onnx_writer:
            try:
                onnx_writer(onnx_path)
            except Exception as e:
                print(f"{case}: ONNX export failed: {e}")
        if not a.wgslc:
            rows.append((case, "written", "", ""))
            continue
        art = os.path.join(d, "artifact")
        n_pt2, err = dispatches(a.wgslc, os.path.join(d, "model.pt2"), art, (meta or {}).get("dims"))
        verdict = ""
        if n_pt2 is None:
            verdict = "compile: " + err
        else:
            ins = sum([["--input", os.path.join(d, f"input_{i}.npy")] for i in range(len(args))], [])
            r = subprocess.run([a.wgslc, "run", art, "-o", os.path.join(d, "wgslc_out")] + ins,
                               capture_output=True, text=True)
            if r.returncode:
                verdict = "run: " + r.stderr.strip()[-300:]
            else:
                errs, ok = [], True
                outs = ref if isinstance(ref, (tuple, list)) else [ref]
                for i, y in enumerate(outs):
                    y = y.detach().numpy()
                    got = np.load(os.path.join(d, "wgslc_out", f"output_{i}.npy"))
                    errs.append(float(np.abs(got.astype(np.float64) - y).max()))
                    ok &= bool(np.allclose(got, y, rtol=1e-4, atol=1e-5))
                verdict = f"{'PASS' if ok else 'FAIL'} max|err|={max(errs):.2e}"
        n_onnx = ""
        if os.path.exists(onnx_path):
            n, err = dispatches(a.wgslc, onnx_path, art + "_onnx", None)
            n_onnx = str(n) if n is not None else "onnx compile failed: " + err[-150:]
            shutil.rmtree(art + "_onnx", ignore_errors=True)
        shutil.rmtree(art, ignore_errors=True)
        shutil.rmtree(os.path.join(d, "wgslc_out"), ignore_errors=True)
        rows.append((case, verdict, str(n_pt2), n_onnx))
    print()
    print("| case | .pt2 vs torch | dispatches (.pt2) | dispatches (ONNX dynamo) |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    sys.exit(main())
