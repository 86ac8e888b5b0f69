#!/usr/bin/env python3
"""Makes testdata/genai: tiny decoders written by onnxruntime-genai's model builder, the format onnxruntime's WebGPU
provider and many onnx-community repositories ship, with onnxruntime's greedy token ids on each.

    PYTHONPATH=<onnxruntime_genai wheel, unpacked> python3 scripts/make_genai.py OUT_DIR [CASE...]  # torch, transformers

For each architecture (transformers' own config and model class, random weights — of SEEDS initializations the one
whose greedy paths have the widest smallest top-2 logit gap —, 2 layers, 4 query / 2 KV heads of
16 dims, vocabulary 256, a WordLevel tokenizer so the builder has one) the script saves the model with
`save_pretrained`, runs `python -m onnxruntime_genai.models.builder -i HF -o OUT -p PRECISION -e EP`, and keeps
OUT_DIR/<arch>_<precision>_<ep>/ with the builder's model.onnx (its external data, if any) and genai_config.json.
The builder writes `GroupQueryAttention` (`com.microsoft`; packed QKV and rotary inside it for `-e webgpu`),
`SkipSimplifiedLayerNormalization`, `SimplifiedLayerNormalization`, and at int4 `MatMulNBits` and
`GatherBlockQuantized`; its inputs are input_ids, attention_mask and past_key_values.N.key/value
`[batch_size, kv_heads, past_sequence_length, head_size]` (the head size declared as a symbolic dim).

Each case also holds prompt_<k>.npy (int64 [1, L], L = 1 and 5) and tokens_<k>.npy: onnxruntime's greedy generation
through the builder's model (CPU provider, `MatMulNBits` at accuracy_level 0 — see `reference_session`; prefill of the whole prompt, then one token per step with the cache of
exactly the tokens so far and an attention_mask of ones — how onnxruntime-genai runs it without a shared buffer),
prompt plus NEW tokens; and meta.json with the versions, the smallest gap between the two best logits along the
greedy paths, and whether transformers' own greedy generation from the same weights gives the same tokens.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from tokenizers import Tokenizer, models

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_seeds import widest_gap_model  # noqa: E402

NEW = 40
VOCAB = 256
SHAPE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, pad_token_id=None, bos_token_id=2, eos_token_id=1,
             initializer_range=0.5)
SEEDS = 24
ARCHS = {
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, dict(tie_word_embeddings=True)),
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, dict(tie_word_embeddings=False)),
    "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM, dict(sliding_window=None)),
    # The original context equal to the context, so the builder writes plain rotary (not LongRoPE).
    "phi3": (transformers.Phi3Config, transformers.Phi3ForCausalLM,
             dict(tie_word_embeddings=False, original_max_position_embeddings=128)),
    # Softcapped scores and logits, and a sliding window shorter than the generation on alternate layers.
    "gemma2": (transformers.Gemma2Config, transformers.Gemma2ForCausalLM,
               dict(tie_word_embeddings=True, head_dim=16, sliding_window=8, attn_logit_softcapping=50.0,
                    final_logit_softcapping=30.0, query_pre_attn_scalar=16)),
}
CASES = [
    ("qwen2", "fp32", "webgpu"),
    ("qwen2", "fp32", "cpu"),
    ("llama", "fp32", "webgpu"),
    ("mistral", "fp32", "webgpu"),
    ("qwen2", "int4", "webgpu"),
    ("qwen2", "fp16", "webgpu"),
    ("phi3", "fp32", "webgpu"),
    ("gemma2", "fp32", "webgpu"),
]
PROMPTS = [np.array([[17]], np.int64), np.array([[3, 141, 59, 26, 53]], np.int64)]


def hf_model(arch, d):
    """Of SEEDS random initializations, the one whose greedy paths have the largest smallest top-2 gap (so that
    rounding differences between runtimes, and narrow weights, leave the tokens alone)."""
    cfg_cls, model_cls, extra = ARCHS[arch]
    m, tokens, _, seed = widest_gap_model(lambda: model_cls(cfg_cls(**SHAPE, **extra)), PROMPTS, NEW, SEEDS)
    m.save_pretrained(d)
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", pad_token="t0", eos_token="t1",
                                         bos_token="t2").save_pretrained(d)
    return tokens, seed


def ort_greedy(sess, prompt):
    """Prefill of the whole prompt, then one token per step, the cache exactly the tokens so far."""
    ins = {i.name: i for i in sess.get_inputs()}
    outs = [o.name for o in sess.get_outputs()]
    dtype = lambda t: np.float16 if "float16" in t else np.float32
    past = {n: np.zeros((1, i.shape[1], 0, i.shape[3] if isinstance(i.shape[3], int) else HEAD), dtype(i.type))
            for n, i in ins.items() if n.startswith("past_key_values.")}
    tokens, x, gap = list(prompt[0]), prompt, float("inf")
    for _ in range(NEW):
        p = next(iter(past.values())).shape[2]
        feed = dict(past, input_ids=x, attention_mask=np.ones((1, p + x.shape[1]), np.int64))
        if "position_ids" in ins:
            feed["position_ids"] = np.arange(p, p + x.shape[1], dtype=np.int64)[None]
        r = dict(zip(outs, sess.run(None, feed)))
        last = r["logits"][0, -1].astype(np.float64)
        top = np.sort(last)[-2:]
        gap = min(gap, float(top[1] - top[0]))
        tokens.append(int(np.argmax(last)))
        x = np.array([[tokens[-1]]], np.int64)
        past = {n: r[n.replace("past_key_values.", "present.")] for n in past}
    return np.array([tokens], np.int64), gap


HEAD = 16


def reference_session(path):
    """onnxruntime on the builder's model, with `MatMulNBits` at accuracy_level 0: the builder asks for 4 (int8
    activations, a speed setting of onnxruntime's CPU kernel that rounds the products' inputs), and the reference is
    the model's own arithmetic — the dequantized weights times the activations as they are."""
    m = onnx.load(path)
    for n in m.graph.node:
        for a in n.attribute:
            if n.op_type == "MatMulNBits" and a.name == "accuracy_level":
                a.i = 0
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


def main():
    out, only = sys.argv[1], set(sys.argv[2:])
    import onnxruntime_genai  # noqa: F401  (the builder's package must be importable)

    rows, hf_tokens = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for arch, prec, ep in CASES:
            if only and f"{arch}_{prec}_{ep}" not in only:
                continue
            hf = os.path.join(tmp, arch)
            if not os.path.exists(hf):
                hf_tokens[arch] = hf_model(arch, hf)
            name = f"{arch}_{prec}_{ep}"
            built = os.path.join(tmp, name)
            r = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", hf, "-o", built,
                                "-p", prec, "-e", ep, "-c", os.path.join(tmp, "cache")], capture_output=True, text=True)
            if r.returncode:
                raise SystemExit(f"{name}: the builder failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
            d = os.path.join(out, name)
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            for f in os.listdir(built):
                if f.startswith("model.onnx") or f == "genai_config.json":
                    shutil.copy(os.path.join(built, f), d)
            sess = reference_session(os.path.join(d, "model.onnx"))
            gaps, agree = [], True
            for k, p in enumerate(PROMPTS):
                tokens, gap = ort_greedy(sess, p)
                gaps.append(gap)
                agree &= bool(np.array_equal(tokens, hf_tokens[arch][0][k]))
                np.save(os.path.join(d, f"prompt_{k}.npy"), p)
                np.save(os.path.join(d, f"tokens_{k}.npy"), tokens)
            g = onnx.load(os.path.join(d, "model.onnx"), load_external_data=False).graph
            ops = sorted({f"{n.domain or 'ai.onnx'}:{n.op_type}" for n in g.node})
            gqa = next(n for n in g.node if n.op_type == "GroupQueryAttention")
            meta = dict(arch=arch, precision=prec, execution_provider=ep, new_tokens=NEW, min_top2_gap=min(gaps),
                        reference="onnxruntime (MatMulNBits at accuracy_level 0)", transformers_agrees=agree, seed=hf_tokens[arch][1], ops=ops,
                        gqa={a.name: onnx.helper.get_attribute_value(a) for a in gqa.attribute},
                        gqa_inputs=list(gqa.input), onnxruntime=ort.__version__,
                        onnxruntime_genai=onnxruntime_genai.__version__, transformers=transformers.__version__,
                        torch=torch.__version__)
            meta["gqa"] = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in meta["gqa"].items()}
            with open(os.path.join(d, "meta.json"), "w") as f:
                json.dump(meta, f, indent=1)
            rows.append(f"{name}: min top-2 gap {min(gaps):.3f}, transformers agrees {agree}, "
                        f"files {sorted(os.listdir(d))}, gqa {meta['gqa']} inputs {meta['gqa_inputs']}")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
