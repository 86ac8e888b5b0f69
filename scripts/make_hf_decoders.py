#!/usr/bin/env python3
"""Makes testdata/decoders/*_hf_dynamo23: decoders from transformers' own model classes exported by torch.onnx's
dynamo exporter at opset 23, which writes the ONNX-domain `Attention`, `RotaryEmbedding` and `RMSNormalization`
for SDPA, rotary and RMSNorm; with transformers' greedy token ids.

    python3 scripts/make_hf_decoders.py OUT_DIR   # needs torch (>= 2.9), transformers (>= 5), onnxscript, onnxruntime

Made on CPU with torch 2.11.0, transformers 5.24.0 and onnxscript 0.7.2 from PyPI. Each architecture (transformers'
config and class, random weights — of SEEDS initializations the one whose greedy paths have the widest smallest
top-2 logit gap —, 2 layers, 4 query / 2 KV heads of 16 dims, vocabulary 256) is wrapped as
`forward(input_ids, attention_mask, position_ids, k0, v0, k1, v1) -> (logits, *present)` over a `DynamicCache`, exported
with `torch.onnx.export(dynamo=True, opset_version=23)` with `Dim.AUTO` on the token, mask and cache lengths, and
written as OUT_DIR/<arch>_hf_dynamo23/model.onnx with prompt_<k>.npy (L = 1 and 5), tokens_<k>.npy (transformers'
`generate`, greedy, NEW tokens) and meta.json. The script checks that onnxruntime's greedy loop through the
exported model (prefill of the prompt, then one token a step, the cache exactly the tokens so far) gives the same
tokens.
"""

import json
import os
import shutil
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from transformers import DynamicCache

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_seeds import widest_gap_model  # noqa: E402

NEW = 40
LAYERS = 2
SEEDS = 24
SHAPE = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, bos_token_id=2, eos_token_id=None,
             initializer_range=0.5)
ARCHS = {
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, dict(tie_word_embeddings=True)),
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, dict(tie_word_embeddings=False)),
}
PROMPTS = [np.array([[17]], np.int64), np.array([[3, 141, 59, 26, 53]], np.int64)]
NAMES = ["input_ids", "attention_mask", "position_ids"] + [
    f"past_key_values.{l}.{kv}" for l in range(LAYERS) for kv in ("key", "value")]
OUTS = ["logits"] + [f"present.{l}.{kv}" for l in range(LAYERS) for kv in ("key", "value")]


class Step(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask, position_ids, k0, v0, k1, v1):  # LAYERS caches, named
        past = (k0, v0, k1, v1)
        cache = DynamicCache()
        for layer in range(LAYERS):
            cache.update(past[2 * layer], past[2 * layer + 1], layer)
        o = self.m(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   past_key_values=cache, use_cache=True)
        kv = o.past_key_values
        return (o.logits,) + tuple(t for l in range(LAYERS) for t in (kv.layers[l].keys, kv.layers[l].values))


def ort_greedy(sess, prompt, kv_heads, head_dim):
    past = [np.zeros((1, kv_heads, 0, head_dim), np.float32) for _ in range(2 * LAYERS)]
    tokens, x = list(prompt[0]), prompt
    for _ in range(NEW):
        p = past[0].shape[2]
        feed = dict(zip(NAMES, [x, np.ones((1, p + x.shape[1]), np.int64),
                                np.arange(p, p + x.shape[1], dtype=np.int64)[None], *past]))
        r = sess.run(None, feed)
        tokens.append(int(np.argmax(r[0][0, -1])))
        x, past = np.array([[tokens[-1]]], np.int64), r[1:]
    return np.array([tokens], np.int64)


def main():
    out = sys.argv[1]
    for arch, (cfg_cls, model_cls, extra) in ARCHS.items():
        make = lambda: model_cls(cfg_cls(**SHAPE, **extra))  # noqa: E731
        m, tokens, gap, seed = widest_gap_model(make, PROMPTS, NEW, SEEDS)
        d = os.path.join(out, f"{arch}_hf_dynamo23")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        past, n = 3, 2
        args = (torch.randint(0, 256, (1, n)), torch.ones(1, past + n, dtype=torch.int64),
                torch.arange(past, past + n)[None], *[torch.randn(1, 2, past, 16) for _ in range(2 * LAYERS)])
        auto = torch.export.Dim.AUTO
        torch.onnx.export(Step(m), args, os.path.join(d, "model.onnx"), dynamo=True, opset_version=23,
                          input_names=NAMES, output_names=OUTS, external_data=False,
                          dynamic_shapes=[{1: auto}, {1: auto}, {1: auto}] + [{2: auto}] * (2 * LAYERS))
        sess = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
        for k, p in enumerate(PROMPTS):
            got = ort_greedy(sess, p, 2, 16)
            if not np.array_equal(got, tokens[k]):
                raise SystemExit(f"{arch}: onnxruntime's tokens differ from transformers': {got} {tokens[k]}")
            np.save(os.path.join(d, f"prompt_{k}.npy"), p)
            np.save(os.path.join(d, f"tokens_{k}.npy"), tokens[k])
        ops = sorted({n.op_type for n in onnx.load(os.path.join(d, "model.onnx")).graph.node})
        meta = dict(arch=arch, exporter="torch.onnx.export(dynamo=True, opset_version=23)", new_tokens=NEW,
                    min_top2_gap=gap, seed=seed, ops=ops, torch=torch.__version__,
                    transformers=transformers.__version__, onnxruntime=ort.__version__)
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1)
        print(f"{d}: seed {seed}, min top-2 gap {gap:.3f}, ops {ops}")


if __name__ == "__main__":
    main()
