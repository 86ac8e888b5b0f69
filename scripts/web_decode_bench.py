#!/usr/bin/env python3
"""Decode on the browser stack of a real GPU, against onnxruntime's WebGPU provider on the format it is tuned for,
in one run: onnxruntime-genai builder models (`-p fp32` and `-p int4`, `-e webgpu`; transformers' Qwen2ForCausalLM at
the Qwen2.5-0.5B shape, random weights; or --model DIR, a builder output) compiled by wgslc, then greedy decoding of
the same prompt with

- `wgslc generate` (the Rust runtime, wgpu on Vulkan),
- wgslc.js's Session.generate on Dawn (Chrome's WebGPU implementation) in Node, through the npm package `webgpu`,
- onnxruntime-web's WebGPU provider on the builder's model.onnx, on the same Dawn (its web build in Node,
  single-threaded; the loop feeds each step's present tensors back on the GPU and reads the logits back),
- with --ort-genai STACK, onnxruntime-genai's own loop on onnxruntime's native WebGPU provider (Dawn built into
  onnxruntime-webgpu's library) on the same model: scripts/ort_genai_decode.py says what STACK holds.

    python3 scripts/web_decode_bench.py --wgslc BIN --stack DIR [--ort-genai STACK] [--model BUILDER_DIR] [--layers 24]
        [--target cpu]

On a machine without a GPU, Chrome's CPU adapter (SwiftShader) serves every runtime here: VK_ICD_FILENAMES=
/usr/lib/chromium/vk_swiftshader_icd.json (Debian's chromium ships it) makes Dawn and wgpu find it.

DIR holds `node` (a Node 20 binary), `webgpu/` (the npm package: index.js, dist/linux-x64/dawn.node) and `ort/`
(onnxruntime-web's dist: ort.webgpu.mjs, ort-wasm-simd-threaded.asyncify.mjs and .asyncify.wasm). The GPU machine has no
Node and no network: pack them here and carry them (docs/performance.md says how). Building the model needs the
onnxruntime-genai builder on PYTHONPATH (its wheel's Python files). Prints one JSON line per measurement and a
table: tok/s (median of --rounds, the prefill excluded), and whether each runtime's tokens equal `wgslc generate`'s.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_models(out, layers, precisions):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from decode_bench import QWEN05
    torch.manual_seed(0)
    hf = os.path.join(out, "hf")
    cfg = Qwen2Config(vocab_size=QWEN05["vocab"], hidden_size=896, intermediate_size=4864, num_hidden_layers=layers,
                      num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=4096, rope_theta=1e6,
                      tie_word_embeddings=True)
    Qwen2ForCausalLM(cfg).eval().save_pretrained(hf)
    models = []
    for prec in precisions:
        model = os.path.join(out, f"genai_{prec}")
        r = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", hf, "-o", model, "-p",
                            prec, "-e", "webgpu", "-c", os.path.join(out, "cache")], capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"builder {prec} failed: {r.stderr[-2000:]}")
        models.append(model)
    return models


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wgslc", required=True)
    ap.add_argument("--stack", required=True)
    ap.add_argument("--model", help="an onnxruntime-genai builder output (model.onnx, genai_config.json), or a decoder's "
                                    ".onnx file of another exporter (scripts/decode_bench.py --export-only): wgslc only")
    ap.add_argument("--precisions", default="fp32,int4", help="the builder's -p values to build (without --model)")
    ap.add_argument("--out", default="/tmp/web_decode")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--capacity", type=int, default=512)
    ap.add_argument("--chunk", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--node-timeout", type=int, default=300, help="seconds for each Node process")
    ap.add_argument("--target", default="gpu", choices=["gpu", "cpu"],
                    help="wgslc compile --target (cpu: a CPU adapter, SwiftShader through VK_ICD_FILENAMES)")
    ap.add_argument("--ort-genai", help="a directory with onnxruntime_genai/ and onnxruntime-webgpu's library")
    ap.add_argument("--no-subgroups", action="store_true",
                    help="wgslc's kernels on their plain modules (wgslc --no-subgroups, loadSession's subgroups: false)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    models = [a.model] if a.model else build_models(a.out, a.layers, a.precisions.split(","))
    vocab = vocab_size(models[0])
    prompt = np.random.default_rng(0).integers(0, min(1000, vocab), (1, a.prompt)).astype(np.int64)
    np.save(os.path.join(a.out, "prompt.npy"), prompt)
    rows = []
    for model in models:
        rows += measure(a, os.path.abspath(model), prompt)
    print("\n| model | runtime | steps a submit | tok/s (median) | load | tokens equal `wgslc generate`'s |")
    print("|---|---|---|---|---|---|")
    for x in rows:
        load = f"{x['load_ms'] / 1e3:.1f} s" if "load_ms" in x else ""
        print(f"| {x['model']} | {x['runtime']} | {x.get('steps_per_submit', '')} | {x['tok_s']:.1f} | {load} | "
              f"{x['same']} |")


def vocab_size(model):
    """The vocabulary of a builder output (its genai_config.json) or of a decoder .onnx file (its logits' last dim)."""
    if os.path.isdir(model):
        return json.load(open(os.path.join(model, "genai_config.json")))["model"]["vocab_size"]
    import onnx
    m = onnx.load(model, load_external_data=False)
    out = next(o for o in m.graph.output if "logits" in o.name)
    return out.type.tensor_type.shape.dim[-1].dim_value


def measure(a, model, prompt):
    """One model: compiled, then decoded by each runtime; returns the table's rows. A builder output runs on every
    runtime; a decoder .onnx file of another exporter on wgslc's two runtimes only."""
    builder = os.path.isdir(model)
    name = os.path.basename(model)
    onnx_file = os.path.join(model, "model.onnx") if builder else model
    root = os.path.join(a.out, "root")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    art = os.path.join(root, "art")
    r = subprocess.run([a.wgslc, "--quiet", "compile", onnx_file, "-o", art, "--kv-cache",
                        str(a.capacity), "--prefill-chunk", str(a.chunk), "--target", a.target], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{name}: compile failed: {r.stderr[-2000:]}")
    lines = []
    for k in (1, 16):
        runs, tokens = [], None
        for r in range(a.rounds + 1):  # the first round untimed: the GPU's clocks rise while it runs
            g = os.path.join(a.out, "gen")
            p = subprocess.run([a.wgslc, "--quiet"] + (["--no-subgroups"] if a.no_subgroups else []) + ["generate", art, "--input-ids", os.path.join(a.out, "prompt.npy"),
                                "--max-new-tokens", str(a.new), "--steps-per-submit", str(k), "-o", g],
                               capture_output=True, text=True)
            if p.returncode:
                sys.exit(f"{name}: generate failed: {p.stderr[-2000:]}")
            if r > 0:
                runs.append(json.loads(p.stdout.strip().splitlines()[-1])["tokens_per_s"])
            tokens = np.load(os.path.join(g, "tokens.npy")).reshape(-1)[a.prompt:].tolist()
        lines.append({"runtime": "wgslc generate (wgpu, Vulkan)" + (", no subgroups" if a.no_subgroups else ""),
                      "steps_per_submit": k,
                      "tok_s": statistics.median(runs), "runs": runs, "tokens": tokens})
        print(json.dumps({"model": name, **lines[-1]}), flush=True)
    reference = lines[0]["tokens"]

    # wgslc.js and the artifact.js it imports, in a folder whose package.json makes Node read them as ES modules.
    web = os.path.join(a.out, "wgslc_js")
    os.makedirs(web, exist_ok=True)
    for f in ("wgslc.js", "artifact.js"):
        shutil.copy(os.path.join(ROOT, "runtime", "web", f), os.path.join(web, f))
    json.dump({"type": "module"}, open(os.path.join(web, "package.json"), "w"))
    cfg = {"webgpu": os.path.join(a.stack, "webgpu"), "ort": os.path.join(a.stack, "ort"), "root": root,
           "wgslc_js": os.path.join(web, "wgslc.js"),
           "wgslc": [{"name": name, "artifact": "art", "steps_per_submit": [1, 16]}], "onnx": [],
           "prompt": prompt[0].tolist(), "new": a.new, "rounds": a.rounds, "subgroups": not a.no_subgroups}
    if builder:
        import onnx
        dec = json.load(open(os.path.join(model, "genai_config.json")))["model"]["decoder"]
        m = onnx.load(onnx_file, load_external_data=False)
        kv = next(i for i in m.graph.input if i.name.startswith("past_key_values"))
        kv_dtype = {1: "float32", 10: "float16"}[kv.type.tensor_type.elem_type]
        cfg["onnx"] = [{"name": name, "model": onnx_file, "kv_heads": dec["num_key_value_heads"],
                        "head_dim": dec["head_size"], "kv_dtype": kv_dtype}]
    # wgslc.js, then onnxruntime-web, each in a Node process of its own (a failure or a hang of one keeps the other's).
    for part in ("wgslc", "onnx") if builder else ("wgslc",):
        path = os.path.join(a.out, f"node_{part}.json")
        json.dump({**cfg, **{k: [] for k in ("wgslc", "onnx") if k != part}}, open(path, "w"))
        node = [os.path.join(a.stack, "node"), os.path.join(ROOT, "scripts", "node_decode.mjs"), path]
        lines += rows(node, a.node_timeout, f"{name}: node ({part})")
    if a.ort_genai and builder:
        env = {**os.environ, "PYTHONPATH": os.path.abspath(a.ort_genai)}
        genai = [sys.executable, os.path.join(ROOT, "scripts", "ort_genai_decode.py"), model,
                 os.path.join(a.out, "prompt.npy"), str(a.new), str(a.rounds)]
        lines += rows(genai, a.node_timeout, f"{name}: onnxruntime-genai", env)
    for x in lines:
        if x["runtime"] == "wgslc.js":
            x["runtime"] += " (subgroups)" if x.get("subgroups") else " (no subgroups)"
        x["model"] = name
        x["same"] = f"{sum(p == q for p, q in zip(x['tokens'], reference))}/{len(reference)}"
    return lines

def rows(cmd, timeout, what, env=None):
    """Runs a measuring process and returns the rows of the JSON lines it prints (each printed as it comes; lines
    with an "adapter" or an "error" are printed only); a failure or a time-out is printed with its last errors."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        out, err, code = r.stdout, r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        out, err, code = (e.stdout or b"").decode(), f"timed out after {timeout} s", "timeout"
    found = []
    for line in out.splitlines():
        if line.startswith("{"):
            x = json.loads(line)
            print(line, flush=True)
            if "adapter" not in x and "error" not in x:
                found.append(x)
    if code:
        last = [x for x in err.splitlines() if x.strip() and len(x) < 400][-3:]
        print(f"{what} failed ({code}): {' / '.join(last)}", flush=True)
    return found


if __name__ == "__main__":
    main()
