#!/usr/bin/env python3
"""The fusion benchmark of docs/performance.md: exports a GPT-2-style, a BERT-style and a Llama-style (GQA) model
(torch.onnx.export, dynamo, opset 20) and a CNN (ResNet-18), compiles each with wgslc fused and with --no-fuse, times both with
`wgslc bench`, checks the fused outputs against onnxruntime, and times onnxruntime (CUDA) and PyTorch (CUDA,
eager) on the same inputs as baselines.

    python3 scripts/bench_models.py OUT_DIR --wgslc PATH [--models gpt2,bert,llama,resnet18,mobilenet_v2] [--iterations N] [--tokens N]
        [--modes fused,no_fuse] [--torch-compile]

Each model is compiled six ways (or those named by --modes): default (fused), --memory-budget 2 (fused_split),
--no-reuse (fused_no_reuse), --attention unfused, --inverted-residual unfused, --no-fuse (no_fuse).
--torch-compile also times the model under torch.compile(mode="reduce-overhead") (Inductor + CUDA graphs);
--interleave R then times it and the fused artifact R more times, alternating, and prints the ratio of the medians.
--torch-profile lists the CUDA kernels of torch.compile's forward (Inductor's default mode: the same kernels without
the CUDA graph) with their GPU time per inference, to set beside `wgslc bench ART --profile`.
--dawn STACK also runs every compiled artifact through wgslc.js on Dawn (Chrome's WebGPU implementation) in Node, on
the same GPU (scripts/node_forward.mjs; STACK holds `node` and the npm package `webgpu` as `webgpu/`, as
scripts/web_decode_bench.py's stack does), and a chain of --chain one-workgroup dispatches natively and on Dawn (the
per-dispatch cost of each replay); `wgslc --shader-checks bench` (wgpu's own bounds checks, as a browser keeps
them) is timed beside the default. --dawn-flag passes a flag to dawn.node's create() (such as
`enable-dawn-features=disable_robustness`, to see what Tint's bounds checks cost). --dawn-profile P also sets every
kernel's GPU time on Dawn (the median of P profiled runs) beside `wgslc bench --profile`'s, by kind, with Dawn's
timestamp quantization off (it rounds timestamps to 65.5 µs, as browsers do, which leaves a kernel 0 or 65.5 µs).

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


def wgslc_bench(wgslc, art, inputs, iters, checked=False):
    r = subprocess.run([wgslc] + (["--shader-checks"] if checked else []) + ["bench", art, "--iterations", str(iters)]
                       + sum([["--input", p] for p in inputs], []), capture_output=True, text=True)
    if r.returncode:
        return {"error": r.stderr.strip()[-300:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def wgslc_profile(wgslc, art, inputs, iters):
    """`wgslc bench --profile`'s every dispatch in replay order: [[kernel, ms], ...] (GPU timestamps)."""
    r = subprocess.run([wgslc, "bench", art, "--iterations", str(iters), "--profile"]
                       + sum([["--input", p] for p in inputs], []), capture_output=True, text=True)
    if r.returncode:
        return None
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    return next((line["kernels"] for line in lines if "kernels" in line), None)


def kind(name):
    """A kernel's kind: its name without the numbers that tell a layer's repeats apart (as `wgslc bench` sums)."""
    return "".join(c for c in name if not c.isdigit())


def print_profiles(name, native, dawn):
    """Dawn's kernel times against native ones, one replay each: the kinds, then the dispatches Dawn loses most on."""
    if not native or not dawn or len(native) != len(dawn):
        print(f"{name}: no comparable profiles (native {len(native or [])}, Dawn {len(dawn or [])} dispatches)")
        return
    kinds = {}
    for (k, n), (_, d) in zip(native, dawn):
        e = kinds.setdefault(kind(k), [0, 0.0, 0.0])
        e[0] += 1
        e[1] += n
        e[2] += d
    print()
    print(f"{name}: kernels {sum(n for _, n in native):.3f} ms native, {sum(d for _, d in dawn):.3f} on Dawn (GPU timestamps)")
    print("| kind | count | native ms | Dawn ms | Dawn − native |")
    print("| --- | --- | --- | --- | --- |")
    for k, (c, n, d) in sorted(kinds.items(), key=lambda kv: kv[1][1] - kv[1][2])[:12]:
        print(f"| {k} | {c} | {n:.4f} | {d:.4f} | {d - n:+.4f} |")
    print("| dispatch | kernel | native ms | Dawn ms |")
    print("| --- | --- | --- | --- |")
    worst = sorted(range(len(native)), key=lambda i: native[i][1] - dawn[i][1])[:10]
    for i in worst:
        print(f"| {i} | {native[i][0]} | {native[i][1]:.4f} | {dawn[i][1]:.4f} |")


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
    ap.add_argument("--dawn", help="a folder with `node` and `webgpu/`: also run the artifacts with wgslc.js on Dawn")
    ap.add_argument("--dawn-flag", action="append", default=[], help="a flag for dawn.node's create() (repeatable)")
    ap.add_argument("--chain", type=int, default=500, help="with --dawn: dispatches in the per-dispatch chain")
    ap.add_argument("--rounds", type=int, default=3, help="with --dawn: rounds of --iterations replays (median)")
    ap.add_argument("--interleave", type=int, default=0, metavar="R",
                    help="with --torch-compile: R more rounds of torch.compile's timing and the fused artifact's "
                         "`wgslc bench`, alternating on the same GPU, for a ratio of medians that GPU clock drift "
                         "between two single timings cannot move")
    ap.add_argument("--dawn-profile", type=int, default=0, metavar="P",
                    help="with --dawn: every kernel's GPU time on Dawn (the median of P profiled wgslc.js runs) beside "
                         "`wgslc bench --profile`'s, by kind and by the dispatches that differ most")
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
        np.save(os.path.join(d, "ref_0.npy"), ref[0])
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
            if a.dawn:
                row[f"{mode}_checked_ms"] = wgslc_bench(a.wgslc, art, inputs, a.iterations, True).get("ms_per_inference")
                if a.dawn_profile:
                    row[f"{mode}_kernels"] = wgslc_profile(a.wgslc, art, inputs, a.iterations)
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
        if a.torch_compile and a.interleave and row.get("fused_ms") is not None:
            art = os.path.join(d, "art_fused")
            tc, wg = [], []
            for _ in range(a.interleave):
                with torch.no_grad():
                    tc.append(cuda_time(lambda: cc(*cargs), a.iterations))
                wg.append(wgslc_bench(a.wgslc, art, inputs, a.iterations).get("ms_per_inference"))
            row["torch_compile_rounds_ms"], row["fused_rounds_ms"] = tc, wg
        cm.cpu()
        row["dispatch_ratio"] = row.get("fused_dispatches", 0) / max(nodes, 1)
        results.append(row)
        print(json.dumps(row), flush=True)
    if a.dawn:
        dawn(a, results)
    json.dump(results, open(os.path.join(a.out, "bench.json"), "w"), indent=1)
    print()
    print("| model | ONNX nodes | dispatches fused / unfused | ratio | wgslc fused ms | --memory-budget 2 ms | --no-reuse ms | --no-fuse ms | ORT ms (its provider) | torch CUDA eager ms | torch.compile ms | rel. L2 vs ORT | planned / lower bound (budget 2) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in (r for r in results if r["model"] != "chain"):
        print(f"| {r['model']} | {r['onnx_nodes']} | {r.get('fused_dispatches')} / {r.get('no_fuse_dispatches')} | "
              f"{r['dispatch_ratio']:.2f} | {r.get('fused_ms')} | {r.get('fused_split_ms')} | {r.get('fused_no_reuse_ms')} | "
              f"{r.get('no_fuse_ms')} | {r['ort_cuda_ms']:.3f} | {r['torch_cuda_eager_ms']:.3f} | {r.get('torch_compile_ms')} | "
              f"{r.get('fused_rel_l2')} | "
              f"{r.get('fused_memory_ratio')} ({r.get('fused_split_memory_ratio')}) |")
    interleaved_table(results)


def interleaved_table(results):
    """The --interleave rounds: medians and the ratio of medians, with every round's pair."""
    rows = [r for r in results if r.get("fused_rounds_ms")]
    if not rows:
        return
    print()
    print("| model | wgslc fused ms (median) | torch.compile ms (median) | wgslc / torch.compile | rounds, wgslc / torch.compile ms |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        w, t = float(np.median(r["fused_rounds_ms"])), float(np.median(r["torch_compile_rounds_ms"]))
        pairs = ", ".join(f"{x:.3f} / {y:.3f}" for x, y in zip(r["fused_rounds_ms"], r["torch_compile_rounds_ms"]))
        print(f"| {r['model']} | {w:.3f} | {t:.3f} | {w / t:.2f} | {pairs} |")


def dawn(a, results):
    """Every compiled artifact through wgslc.js on Dawn in Node (scripts/node_forward.mjs), beside `wgslc bench`."""
    import shutil
    root = os.path.abspath(a.out)
    web = os.path.join(root, "web")
    os.makedirs(web, exist_ok=True)
    for f in ("wgslc.js", "artifact.js"):
        shutil.copy(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runtime", "web", f), web)
    json.dump({"type": "module"}, open(os.path.join(web, "package.json"), "w"))
    models = []
    rows = {}
    for r in results:
        for key in list(r):
            if not key.endswith("_dispatches") or r.get(key.replace("_dispatches", "_ms")) is None:
                continue
            mode = key[: -len("_dispatches")]
            name = f"{r['model']}/{mode}"
            models.append({"name": name, "artifact": f"{r['model']}/art_{mode}", "inputs": [f"{r['model']}/input_0.npy"],
                           "output": f"{r['model']}/dawn_{mode}.f32"})
            rows[name] = (r, mode)
    if a.chain:
        from web_bench import chain_case
        d = chain_case(os.path.join(root, "chain"), a.chain)
        np.save(os.path.join(d, "ref_0.npy"), np.abs(np.load(os.path.join(d, "input_0.npy"))))
        art = os.path.join(d, "art_no_fuse")
        subprocess.run([a.wgslc, "compile", os.path.join(d, "model.onnx"), "-o", art, "--no-fuse"], check=True,
                       capture_output=True)
        inputs = [os.path.join(d, "input_0.npy")]
        row = {"model": "chain", "onnx_nodes": a.chain, "no_fuse_dispatches": a.chain, "dispatch_ratio": 1.0,
               "no_fuse_ms": wgslc_bench(a.wgslc, art, inputs, a.iterations).get("ms_per_inference"),
               "no_fuse_checked_ms": wgslc_bench(a.wgslc, art, inputs, a.iterations, True).get("ms_per_inference")}
        results.append(row)
        models.append({"name": "chain/no_fuse", "artifact": "chain/art_no_fuse", "inputs": ["chain/input_0.npy"],
                       "output": "chain/dawn_no_fuse.f32"})
        rows["chain/no_fuse"] = (row, "no_fuse")
    cfg = {"webgpu": os.path.join(os.path.abspath(a.dawn), "webgpu"), "wgslc_js": os.path.join(web, "wgslc.js"),
           "root": root, "models": models, "iterations": a.iterations, "rounds": a.rounds,
           "dawn": a.dawn_flag + (["disable-dawn-features=timestamp_quantization"] if a.dawn_profile else []),
           "profile": a.dawn_profile}
    path = os.path.join(root, "node_forward.json")
    json.dump(cfg, open(path, "w"))
    node = [os.path.join(a.dawn, "node"), os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_forward.mjs"), path]
    p = subprocess.run(node, capture_output=True, text=True, timeout=1800)
    if p.returncode:
        print(f"node failed ({p.returncode}): {p.stderr[-2000:]}", file=sys.stderr)
    for line in p.stdout.splitlines():
        if not line.startswith("{"):
            continue
        j = json.loads(line)
        r, mode = rows[j["name"]]
        for k in ("load_ms", "first_run_ms", "run_ms", "replay_ms", "replay_rounds_ms", "encode_us_per_dispatch", "error",
                  "adapter", "kernels"):
            if k in j:
                r[f"dawn_{mode}_{k}"] = j[k]
        out = os.path.join(root, j["name"].split("/")[0], f"dawn_{mode}.f32")
        if "error" not in j and os.path.exists(out):
            ref = np.load(os.path.join(root, j["name"].split("/")[0], "ref_0.npy")).astype(np.float32).ravel()
            got = np.fromfile(out, dtype=np.float32)
            r[f"dawn_{mode}_rel_l2"] = float(np.linalg.norm(got - ref) / np.linalg.norm(ref)) if got.size == ref.size else None
        print(json.dumps({"dawn": j["name"], **{k: v for k, v in j.items() if k != "name"}}), flush=True)
    print()
    print("| model | mode | dispatches | `wgslc bench` ms | `--shader-checks` ms | wgslc.js on Dawn: replay ms | run ms (inputs in, outputs back) | first run ms | load ms | encode µs a dispatch | native / Dawn | rel. L2 vs ORT |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, (r, mode) in rows.items():
        nat, rep = r.get(f"{mode}_ms"), r.get(f"dawn_{mode}_replay_ms")
        ratio = f"{nat / rep:.2f}" if nat and rep else r.get(f"dawn_{mode}_error", "—")
        f = lambda k: (f"{r[k]:.3f}" if isinstance(r.get(k), float) else str(r.get(k)))  # noqa: E731
        print(f"| {r['model']} | {mode} | {r.get(f'{mode}_dispatches')} | {f(f'{mode}_ms')} | {f(f'{mode}_checked_ms')} | "
              f"{f(f'dawn_{mode}_replay_ms')} | {f(f'dawn_{mode}_run_ms')} | {f(f'dawn_{mode}_first_run_ms')} | "
              f"{f(f'dawn_{mode}_load_ms')} | {f(f'dawn_{mode}_encode_us_per_dispatch')} | {ratio} | "
              f"{r.get(f'dawn_{mode}_rel_l2')} |")
    if a.dawn_profile:
        for name, (r, mode) in rows.items():
            if r["model"] != "chain":
                print_profiles(name, r.get(f"{mode}_kernels"), r.get(f"dawn_{mode}_kernels"))


if __name__ == "__main__":
    main()
