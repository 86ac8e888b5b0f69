#!/usr/bin/env python3
"""The fusion benchmark of docs/performance.md: exports a GPT-2-style, a BERT-style and a Llama-style (GQA) model
(torch.onnx.export, dynamo, opset 20) and a CNN (ResNet-18), compiles each with wgslc fused and with --no-fuse, times both with
`wgslc bench`, checks the fused outputs against onnxruntime, and times onnxruntime (CUDA) and PyTorch (CUDA,
eager) on the same inputs as baselines.

    python3 scripts/bench_models.py OUT_DIR --wgslc PATH [--models gpt2,bert,llama,resnet18,mobilenet_v2] [--iterations N] [--tokens N]
        [--modes fused,no_fuse] [--torch-compile]

Each model is compiled six ways (or those named by --modes): default (fused), --memory-budget 2 (fused_split),
--no-reuse (fused_no_reuse), --attention unfused, --inverted-residual unfused, --no-fuse (no_fuse).
--torch-compile also times the model under torch.compile(mode="reduce-overhead") (Inductor + CUDA graphs).
--torch-profile lists the CUDA kernels of torch.compile's forward (Inductor's default mode: the same kernels without
the CUDA graph) with their GPU time per inference, to set beside `wgslc bench ART --profile`.

Prints a table and writes OUT_DIR/bench.json. Needs torch, torchvision, transformers, onnx, onnxscript and
onnxruntime (the GPU machine has them).
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_profile import torch_kernels  # noqa: E402


class LastHidden(torch.nn.Module):
    """A transformers model called on token ids alone (with fixed keyword arguments), returning its last hidden
    state: one tensor in, one out, as torch.onnx.export wants."""

    def __init__(self, m, **kwargs):
        super().__init__()
        self.m = m
        self.kwargs = kwargs

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, **self.kwargs).last_hidden_state


def gpt2(tokens=128):
    from transformers import GPT2Config, GPT2Model
    cfg = GPT2Config(vocab_size=8192, n_positions=max(256, tokens), n_embd=768, n_layer=12, n_head=12, use_cache=False)
    return LastHidden(GPT2Model(cfg), use_cache=False), (torch.randint(0, 8192, (1, tokens)),)


def bert(tokens=128):
    from transformers import BertConfig, BertModel
    cfg = BertConfig(vocab_size=8192, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                     intermediate_size=3072, max_position_embeddings=max(256, tokens))
    return LastHidden(BertModel(cfg, add_pooling_layer=False)), (torch.randint(0, 8192, (1, tokens)),)


def llama(tokens=128):
    """A Llama-style decoder with grouped-query attention (12 query heads over 4 K/V heads), RMSNorm and SwiGLU."""
    from transformers import LlamaConfig, LlamaModel
    cfg = LlamaConfig(vocab_size=8192, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                      num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=max(256, tokens),
                      use_cache=False)
    return LastHidden(LlamaModel(cfg), use_cache=False), (torch.randint(0, 8192, (1, tokens)),)


def resnet18(tokens=None):
    import torchvision
    return torchvision.models.resnet18(weights=None), (torch.randn(1, 3, 224, 224),)


def mobilenet_v2(tokens=None):
    import torchvision
    return torchvision.models.mobilenet_v2(weights=None), (torch.randn(1, 3, 224, 224),)


MODELS = {"gpt2": gpt2, "bert": bert, "llama": llama, "resnet18": resnet18, "mobilenet_v2": mobilenet_v2}


def cuda_time(fn, iters):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def wgslc_bench(wgslc, art, inputs, iters):
    r = subprocess.run([wgslc, "bench", art, "--iterations", str(iters)] + sum([["--input", p] for p in inputs], []),
                       capture_output=True, text=True)
    if r.returncode:
        return {"error": r.stderr.strip()[-300:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--wgslc", required=True)
    ap.add_argument("--models", default="gpt2,bert,llama,resnet18")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--tokens", type=int, default=128, help="sequence length of the transformers")
    ap.add_argument("--modes", default="", help="the compile modes to run (default: all)")
    ap.add_argument("--torch-compile", action="store_true", help="also time torch.compile(mode='reduce-overhead')")
    ap.add_argument("--torch-profile", action="store_true", help="list torch.compile's kernels and their GPU time")
    ap.add_argument("--torch-fp32-convs", action="store_true",
                    help="PyTorch's convolutions in fp32 (torch.backends.cudnn.allow_tf32 = False); by default cuDNN "
                         "runs fp32 convolutions on TF32 tensor cores, while matmuls stay fp32")
    a = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = not a.torch_fp32_convs
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    results = []
    for name in a.models.split(","):
        model, args = MODELS[name](a.tokens)
        model.eval()
        d = os.path.join(a.out, name)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "model.onnx")
        with torch.no_grad():
            torch.onnx.export(model, args, path, dynamo=True, opset_version=20, external_data=False,
                              input_names=[f"input_{i}" for i in range(len(args))])
        nodes = len(onnx.load(path, load_external_data=False).graph.node)
        inputs = []
        for i, t in enumerate(args):
            p = os.path.join(d, f"input_{i}.npy")
            np.save(p, t.numpy())
            inputs.append(p)
        row = {"model": name, "onnx_nodes": nodes}
        # onnxruntime references and CUDA timing.
        sess = ort.InferenceSession(path, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
        feed = {i.name: t.numpy() for i, t in zip(sess.get_inputs(), args)}
        ref = sess.run(None, feed)
        row["ort_provider"] = sess.get_providers()[0]
        row["ort_cuda_ms"] = cuda_time(lambda: sess.run(None, feed), a.iterations)
        cm = model.cuda()
        cargs = [t.cuda() for t in args]
        with torch.no_grad():
            row["torch_cuda_eager_ms"] = cuda_time(lambda: cm(*cargs), a.iterations)
            if a.torch_compile:
                t = time.perf_counter()
                cc = torch.compile(cm, mode="reduce-overhead")
                for _ in range(3):
                    cc(*cargs)
                row["torch_compile_warmup_s"] = round(time.perf_counter() - t, 1)
                row["torch_compile_ms"] = cuda_time(lambda: cc(*cargs), a.iterations)
            if a.torch_profile:
                row["torch_kernels"] = torch_kernels(torch.compile(cm), cargs, a.iterations)
        cm.cpu()
        # fused_no_reuse: a buffer per value, so every kernel binds its inputs read-only; against "fused" it measures
        # what the arena's read-write input bindings cost.
        # fused_split: two sets of arenas whatever they cost (--memory-budget 2), so inputs are read-only.
        # attention_unfused: Q·Kᵀ → softmax → ·V as three kernels instead of the attention kernel.
        # inverted_residual_unfused: MobileNet's expansion → depthwise → projection as a kernel per convolution.
        for mode, extra in [("fused", []), ("fused_split", ["--memory-budget", "2"]), ("fused_no_reuse", ["--no-reuse"]),
                            ("attention_unfused", ["--attention", "unfused"]),
                            ("inverted_residual_unfused", ["--inverted-residual", "unfused"]), ("no_fuse", ["--no-fuse"])]:
            if a.modes and mode not in a.modes.split(","):
                continue
            art = os.path.join(d, f"art_{mode}")
            t = time.perf_counter()
            r = subprocess.run([a.wgslc, "compile", path, "-o", art] + extra, capture_output=True, text=True)
            row[f"{mode}_compile_s"] = round(time.perf_counter() - t, 2)
            if r.returncode:
                row[f"{mode}_error"] = r.stderr.strip()[-400:]
                continue
            rep = json.load(open(os.path.join(art, "report.json")))
            row[f"{mode}_dispatches"] = rep["dispatches"]
            row[f"{mode}_graph_nodes"] = rep["graph_nodes"]
            row[f"{mode}_bytes_moved"] = rep["bytes_moved"]
            mem = rep["memory"]
            row[f"{mode}_memory"] = {k: mem[k] for k in ("planned_bytes", "lower_bound_bytes", "naive_bytes", "weights_bytes", "split_arenas")}
            row[f"{mode}_memory_ratio"] = round(mem["planned_bytes"] / max(mem["lower_bound_bytes"], 1), 3)
            b = wgslc_bench(a.wgslc, art, inputs, a.iterations)
            row[f"{mode}_ms"] = b.get("ms_per_inference")
            row["adapter"] = b.get("adapter", row.get("adapter"))
            if "error" in b:
                row[f"{mode}_error"] = b["error"]
            outd = os.path.join(d, f"out_{mode}")
            r = subprocess.run([a.wgslc, "run", art, "-o", outd] + sum([["--input", p] for p in inputs], []),
                               capture_output=True, text=True)
            if r.returncode == 0:
                got = np.load(os.path.join(outd, "output_0.npy"))
                row[f"{mode}_max_abs_err"] = float(np.abs(got - ref[0]).max())
                row[f"{mode}_rel_l2"] = float(np.linalg.norm(got - ref[0]) / np.linalg.norm(ref[0]))
        row["dispatch_ratio"] = row.get("fused_dispatches", 0) / max(nodes, 1)
        results.append(row)
        print(json.dumps(row), flush=True)
    json.dump(results, open(os.path.join(a.out, "bench.json"), "w"), indent=1)
    print()
    print("| model | ONNX nodes | dispatches fused / unfused | ratio | wgslc fused ms | --memory-budget 2 ms | --no-reuse ms | --no-fuse ms | ORT ms (its provider) | torch CUDA eager ms | torch.compile ms | rel. L2 vs ORT | planned / lower bound (budget 2) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['model']} | {r['onnx_nodes']} | {r.get('fused_dispatches')} / {r.get('no_fuse_dispatches')} | "
              f"{r['dispatch_ratio']:.2f} | {r.get('fused_ms')} | {r.get('fused_split_ms')} | {r.get('fused_no_reuse_ms')} | "
              f"{r.get('no_fuse_ms')} | {r['ort_cuda_ms']:.3f} | {r['torch_cuda_eager_ms']:.3f} | {r.get('torch_compile_ms')} | "
              f"{r.get('fused_rel_l2')} | "
              f"{r.get('fused_memory_ratio')} ({r.get('fused_split_memory_ratio')}) |")


if __name__ == "__main__":
    main()
