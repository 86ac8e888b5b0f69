#!/usr/bin/env python3
"""Exports small PyTorch models with both ONNX exporters, computes onnxruntime references, and (optionally)
checks wgslc against them.

    python3 scripts/torch_exports.py OUT_DIR [--wgslc PATH] [--models NAME,...]

For each model (by default an MLP, a CNN, nanoGPT and a GPT-2-style decoder without KV cache; with --models also
torchvision's squeezenet1_1, mobilenet_v2, shufflenet_v2_x0_5, mnasnet0_5 and resnet18, and a BERT-style encoder,
all with random weights, since nothing is downloaded) and each exporter (TorchScript at opset 17, dynamo at
opset 20) it writes OUT_DIR/<model>_<exporter>/ in testdata's case layout: model.onnx,
input_<i>.npy, output_<i>.npy (onnxruntime's outputs). testdata/torch holds the default models' cases,
bert_dynamo20 (`--models bert`) and bert_wide_dynamo20 (`--models bert_wide`, a long feed-forward that wgslc splits
along K). With --wgslc it also compiles and runs each case with
that binary and prints a table (max abs error, rtol 1e-4 / atol 1e-5 verdict). Needs torch, transformers, onnx,
onnxscript and onnxruntime; the GPU machine has them.
"""

import argparse
import os
import shutil
import subprocess
import sys
import traceback

import numpy as np
import onnxruntime as ort
import torch


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.act = torch.nn.GELU()
        self.ln = torch.nn.LayerNorm(64)
        self.fc2 = torch.nn.Linear(64, 16)

    def forward(self, x):
        return self.fc2(self.ln(self.act(self.fc1(x))))


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
            torch.nn.Conv2d(32, 32, 3, padding=1, groups=4), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))

    def forward(self, x):
        return self.body(x)


class NanoBlock(torch.nn.Module):
    """A GPT-2 block written in plain torch (as nanoGPT does): causal self-attention through a tril mask buffer,
    masked_fill, softmax and tanh-free GELU, pre-LayerNorm with residuals."""

    def __init__(self, d, heads, seq):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, 4 * d)
        self.out = torch.nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (k.size(-1) ** 0.5))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class NanoGPT(torch.nn.Module):
    def __init__(self, vocab=512, seq=32, d=64, heads=4, layers=2):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, d)
        self.wpe = torch.nn.Embedding(seq, d)
        self.blocks = torch.nn.ModuleList([NanoBlock(d, heads, seq) for _ in range(layers)])
        self.ln_f = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=4, use_cache=False)
    m = GPT2LMHeadModel(cfg)

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).logits

    return Wrap(m)


def bert(**config):
    """transformers' BertModel (two layers of 128 unless `config` says otherwise), returning last_hidden_state."""
    from transformers import BertConfig, BertModel
    cfg = BertConfig(**{**dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=512, max_position_embeddings=64), **config})
    m = BertModel(cfg)

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    return Wrap(m)


def bert_wide():
    """One BERT layer with a feed-forward 16 times its width: at 16 tokens the output projection (K = 2048, 128
    outputs) has too few tiles to fill a GPU, so wgslc's `ksplit` stage splits it along K (its bias and residual in
    the parts' sums)."""
    return bert(vocab_size=256, num_hidden_layers=1, intermediate_size=2048, max_position_embeddings=32)


def randomize_batchnorm(model):
    """Non-trivial BatchNorm statistics, so folding them into convolutions is tested."""
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.5, 0.5)
    return model


TORCHVISION = ["squeezenet1_1", "mobilenet_v2", "shufflenet_v2_x0_5", "mnasnet0_5", "resnet18"]
DEFAULT = ["mlp", "cnn", "nanogpt", "gpt2"]


def models(names):
    torch.manual_seed(0)
    for name in names:
        if name == "mlp":
            yield name, MLP(), (torch.randn(4, 32),)
        elif name == "cnn":
            yield name, randomize_batchnorm(CNN()), (torch.randn(2, 3, 32, 32),)
        elif name == "nanogpt":
            yield name, NanoGPT(), (torch.randint(0, 512, (1, 16)),)
        elif name == "gpt2":
            yield name, gpt2(), (torch.randint(0, 512, (1, 16)),)
        elif name == "bert":
            mask = torch.ones(1, 16, dtype=torch.long)
            mask[0, 12:] = 0
            yield name, bert(), (torch.randint(0, 1000, (1, 16)), mask)
        elif name == "bert_wide":
            mask = torch.ones(1, 16, dtype=torch.long)
            mask[0, 13:] = 0
            yield name, bert_wide(), (torch.randint(0, 256, (1, 16)), mask)
        elif name in TORCHVISION:
            import torchvision
            model = randomize_batchnorm(getattr(torchvision.models, name)(weights=None))
            yield name, model, (torch.randn(1, 3, 224, 224),)
        else:
            raise SystemExit(f"unknown model '{name}' (known: {', '.join(DEFAULT + ['bert', 'bert_wide'] + TORCHVISION)})")


def export(model, args, path, dynamo):
    model.eval()
    kw = dict(input_names=[f"input_{i}" for i in range(len(args))], output_names=["output_0"])
    if dynamo:
        torch.onnx.export(model, args, path, dynamo=True, opset_version=20, external_data=False, **kw)
    else:
        torch.onnx.export(model, args, path, dynamo=False, opset_version=17, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--wgslc")
    ap.add_argument("--models", default=",".join(DEFAULT), help="comma-separated model names")
    a = ap.parse_args()
    rows = []
    for name, model, args in models(a.models.split(",")):
        for exporter, dynamo in [("torchscript17", False), ("dynamo20", True)]:
            d = os.path.join(a.out, f"{name}_{exporter}")
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            try:
                with torch.no_grad():
                    export(model, args, os.path.join(d, "model.onnx"), dynamo)
                sess = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
                feeds = {i.name: t.numpy() for i, t in zip(sess.get_inputs(), args)}
                outs = sess.run(None, feeds)
                for i, t in enumerate(args):
                    np.save(os.path.join(d, f"input_{i}.npy"), t.numpy())
                for i, y in enumerate(outs):
                    np.save(os.path.join(d, f"output_{i}.npy"), y)
                with torch.no_grad():
                    ref = model(*args)
                torch_err = float(np.abs(outs[0] - ref.numpy()).max())
            except Exception as e:  # an exporter failing is a result to report, not a crash
                traceback.print_exc()
                rows.append((name, exporter, f"export failed: {type(e).__name__}", ""))
                continue
            verdict = ""
            if a.wgslc:
                art = os.path.join(d, "artifact")
                r = subprocess.run([a.wgslc, "compile", os.path.join(d, "model.onnx"), "-o", art], capture_output=True, text=True)
                if r.returncode:
                    verdict = "compile: " + r.stderr.strip()[-300:]
                else:
                    ins = sum([["--input", os.path.join(d, f"input_{i}.npy")] for i in range(len(args))], [])
                    r = subprocess.run([a.wgslc, "run", art, "-o", os.path.join(d, "wgslc_out")] + ins, capture_output=True, text=True)
                    if r.returncode:
                        verdict = "run: " + r.stderr.strip()[-300:]
                    else:
                        errs = []
                        ok = True
                        for i, y in enumerate(outs):
                            got = np.load(os.path.join(d, "wgslc_out", f"output_{i}.npy"))
                            errs.append(float(np.abs(got - y).max()))
                            ok &= bool(np.allclose(got, y, rtol=1e-4, atol=1e-5))
                        verdict = f"{'PASS' if ok else 'FAIL'} max|err|={max(errs):.2e}"
                shutil.rmtree(art, ignore_errors=True)
                shutil.rmtree(os.path.join(d, "wgslc_out"), ignore_errors=True)
            rows.append((name, exporter, f"ort vs torch {torch_err:.1e}", verdict))
    print()
    for r in rows:
        print(" | ".join(r))


if __name__ == "__main__":
    sys.exit(main())
