#!/usr/bin/env python3
"""Test data from onnxruntime's transformers optimizer: testdata/torch exports rewritten by
`onnxruntime.transformers.optimizer.optimize_model` (as users shrink a model for onnxruntime before shipping it),
which writes com.microsoft ops (SkipLayerNormalization, BiasGelu, FastGelu with `enable_gelu_approximation`). Each
case keeps the export's inputs; its outputs are onnxruntime's (CPU) on the optimized graph.

    .venv/bin/python scripts/ort_optimize.py      # needs onnxruntime, onnx, numpy, sympy, packaging

Writes testdata/torch/<export>_ortopt[_approx]/ (model.onnx, input_*.npy, output_*.npy).
"""
import glob
import os
import shutil
from collections import Counter

import numpy as np
import onnxruntime as ort
from onnxruntime.transformers.fusion_options import FusionOptions
from onnxruntime.transformers.optimizer import optimize_model

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "testdata", "torch")

# (export, model_type, heads, hidden, gelu approximation)
CASES = [
    ("nanogpt_torchscript17", "gpt2", 4, 64, False),
    ("nanogpt_torchscript17", "gpt2", 4, 64, True),
    ("bert_dynamo20", "bert", 2, 128, False),
]


def main():
    for export, model_type, heads, hidden, approx in CASES:
        src = os.path.join(ROOT, export)
        name = f"{export}_ortopt" + ("_approx" if approx else "")
        out = os.path.join(ROOT, name)
        options = FusionOptions(model_type)
        options.enable_gelu_approximation = approx
        m = optimize_model(os.path.join(src, "model.onnx"), model_type=model_type, num_heads=heads, hidden_size=hidden,
                           optimization_options=options, opt_level=0)
        ops = Counter(n.op_type for n in m.model.graph.node if n.domain == "com.microsoft")
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        m.save_model_to_file(os.path.join(out, "model.onnx"))
        sess = ort.InferenceSession(os.path.join(out, "model.onnx"), providers=["CPUExecutionProvider"])
        inputs = sorted(glob.glob(os.path.join(src, "input_*.npy")))
        feed = {i.name: np.load(f) for i, f in zip(sess.get_inputs(), inputs)}
        for f in inputs:
            shutil.copy(f, out)
        for i, y in enumerate(sess.run(None, feed)):
            np.save(os.path.join(out, f"output_{i}.npy"), y)
        print(name, dict(ops))


if __name__ == "__main__":
    main()
