#!/usr/bin/env python3
"""A GPT-2 with the real vocabulary (50257 × 768: a 154 MB tied embedding, over WebGPU's 128 MiB binding) and two
layers, exported with torch.onnx.export(dynamo=True, opset 20), compiled under WebGPU's default limits by each
wgslc binary given, run and compared with onnxruntime, and benched. Needs torch, transformers, onnx, onnxruntime
(the GPU machine has them).

    python3 scripts/real_embedding_check.py [BIN ...]   (default: .bin/wgslc_base .bin/wgslc)
"""
import sys
import os
import subprocess

import numpy as np
import onnxruntime as ort
import torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
cfg = GPT2Config(n_layer=2, use_cache=False)  # the real vocabulary (50257) and width (768): a 154 MB tied embedding
m = GPT2LMHeadModel(cfg).eval()
class W(torch.nn.Module):
    def __init__(s, m): super().__init__(); s.m = m
    def forward(s, ids): return s.m(input_ids=ids, use_cache=False).logits
ids = torch.randint(0, 50257, (1, 8))
os.makedirs('/tmp/g2', exist_ok=True)
torch.onnx.export(W(m), (ids,), '/tmp/g2/model.onnx', dynamo=True, opset_version=20, external_data=False, input_names=['input_0'])
np.save('/tmp/g2/input_0.npy', ids.numpy())
ref = ort.InferenceSession('/tmp/g2/model.onnx', providers=['CPUExecutionProvider']).run(None, {'input_0': ids.numpy()})[0]
for b in sys.argv[1:] or ['.bin/wgslc_base', '.bin/wgslc']:
    r = subprocess.run([b, 'compile', '/tmp/g2/model.onnx', '-o', f'/tmp/g2/{os.path.basename(b)}'], capture_output=True, text=True)
    print(b, 'compile rc', r.returncode, (r.stderr or r.stdout).strip().splitlines()[-1][:300])
    if r.returncode == 0:
        subprocess.run([b, 'run', f'/tmp/g2/{os.path.basename(b)}', '--input', '/tmp/g2/input_0.npy', '-o', f'/tmp/g2/out_{os.path.basename(b)}'], check=True, capture_output=True)
        got = np.load(f'/tmp/g2/out_{os.path.basename(b)}/output_0.npy')
        print(b, 'shape', got.shape, ref.shape, 'max abs err', float(np.abs(got - ref).max()), 'max ref', float(np.abs(ref).max()))
        r = subprocess.run([b, 'bench', f'/tmp/g2/{os.path.basename(b)}', '--input', '/tmp/g2/input_0.npy', '--iterations', '50'], capture_output=True, text=True)
        print(b, r.stdout.strip())
