#!/usr/bin/env python3
"""Makes testdata/encoders: a tiny BERT encoder (random weights, two layers, fp32) exported with a dynamic sequence
length, and onnxruntime's outputs at several lengths, for `--dim sequence_length=MIN..MAX`.

    python3 scripts/make_encoders.py OUT_DIR        # the GPU machine has torch, transformers, onnx, onnxruntime

The model is written in plain torch the way HF's BertModel computes it (eager attention, the extended mask
`(1 - mask) * finfo.min`, erf GELU, post-LayerNorm, the tanh pooler): transformers' own mask code is traced with its
sequence length fixed by the legacy exporter (onnxruntime's outputs at other lengths are then wrong by ~3), which
is no test of a compiler. The model returns what sentence-embedding and classification code reads from an encoder: `last_hidden_state`,
`pooler_output` (tanh of a projection of token 0), `mean_pooled` (the attention-masked mean over the sequence, as
sentence-transformers computes it) and `mean` (a plain mean over the sequence).

Exported twice, as OUT_DIR/bert_<exporter>/model.onnx:
- `torchscript17`: torch.onnx.export(dynamo=False, opset 17) with HF/optimum's named dynamic axes (batch_size,
  sequence_length);
- `dynamo20`: torch.onnx.export(dynamo=True, opset 20), the sequence a `torch.export.Dim` named sequence_length;
and once more as OUT_DIR/bert_wide_dynamo20 (dynamo, opset 20): one layer whose feed-forward is 1024 wide, so its
down projection (K = 1024 over 64 outputs) is split along K in every bucket of `--dim sequence_length=1..128`, at
lengths inside the buckets (WIDE_LENGTHS). `--only NAME` writes that case alone.
Each case holds, for every length L in LENGTHS, len_<L>/input_<i>.npy (input_ids, attention_mask, token_type_ids;
the longer ones with padding at the end: mask 0) and len_<L>/output_<i>.npy, onnxruntime's outputs of the exported
model, checked against torch's; meta.json names the lengths, the range (`ranges`), the dims to bind (`dims`) and the versions.
"""

import json
import os
import sys

import numpy as np
import onnxruntime as ort
import torch

MAX = 128
LENGTHS = [1, 7, 64, 128]
WIDE_LENGTHS = [1, 3, 40, 100, 128]
OUTPUTS = ["last_hidden_state", "pooler_output", "mean_pooled", "mean"]
INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


class Layer(torch.nn.Module):
    def __init__(self, h, heads, ffn):
        super().__init__()
        self.heads, self.d = heads, h // heads
        self.q, self.k, self.v, self.o = (torch.nn.Linear(h, h) for _ in range(4))
        self.ln1, self.ln2 = torch.nn.LayerNorm(h, eps=1e-12), torch.nn.LayerNorm(h, eps=1e-12)
        self.up, self.down = torch.nn.Linear(h, ffn), torch.nn.Linear(ffn, h)

    def split(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.d).transpose(1, 2)

    def forward(self, x, ext_mask):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / (self.d ** 0.5) + ext_mask
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2)
        ctx = ctx.reshape(x.shape)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.down(torch.nn.functional.gelu(self.up(x))))


class Encoder(torch.nn.Module):
    def __init__(self, vocab=256, h=64, heads=4, ffn=128, layers=2, max_pos=MAX):
        super().__init__()
        self.word = torch.nn.Embedding(vocab, h)
        self.pos = torch.nn.Embedding(max_pos, h)
        self.token_type = torch.nn.Embedding(2, h)
        self.ln = torch.nn.LayerNorm(h, eps=1e-12)
        self.layers = torch.nn.ModuleList(Layer(h, heads, ffn) for _ in range(layers))
        self.pool = torch.nn.Linear(h, h)

    def forward(self, input_ids, attention_mask, token_type_ids):
        s = input_ids.shape[1]
        pos = torch.arange(s, device=input_ids.device).unsqueeze(0)
        x = self.ln(self.word(input_ids) + self.pos(pos) + self.token_type(token_type_ids))
        ext = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, ext)
        pooled = torch.tanh(self.pool(x[:, 0]))
        m = attention_mask.unsqueeze(-1).to(x.dtype)
        mean_pooled = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return x, pooled, mean_pooled, x.mean(1)


def inputs(length, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 256, (1, length), generator=g)
    mask = torch.ones(1, length, dtype=torch.int64)
    if length > 4:
        mask[0, -2:] = 0  # padding at the end, as a tokenizer pads a batch
    types = torch.zeros(1, length, dtype=torch.int64)
    types[0, length // 2:] = 1
    return ids, mask, types


def export(m, path, dynamo):
    args = inputs(16, 0)
    if dynamo:
        seq = torch.export.Dim("sequence_length", min=1, max=MAX)
        shapes = {"input_ids": {1: seq}, "attention_mask": {1: seq}, "token_type_ids": {1: seq}}
        torch.onnx.export(m, args, path, dynamo=True, opset_version=20, external_data=False, input_names=INPUTS,
                          output_names=OUTPUTS, dynamic_shapes=shapes)
    else:
        axes = {n: {0: "batch_size", 1: "sequence_length"} for n in INPUTS}
        axes["last_hidden_state"] = {0: "batch_size", 1: "sequence_length"}
        for n in OUTPUTS[1:]:
            axes[n] = {0: "batch_size"}
        torch.onnx.export(m, args, path, dynamo=False, opset_version=17, input_names=INPUTS, output_names=OUTPUTS,
                          dynamic_axes=axes)


def main():
    out = sys.argv[1]
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    torch.manual_seed(0)
    m = Encoder().eval()
    torch.manual_seed(1)
    wide = Encoder(ffn=1024, layers=1).eval()
    cases = [("torchscript17", False, m, LENGTHS, "bert_torchscript17"), ("dynamo20", True, m, LENGTHS, "bert_dynamo20"),
             ("dynamo20", True, wide, WIDE_LENGTHS, "bert_wide_dynamo20")]
    for exporter, dynamo, m, lengths, name in cases:
        if only is not None and name != only:
            continue
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "model.onnx")
        try:
            export(m, path, dynamo)
        except Exception as e:  # report and go on with the other exporter
            print(f"{exporter}: export failed: {type(e).__name__}: {e}"[:2000])
            continue
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        worst = 0.0
        for k, length in enumerate(lengths):
            args = inputs(length, 100 + k)
            feed = {n: a.numpy() for n, a in zip(INPUTS, args) if n in names}
            got = sess.run(None, feed)
            with torch.no_grad():
                want = [t.numpy() for t in m(*args)]
            for g, w in zip(got, want):
                worst = max(worst, float(np.abs(g - w).max()))
            ld = os.path.join(d, f"len_{length}")
            os.makedirs(ld, exist_ok=True)
            for i, n in enumerate(names):
                np.save(os.path.join(ld, f"input_{i}.npy"), feed[n])
            for i, o in enumerate(got):
                np.save(os.path.join(ld, f"output_{i}.npy"), o)
        assert worst < 1e-4, f"{exporter}: onnxruntime and torch differ by {worst}"
        meta = dict(lengths=lengths, ranges={"sequence_length": [1, MAX]}, exporter=exporter, inputs=names, outputs=OUTPUTS,
                    max_abs_err_ort_vs_torch=worst, torch=torch.__version__,
                    onnxruntime=ort.__version__)
        if not dynamo:
            meta["dims"] = {"batch_size": 1}
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1)
        print(exporter, "ok", worst, os.path.getsize(path))


if __name__ == "__main__":
    main()
