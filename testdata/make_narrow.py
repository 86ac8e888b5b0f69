#!/usr/bin/env python3
"""Generates wgslc's narrow-weight test data with the tools people shrink models with, and onnxruntime's outputs:

    .venv/bin/python testdata/make_narrow.py        # the venv of testdata/requirements.txt

- testdata/narrow/<case>: testdata models converted by onnxruntime's float16 converter
  (`convert_float_to_float16`, both `keep_io_types` settings), quantized by its `MatMulNBitsQuantizer` (4 and 8
  bits, blocks of 16 to 128, symmetric and with zero points, MatMul and Gather; QOperator and QDQ formats, the QDQ
  reference run without graph optimizations, which would rewrite its DequantizeLinear → MatMul), each with
  onnxruntime's outputs on the converted graph; and `*_weights_<f16|q8|q4>` cases: the fp32 model with its fp32
  reference, which wgslc compiles with `--weights` (meta.json) and matches within a tolerance stated per format
  below as a fraction of the reference's largest magnitude.
- testdata/ops/<case>: one MatMulNBits, GatherBlockQuantized or blocked DequantizeLinear per bit width, block size
  and zero-point form, built with onnx.helper from random codes, and onnxruntime's outputs.
- testdata/decoders/<case>: the bundled tiny decoders converted and quantized the same ways, with onnxruntime's
  greedy tokens on the converted graph (a growing cache, as scripts/make_decoders.py runs torch) from the same
  prompts; meta.json says so (`"reference": "onnxruntime"`).
- testdata/decoders/llama_dynamo20_cache_read (`make_narrow.py window`, also in `decoders`): the decoder with its first
  cache also returned as an output of its own, so its decode step copies its rows instead of writing in place.
- testdata/masks/<case>_fp16, <case>_cache_read (`make_narrow.py masks`, not by default): a position-masked decoder
  of testdata/masks converted to float16 with `keep_io_types` (its caches float32 behind Casts), and the same
  decoder with its first cache also returned as an output of its own, which no cache layout of wgslc fits (meta.json
  `"kv_cache": "refused"`).
"""

import json
import os
import shutil
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantFormat
from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer
from onnxruntime.transformers.float16 import convert_float_to_float16

ROOT = os.path.dirname(os.path.abspath(__file__))
RNG = np.random.default_rng(20261125)
# --weights cases: the tolerance, as a fraction of the fp32 reference's largest magnitude (absolute), per format.
# float16 weights round each to 11 bits; 8-bit blocks of 32 err by a scale step / 2 ≈ 0.4 % of a block's range;
# 4-bit ones by ≈ 7 % (random uniform weights, the worst case for a symmetric grid).
WEIGHTS_TOLERANCE = {"f16": 0.005, "q8": 0.03, "q4": 0.3}
NEW = 40


def run(model, inputs, exact=False):
    so = ort.SessionOptions()
    if exact:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feed = {}
    for i, x in zip(sess.get_inputs(), inputs):
        feed[i.name] = x.astype(np.float16) if i.type == "tensor(float16)" else x
    return [feed[i.name] for i in sess.get_inputs()], sess.run(None, feed)


def save(suite, name, model, inputs, meta=None, exact=False):
    d = os.path.join(ROOT, suite, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    onnx.save(model, os.path.join(d, "model.onnx"))
    inputs, outs = run(model, inputs, exact)
    for k, x in enumerate(inputs):
        np.save(os.path.join(d, f"input_{k}.npy"), x)
    for k, y in enumerate(outs):
        np.save(os.path.join(d, f"output_{k}.npy"), y)
    if meta:
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True)
            f.write("\n")
    return outs


def source(rel):
    """A testdata case's model and inputs."""
    d = os.path.join(ROOT, rel)
    ins = []
    while os.path.exists(os.path.join(d, f"input_{len(ins)}.npy")):
        ins.append(np.load(os.path.join(d, f"input_{len(ins)}.npy")))
    meta = json.load(open(os.path.join(d, "meta.json"))) if os.path.exists(os.path.join(d, "meta.json")) else {}
    return onnx.load(os.path.join(d, "model.onnx")), ins, {k: v for k, v in meta.items() if k == "dims"}


def fp16(m, keep):
    return convert_float_to_float16(m, keep_io_types=keep)


def nbits(m, bits=4, block=32, symmetric=True, gather=False, qdq=False):
    cfg = DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=symmetric, bits=bits,
                                       quant_format=QuantFormat.QDQ if qdq else QuantFormat.QOperator,
                                       op_types_to_quantize=("MatMul", "Gather") if gather else ("MatMul",))
    q = MatMulNBitsQuantizer(m, algo_config=cfg)
    q.process()
    return q.model.model


# Tolerances of the converted graphs against onnxruntime's run of the same graph: onnxruntime rounds every float16
# intermediate, wgslc computes in float32 and rounds only at Casts; quantized weights are decoded alike.
FP16 = {"rtol": 2e-2, "atol": 2e-2}
QUANT = {"rtol": 1e-3, "atol": 1e-4}


def forward_cases():
    sources = {
        "transformer": "models/transformer",
        "cnn_dynamo20": "torch/cnn_dynamo20",
        "mlp_torchscript17": "torch/mlp_torchscript17",
        "nanogpt_dynamo20": "torch/nanogpt_dynamo20",
        "nanogpt_torchscript17": "torch/nanogpt_torchscript17",
    }
    conversions = [
        ("transformer", "fp16_keep", lambda m: fp16(m, True), FP16, False),
        ("transformer", "fp16_all", lambda m: fp16(m, False), FP16, False),
        # The float16 converter appends keep_io_types' input Casts last: nodes out of topological order.
        ("cnn_dynamo20", "fp16_keep", lambda m: fp16(m, True), FP16, False),
        ("cnn_dynamo20", "fp16_all", lambda m: fp16(m, False), FP16, False),
        ("mlp_torchscript17", "fp16_keep", lambda m: fp16(m, True), FP16, False),
        ("nanogpt_dynamo20", "fp16_all", lambda m: fp16(m, False), FP16, False),
        ("transformer", "q4_b32_sym", lambda m: nbits(m, 4, 32, True), QUANT, False),
        ("transformer", "q4_b128_zp", lambda m: nbits(m, 4, 128, False), QUANT, False),
        ("transformer", "q8_b32_zp", lambda m: nbits(m, 8, 32, False), QUANT, False),
        ("transformer", "q4_b32_gather", lambda m: nbits(m, 4, 32, False, gather=True), QUANT, False),
        ("transformer", "qdq_q4_b32", lambda m: nbits(m, 4, 32, True, qdq=True), QUANT, True),
        ("nanogpt_torchscript17", "q4_b16_zp", lambda m: nbits(m, 4, 16, False), QUANT, False),
        ("mlp_torchscript17", "q4_b32_fp16", lambda m: nbits(fp16(m, True), 4, 32, True), FP16, False),
    ]
    for src, tag, convert, tol, exact in conversions:
        m, ins, meta = source(sources[src])
        save("narrow", f"{src}_{tag}", convert(m), ins, dict(meta, **tol), exact)
    for src in ("transformer", "nanogpt_torchscript17", "cnn_dynamo20"):
        m, ins, meta = source(sources[src])
        _, ref = run(m, ins)
        scale = max(float(np.abs(y).max()) for y in ref)
        for w, frac in WEIGHTS_TOLERANCE.items():
            save("narrow", f"{src}_weights_{w}", m, ins, dict(meta, weights=w, rtol=0.0, atol=frac * scale))


def wide_k_source():
    """A one-row product over K = 4864 (a Qwen2.5-0.5B down projection's), with bias and ReLU, then one over K = 64:
    the first is what the packed matrix-vector kernel sums in three staged chunks of A. The float32 graph is
    written here; its narrow forms are the quantizer's (the producer under test)."""
    rng = np.random.default_rng(7)
    k, n, m = 4864, 64, 16
    c = lambda name, a: numpy_helper.from_array(a.astype(np.float32), name)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="down"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="bias"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="out")]
    g = helper.make_graph(nodes, "wide_k", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m])],
                          initializer=[c("w1", rng.standard_normal((k, n)) * 0.02),
                                       c("b1", rng.standard_normal(n) * 0.1),
                                       c("w2", rng.standard_normal((n, m)) * 0.1)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, [rng.standard_normal((1, k)).astype(np.float32)]


def wide_k_cases():
    # q4_b128_zp: the second product's packed blob (512 bytes of codes, 64 of scales, 8 of zero points) is not a
    # multiple of the 16-byte unit a packed kernel reads; WebGPU's runtime array length rounds down, so its zero
    # points were out of bounds in Chromium (Tint clamps) and right on wgpu: the case that found it.
    for tag, convert in [("q4_b32_sym", lambda m: nbits(m, 4, 32, True)),
                         ("q8_b32_zp", lambda m: nbits(m, 8, 32, False)),
                         ("q4_b128_zp", lambda m: nbits(m, 4, 128, False))]:
        m, ins = wide_k_source()
        save("narrow", f"wide_k4864_{tag}", convert(m), ins, dict(QUANT))


# ---- op cases -------------------------------------------------------------------------------------------------


def pack(codes, bits):
    """Codes (a multiple of 8 / bits along the last axis) packed low bits first, as uint8."""
    per = 8 // bits
    c = codes.reshape(-1, per).astype(np.uint8)
    out = np.zeros(c.shape[0], np.uint8)
    for j in range(per):
        out |= c[:, j] << (j * bits)
    return out


def matmul_nbits_case(k, n, bits, block, zp=None, bias=False, fp16_io=False, rank=3, rng=None):
    rng = rng or RNG
    kb = (k + block - 1) // block
    codes = rng.integers(0, 1 << bits, size=(n, kb * block))
    b = pack(codes, bits).reshape(n, kb, block * bits // 8)
    t = np.float16 if fp16_io else np.float32
    elem = TensorProto.FLOAT16 if fp16_io else TensorProto.FLOAT
    scales = (rng.uniform(0.01, 0.05, size=(n, kb)) * rng.choice([-1, 1], size=(n, kb))).astype(t)
    inits = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(scales.reshape(-1), "scales")]
    ins = ["a", "b", "scales"]
    if zp == "packed":
        z = rng.integers(0, 1 << bits, size=(n, ((kb * bits + 7) // 8) * 8 // bits))
        inits.append(numpy_helper.from_array(pack(z, bits).reshape(n, -1), "zp"))
        ins.append("zp")
    elif zp == "float":
        inits.append(numpy_helper.from_array(rng.uniform(0, (1 << bits) - 1, size=(n, kb)).astype(t), "zp"))
        ins.append("zp")
    if bias:
        ins += ["", ""] if len(ins) == 3 else [""]
        inits.append(numpy_helper.from_array(rng.uniform(-1, 1, n).astype(t), "bias"))
        ins.append("bias")
    node = helper.make_node("MatMulNBits", ins, ["y"], domain="com.microsoft", K=k, N=n, bits=bits, block_size=block)
    shape = [2, 3, k] if rank == 3 else [1, k]
    g = helper.make_graph([node], "case", [helper.make_tensor_value_info("a", elem, shape)],
                          [helper.make_tensor_value_info("y", elem, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m, [rng.uniform(-1, 1, size=shape).astype(np.float32)]


def gather_block_quantized_case(dtype, bits, block, zp, rows=40, cols=64):
    nb = cols // block
    if dtype == "uint8":
        codes = RNG.integers(0, 1 << bits, size=(rows, cols))
        data = pack(codes, bits).reshape(rows, cols * bits // 8)
        d = numpy_helper.from_array(data, "data")
        z = numpy_helper.from_array(pack(RNG.integers(0, 1 << bits, size=(rows, nb)), bits).reshape(rows, -1), "zp")
    else:
        lo, hi = (-8, 8) if dtype == "int4" else (0, 16)
        et = TensorProto.INT4 if dtype == "int4" else TensorProto.UINT4
        d = helper.make_tensor("data", et, [rows, cols], RNG.integers(lo, hi, size=rows * cols).tolist())
        z = helper.make_tensor("zp", et, [rows, nb], RNG.integers(lo, hi, size=rows * nb).tolist())
    scales = numpy_helper.from_array(RNG.uniform(0.01, 0.1, size=(rows, nb)).astype(np.float32), "scales")
    inits = [d, scales] + ([z] if zp else [])
    ins = ["data", "ids", "scales"] + (["zp"] if zp else [])
    node = helper.make_node("GatherBlockQuantized", ins, ["y"], domain="com.microsoft", gather_axis=0,
                            quantize_axis=1, block_size=block, bits=bits)
    g = helper.make_graph([node], "case", [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    return m, [RNG.integers(0, rows, size=(2, 3)).astype(np.int64)]


def dequantize_blocked_case(dtype, axis, block, zp, reader):
    """DequantizeLinear (opset 21, blocked) of a constant weight, read by a MatMul or a Gather."""
    k, n = 64, 24
    et, lo, hi = {"int4": (TensorProto.INT4, -8, 8), "uint4": (TensorProto.UINT4, 0, 16),
                  "int8": (TensorProto.INT8, -128, 128), "uint8": (TensorProto.UINT8, 0, 256)}[dtype]
    sshape = [k, n]
    sshape[axis] = (sshape[axis] + block - 1) // block
    x = helper.make_tensor("wq", et, [k, n], RNG.integers(lo, hi, size=k * n).tolist())
    s = numpy_helper.from_array(RNG.uniform(0.01, 0.05, size=sshape).astype(np.float32), "ws")
    z = helper.make_tensor("wz", et, sshape, RNG.integers(lo, hi, size=int(np.prod(sshape))).tolist())
    inits = [x, s] + ([z] if zp else [])
    dq = helper.make_node("DequantizeLinear", ["wq", "ws"] + (["wz"] if zp else []), ["w"], axis=axis,
                          block_size=block)
    if reader == "matmul":
        nodes = [dq, helper.make_node("MatMul", ["a", "w"], ["y"])]
        inp = helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, k])
        feed = [RNG.uniform(-1, 1, size=(3, k)).astype(np.float32)]
    else:
        nodes = [dq, helper.make_node("Gather", ["w", "ids"], ["y"])]
        inp = helper.make_tensor_value_info("ids", TensorProto.INT64, [5])
        feed = [RNG.integers(0, k, size=5).astype(np.int64)]
    g = helper.make_graph(nodes, "case", [inp], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m, feed


def op_cases():
    for bits, block, zp, bias in [(4, 32, None, False), (4, 16, "packed", True), (4, 64, "packed", False),
                                  (4, 128, None, True), (4, 256, "packed", False), (8, 32, None, False),
                                  (8, 64, "packed", True), (2, 16, "packed", False), (4, 32, "float", False)]:
        # K = 80: a block size above 16 does not divide it, so the last block of each row is short.
        name = f"matmul_nbits_{bits}bit_b{block}" + (f"_zp_{zp}" if zp else "") + ("_bias" if bias else "")
        save("ops", name, *matmul_nbits_case(80, 40, bits, block, zp, bias), QUANT)
    save("ops", "matmul_nbits_one_row_k256", *matmul_nbits_case(256, 72, 4, 32, "packed", False, rank=2), QUANT)
    # One row over K longer than the packed kernel's chunk of A (2048): three chunks, the last one short.
    save("ops", "matmul_nbits_one_row_k4864", *matmul_nbits_case(4864, 40, 4, 32, "packed", False, rank=2), QUANT)
    save("ops", "matmul_nbits_one_row_8bit_k2112", *matmul_nbits_case(2112, 24, 8, 64, None, True, rank=2), QUANT)
    save("ops", "matmul_nbits_fp16", *matmul_nbits_case(64, 24, 4, 32, None, True, fp16_io=True), FP16)
    for dtype, bits, block, zp in [("uint8", 4, 16, True), ("uint8", 8, 32, False), ("int4", 4, 32, False),
                                   ("uint4", 4, 16, True)]:
        name = f"gather_block_quantized_{dtype}_{bits}bit_b{block}" + ("_zp" if zp else "")
        save("ops", name, *gather_block_quantized_case(dtype, bits, block, zp), QUANT)
    for dtype, axis, block, zp, reader in [("int4", 0, 32, False, "matmul"), ("uint4", 0, 16, True, "matmul"),
                                           ("int8", 1, 8, True, "matmul"), ("int4", 1, 16, False, "gather"),
                                           ("uint8", 0, 32, True, "gather")]:
        name = f"dequantize_{dtype}_axis{axis}_b{block}" + ("_zp" if zp else "") + f"_{reader}"
        save("ops", name, *dequantize_blocked_case(dtype, axis, block, zp, reader), QUANT, exact=True)
    # One row over 135,200 outputs (an LLM head's width, K = 32 to keep it small): the packed kernel's workgroups
    # compute 4 tiles of 32 columns each, the last workgroup's partly past the end.
    save("ops", "matmul_nbits_one_row_wide_n", *matmul_nbits_case(32, 135_200, 4, 32, None, False, rank=2,
                                                                      rng=np.random.default_rng(135_200)), QUANT)


# ---- decoders -------------------------------------------------------------------------------------------------


def greedy(model, prompt, new):
    """onnxruntime's greedy tokens from `prompt` with a growing cache (`model` a ModelProto or a path), and the
    smallest gap between the two best logits along the way."""
    src = model if isinstance(model, str) else model.SerializeToString()
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    ins = {i.name: i for i in sess.get_inputs()}
    past_names = [k for k in ins if k.startswith("past_key_values")]
    shape = ins[past_names[0]].shape
    ft = np.float16 if ins[past_names[0]].type == "tensor(float16)" else np.float32
    past = [np.zeros((1, shape[1], 0, shape[3]), ft) for _ in past_names]
    x, tokens, gap = prompt, list(prompt[0]), float("inf")
    for _ in range(new):
        p, s = past[0].shape[2], x.shape[1]
        feed = {"input_ids": x, "attention_mask": np.ones((1, p + s), np.int64),
                "position_ids": np.arange(p, p + s, dtype=np.int64)[None]}
        feed.update(zip(past_names, past))
        names = [o.name for o in sess.get_outputs()]
        r = sess.run(None, {k: v for k, v in feed.items() if k in ins})
        past = [t for n, t in zip(names, r) if n.startswith("present")]
        last = r[0][0, -1].astype(np.float64)
        top = np.sort(last)[-2:]
        gap = min(gap, float(top[1] - top[0]))
        nxt = int(np.argmax(last))
        tokens.append(nxt)
        x = np.array([[nxt]], np.int64)
    return np.array([tokens], np.int64), gap


def cache_read(m):
    """The decoder with its first cache input also returned as an output of its own (`past_copy`)."""
    past = m.graph.input[3]
    m.graph.node.append(helper.make_node("Identity", [past.name], ["past_copy"], name="past_copy"))
    m.graph.output.append(helper.make_tensor_value_info("past_copy", past.type.tensor_type.elem_type, None))
    return m


def decoder_cases(suite="decoders", only=None):
    conversions = {
        "decoders": [
            ("qwen2_dynamo20", "fp16", lambda m: fp16(m, True)),
            ("llama_torchscript17", "fp16_all", lambda m: fp16(m, False)),
            ("qwen2_dynamo20", "q4", lambda m: nbits(m, 4, 32, True)),
            ("llama_dynamo20", "q4_gather_zp", lambda m: nbits(m, 4, 16, False, gather=True)),
            ("qwen2_torchscript17", "q8_zp", lambda m: nbits(m, 8, 32, False)),
            # A shape-built mask with the first cache also an output of its own: the decode step can't write in
            # place, so it copies its rows (the window), the runtimes' other decode path.
            ("llama_dynamo20", "cache_read", cache_read),
        ],
        # A position-compared mask whose caches keep_io_types leaves float32 behind Casts; and one whose first
        # cache is also an output of its own (nothing may write it in place, and the window does not fit its mask).
        "masks": [("llama_posmask_dynamo20", "fp16", lambda m: fp16(m, True)),
                  ("llama_posmask_dynamo20", "cache_read", cache_read)],
    }[suite]
    for src, tag, convert in conversions:
        if only is not None and tag != only:
            continue
        s = os.path.join(ROOT, suite, src)
        m = convert(onnx.load(os.path.join(s, "model.onnx")))
        d = os.path.join(ROOT, suite, f"{src}_{tag}")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        onnx.save(m, os.path.join(d, "model.onnx"))
        gaps = []
        for k in range(2):
            prompt = np.load(os.path.join(s, f"prompt_{k}.npy"))
            tokens, gap = greedy(m, prompt, NEW)
            np.save(os.path.join(d, f"prompt_{k}.npy"), prompt)
            np.save(os.path.join(d, f"tokens_{k}.npy"), tokens)
            gaps.append(gap)
        meta = {"source": f"{suite}/{src}", "conversion": tag, "reference": "onnxruntime", "new_tokens": NEW,
                "min_top2_gap": min(gaps), "onnxruntime": ort.__version__}
        if tag == "cache_read" and suite == "masks":
            meta["kv_cache"] = "refused"
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"{suite}/{src}_{tag}: min top-2 gap {min(gaps):.3f}")


def main():
    parts = set(sys.argv[1:]) or {"forward", "ops", "decoders"}
    if "forward" in parts:
        forward_cases()
    if "forward" in parts or "wide" in parts:
        wide_k_cases()
    if "ops" in parts:
        op_cases()
    if "decoders" in parts:
        decoder_cases()
    if "masks" in parts:
        decoder_cases("masks")
    if "window" in parts:
        decoder_cases("decoders", only="cache_read")


if __name__ == "__main__":
    main()
