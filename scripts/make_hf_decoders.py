#!/usr/bin/env python3
"""Makes testdata/decoders/<arch>_hf_<exporter>: decoders from transformers' own model classes exported by torch.onnx
(the dynamo exporter at opsets 18 and 23 — at 23 it writes the ONNX-domain `Attention`, `RotaryEmbedding` and
`RMSNormalization` for SDPA, rotary and RMSNorm — and the TorchScript exporter at opset 17), with transformers'
greedy token ids.

    python3 scripts/make_hf_decoders.py OUT_DIR [--archs a,b] [--exporters dynamo23,dynamo18,torchscript17]
    # needs torch (>= 2.9), transformers (>= 5), onnxscript, onnxruntime

Made with torch 2.11.0, transformers 5.24.0 (Qwen2 and Llama at opset 23) or 5.17.0 (the others, on the GPU
machine's CPU) and onnxscript 0.7.2. Each architecture (transformers' config and class, random weights — of SEEDS
initializations the one whose greedy paths have the widest smallest top-2 logit gap —, 2 layers, 4 query heads of
16 dims over 2 KV heads where the architecture has GQA, vocabulary 256) is wrapped as
`forward(input_ids, attention_mask, position_ids, k0, v0, k1, v1) -> (logits, *present)` over a `DynamicCache`, exported
with the token, mask and cache lengths dynamic, and written as OUT_DIR/<arch>_hf_<exporter>/model.onnx with
prompt_<k>.npy (L = 1 and 5), tokens_<k>.npy (transformers' `generate`, greedy, NEW tokens) and meta.json. The
script checks that onnxruntime's greedy loop through the exported model (prefill of the prompt, then one token a
step, the cache exactly the tokens so far) gives the same tokens; an architecture or exporter that fails is reported
and skipped.
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
GEMMA = dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=8, attn_logit_softcapping=50.0,
             final_logit_softcapping=30.0)
ARCHS = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=True)),
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(tie_word_embeddings=False)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=16, tie_word_embeddings=True)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=None)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(pad_token_id=0)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", GEMMA),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(GEMMA, final_logit_softcapping=None,
                                                              attn_logit_softcapping=None)),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {}),
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM", dict(no_rope_layer_interval=2)),
    "neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(rotary_pct=0.25, num_key_value_heads=4)),
    "phi": ("PhiConfig", "PhiForCausalLM", dict(partial_rotary_factor=0.5)),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", dict(partial_rotary_factor=0.25)),
    # Learned absolute positions, LayerNorm, GELU, multi-head attention; hidden_size and the others map onto n_embd...
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_inner=128)),
}
EXPORTERS = {"dynamo23": (True, 23), "dynamo18": (True, 18), "torchscript17": (False, 17)}
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


def cache_shape(m):
    """(KV heads, head dim) of the model's cache, from a one-token run."""
    with torch.no_grad():
        kv = m(input_ids=torch.tensor([[1]]), use_cache=True).past_key_values
    k = kv.layers[0].keys
    return k.shape[1], k.shape[3]


def export(m, path, exporter, kv_heads, head_dim):
    dynamo, opset = EXPORTERS[exporter]
    past, n = 3, 2
    args = (torch.randint(0, 256, (1, n)), torch.ones(1, past + n, dtype=torch.int64),
            torch.arange(past, past + n)[None], *[torch.randn(1, kv_heads, past, head_dim) for _ in range(2 * LAYERS)])
    if dynamo:
        auto = torch.export.Dim.AUTO
        torch.onnx.export(Step(m), args, path, dynamo=True, opset_version=opset, input_names=NAMES,
                          output_names=OUTS, external_data=False,
                          dynamic_shapes=[{1: auto}, {1: auto}, {1: auto}] + [{2: auto}] * (2 * LAYERS))
    else:
        axes = {"input_ids": {1: "sequence_length"}, "attention_mask": {1: "total_sequence_length"},
                "position_ids": {1: "sequence_length"}}
        axes.update({n: {2: "past_sequence_length"} for n in NAMES[3:]})
        axes.update({n: {2: "total_sequence_length"} for n in OUTS[1:]})
        torch.onnx.export(Step(m), args, path, dynamo=False, opset_version=opset, input_names=NAMES,
                          output_names=OUTS, dynamic_axes=axes)


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--archs", default="qwen2,llama")
    ap.add_argument("--exporters", default="dynamo23")
    a = ap.parse_args()
    failed = []
    for arch in a.archs.split(","):
        cfg_name, model_name, extra = ARCHS[arch]
        cfg_cls, model_cls = getattr(transformers, cfg_name), getattr(transformers, model_name)
        make = lambda: model_cls(cfg_cls(**{**SHAPE, **extra}))  # noqa: E731
        m, tokens, gap, seed = widest_gap_model(make, PROMPTS, NEW, SEEDS)
        kv_heads, head_dim = cache_shape(m)
        for exporter in a.exporters.split(","):
            d = os.path.join(a.out, f"{arch}_hf_{exporter}")
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            try:
                export(m, os.path.join(d, "model.onnx"), exporter, kv_heads, head_dim)
                sess = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
                for k, p in enumerate(PROMPTS):
                    got = ort_greedy(sess, p, kv_heads, head_dim)
                    if not np.array_equal(got, tokens[k]):
                        raise RuntimeError(f"onnxruntime's tokens differ from transformers': {got} {tokens[k]}")
                    np.save(os.path.join(d, f"prompt_{k}.npy"), p)
                    np.save(os.path.join(d, f"tokens_{k}.npy"), tokens[k])
            except Exception as e:  # noqa: BLE001 - reported, the others still made
                shutil.rmtree(d, ignore_errors=True)
                failed.append(f"{arch} {exporter}: {str(e).strip().splitlines()[-1][:300] if str(e).strip() else e!r}")
                print(f"FAILED {failed[-1]}", flush=True)
                continue
            dynamo, opset = EXPORTERS[exporter]
            ops = sorted({n.op_type for n in onnx.load(os.path.join(d, "model.onnx")).graph.node})
            meta = dict(arch=arch, exporter=f"torch.onnx.export(dynamo={dynamo}, opset_version={opset})",
                        new_tokens=NEW, min_top2_gap=gap, seed=seed, ops=ops, torch=torch.__version__,
                        transformers=transformers.__version__, onnxruntime=ort.__version__)
            with open(os.path.join(d, "meta.json"), "w") as f:
                json.dump(meta, f, indent=1)
            print(f"{d}: seed {seed}, min top-2 gap {gap:.3f}, ops {ops}", flush=True)
    if failed:
        print("failed:\n  " + "\n  ".join(failed))


if __name__ == "__main__":
    main()
