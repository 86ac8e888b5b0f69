#!/usr/bin/env python3
"""Makes testdata/decoders/*_optimum_merged: tiny decoders exported by optimum as merged decoders
(`decoder_model_merged.onnx`, what onnx-community/Xenova repositories made with optimum 1.x ship for
transformers.js), with onnxruntime's greedy token ids on each.

    python3 scripts/make_optimum.py OUT_DIR   # needs optimum 1.x with its exporters, torch, transformers

The testdata was made on CPU with optimum 1.23.3, transformers 4.46.3 and torch 2.6.0 from PyPI. For each
architecture (transformers' own config and model class, random weights — of SEEDS initializations the one whose
greedy paths have the widest smallest top-2 logit gap —, 2 layers, 4 query / 2 KV heads of 16 dims, vocabulary
256) the script saves the model with `save_pretrained` and writes two merged decoders, each one `If` on the input
`use_cache_branch` between the export with past inputs and the one without:
- `<arch>_optimum_merged`: optimum's own ONNX configs for the architecture (`TasksManager`, `use_past` with and
  without `use_past_in_inputs`), exported with `optimum.exporters.onnx.export` and merged by
  `optimum.onnx.merge_decoders` — what `optimum-cli` did by default before 1.14, with the `position_ids` input
  optimum's configs have since;
- `<arch>_optimum_legacy`: `optimum-cli export onnx --task text-generation-with-past --legacy` (the three-file
  export, the merged file kept), which leaves `position_ids` out: the model counts positions from the past's
  length (`arange(past, past + n)`), which wgslc's decoder pass takes from the step's cache row — only qwen2.

Each case also holds prompt_<k>.npy (int64 [1, L], L = 1 and 5) and tokens_<k>.npy: onnxruntime's greedy
generation through the merged model as optimum and transformers.js run it (the prompt's step with
use_cache_branch false and an empty past, then one token per step with use_cache_branch true and the cache of
exactly the tokens so far, attention_mask of ones), prompt plus NEW tokens; and meta.json with the versions, the
smallest top-2 gap and whether transformers' own greedy generation gives the same tokens.
"""

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_seeds import widest_gap_model  # noqa: E402

NEW = 40
VOCAB = 256
SHAPE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, bos_token_id=2, eos_token_id=None,
             initializer_range=0.5)
SEEDS = 24
ARCHS = {
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, dict(tie_word_embeddings=True)),
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, dict(tie_word_embeddings=False)),
}
PROMPTS = [np.array([[17]], np.int64), np.array([[3, 141, 59, 26, 53]], np.int64)]


def hf_model(arch, d):
    cfg_cls, model_cls, extra = ARCHS[arch]
    m, tokens, _, seed = widest_gap_model(lambda: model_cls(cfg_cls(**SHAPE, **extra)), PROMPTS, NEW, SEEDS)
    m.save_pretrained(d)
    return tokens, seed


def ort_greedy(sess, prompt):
    """optimum's protocol: the prompt with use_cache_branch false and an empty past, then one token per step with
    use_cache_branch true and the cache exactly the tokens so far."""
    ins = {i.name: i for i in sess.get_inputs()}
    outs = [o.name for o in sess.get_outputs()]
    past = {n: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
            for n, i in ins.items() if n.startswith("past_key_values.")}
    tokens, x, gap, first = list(prompt[0]), prompt, float("inf"), True
    for _ in range(NEW):
        p = next(iter(past.values())).shape[2]
        feed = dict(past, input_ids=x, attention_mask=np.ones((1, p + x.shape[1]), np.int64),
                    use_cache_branch=np.array([not first]))
        if "position_ids" in ins:
            feed["position_ids"] = np.arange(p, p + x.shape[1], dtype=np.int64)[None]
        r = dict(zip(outs, sess.run(None, feed)))
        last = r["logits"][0, -1].astype(np.float64)
        top = np.sort(last)[-2:]
        gap = min(gap, float(top[1] - top[0]))
        tokens.append(int(np.argmax(last)))
        x, first = np.array([[tokens[-1]]], np.int64), False
        past = {n: r[n.replace("past_key_values.", "present.")] for n in past}
    return np.array([tokens], np.int64), gap


def main():
    out = sys.argv[1]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ARCHS:
            hf = os.path.join(tmp, arch)
            hf_tokens, seed = hf_model(arch, hf)
            for flavor in ["merged", "legacy"] if arch == "qwen2" else ["merged"]:
                d = os.path.join(out, f"{arch}_optimum_{flavor}")
                shutil.rmtree(d, ignore_errors=True)
                os.makedirs(d)
                merged = os.path.join(d, "model.onnx")
                if flavor == "merged":
                    export_merged(hf, os.path.join(tmp, arch + "_parts"), merged)
                else:
                    export_legacy(hf, os.path.join(tmp, arch + "_legacy"), merged)
                rows.append(reference(arch, flavor, d, hf_tokens, seed))
    print("\n".join(rows))


def export_merged(hf, parts, merged):
    """optimum's exporter and merger, called as `optimum-cli` called them before 1.14."""
    from pathlib import Path

    from optimum.exporters.onnx import export
    from optimum.exporters.tasks import TasksManager
    from optimum.onnx import merge_decoders

    os.makedirs(parts, exist_ok=True)
    m = transformers.AutoModelForCausalLM.from_pretrained(hf).eval()
    config = TasksManager.get_exporter_config_constructor("onnx", m, task="text-generation-with-past",
                                                          library_name="transformers")
    export(m, config(m.config, use_past=True, use_past_in_inputs=False), Path(parts) / "decoder_model.onnx")
    export(m, config(m.config, use_past=True, use_past_in_inputs=True), Path(parts) / "decoder_with_past_model.onnx")
    merge_decoders(os.path.join(parts, "decoder_model.onnx"), os.path.join(parts, "decoder_with_past_model.onnx"),
                   save_path=merged, strict=False)


def export_legacy(hf, exported, merged):
    r = subprocess.run(["optimum-cli", "export", "onnx", "--model", hf, "--task", "text-generation-with-past",
                        "--legacy", exported], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"optimum's export failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    shutil.copy(os.path.join(exported, "decoder_model_merged.onnx"), merged)


def reference(arch, flavor, d, hf_tokens, seed):
    """onnxruntime's greedy tokens through the merged model, saved with the prompts and meta.json."""
    sess = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
    gaps, agree = [], True
    for k, p in enumerate(PROMPTS):
        tokens, gap = ort_greedy(sess, p)
        gaps.append(gap)
        agree &= bool(np.array_equal(tokens, hf_tokens[k]))
        np.save(os.path.join(d, f"prompt_{k}.npy"), p)
        np.save(os.path.join(d, f"tokens_{k}.npy"), tokens)
    exporter = {"merged": "optimum.exporters.onnx.export (with and without past) + optimum.onnx.merge_decoders",
                "legacy": "optimum-cli export onnx --task text-generation-with-past --legacy"}[flavor]
    meta = dict(arch=arch, exporter=exporter, new_tokens=NEW, min_top2_gap=min(gaps),
                reference="onnxruntime, optimum's protocol", transformers_agrees=agree, seed=seed,
                optimum=importlib.metadata.version("optimum"), onnxruntime=ort.__version__,
                transformers=transformers.__version__, torch=torch.__version__,
                inputs=[i.name for i in sess.get_inputs()])
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return f"{d}: min top-2 gap {min(gaps):.3f}, transformers agrees {agree}, seed {seed}"


if __name__ == "__main__":
    main()
