#!/usr/bin/env python3
"""Generates wgslc's test models and their reference outputs.

Every case is a directory holding model.onnx, input_<i>.npy (graph-input order), output_<i>.npy (reference
outputs computed by onnxruntime) and, where a case needs its own tolerance, meta.json. The files are committed,
so CI needs neither onnx nor onnxruntime; rerun this after changing a case:

    python3 -m venv .venv && .venv/bin/pip install -r testdata/requirements.txt
    .venv/bin/python testdata/make_testdata.py

Suites: testdata/models/ (the MLP, CNN and transformer block of the end-to-end issue) and testdata/ops/ (one
op per case over broadcasting and edge shapes, in the attribute and input forms of opsets 11-22).
"""

import json
import os
import shutil
import sys

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.abspath(__file__))
RNG = np.random.default_rng(20261122)
F = TensorProto.FLOAT
I64 = TensorProto.INT64
I32 = TensorProto.INT32
B = TensorProto.BOOL


def rand(*shape, lo=-1.0, hi=1.0, rng=None):
    """Uniform float32 values from `rng` (the shared generator by default; a case with its own keeps the data of
    the cases generated after it unchanged)."""
    return (rng or RNG).uniform(lo, hi, size=shape).astype(np.float32)


# meta.json of the cases that need one: symbolic dims to bind, and "inverted_residual": "unfused" for cases the
# tests also run with `--inverted-residual unfused`.
CASE_META = {"symbolic_dims_bound": {"dims": {"batch": 3}},
             # float16 weights against the float32 reference: 2^-11 relative on each weight, over K = 96 terms.
             "residual_rmsnorm_gemv_f16": {"weights": "f16", "atol": 5e-3, "rtol": 0.0},
             # float16 weights against the float32 reference, over three products of K = 64, 48 and 40.
             "attention_projection_f16": {"weights": "f16", "atol": 5e-3, "rtol": 0.0},
             # 4- and 8-bit codes against the float32 reference, over the three products (measured 0.0046, 0.072).
             "attention_projection_q8": {"weights": "q8", "atol": 0.03, "rtol": 0.0},
             "attention_projection_q4": {"weights": "q4", "atol": 0.3, "rtol": 0.0},
             # 4- and 8-bit codes against the float32 reference (measured 0.051 and 0.0038).
             "gemv_q4_two_word_loads": {"weights": "q4", "atol": 0.2, "rtol": 0.0},
             "gemv_q8_two_word_loads": {"weights": "q8", "atol": 0.03, "rtol": 0.0}}
# Cases whose reference is onnxruntime without graph optimizations: with them it rewrites QuantizeLinear →
# DequantizeLinear → MatMul into an integer MatMul that requantizes, and int4 DequantizeLinear → MatMul into
# MatMulNBits, neither of which is the graph's float arithmetic (ONNX's reference evaluator agrees with the
# unoptimized run).
EXACT = {"qdq_matmul_per_axis", "dequantize_int4_blocked_matmul"}


def save_case(suite, name, model, inputs, meta=None, consts=()):
    """Checks the model, runs onnxruntime on `inputs` and writes the case directory. Inputs named in `consts`
    are bound at compile time (`--const NAME=const_NAME.npy`, listed in meta.json) rather than written as run-time
    inputs."""
    # Outputs declared without a shape (ONNX allows it; the checker does not) are checked by onnxruntime.
    if all(o.type.tensor_type.HasField("shape") for o in model.graph.output):
        onnx.checker.check_model(model, full_check=True)
    d = os.path.join(ROOT, suite, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    onnx.save(model, os.path.join(d, "model.onnx"))
    so = ort.SessionOptions()
    if name in EXACT:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feed = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
    outs = sess.run(None, feed)
    runtime = [(i, x) for i, x in zip(sess.get_inputs(), inputs) if i.name not in consts]
    for k, (_, x) in enumerate(runtime):
        np.save(os.path.join(d, f"input_{k}.npy"), x)
    for i, x in zip(sess.get_inputs(), inputs):
        if i.name in consts:
            np.save(os.path.join(d, f"const_{i.name}.npy"), x)
    if consts:
        meta = dict(meta or {}, const={c: f"const_{c}.npy" for c in consts})
    for i, y in enumerate(outs):
        np.save(os.path.join(d, f"output_{i}.npy"), y)
    if meta:
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True)
            f.write("\n")


def model(nodes, inputs, outputs, inits=(), opset=17, name="case"):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="wgslc-testdata")
    m.ir_version = 8 if opset < 19 else 10
    return m


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


# ---- per-op cases -------------------------------------------------------------------------------------------


def unary_case(op, x, opset=17, out_type=F, **attrs):
    elem = B if x.dtype == np.bool_ else F
    return model(
        [helper.make_node(op, ["x"], ["y"], **attrs)],
        [vi("x", elem, list(x.shape))],
        [vi("y", out_type, None)],
        opset=opset,
    ), [x]


BOOL_OPS = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or"}


def binary_case(op, a, b, opset=17):
    ta = {np.float32: F, np.int64: I64, np.bool_: B}[a.dtype.type]
    tb = {np.float32: F, np.int64: I64, np.bool_: B}[b.dtype.type]
    return model(
        [helper.make_node(op, ["a", "b"], ["y"])],
        [vi("a", ta, list(a.shape)), vi("b", tb, list(b.shape))],
        [vi("y", B if op in BOOL_OPS else ta, None)],
        opset=opset,
    ), [a, b]


def sdpa_case(rng, qs, ks, vs, mask, scale=None):
    """Attention as PyTorch's SDPA exports it: Q·Kᵀ, an optional scale, an additive mask, Softmax, Where(IsNaN(p), 0,
    p), ·V; inputs q, k, v drawn from `rng`, then the mask."""
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), helper.make_node("MatMul", ["q", "kt"], ["s"])]
    inits, scores = [], ["s"]
    if scale is not None:
        nodes.append(helper.make_node("Mul", ["s", "scale"], ["s2"]))
        inits.append(init("scale", np.float32(scale)))
        scores.append("s2")
    masked = f"s{len(scores) + 1}"
    nodes += [helper.make_node("Add", [scores[-1], "mask"], [masked]),
              helper.make_node("Softmax", [masked], ["p"], axis=-1),
              helper.make_node("IsNaN", ["p"], ["nan"]),
              helper.make_node("Where", ["nan", "zero", "p"], ["p2"]),
              helper.make_node("MatMul", ["p2", "v"], ["y"])]
    inputs = [vi("q", F, list(qs)), vi("k", F, list(ks)), vi("v", F, list(vs)), vi("mask", F, list(mask.shape))]
    m = model(nodes, inputs, [vi("y", F, None)], inits + [init("zero", np.float32(0.0))])
    return m, [rng.standard_normal(sh).astype(np.float32) for sh in [qs, ks, vs]] + [mask]


def rms_chain():
    """RMSNorm of x as exporters emit it, into "nw": Pow 2 → ReduceMean (last axis) → Add eps → Sqrt → Reciprocal →
    Mul x → Mul weight w (constants two, axes, eps, w)."""
    return [helper.make_node("Pow", ["x", "two"], ["p"]),
            helper.make_node("ReduceMean", ["p", "axes"], ["m"], keepdims=1),
            helper.make_node("Add", ["m", "eps"], ["a"]),
            helper.make_node("Sqrt", ["a"], ["s"]),
            helper.make_node("Reciprocal", ["s"], ["r"]),
            helper.make_node("Mul", ["x", "r"], ["n"]),
            helper.make_node("Mul", ["w", "n"], ["nw"])]


def ops():
    cases = {}
    x = rand(2, 3, 5, lo=-3, hi=3)
    pos = rand(2, 3, 5, lo=0.1, hi=4)
    for op in ["Neg", "Abs", "Exp", "Erf", "Tanh", "Sigmoid", "Relu", "Floor", "Ceil"]:
        cases[op.lower()] = unary_case(op, x)
    cases["sqrt"] = unary_case("Sqrt", pos)
    cases["log"] = unary_case("Log", pos)
    cases["reciprocal"] = unary_case("Reciprocal", pos)
    cases["tanh_large"] = unary_case("Tanh", np.array([-100, -20, -1, 0, 1, 20, 100], np.float32))
    cases["leakyrelu"] = unary_case("LeakyRelu", x, alpha=0.1)
    cases["hardsigmoid"] = unary_case("HardSigmoid", x, alpha=0.3, beta=0.4)
    cases["hardswish"] = unary_case("HardSwish", x, opset=14)
    cases["gelu"] = unary_case("Gelu", x, opset=20)
    cases["gelu_tanh"] = unary_case("Gelu", x, opset=20, approximate="tanh")
    cases["not"] = unary_case("Not", RNG.random((3, 4)) > 0.5, out_type=B)
    cases["isnan"] = unary_case("IsNaN", np.array([1.0, np.nan, -np.inf, np.inf, 0.0], np.float32), out_type=B)
    cases["identity"] = unary_case("Identity", x)
    cases["dropout_inference"] = unary_case("Dropout", x, opset=13)

    cases["add_broadcast"] = binary_case("Add", rand(2, 3, 4), rand(4))
    cases["sub_broadcast_both"] = binary_case("Sub", rand(2, 1, 4), rand(3, 1))
    cases["mul_scalar"] = binary_case("Mul", rand(1), rand(2, 3))
    cases["div_broadcast"] = binary_case("Div", rand(2, 3), rand(2, 1, lo=0.5, hi=2))
    cases["pow_general"] = binary_case("Pow", rand(3, 4, lo=0.1, hi=3), rand(3, 4, lo=-2, hi=2))
    cases["pow_negative_base_int_exponent"] = binary_case("Pow", rand(3, 4, lo=-3, hi=3), np.array([3.0], np.float32))
    cases["add_int64"] = binary_case("Add", RNG.integers(-50, 50, (3, 4)), RNG.integers(-50, 50, (4,)))
    cases["mul_int64"] = binary_case("Mul", RNG.integers(-50, 50, (3, 4)), RNG.integers(-50, 50, (3, 1)))
    cases["div_int64_truncates"] = binary_case("Div", RNG.integers(-50, 50, (6,)), np.array([7, -7, 3, 5, -2, 9], np.int64))
    a, b = rand(3, 4), rand(4)
    b[1] = a[0, 1]
    for op in ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]:
        cases[op.lower()] = binary_case(op, a, b)
    cases["equal_int64"] = binary_case("Equal", RNG.integers(0, 3, (4, 3)), RNG.integers(0, 3, (3,)))
    cases["and"] = binary_case("And", RNG.random((3, 4)) > 0.5, RNG.random((4,)) > 0.5)
    cases["or"] = binary_case("Or", RNG.random((3, 4)) > 0.5, RNG.random((3, 1)) > 0.5)
    cases["max2"] = binary_case("Max", rand(3, 4), rand(4))
    cases["min2"] = binary_case("Min", rand(3, 4), rand(3, 1))

    cond = RNG.random((3, 1)) > 0.5
    cases["where_broadcast"] = (
        model(
            [helper.make_node("Where", ["c", "a", "b"], ["y"])],
            [vi("c", B, [3, 1]), vi("a", F, [3, 4]), vi("b", F, [4])],
            [vi("y", F, None)],
        ),
        [cond, rand(3, 4), rand(4)],
    )
    cases["clip_inputs"] = (
        model(
            [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
            [vi("x", F, [2, 3, 5])],
            [vi("y", F, None)],
            [init("lo", np.float32(-0.5)), init("hi", np.float32(0.7))],
            opset=13,
        ),
        [x],
    )
    cases["clip_max_only"] = (
        model([helper.make_node("Clip", ["x", "", "hi"], ["y"])], [vi("x", F, [2, 3, 5])], [vi("y", F, None)],
              [init("hi", np.float32(0.7))], opset=13),
        [x],
    )
    cases["clip_opset6_attrs"] = unary_case("Clip", x, opset=6, min=-1.0, max=1.5)
    for name, src, dst, data in [
        ("cast_f32_i64", F, I64, rand(3, 4, lo=-9, hi=9)),
        ("cast_i64_f32", I64, F, RNG.integers(-100, 100, (3, 4))),
        ("cast_bool_f32", B, F, RNG.random((3, 4)) > 0.5),
        ("cast_f32_bool", F, B, np.array([0.0, 1.0, -2.0, 0.0, 0.5], np.float32)),
    ]:
        cases[name] = (
            model([helper.make_node("Cast", ["x"], ["y"], to=dst)], [vi("x", src, list(data.shape))], [vi("y", dst, None)]),
            [data],
        )

    # ---- contractions ----
    def matmul(sa, sb, name):
        cases[name] = (
            model([helper.make_node("MatMul", ["a", "b"], ["y"])], [vi("a", F, sa), vi("b", F, sb)], [vi("y", F, None)]),
            [rand(*sa), rand(*sb)],
        )

    matmul([3, 4], [4, 5], "matmul_2d")
    matmul([2, 3, 4], [4, 5], "matmul_batched")
    matmul([2, 1, 3, 4], [3, 4, 6], "matmul_broadcast_batch")
    matmul([4], [4, 5], "matmul_vector_matrix")
    matmul([3, 4], [4], "matmul_matrix_vector")
    matmul([70, 130], [130, 90], "matmul_tile_edges")
    for name, ta, tb, alpha, beta, cshape in [
        ("gemm_plain", 0, 0, 1.0, 1.0, [5]),
        ("gemm_trans_a", 1, 0, 1.0, 1.0, [3, 5]),
        ("gemm_trans_b_alpha_beta", 0, 1, 0.5, 2.0, [3, 1]),
        ("gemm_no_c", 1, 1, 1.5, 1.0, None),
    ]:
        sa = [4, 3] if ta else [3, 4]
        sb = [5, 4] if tb else [4, 5]
        ins = ["a", "b"] + (["c"] if cshape else [])
        inits = [init("b", rand(*sb))] + ([init("c", rand(*cshape))] if cshape else [])
        cases[name] = (
            model([helper.make_node("Gemm", ins, ["y"], alpha=alpha, beta=beta, transA=ta, transB=tb)],
                  [vi("a", F, sa)], [vi("y", F, None)], inits),
            [rand(*sa)],
        )

    # ---- normalizations and reductions ----
    s = rand(2, 3, 7, lo=-4, hi=4)
    cases["softmax_last"] = unary_case("Softmax", s, opset=13, axis=-1)
    cases["softmax_middle_axis"] = unary_case("Softmax", s, opset=13, axis=1)
    cases["softmax_legacy_opset11"] = unary_case("Softmax", s, opset=11, axis=1)
    cases["softmax_long_row"] = unary_case("Softmax", rand(3, 300, lo=-10, hi=10), opset=13)
    for name, axis, scale_shape, bias in [("layernorm_last", -1, [7], True), ("layernorm_two_axes", -2, [3, 7], True),
                                          ("layernorm_no_bias", -1, [7], False)]:
        ins = ["x", "scale"] + (["bias"] if bias else [])
        inits = [init("scale", rand(*scale_shape, lo=0.5, hi=1.5))] + ([init("bias", rand(*scale_shape))] if bias else [])
        cases[name] = (
            model([helper.make_node("LayerNormalization", ins, ["y"], axis=axis, epsilon=1e-5)],
                  [vi("x", F, [2, 3, 7])], [vi("y", F, None)], inits),
            [s],
        )
    r = rand(2, 3, 4, 5)
    cases["reducemean_attr_keepdims"] = unary_case("ReduceMean", r, opset=13, axes=[1, 3], keepdims=1)
    cases["reducemax_attr_nokeep"] = unary_case("ReduceMax", r, opset=13, axes=[-1], keepdims=0)
    cases["reducemean_all"] = unary_case("ReduceMean", r, opset=13, keepdims=0)
    for name, op, opset, axes, keep in [("reducesum_input_axes", "ReduceSum", 13, [0, 2], 1),
                                        ("reducemean_input_axes_opset18", "ReduceMean", 18, [-1], 0),
                                        ("reducemax_input_axes_opset18", "ReduceMax", 18, [1], 1)]:
        cases[name] = (
            model([helper.make_node(op, ["x", "axes"], ["y"], keepdims=keep)], [vi("x", F, [2, 3, 4, 5])],
                  [vi("y", F, None)], [init("axes", np.array(axes, np.int64))], opset=opset),
            [r],
        )

    # Epilogues that read their anchor's own input: one binding serves both reads (PP-OCRv6's recognizer: a
    # depthwise 1x7 Conv + BatchNorm + swish + a residual Add of the Conv's input), and Softmax(x) + x.
    c = 16
    cases["conv_depthwise_swish_residual"] = (
        model([helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[0, 1, 0, 1]),
               helper.make_node("Sigmoid", ["c0"], ["s0"]), helper.make_node("Mul", ["c0", "s0"], ["sw"]),
               helper.make_node("Conv", ["sw", "wd", "bd"], ["cd"], group=c, pads=[0, 3, 0, 3]),
               helper.make_node("BatchNormalization", ["cd", "bs", "bb", "bm", "bv"], ["bn"]),
               helper.make_node("Sigmoid", ["bn"], ["s1"]), helper.make_node("Mul", ["bn", "s1"], ["sw1"]),
               helper.make_node("Add", ["sw1", "sw"], ["res"]),
               helper.make_node("Conv", ["res", "w2"], ["y"])],
              [vi("x", F, [1, c, 8, 40])], [vi("y", F, None)],
              [init("w0", rand(c, c, 1, 3) * 0.5), init("wd", rand(c, 1, 1, 7)), init("bd", rand(c)),
               init("bs", rand(c, lo=0.5, hi=1.5)), init("bb", rand(c)), init("bm", rand(c)),
               init("bv", rand(c, lo=0.5, hi=2)), init("w2", rand(c, c, 1, 1) * 0.5)]),
        [rand(1, c, 8, 40)],
    )
    cases["softmax_residual"] = (
        model([helper.make_node("Softmax", ["x"], ["s"], axis=-1), helper.make_node("Add", ["s", "x"], ["y"])],
              [vi("x", F, [4, 33])], [vi("y", F, None)]),
        [rand(4, 33)],
    )

    # ---- quantization: the QDQ pattern of quantized exports, int8 weights per output channel ----
    wq = RNG.integers(-127, 128, (16, 8)).astype(np.int8)
    cases["qdq_matmul_per_axis"] = (
        model([helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
               helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
               helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=1),
               helper.make_node("MatMul", ["xd", "wd"], ["y"])],
              [vi("x", F, [4, 16])], [vi("y", F, None)],
              [init("xs", np.array(0.02, np.float32)), init("xz", np.array(128, np.uint8)), init("wq", wq),
               init("ws", rand(8, lo=0.001, hi=0.01)), init("wz", np.zeros(8, np.int8))], opset=13),
        [rand(4, 16, lo=-3, hi=3)],
    )
    # ---- narrow types: 8-bit and 16-bit floats round trips, 4-bit weights dequantized in blocks ----
    # (saturating float8 casts only: onnxruntime 1.31's non-saturating ones differ from the ONNX spec on overflow,
    # e.g. -485.7 -> -448 rather than NaN in e4m3fn; the node suite's no_saturate cases hold the spec's values.)
    edge = np.array([0.0, -0.0, 1e-7, -1e-7, 0.4789, 449.0, 464.0, 465.0, -1000.0, 57344.0, 61440.0, 65520.0,
                     3.0e38, np.inf, -np.inf, 1.00390625, 1.01171875, 6e-8, 2.5, -0.75], np.float32)
    xr = np.concatenate([edge, rand(4 * 37 - edge.size, lo=-600, hi=600)]).reshape(4, 37)

    def round_trip(to, **attrs):
        return [helper.make_node("Cast", ["x"], [f"n{to}"], to=to, **attrs),
                helper.make_node("Cast", [f"n{to}"], [f"y{to}"], to=F)]

    kinds = [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2, TensorProto.BFLOAT16, TensorProto.FLOAT16]
    cases["cast_narrow_floats"] = (
        model(round_trip(kinds[0]) + round_trip(kinds[1]) + round_trip(kinds[2]) + round_trip(kinds[3]),
              [vi("x", F, [4, 37])], [vi(f"y{k}", F, None) for k in kinds], opset=21),
        [xr],
    )
    D = TensorProto.DOUBLE
    cases["float64_computed_in_f32"] = (
        model([helper.make_node("Mul", ["x", "w"], ["m"]), helper.make_node("Sigmoid", ["m"], ["s"]),
               helper.make_node("ReduceSum", ["s"], ["y"], keepdims=0)],
              [vi("x", D, [3, 5])], [vi("y", D, None)], [init("w", rand(5).astype(np.float64))], opset=13),
        [rand(3, 5, lo=-4, hi=4).astype(np.float64)],
    )
    k4, n4, blk = 32, 8, 16
    w4 = RNG.integers(-8, 8, (k4, n4))
    z4 = RNG.integers(-2, 3, (k4 // blk, n4))
    cases["dequantize_int4_blocked_matmul"] = (
        model([helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0, block_size=blk),
               helper.make_node("MatMul", ["x", "wd"], ["y"])],
              [vi("x", F, [3, k4])], [vi("y", F, None)],
              [numpy_helper.from_array(w4.astype(ml_dtypes.int4), "w"),
               init("ws", rand(k4 // blk, n4, lo=0.01, hi=0.1)),
               helper.make_tensor("wz", TensorProto.INT4, [k4 // blk, n4], z4.ravel().tolist())], opset=21),
        [rand(3, k4)],
    )
    cases["quantize_float8_e4m3fn"] = (
        model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
               helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])],
              [vi("x", F, [5, 9])], [vi("y", F, None)],
              [init("s", np.array(0.05, np.float32)),
               helper.make_tensor("z", TensorProto.FLOAT8E4M3FN, [], [0.0])], opset=19),
        [rand(5, 9, lo=-40, hi=40)],
    )
    # ---- 3-D pooling (video and volumetric models), as two separable 2-D pools ----
    cases["pool3d_max_avg"] = (
        model([helper.make_node("MaxPool", ["x"], ["m"], kernel_shape=[3, 3, 2], strides=[2, 1, 2], pads=[1, 1, 0, 1, 0, 1]),
               helper.make_node("AveragePool", ["m"], ["y"], kernel_shape=[2, 3, 2], strides=[1, 2, 1],
                                pads=[0, 1, 1, 1, 0, 0], ceil_mode=1, count_include_pad=0)],
              [vi("x", F, [1, 3, 7, 8, 9])], [vi("y", F, None)], opset=19),
        [rand(1, 3, 7, 8, 9)],
    )
    # ---- Loop with a constant trip count and Scan, unrolled at import ----
    sb = helper.make_graph(
        [helper.make_node("MatMul", ["h", "w"], ["hw"]), helper.make_node("Add", ["hw", "xt"], ["a"]),
         helper.make_node("Tanh", ["a"], ["h2"]), helper.make_node("Identity", ["h2"], ["y"])],
        "scan_body", [vi("h", F, [1, 6]), vi("xt", F, [1, 6])], [vi("h2", F, [1, 6]), vi("y", F, [1, 6])],
        initializer=[init("w", rand(6, 6) * 0.5)])
    cases["scan_reverse_recurrence"] = (
        model([helper.make_node("Scan", ["h0", "x"], ["hT", "ys"], body=sb, num_scan_inputs=1,
                                scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[2])],
              [vi("h0", F, [1, 6]), vi("x", F, [1, 5, 6])], [vi("hT", F, None), vi("ys", F, None)], opset=16),
        [rand(1, 6), rand(1, 5, 6)],
    )
    lb = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F), helper.make_node("Mul", ["acc", "fi"], ["mm"]),
         helper.make_node("Add", ["mm", "x"], ["acc2"]), helper.make_node("Identity", ["cond"], ["cond2"]),
         helper.make_node("ReduceSum", ["acc2"], ["s"], keepdims=0)],
        "loop_body", [vi("i", I64, []), vi("cond", B, []), vi("acc", F, [2, 3])],
        [vi("cond2", B, []), vi("acc2", F, [2, 3]), vi("s", F, [])])
    cases["loop_constant_trip_count"] = (
        model([helper.make_node("Loop", ["m", "", "a0"], ["aT", "sums"], body=lb)],
              [vi("a0", F, [2, 3]), vi("x", F, [2, 3])], [vi("aT", F, None), vi("sums", F, None)],
              [init("m", np.array(4, np.int64))], opset=16),
        [rand(2, 3), rand(2, 3)],
    )
    # The QOperator form of quantized exports: QLinearConv (per-channel weight scales, int32 bias), then
    # QLinearMatMul over the flattened result; and MatMulInteger (a scalar zero point for A, onnxruntime's limit,
    # per column for B).
    U8 = TensorProto.UINT8
    wc = RNG.integers(-60, 60, (4, 3, 3, 3)).astype(np.int8)
    wm = RNG.integers(0, 255, (4 * 5 * 5, 6)).astype(np.uint8)
    cases["qlinear_conv_matmul"] = (
        model([helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["c"],
                                kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
               helper.make_node("Reshape", ["c", "flat"], ["cf"]),
               helper.make_node("QLinearMatMul", ["cf", "ys", "yz", "wm", "ms", "mz", "os", "oz"], ["y"])],
              [vi("x", U8, [1, 3, 10, 9])], [vi("y", U8, None)],
              [init("xs", np.array(0.02, np.float32)), init("xz", np.array(120, np.uint8)), init("w", wc),
               init("ws", rand(4, lo=0.002, hi=0.01)), init("wz", np.zeros(4, np.int8)),
               init("ys", np.array(0.05, np.float32)), init("yz", np.array(100, np.uint8)),
               init("b", RNG.integers(-500, 500, 4).astype(np.int32)), init("flat", np.array([1, -1], np.int64)),
               init("wm", wm), init("ms", np.array(0.004, np.float32)), init("mz", np.array(128, np.uint8)),
               init("os", np.array(0.3, np.float32)), init("oz", np.array(90, np.uint8))], opset=13),
        [RNG.integers(0, 255, (1, 3, 10, 9)).astype(np.uint8)],
    )
    cases["matmul_integer_zero_points"] = (
        model([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])],
              [vi("a", U8, [5, 7]), vi("b", U8, [7, 3])], [vi("y", TensorProto.INT32, None)],
              [init("az", np.array(131, np.uint8)), init("bz", RNG.integers(0, 255, 3).astype(np.uint8))],
              opset=13),
        [RNG.integers(0, 255, (5, 7)).astype(np.uint8), RNG.integers(0, 255, (7, 3)).astype(np.uint8)],
    )
    cases["dynamic_quantize"] = (
        model([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], [vi("x", F, [3, 7])],
              [vi("y", TensorProto.UINT8, None), vi("s", F, None), vi("z", TensorProto.UINT8, None)], opset=13),
        [rand(3, 7, lo=-2, hi=5)],
    )

    # ---- Einsum ----
    def einsum(name, eq, *shapes):
        names = [f"x{i}" for i in range(len(shapes))]
        cases[name] = (model([helper.make_node("Einsum", names, ["y"], equation=eq)],
                             [vi(n, F, list(s)) for n, s in zip(names, shapes)], [vi("y", F, None)], opset=12),
                       [rand(*s) for s in shapes])

    einsum("einsum_attention_scores", "bhqd,bhkd->bhqk", (2, 3, 5, 8), (2, 3, 7, 8))
    einsum("einsum_rotary_outer", "i,j->ij", (6,), (4,))
    einsum("einsum_ellipsis_broadcast", "...ij,jk->...ik", (2, 1, 3, 4), (4, 5))
    einsum("einsum_three_operands", "ab,bc,cd->ad", (3, 4), (4, 5), (5, 2))
    einsum("einsum_diagonal_trace_implicit", "iij,jk", (4, 4, 3), (3, 2))
    einsum("einsum_sum_all", "ijk->", (2, 3, 4))

    # ---- recurrences (one dispatch per direction and batch element walks the steps) ----
    def rnn_case(name, op, t, b, i, h, dirs=1, bias=True, lens=None, state=False, peep=False, outs=("y", "yh"),
                 batch_major=False, **attrs):
        g = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
        inits = [init("w", rand(dirs, g * h, i) * 0.5), init("r", rand(dirs, g * h, h) * 0.5)]
        ins = ["x", "w", "r", "b" if bias else "", "lens" if lens is not None else ""]
        if bias:
            inits.append(init("b", rand(dirs, 2 * g * h) * 0.5))
        if lens is not None:
            inits.append(init("lens", np.array(lens, np.int32)))
        inputs = [vi("x", F, [b, t, i] if batch_major else [t, b, i])]
        feeds = [rand(b, t, i) if batch_major else rand(t, b, i)]
        if state:
            ins.append("h0")
            shape = [b, dirs, h] if batch_major else [dirs, b, h]
            inputs.append(vi("h0", F, shape))
            feeds.append(rand(*shape))
            if op == "LSTM":
                ins.append("c0")
                inputs.append(vi("c0", F, shape))
                feeds.append(rand(*shape))
        if peep:
            ins += [""] * (7 - len(ins)) + ["p"]
            inits.append(init("p", rand(dirs, 3 * h)))
        while ins and ins[-1] == "":
            ins.pop()
        if dirs == 2:
            attrs["direction"] = "bidirectional"
        node = helper.make_node(op, ins, list(outs), hidden_size=h, layout=int(batch_major), **attrs)
        cases[name] = (model([node], inputs, [vi(o, F, None) for o in outs if o], inits, opset=14), feeds)

    rnn_case("lstm_bidirectional_lens_state_peepholes", "LSTM", 6, 3, 5, 7, dirs=2, lens=[6, 2, 4], state=True,
             peep=True, outs=("y", "yh", "yc"))
    # (Batch-major layouts are the node suite's *_batchwise cases: onnxruntime runs only layout 0.)
    rnn_case("lstm_reverse_state", "LSTM", 5, 2, 4, 6, state=True, direction="reverse", outs=("y", "yh", "yc"))
    # A voice-activity detector's state update: only Y_h and Y_c are read, 128 units.
    rnn_case("lstm_state_only_128", "LSTM", 1, 1, 64, 128, state=True, outs=("", "yh", "yc"))
    # An OCR recognizer's bidirectional 512-wide sequence head (two units per thread).
    rnn_case("lstm_bidirectional_512", "LSTM", 8, 1, 48, 512, dirs=2, outs=("y",))
    rnn_case("lstm_clip_input_forget", "LSTM", 4, 2, 3, 5, clip=0.5, input_forget=1, outs=("y", "yh", "yc"))
    # PyTorch's GRU (linear_before_reset), and ONNX's default one with clip and custom activations.
    rnn_case("gru_linear_before_reset_bidirectional", "GRU", 5, 2, 4, 6, dirs=2, state=True, linear_before_reset=1,
             lens=[5, 3])
    rnn_case("gru_reverse_clip_activations", "GRU", 4, 3, 3, 5, direction="reverse", clip=1.5,
             activations=["HardSigmoid", "LeakyRelu"], activation_alpha=[0.3, 0.05], activation_beta=[0.4])
    rnn_case("rnn_relu_no_bias", "RNN", 6, 2, 3, 4, bias=False, activations=["Relu"], state=True)

    # ---- convolution and pooling ----
    def conv(name, xs, ws, bias=True, **attrs):
        ins = ["x", "w"] + (["b"] if bias else [])
        inits = [init("w", rand(*ws))] + ([init("b", rand(ws[0]))] if bias else [])
        cases[name] = (model([helper.make_node("Conv", ins, ["y"], **attrs)], [vi("x", F, xs)], [vi("y", F, None)], inits),
                       [rand(*xs)])

    conv("conv_3x3_pad1", [2, 3, 9, 9], [4, 3, 3, 3], pads=[1, 1, 1, 1])
    conv("conv_stride2_dilation2", [1, 2, 11, 10], [3, 2, 3, 3], strides=[2, 2], dilations=[2, 2], pads=[1, 0, 2, 1])
    conv("conv_groups", [1, 4, 6, 6], [6, 2, 3, 3], group=2)
    conv("conv_depthwise_no_bias", [1, 3, 7, 7], [3, 1, 3, 3], bias=False, group=3, pads=[1, 1, 1, 1])
    conv("conv_same_upper", [1, 2, 7, 8], [2, 2, 4, 4], auto_pad="SAME_UPPER", strides=[2, 2])
    conv("conv_1d", [2, 3, 12], [5, 3, 3], strides=[2], pads=[1, 1])

    def convt(name, xs, ws, bias=True, w_input=False, **attrs):
        ins = ["x", "w"] + (["b"] if bias else [])
        inputs, feeds = [vi("x", F, xs)], [rand(*xs)]
        inits = [init("b", rand(ws[1] * attrs.get("group", 1)))] if bias else []
        if w_input:
            inputs.append(vi("w", F, ws))
            feeds.append(rand(*ws))
        else:
            inits.append(init("w", rand(*ws)))
        cases[name] = (model([helper.make_node("ConvTranspose", ins, ["y"], **attrs)], inputs, [vi("y", F, None)], inits),
                       feeds)

    # The 2x2, stride-2 upsampling of U-Nets and OCR detectors (no overlap: a 1x1 Conv and a rearrangement).
    convt("convtranspose_2x2_stride2", [1, 8, 5, 6], [8, 4, 2, 2], strides=[2, 2])
    convt("convtranspose_4_stride4_1d", [2, 3, 6], [3, 2, 4], strides=[4])
    # torch's ConvTranspose2d(k=3, s=2, p=1, output_padding=1), groups with dilation and uneven pads, a 1-D one
    # whose pads crop, and weights that are a run-time input.
    convt("convtranspose_3x3_stride2_outpad", [1, 3, 5, 5], [3, 2, 3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
          output_padding=[1, 1])
    convt("convtranspose_groups_dilation", [2, 4, 4, 5], [4, 3, 3, 2], group=2, dilations=[2, 1], strides=[1, 3],
          pads=[0, 1, 2, 0])
    convt("convtranspose_1d_crop", [2, 3, 7], [3, 5, 4], bias=False, strides=[3], pads=[4, 2])
    convt("convtranspose_weight_input", [1, 2, 4, 4], [2, 3, 3, 3], w_input=True, strides=[2, 2], pads=[1, 1, 1, 1])
    p = rand(1, 2, 9, 9)
    cases["maxpool_2x2"] = unary_case("MaxPool", p, kernel_shape=[2, 2], strides=[2, 2])
    cases["maxpool_3x3_pad_ceil"] = unary_case("MaxPool", p, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    cases["averagepool_exclude_pad"] = unary_case("AveragePool", p, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cases["averagepool_include_pad"] = unary_case("AveragePool", p, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                                  count_include_pad=1)
    cases["globalaveragepool"] = unary_case("GlobalAveragePool", p)
    cases["batchnorm"] = (
        model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)],
              [vi("x", F, [2, 3, 4, 4])], [vi("y", F, None)],
              [init("s", rand(3)), init("b", rand(3)), init("m", rand(3)), init("v", rand(3, lo=0.5, hi=2))], opset=15),
        [rand(2, 3, 4, 4)],
    )

    # ---- layout ----
    t = rand(2, 3, 4)

    def with_const(name, op, const_inputs, xs=(2, 3, 4), opset=17, data=None, n_out=1, **attrs):
        names = ["x"] + [n for n, _ in const_inputs]
        outs = ["y"] if n_out == 1 else [f"y{i}" for i in range(n_out)]
        cases[name] = (
            model([helper.make_node(op, names, outs, **attrs)], [vi("x", F, list(xs))],
                  [vi(o, F, None) for o in outs], [init(n, np.array(v, np.int64)) for n, v in const_inputs if n], opset=opset),
            [rand(*xs) if data is None else data],
        )

    with_const("reshape_minus1_zero", "Reshape", [("shape", [0, -1])])
    with_const("flatten_axis2", "Flatten", [], axis=2)
    with_const("transpose_021", "Transpose", [], perm=[0, 2, 1])
    with_const("transpose_default", "Transpose", [])
    with_const("transpose_4d", "Transpose", [], xs=(2, 3, 4, 5), perm=[0, 2, 1, 3])
    with_const("unsqueeze_input_axes", "Unsqueeze", [("axes", [0, -1])])
    with_const("unsqueeze_attr_opset11", "Unsqueeze", [], opset=11, axes=[1])
    with_const("squeeze_input_axes", "Squeeze", [("axes", [1])], xs=(2, 1, 4))
    with_const("squeeze_all", "Squeeze", [], xs=(1, 3, 1, 2))
    with_const("expand", "Expand", [("shape", [2, 3, 1, 4])], xs=(3, 1, 1))
    with_const("slice_basic", "Slice", [("starts", [1, 0]), ("ends", [3, -1]), ("axes", [1, 2])], xs=(2, 4, 5))
    with_const("slice_negative_steps", "Slice", [("starts", [-1, 4]), ("ends", [-100, 0]), ("axes", [1, 2]), ("steps", [-1, -2])],
               xs=(2, 4, 5))
    with_const("slice_int64_max_end", "Slice", [("starts", [1]), ("ends", [9223372036854775807]), ("axes", [-1])], xs=(2, 4, 5))
    with_const("slice_opset9_attrs", "Slice", [], opset=9, xs=(2, 4, 5), starts=[0, 1], ends=[1, 4], axes=[0, 2])
    with_const("split_input_sizes", "Split", [("split", [1, 3])], xs=(2, 4, 3), n_out=2, axis=1, opset=13)
    with_const("split_num_outputs_uneven", "Split", [], xs=(2, 5), n_out=3, axis=1, opset=18, num_outputs=3)
    with_const("split_opset11_attr", "Split", [], xs=(6, 2), n_out=2, opset=11, split=[2, 4])
    cases["concat_axis1"] = (
        model([helper.make_node("Concat", ["a", "b", "c"], ["y"], axis=1)],
              [vi("a", F, [2, 1, 3]), vi("b", F, [2, 4, 3]), vi("c", F, [2, 2, 3])], [vi("y", F, None)]),
        [rand(2, 1, 3), rand(2, 4, 3), rand(2, 2, 3)],
    )
    emb = rand(10, 4)
    cases["gather_runtime_indices"] = (
        model([helper.make_node("Gather", ["data", "idx"], ["y"], axis=0)], [vi("idx", I64, [2, 3])], [vi("y", F, None)],
              [init("data", emb)]),
        [np.array([[0, 9, -1], [3, -10, 4]], np.int64)],
    )
    cases["gather_axis1_const_indices"] = (
        model([helper.make_node("Gather", ["x", "idx"], ["y"], axis=1)], [vi("x", F, [2, 5, 3])], [vi("y", F, None)],
              [init("idx", np.array([4, 0, -2], np.int64))]),
        [rand(2, 5, 3)],
    )
    cases["gather_scalar_index"] = (
        model([helper.make_node("Gather", ["x", "idx"], ["y"], axis=1)], [vi("x", F, [2, 5, 3])], [vi("y", F, None)],
              [init("idx", np.array(-1, np.int64))]),
        [rand(2, 5, 3)],
    )
    # The exporter's shape subgraph: Shape -> Gather -> Unsqueeze -> Concat -> Reshape, plus Range and ConstantOfShape.
    cases["shape_subgraph_reshape"] = (
        model(
            [
                helper.make_node("Shape", ["x"], ["s"]),
                helper.make_node("Gather", ["s", "zero_scalar"], ["n"], axis=0),
                helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
                helper.make_node("Concat", ["n1", "minus1"], ["spec"], axis=0),
                helper.make_node("Reshape", ["x", "spec"], ["flat"]),
                helper.make_node("Shape", ["flat"], ["fs"], start=-1),
                helper.make_node("ConstantOfShape", ["fs"], ["ones"], value=helper.make_tensor("v", F, [1], [1.0])),
                helper.make_node("Cast", ["fs"], ["fsf"], to=F),
                helper.make_node("Constant", [], ["start"], value=helper.make_tensor("st", F, [], [0.0])),
                helper.make_node("Constant", [], ["delta"], value=helper.make_tensor("de", F, [], [0.5])),
                helper.make_node("Squeeze", ["fsf", "axes0"], ["limit"]),
                helper.make_node("Range", ["start", "limit", "delta"], ["rng"]),
                helper.make_node("Slice", ["rng", "zero", "fs"], ["rng_cut"]),
                helper.make_node("Mul", ["flat", "ones"], ["m"]),
                helper.make_node("Add", ["m", "rng_cut"], ["y"]),
            ],
            [vi("x", F, [2, 3, 4])],
            [vi("y", F, None)],
            [init("zero", np.array([0], np.int64)), init("zero_scalar", np.array(0, np.int64)),
             init("axes0", np.array([0], np.int64)),
             init("minus1", np.array([-1], np.int64))],
        ),
        [rand(2, 3, 4)],
    )
    cases["output_is_input_and_weight"] = (
        model([helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Identity", ["w"], ["z"])],
              [vi("x", F, [3])], [vi("y", F, None), vi("z", F, None), vi("x", F, [3])], [init("w", rand(2))]),
        [rand(3)],
    )
    cases["symbolic_dims_bound"] = (
        model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, ["batch", 4])], [vi("y", F, None)]),
        [rand(3, 4)],
    )
    # Three projections of one input (Q, K, V), each with a bias: merged into one MatMul when fusing.
    qkv_nodes, qkv_inits = [], []
    for t in ["q", "k", "v"]:
        qkv_nodes += [helper.make_node("MatMul", ["x", f"w{t}"], [f"{t}0"]), helper.make_node("Add", [f"{t}0", f"b{t}"], [t])]
        qkv_inits += [init(f"w{t}", rand(8, 6)), init(f"b{t}", rand(6))]
    cases["matmul_siblings_qkv"] = (
        model(qkv_nodes, [vi("x", F, [2, 5, 8])], [vi(t, F, None) for t in ["q", "k", "v"]], qkv_inits),
        [rand(2, 5, 8)],
    )
    # Enough output tiles that the compiler picks the 32-wide matmul tile.
    cases["matmul_tile32"] = (
        model([helper.make_node("MatMul", ["a", "b"], ["y"])], [vi("a", F, [4, 256, 8]), vi("b", F, [8, 256])], [vi("y", F, None)]),
        [rand(4, 256, 8), rand(8, 256)],
    )
    # Scaled, masked attention as PyTorch's SDPA exports it (Where(IsNaN(p), 0, p) after the softmax), with shapes
    # off every tile size (19 queries, 70 keys, widths 20 and 23), masked key ranges and a fully masked row.
    rng = np.random.default_rng(7)
    mask = np.zeros((19, 70), np.float32)
    mask[:, 65:] = -np.inf
    mask[3, :] = -np.inf
    mask[5, :40] = -np.inf
    cases["attention_masked"] = sdpa_case(rng, (1, 2, 19, 20), (1, 2, 70, 20), (1, 2, 70, 23), mask, scale=0.3)
    # A prefill chunk's mask as torch exports write it (float32's lowest, not -inf): keys 0..50 seen (the cache's
    # real rows), 50..250 masked (its stale window), the chunk's 40 keys from 250 causal, the last 10 masked; row 7
    # masked everywhere (its softmax is uniform over all 300 keys). Whole tiles of 64 keys are skipped, and the
    # block holding row 7 scores every key again.
    low = np.finfo(np.float32).min
    mask3 = np.full((40, 300), low, np.float32)
    mask3[:, :50] = 0
    for i in range(40):
        mask3[i, 250:251 + i] = 0
    mask3[7, :] = low
    cases["attention_masked_tiles"] = sdpa_case(rng, (1, 2, 40, 16), (1, 2, 300, 16), (1, 2, 300, 16), mask3,
                                                scale=0.25)
    # 264 heads: enough blocks that the attention kernel takes 32 query rows per workgroup (two per thread).
    mask2 = np.zeros((3, 5), np.float32)
    mask2[1, :] = -np.inf
    mask2[2, 3:] = -np.inf
    cases["attention_many_heads"] = sdpa_case(rng, (1, 264, 3, 4), (1, 264, 5, 4), (1, 264, 5, 3), mask2)
    # Heads 64 wide, an LLM's (each thread's four value columns read as one vec4): 37 query rows at positions 93..129
    # of 130 keys (three tiles of 64, the last partial), causal, and rows 0..4 not seeing the first 64 keys (a whole
    # tile skipped for no block, masked for some rows).
    r64 = np.random.default_rng(64)
    m64 = np.full((37, 130), low, np.float32)
    for i in range(37):
        m64[i, : 94 + i] = 0
    m64[:5, :64] = low
    cases["attention_head64"] = sdpa_case(r64, (1, 2, 37, 64), (1, 2, 130, 64), (1, 2, 130, 64), m64, scale=0.125)
    # Query rows 80 wide (five steps of 16 through workgroup memory), value rows 128 (two vec4s a thread), 70 keys.
    m128 = np.zeros((9, 70), np.float32)
    m128[:, 66:] = -np.inf
    cases["attention_dv128"] = sdpa_case(r64, (1, 1, 9, 80), (1, 1, 70, 80), (1, 1, 70, 128), m128, scale=0.1)
    # One query row (a decode step: the one-row attention kernel): 300 keys (not a multiple of its loops), rows 20
    # and 24 wide (K and V read as vec4s), one head fully masked, another masked past key 250.
    r1 = np.random.default_rng(11)
    mask1 = np.zeros((3, 1, 300), np.float32)
    mask1[1, :, :] = -np.inf
    mask1[2, :, 250:] = -np.inf
    cases["attention_one_row"] = sdpa_case(r1, (1, 3, 1, 20), (1, 3, 300, 20), (1, 3, 300, 24), mask1, scale=0.2)
    # The same with K given transposed and V transposed back from [h, d, keys] (both read four scalars at a time),
    # no mask.
    cases["attention_one_row_strided"] = (
        model([helper.make_node("MatMul", ["q", "kt"], ["s"]),
               helper.make_node("Mul", ["s", "scale"], ["s2"]),
               helper.make_node("Softmax", ["s2"], ["p"], axis=-1),
               helper.make_node("Transpose", ["vt"], ["v"], perm=[0, 1, 3, 2]),
               helper.make_node("MatMul", ["p", "v"], ["y"])],
              [vi("q", F, [1, 2, 1, 8]), vi("kt", F, [1, 2, 8, 37]), vi("vt", F, [1, 2, 12, 37])],
              [vi("y", F, None)], [init("scale", np.float32(0.35))]),
        [r1.standard_normal(sh).astype(np.float32) for sh in [(1, 2, 1, 8), (1, 2, 8, 37), (1, 2, 12, 37)]],
    )
    # A prefill chunk's attention: K and V are Concat(window of the cache, the chunk's rows) along the keys (a
    # Slice of each cache, then 5 new rows: 72 keys over two tiles of 64), expanded for 4 query heads sharing 2,
    # under a causal mask after the window: the attention kernel reads both Concats in place, by key.
    rc = np.random.default_rng(40)
    cat = []
    for t in ["k", "v"]:
        cat += [helper.make_node("Slice", [f"{t}_cache", "w0", "w1", "wax"], [f"{t}w"]),
                helper.make_node("Concat", [f"{t}w", f"{t}_new"], [f"{t}c"], axis=2),
                helper.make_node("Unsqueeze", [f"{t}c", "ax2"], [f"{t}u"]),
                helper.make_node("Expand", [f"{t}u", "rep"], [f"{t}e"]),
                helper.make_node("Reshape", [f"{t}e", "heads"], [f"{t}h"])]
    cmask = np.zeros((5, 72), np.float32)
    cmask[:, 30:67] = -np.inf
    for i in range(5):
        cmask[i, 67 + i + 1:] = -np.inf
    cases["attention_concat_kv"] = (
        model(cat + [helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2]),
                     helper.make_node("MatMul", ["q", "kt"], ["s"]),
                     helper.make_node("Mul", ["s", "scale"], ["s2"]),
                     helper.make_node("Add", ["s2", "mask"], ["s3"]),
                     helper.make_node("Softmax", ["s3"], ["p"], axis=-1),
                     helper.make_node("MatMul", ["p", "vh"], ["y"])],
              [vi("q", F, [1, 4, 5, 8]), vi("k_cache", F, [1, 2, 70, 8]), vi("v_cache", F, [1, 2, 70, 8]),
               vi("k_new", F, [1, 2, 5, 8]), vi("v_new", F, [1, 2, 5, 8])], [vi("y", F, None)],
              [init("w0", np.array([0], np.int64)), init("w1", np.array([67], np.int64)),
               init("wax", np.array([2], np.int64)), init("ax2", np.array([2], np.int64)),
               init("rep", np.array([1, 2, 2, 72, 8], np.int64)), init("heads", np.array([1, 4, 72, 8], np.int64)),
               init("scale", np.float32(0.35)), init("mask", cmask)]),
        [rc.standard_normal(s).astype(np.float32)
         for s in [(1, 4, 5, 8), (1, 2, 70, 8), (1, 2, 70, 8), (1, 2, 5, 8), (1, 2, 5, 8)]],
    )
    # Keys concatenated along their features (a part with rotary, a part without, as MLA-style attention writes
    # them): the Concat is read in place through its flat indices.
    cases["attention_concat_features"] = (
        model([helper.make_node("Concat", ["ka", "kb"], ["k"], axis=3),
               helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
               helper.make_node("MatMul", ["q", "kt"], ["s"]),
               helper.make_node("Softmax", ["s"], ["p"], axis=-1),
               helper.make_node("MatMul", ["p", "v"], ["y"])],
              [vi("q", F, [1, 2, 9, 8]), vi("ka", F, [1, 2, 9, 6]), vi("kb", F, [1, 2, 9, 2]),
               vi("v", F, [1, 2, 9, 4])], [vi("y", F, None)], []),
        [rc.standard_normal(s).astype(np.float32) for s in [(1, 2, 9, 8), (1, 2, 9, 6), (1, 2, 9, 2), (1, 2, 9, 4)]],
    )
    # Grouped-query attention as exporters write it: 4 query heads share 2 K/V heads through Unsqueeze → Expand →
    # Reshape, with a causal mask through Where.
    gqa = []
    for t in ["k", "v"]:
        gqa += [helper.make_node("Unsqueeze", [t, "ax2"], [f"{t}u"]),
                helper.make_node("Expand", [f"{t}u", "rep"], [f"{t}e"]),
                helper.make_node("Reshape", [f"{t}e", "heads"], [f"{t}h"])]
    causal = np.tril(np.ones((6, 6), bool))
    cases["attention_gqa"] = (
        model(gqa + [helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2]),
                     helper.make_node("MatMul", ["q", "kt"], ["s"]),
                     helper.make_node("Div", ["s", "sqrt_d"], ["s2"]),
                     helper.make_node("Where", ["causal", "s2", "ninf"], ["s3"]),
                     helper.make_node("Softmax", ["s3"], ["p"], axis=-1),
                     helper.make_node("MatMul", ["p", "vh"], ["y"])],
              [vi("q", F, [1, 4, 6, 8]), vi("k", F, [1, 2, 6, 8]), vi("v", F, [1, 2, 6, 8])], [vi("y", F, None)],
              [init("ax2", np.array([2], np.int64)), init("rep", np.array([1, 2, 2, 6, 8], np.int64)),
               init("heads", np.array([1, 4, 6, 8], np.int64)), init("sqrt_d", np.float32(np.sqrt(8))),
               init("causal", causal), init("ninf", np.float32(-np.inf))]),
        [rng.standard_normal(s).astype(np.float32) for s in [(1, 4, 6, 8), (1, 2, 6, 8), (1, 2, 6, 8)]],
    )
    # Few output tiles and a long K (300, not a multiple of 16): the matmul splits K across four slices of a
    # workgroup; with a bias and Relu epilogue.
    cases["matmul_ksplit"] = (
        model([helper.make_node("MatMul", ["a", "w"], ["p"]), helper.make_node("Add", ["p", "bias"], ["q"]),
               helper.make_node("Relu", ["q"], ["y"])],
              [vi("a", F, [2, 40, 300])], [vi("y", F, None)],
              [init("w", rng.standard_normal((300, 70)).astype(np.float32) * 0.1),
               init("bias", rng.standard_normal(70).astype(np.float32))]),
        [rng.standard_normal((2, 40, 300)).astype(np.float32)],
    )
    # Implicit-GEMM convolutions: a 1x1 window read in place (batch 2, ragged 16-tiles), and a 3x3 window with
    # K = 288 (K-split slices) and ragged 32-tiles, with a ReLU and a residual Add in its epilogue.
    conv("conv_pointwise_batch2", [2, 40, 9, 9], [70, 40, 1, 1])
    cases["conv_ksplit_relu_residual"] = (
        model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
               helper.make_node("Relu", ["c"], ["r"]),
               helper.make_node("Add", ["r", "s"], ["y"])],
              [vi("x", F, [1, 32, 10, 10]), vi("s", F, [1, 96, 10, 10])], [vi("y", F, None)],
              [init("w", rand(96, 32, 3, 3)), init("b", rand(96))]),
        [rand(1, 32, 10, 10), rand(1, 96, 10, 10)],
    )
    # A ResNet-style late 3x3 convolution (K = 256 x 9 over 7x7 positions, few output tiles): split along K into
    # four groups of input channels whose outputs are summed with the bias, ReLU and the residual; two images.
    cases["conv_split_k_relu_residual"] = (
        model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
               helper.make_node("Relu", ["c"], ["r"]),
               helper.make_node("Add", ["r", "s"], ["y"])],
              [vi("x", F, [2, 256, 7, 7]), vi("s", F, [2, 64, 7, 7])], [vi("y", F, None)],
              [init("w", rand(64, 256, 3, 3)), init("b", rand(64))]),
        [rand(2, 256, 7, 7), rand(2, 64, 7, 7)],
    )
    # A grouped convolution with 16 output channels a group (ResNeXt-style) runs as batched products, its bias
    # read per group; strided, two images.
    cases["conv_groups_product"] = (
        model([helper.make_node("Conv", ["x", "w", "b"], ["c"], group=4, pads=[1, 1, 1, 1], strides=[2, 2]),
               helper.make_node("Relu", ["c"], ["y"])],
              [vi("x", F, [2, 32, 9, 9])], [vi("y", F, None)],
              [init("w", rand(64, 8, 3, 3)), init("b", rand(64))]),
        [rand(2, 32, 9, 9)],
    )
    # Enough 32x32 tiles (128) for K-split slices on 32x32 tiles rather than 16x16.
    cases["matmul_ksplit_tile32"] = (
        model([helper.make_node("MatMul", ["a", "w"], ["y"])], [vi("a", F, [256, 256])], [vi("y", F, None)],
              [init("w", rand(256, 512))]),
        [rand(256, 256)],
    )
    # Few output tiles over a long K: the product is split along K across workgroups (`split_k`: S parts, a
    # batched product, then one elementwise kernel summing the parts with the epilogue). A 3-D A with a bias and
    # a residual Add (S 4); Gemm with transB and C, K = 3000 (parts of 750, not a multiple of the k-step); A read
    # through a Transpose (views composed). Weights of 0.05 at most, so that K terms sum within the
    # suite's tolerance in any order. Own generator: the cases after these keep their data.
    sk = np.random.default_rng(34)
    cases["matmul_split_k_residual"] = (
        model([helper.make_node("MatMul", ["a", "w"], ["p"]), helper.make_node("Add", ["p", "bias"], ["q"]),
               helper.make_node("Add", ["q", "r"], ["y"])],
              [vi("a", F, [1, 40, 2048]), vi("r", F, [1, 40, 48])], [vi("y", F, None)],
              [init("w", rand(2048, 48, rng=sk) * 0.05), init("bias", rand(48, rng=sk))]),
        [rand(1, 40, 2048, rng=sk), rand(1, 40, 48, rng=sk)],
    )
    cases["gemm_split_k_trans_b"] = (
        model([helper.make_node("Gemm", ["a", "w", "c"], ["y"], transB=1)],
              [vi("a", F, [24, 3000])], [vi("y", F, None)],
              [init("w", rand(20, 3000, rng=sk) * 0.05), init("c", rand(20, rng=sk))]),
        [rand(24, 3000, rng=sk)],
    )
    cases["matmul_split_k_transposed_a"] = (
        model([helper.make_node("Transpose", ["x"], ["a"], perm=[1, 0]), helper.make_node("MatMul", ["a", "w"], ["y"])],
              [vi("x", F, [2048, 36])], [vi("y", F, None)], [init("w", rand(2048, 40, rng=sk) * 0.05)]),
        [rand(2048, 36, rng=sk)],
    )
    # A ResNet shortcut projection: the strided 1x1 Conv of the block input is summed into the second 3x3 Conv's
    # kernel (one product over both K ranges), then ReLU.
    cases["conv_shortcut_projection"] = (
        model([helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
               helper.make_node("Relu", ["c1"], ["r1"]),
               helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
               helper.make_node("Conv", ["x", "wd", "bd"], ["d"], strides=[2, 2]),
               helper.make_node("Add", ["c2", "d"], ["s"]),
               helper.make_node("Relu", ["s"], ["y"])],
              [vi("x", F, [1, 8, 10, 10])], [vi("y", F, None)],
              [init("w1", rand(16, 8, 3, 3)), init("b1", rand(16)), init("w2", rand(16, 16, 3, 3)),
               init("b2", rand(16)), init("wd", rand(16, 8, 1, 1)), init("bd", rand(16))]),
        [rand(1, 8, 10, 10)],
    )
    # The same sum with a 1x1 unit-stride shortcut (read in place), no biases, batch 2, both Convs reading one
    # input, and the Add's operands the other way round.
    cases["conv_sum_pointwise_batch2"] = (
        model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
               helper.make_node("Conv", ["x", "wd"], ["d"]),
               helper.make_node("Add", ["d", "c"], ["y"])],
              [vi("x", F, [2, 8, 6, 6])], [vi("y", F, None)],
              [init("w", rand(12, 8, 3, 3)), init("wd", rand(12, 8, 1, 1))]),
        [rand(2, 8, 6, 6)],
    )
    # RMSNorm as exporters emit it (Pow → ReduceMean → Add ε → Sqrt → Reciprocal → Mul x → Mul weight): one
    # RMSNormalization kernel; x is also read by a residual Add after it.
    cases["rmsnorm_pattern"] = (
        model(rms_chain() + [helper.make_node("Add", ["nw", "x"], ["y"])],
              [vi("x", F, [2, 5, 24])], [vi("y", F, None)],
              [init("two", np.float32(2.0)), init("axes", np.array([-1], np.int64)), init("eps", np.float32(1e-6)),
               init("w", rand(24))], opset=18),
        [rand(2, 5, 24, lo=-2, hi=2)],
    )
    # GQA as transformers' Llama exports it through SDPA: K and V expanded from 2 to 4 heads, Q and Kᵀ each scaled
    # by d^-1/4 before the product (the scales move to the product's epilogue, the expansions fold into its batch
    # strides), a boolean mask through Where, and the NaN guard.
    gq_rng = np.random.default_rng(7)
    gqa2 = []
    for t in ["k", "v"]:
        gqa2 += [helper.make_node("Unsqueeze", [t, "ax2"], [f"{t}u"]),
                 helper.make_node("Expand", [f"{t}u", "rep"], [f"{t}e"]),
                 helper.make_node("Reshape", [f"{t}e", "heads"], [f"{t}h"])]
    cases["attention_gqa_scaled"] = (
        model(gqa2 + [helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2]),
                      helper.make_node("Mul", ["q", "qs"], ["q2"]),
                      helper.make_node("Mul", ["kt", "qs"], ["kt2"]),
                      helper.make_node("Where", ["causal", "zero", "ninf"], ["bias"]),
                      helper.make_node("MatMul", ["q2", "kt2"], ["s"]),
                      helper.make_node("Add", ["s", "bias"], ["s2"]),
                      helper.make_node("Softmax", ["s2"], ["p"], axis=-1),
                      helper.make_node("IsNaN", ["p"], ["nan"]),
                      helper.make_node("Where", ["nan", "zero", "p"], ["p2"]),
                      helper.make_node("MatMul", ["p2", "vh"], ["y"])],
              [vi("q", F, [1, 4, 6, 8]), vi("k", F, [1, 2, 6, 8]), vi("v", F, [1, 2, 6, 8])], [vi("y", F, None)],
              [init("ax2", np.array([2], np.int64)), init("rep", np.array([1, 2, 2, 6, 8], np.int64)),
               init("heads", np.array([1, 4, 6, 8], np.int64)), init("qs", np.float32(8 ** -0.25)),
               init("causal", np.tril(np.ones((6, 6), bool))), init("zero", np.float32(0.0)),
               init("ninf", np.float32(-np.inf))]),
        [gq_rng.standard_normal(s).astype(np.float32) for s in [(1, 4, 6, 8), (1, 2, 6, 8), (1, 2, 6, 8)]],
    )
    # Kernels that store straight into a Transpose's layout: a MatMul (with a bias epilogue) and an elementwise
    # group, each read only by a Transpose.
    cases["store_through_transpose"] = (
        model([helper.make_node("MatMul", ["a", "w"], ["m"]),
               helper.make_node("Add", ["m", "b"], ["mb"]),
               helper.make_node("Transpose", ["mb"], ["y1"], perm=[0, 2, 3, 1]),
               helper.make_node("Relu", ["a"], ["r"]),
               helper.make_node("Transpose", ["r"], ["y2"], perm=[3, 1, 0, 2])],
              [vi("a", F, [2, 3, 4, 5])], [vi("y1", F, None), vi("y2", F, None)],
              [init("w", rand(5, 6)), init("b", rand(6))]),
        [rand(2, 3, 4, 5)],
    )
    # Rotary embedding as transformers exports it: x·cos + Concat(Neg(x[..., h:]), x[..., :h])·sin over heads
    # transposed out of the projection; one kernel (RotateHalf reads x at a rotated coordinate).
    pos = np.arange(6, dtype=np.float32)[:, None] / (10000 ** (np.arange(4, dtype=np.float32) / 4))[None, :]
    emb = np.concatenate([pos, pos], axis=-1)[None, None]
    cases["rotary_embedding"] = (
        model([helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1, 3]),
               helper.make_node("Mul", ["xt", "cos"], ["a"]),
               helper.make_node("Slice", ["xt", "h", "big", "last"], ["x2"]),
               helper.make_node("Slice", ["xt", "zero", "h", "last"], ["x1"]),
               helper.make_node("Neg", ["x2"], ["nx2"]),
               helper.make_node("Concat", ["nx2", "x1"], ["rot"], axis=-1),
               helper.make_node("Mul", ["rot", "sin"], ["b"]),
               helper.make_node("Add", ["a", "b"], ["y"])],
              [vi("x", F, [1, 6, 2, 8])], [vi("y", F, None)],
              [init("cos", np.cos(emb).astype(np.float32)), init("sin", np.sin(emb).astype(np.float32)),
               init("h", np.array([4], np.int64)), init("big", np.array([2 ** 62], np.int64)),
               init("zero", np.array([0], np.int64)), init("last", np.array([-1], np.int64))]),
        [rand(1, 6, 2, 8)],
    )
    # RMSNorm (the exporters' chain) feeding a MatMul: the product normalizes its A rows itself (A scaled by the
    # norm's weights as loaded, row sums of squares from the A tiles). K = 300 runs K-split slices; K = 24 not.
    def rms_matmul(name, xs, n_out):
        k = xs[-1]
        cases[name] = (
            model(rms_chain() + [helper.make_node("MatMul", ["nw", "proj"], ["y"])],
                  [vi("x", F, xs)], [vi("y", F, None)],
                  [init("two", np.float32(2.0)), init("axes", np.array([-1], np.int64)),
                   init("eps", np.float32(1e-5)), init("w", rand(k)), init("proj", rand(k, n_out, lo=-0.2, hi=0.2))],
                  opset=18),
            [rand(*xs, lo=-2, hi=2)],
        )

    rms_matmul("rmsnorm_matmul_ksplit", [2, 5, 300], 40)
    rms_matmul("rmsnorm_matmul", [3, 24], 20)
    # A residual sum that only an RMSNorm reads, the norm feeding a one-row product: the product computes the sum
    # as it stages its row and normalizes it, so neither has a kernel of its own (float32 weights through the
    # matrix-vector kernel, and float16 weights through the packed one).
    def residual_rms_gemv(name, k, n_out):
        cases[name] = (
            model([helper.make_node("Add", ["x0", "x1"], ["x"])] + rms_chain()
                  + [helper.make_node("MatMul", ["nw", "proj"], ["y"])],
                  [vi("x0", F, [1, k]), vi("x1", F, [1, k])], [vi("y", F, None)],
                  [init("two", np.float32(2.0)), init("axes", np.array([-1], np.int64)),
                   init("eps", np.float32(1e-5)), init("w", rand(k)), init("proj", rand(k, n_out, lo=-0.2, hi=0.2))],
                  opset=18),
            [rand(1, k, lo=-2, hi=2), rand(1, k, lo=-2, hi=2)],
        )

    residual_rms_gemv("residual_rmsnorm_gemv", 96, 40)
    residual_rms_gemv("residual_rmsnorm_gemv_f16", 96, 40)
    # MobileNet's depthwise → ReLU6 → pointwise projection: the projection computes its operand from the
    # depthwise input's windows as it loads it (stride 2, biases, batch 2); and a 5x5 depthwise with uneven pads
    # and no bias → Relu → 32-channel projection (the most a 5x5 fuses into) with a residual Add in its epilogue.
    cases["depthwise_pointwise_relu6"] = (
        model([helper.make_node("Conv", ["x", "wd", "bd"], ["d"], group=12, strides=[2, 2], pads=[1, 1, 1, 1]),
               helper.make_node("Clip", ["d", "lo", "hi"], ["r"]),
               helper.make_node("Conv", ["r", "wp", "bp"], ["y"])],
              [vi("x", F, [2, 12, 9, 9])], [vi("y", F, None)],
              [init("wd", rand(12, 1, 3, 3)), init("bd", rand(12)), init("lo", np.float32(0.0)),
               init("hi", np.float32(6.0)), init("wp", rand(20, 12, 1, 1)), init("bp", rand(20))]),
        [rand(2, 12, 9, 9, lo=-4, hi=4)],
    )
    cases["depthwise5x5_pointwise_residual"] = (
        model([helper.make_node("Conv", ["x", "wd"], ["d"], group=8, pads=[2, 1, 2, 3]),
               helper.make_node("Relu", ["d"], ["r"]),
               helper.make_node("Conv", ["r", "wp"], ["p"]),
               helper.make_node("Add", ["p", "res"], ["y"])],
              [vi("x", F, [1, 8, 7, 6]), vi("res", F, [1, 32, 7, 6])], [vi("y", F, None)],
              [init("wd", rand(8, 1, 5, 5)), init("wp", rand(32, 8, 1, 1))]),
        [rand(1, 8, 7, 6), rand(1, 32, 7, 6)],
    )

    # MobileNetV2's inverted-residual block: 1x1 expansion → ReLU6 → depthwise → ReLU6 → 1x1 projection (+ the
    # block's input). Up to 64 projected channels the whole block is one kernel; wider, the expansion is computed
    # in the depthwise kernel and the projection is a product of its own. The tests also run them unfused.
    def inverted_residual(name, xs, e, cout, k=3, stride=1, dilation=1, residual=False, relu6=True, bias=True):
        cin = xs[1]
        act = (lambda i, o: helper.make_node("Clip", [i, "lo", "hi"], [o])) if relu6 else (
            lambda i, o: helper.make_node("Relu", [i], [o]))
        b = (lambda n: [n]) if bias else (lambda n: [])
        nodes = [helper.make_node("Conv", ["x", "we"] + b("be"), ["ex"]), act("ex", "exr"),
                 helper.make_node("Conv", ["exr", "wd"] + b("bd"), ["d"], group=e, strides=[stride, stride],
                                  dilations=[dilation, dilation], pads=[(k // 2) * dilation] * 4),
                 act("d", "dr"),
                 helper.make_node("Conv", ["dr", "wp"] + b("bp"), ["p" if residual else "y"])]
        if residual:
            nodes.append(helper.make_node("Add", ["p", "x"], ["y"]))
        inits = [init("we", rand(e, cin, 1, 1) * 0.5), init("wd", rand(e, 1, k, k) * 0.5),
                 init("wp", rand(cout, e, 1, 1) * 0.3), init("lo", np.float32(0.0)), init("hi", np.float32(6.0))]
        if bias:
            inits += [init("be", rand(e)), init("bd", rand(e)), init("bp", rand(cout))]
        cases[name] = (model(nodes, [vi("x", F, xs)], [vi("y", F, None)], inits), [rand(*xs, lo=-2, hi=2)])
        CASE_META[name] = {"inverted_residual": "unfused"}

    inverted_residual("inverted_residual_block", [1, 16, 14, 14], 96, 16, residual=True)
    inverted_residual("inverted_residual_block_stride2", [2, 12, 15, 13], 72, 40, stride=2)
    inverted_residual("inverted_residual_block_dilated", [1, 8, 12, 12], 48, 8, dilation=2, residual=True,
                      relu6=False, bias=False)
    inverted_residual("expand_depthwise_wide_projection", [1, 24, 16, 16], 144, 80, k=5)
    # Channel counts that are not multiples of 4: the kernel reads its weights one float at a time.
    inverted_residual("inverted_residual_block_odd_channels", [1, 6, 9, 9], 30, 10)

    # Concats written in place by the kernels that produce their inputs (no copy kernels): a SqueezeNet fire
    # module (two convolutions joined along channels at batch 1), elementwise results at batch 2 (each a strided
    # block), products joined along the last axis, and Concats that must keep their copies (an input from outside,
    # a result read twice).
    def fire(name, xs, s, e1, e3):
        nodes = [helper.make_node("Conv", ["x", "ws", "bs"], ["sq"]), helper.make_node("Relu", ["sq"], ["s"]),
                 helper.make_node("Conv", ["s", "w1", "b1"], ["c1"]), helper.make_node("Relu", ["c1"], ["r1"]),
                 helper.make_node("Conv", ["s", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["c3"], ["r3"]),
                 helper.make_node("Concat", ["r1", "r3"], ["y"], axis=1)]
        inits = [init("ws", rand(s, xs[1], 1, 1)), init("bs", rand(s)), init("w1", rand(e1, s, 1, 1)),
                 init("b1", rand(e1)), init("w3", rand(e3, s, 3, 3) * 0.5), init("b3", rand(e3))]
        cases[name] = (model(nodes, [vi("x", F, xs)], [vi("y", F, None)], inits), [rand(*xs)])

    fire("concat_in_place_fire", [1, 16, 13, 13], 8, 24, 24)
    fire("concat_in_place_fire_batch2", [2, 12, 7, 9], 6, 10, 14)
    cases["concat_in_place_elementwise"] = (
        model([helper.make_node("Sigmoid", ["a"], ["sa"]), helper.make_node("Tanh", ["b"], ["tb"]),
               helper.make_node("Mul", ["a", "a"], ["aa"]),
               helper.make_node("Concat", ["sa", "tb", "aa"], ["y"], axis=1)],
              [vi("a", F, [2, 3, 4]), vi("b", F, [2, 5, 4])], [vi("y", F, None)]),
        [rand(2, 3, 4), rand(2, 5, 4)],
    )
    cases["concat_in_place_matmul_last_axis"] = (
        model([helper.make_node("MatMul", ["x", "w1"], ["p1"]), helper.make_node("MatMul", ["z", "w2"], ["p2"]),
               helper.make_node("Gelu", ["p2"], ["g2"]), helper.make_node("Concat", ["p1", "g2"], ["y"], axis=-1)],
              [vi("x", F, [3, 17, 24]), vi("z", F, [3, 17, 16])], [vi("y", F, None)],
              [init("w1", rand(24, 20)), init("w2", rand(16, 12))], opset=20),
        [rand(3, 17, 24), rand(3, 17, 16)],
    )
    cases["concat_keeps_copies"] = (
        model([helper.make_node("Relu", ["a"], ["ra"]), helper.make_node("Exp", ["b"], ["eb"]),
               helper.make_node("Concat", ["ra", "c"], ["y1"], axis=0),
               helper.make_node("Concat", ["eb", "eb"], ["y2"], axis=1)],
              [vi("a", F, [2, 6]), vi("b", F, [2, 3]), vi("c", F, [3, 6])], [vi("y1", F, None), vi("y2", F, None)]),
        [rand(2, 6), rand(2, 3), rand(3, 6)],
    )
    # GatherND: run-time index tuples (negative components too) over the leading dims, with batch dims, and constant
    # indices (which fold into the Gather's row indices).
    gnd_idx = np.array([[[0, -1], [2, 1]], [[-3, 0], [1, 2]]], np.int64)
    cases["gathernd_runtime_indices"] = (
        model([helper.make_node("GatherND", ["x", "idx"], ["y"])], [vi("x", F, [3, 3, 5]), vi("idx", I64, [2, 2, 2])],
              [vi("y", F, None)]),
        [rand(3, 3, 5), gnd_idx],
    )
    cases["gathernd_batch_dims"] = (
        model([helper.make_node("GatherND", ["x", "idx"], ["y"], batch_dims=1)],
              [vi("x", F, [2, 4, 3, 2]), vi("idx", I64, [2, 3, 2])], [vi("y", F, None)]),
        [rand(2, 4, 3, 2), np.array([[[0, 1], [3, -1], [-2, 0]], [[1, 1], [0, 0], [3, 2]]], np.int64)],
    )
    cases["gathernd_const_indices"] = (
        model([helper.make_node("GatherND", ["x", "idx"], ["y"])], [vi("x", F, [4, 6])], [vi("y", F, None)],
              [init("idx", np.array([[3], [-4], [1]], np.int64))]),
        [rand(4, 6)],
    )
    # Resize as the detectors export it (nearest, asymmetric, floor, scales [1, 1, 2, 2], into a Conv: the upsampling
    # is a view), bilinear to sizes (half_pixel), and bicubic with align_corners on a downscale.
    cases["resize_nearest_x2_then_conv"] = (
        model([helper.make_node("Resize", ["x", "", "scales"], ["u"], mode="nearest",
                                coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
               helper.make_node("Conv", ["u", "w"], ["y"], pads=[1, 1, 1, 1])],
              [vi("x", F, [1, 4, 5, 6])], [vi("y", F, None)],
              [init("scales", np.array([1, 1, 2, 2], np.float32)), init("w", rand(3, 4, 3, 3))], opset=13),
        [rand(1, 4, 5, 6)],
    )
    cases["resize_linear_sizes"] = (
        model([helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear")],
              [vi("x", F, [2, 3, 5, 4])], [vi("y", F, None)], [init("sizes", np.array([2, 3, 8, 7], np.int64))],
              opset=13),
        [rand(2, 3, 5, 4)],
    )
    # A TensorFlow-style crop-and-resize whose box reaches past the image: outside points take the extrapolation
    # value; the box is given as fractions of H and W (roi over axes 2, 3).
    cases["resize_tf_crop_and_resize_extrapolate"] = (
        model([helper.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], mode="linear",
                                coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-2.5,
                                axes=[2, 3])],
              [vi("x", F, [1, 2, 9, 11])], [vi("y", F, None)],
              [init("roi", np.array([0.2, -0.1, 0.9, 1.2], np.float32)), init("sizes", np.array([5, 7], np.int64))],
              opset=18),
        [rand(1, 2, 9, 11)],
    )
    cases["resize_cubic_align_corners_down"] = (
        model([helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="cubic",
                                coordinate_transformation_mode="align_corners")],
              [vi("x", F, [1, 2, 9, 8])], [vi("y", F, None)], [init("scales", np.array([1, 1, 0.6, 0.75], np.float32))],
              opset=13),
        [rand(1, 2, 9, 8)],
    )
    # Antialiased downscaling (opset 18; torchvision's antialias=True): the filter stretched by 1 / scale.
    cases["resize_linear_antialias_down"] = (
        model([helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear", antialias=1)],
              [vi("x", F, [1, 2, 12, 10])], [vi("y", F, None)],
              [init("scales", np.array([1, 1, 0.4, 0.5], np.float32))], opset=18),
        [rand(1, 2, 12, 10)],
    )
    cases["resize_cubic_antialias_sizes_exclude_outside"] = (
        model([helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="cubic", antialias=1,
                                exclude_outside=1, cubic_coeff_a=-0.5)],
              [vi("x", F, [1, 1, 11, 9])], [vi("y", F, None)], [init("sizes", np.array([1, 1, 4, 5], np.int64))],
              opset=18),
        [rand(1, 1, 11, 9)],
    )
    # ArgMax/ArgMin along a long axis (an LLM's vocabulary: a workgroup per output), values rounded so the extreme
    # repeats and the tie rule (first index, or the last with select_last_index) decides.
    ties = lambda *shape: np.round(rand(*shape) * 4) / 4
    cases["argmax_long_axis_ties"] = (
        model([helper.make_node("ArgMax", ["x"], ["y"], axis=-1, keepdims=0)], [vi("x", F, [3, 5000])],
              [vi("y", I64, None)]),
        [ties(3, 5000).astype(np.float32)],
    )
    cases["argmin_long_axis_select_last"] = (
        model([helper.make_node("ArgMin", ["x"], ["y"], axis=1, select_last_index=1)], [vi("x", F, [2, 3000, 3])],
              [vi("y", I64, None)]),
        [ties(2, 3000, 3).astype(np.float32)],
    )
    # A row a multiple of 4 long, read as vec4s, ties going to the last index.
    cases["argmax_long_axis_select_last"] = (
        model([helper.make_node("ArgMax", ["x"], ["y"], axis=-1, select_last_index=1)], [vi("x", F, [2, 4096])],
              [vi("y", I64, None)]),
        [ties(2, 4096).astype(np.float32)],
    )
    cases["argmax_long_axis_int64"] = (
        model([helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=1)], [vi("x", I64, [2, 4099])],
              [vi("y", I64, None)]),
        [np.random.default_rng(5).integers(-50, 50, (2, 4099)).astype(np.int64)],
    )
    # Inputs of the narrow dtypes a .npy can hold (an image model's uint8 pixels, int8/int16/uint16 indices,
    # float16 activations), as `wgslc run` reads them.
    for dt, elem, data in [
        ("uint8", TensorProto.UINT8, np.arange(24, dtype=np.uint8).reshape(2, 3, 4) * 10),
        ("int8", TensorProto.INT8, (np.arange(24, dtype=np.int8) - 12).reshape(2, 3, 4)),
        ("int16", TensorProto.INT16, (np.arange(24, dtype=np.int16) * -300).reshape(2, 3, 4)),
        ("uint16", TensorProto.UINT16, (np.arange(24, dtype=np.uint16) * 2000).reshape(2, 3, 4)),
        ("float16", TensorProto.FLOAT16, (rand(2, 3, 4) * 8).astype(np.float16)),
    ]:
        cases[f"input_{dt}_cast"] = (
            model([helper.make_node("Cast", ["x"], ["c"], to=F), helper.make_node("Mul", ["c", "s"], ["y"])],
                  [vi("x", elem, [2, 3, 4])], [vi("y", F, None)], [init("s", np.array([0.5], np.float32))]),
            [data],
        )
    # Rows long enough that the compiler splits the ArgMax into chunks reduced side by side and a merge (passes'
    # split_arg_reduces: 16,384 elements and up): ties across chunks decide by the first index, or the last with
    # select_last_index; a row whose length is not a multiple of the chunk; ArgMin with keepdims.
    cases["argmax_split_rows_ties"] = (
        model([helper.make_node("ArgMax", ["x"], ["y"], axis=-1, keepdims=0)], [vi("x", F, [2, 20000])],
              [vi("y", I64, None)]),
        [(np.round(rand(2, 20000) * 3) / 3).astype(np.float32)],
    )
    cases["argmax_split_select_last"] = (
        model([helper.make_node("ArgMax", ["x"], ["y"], axis=1, select_last_index=1)], [vi("x", F, [1, 16388])],
              [vi("y", I64, None)]),
        [(np.round(rand(1, 16388) * 3) / 3).astype(np.float32)],
    )
    cases["argmin_split_keepdims"] = (
        model([helper.make_node("ArgMin", ["x"], ["y"], axis=-1, keepdims=1)], [vi("x", F, [3, 1, 32768])],
              [vi("y", I64, None)]),
        [rand(3, 1, 32768)],
    )
    # onnxruntime's norms as its transformers optimizer and onnxruntime-genai's model builder write them:
    # SimplifiedLayerNormalization (an RMSNorm, default domain as onnxruntime registers it), and the com.microsoft
    # Skip* forms that add the residual first and may also output that sum (the builder's next residual). The
    # outputs have no declared shape: onnx's checker knows none of these ops (onnxruntime checks them).
    def ms_model(nodes, inputs, outputs, inits):
        g = helper.make_graph(nodes, "case", inputs, outputs, initializer=list(inits))
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              producer_name="wgslc-testdata")
        m.ir_version = 8
        return m

    cases["simplified_layernorm"] = (
        ms_model([helper.make_node("SimplifiedLayerNormalization", ["x", "w"], ["y"], axis=-1, epsilon=1e-6)],
                 [vi("x", F, [2, 5, 24])], [vi("y", F, None)], [init("w", rand(24))]),
        [rand(2, 5, 24, lo=-2, hi=2)],
    )
    cases["skip_simplified_layernorm_sum"] = (
        ms_model([helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "w"], ["y", "", "", "sum"],
                                   domain="com.microsoft", epsilon=1e-6)],
                 [vi("x", F, [2, 5, 24]), vi("skip", F, [2, 5, 24])],
                 [vi("y", F, None), vi("sum", F, None)], [init("w", rand(24))]),
        [rand(2, 5, 24, lo=-2, hi=2), rand(2, 5, 24, lo=-2, hi=2)],
    )
    cases["skip_layernorm_beta_bias"] = (
        ms_model([helper.make_node("SkipLayerNormalization", ["x", "skip", "w", "b", "bias"], ["y"],
                                   domain="com.microsoft", epsilon=1e-5)],
                 [vi("x", F, [2, 5, 24]), vi("skip", F, [2, 5, 24])], [vi("y", F, None)],
                 [init("w", rand(24)), init("b", rand(24)), init("bias", rand(24))]),
        [rand(2, 5, 24, lo=-2, hi=2), rand(2, 5, 24, lo=-2, hi=2)],
    )
    # RotaryEmbedding (opset 23), as torch.onnx writes it at opset 23 for rotary: the 4-D [batch, heads, seq, head]
    # form over position_ids; the 3-D form with num_heads, interleaved pairs and a partial rotary_embedding_dim;
    # and caches given per token (no position_ids).
    rope_pos = np.array([[3, 0, 7, 7, 12]], np.int64)
    angles = np.outer(np.arange(32), 1.0 / (10000 ** (np.arange(8) / 8))).astype(np.float32)
    cases["rotary_embedding_23_4d"] = (
        model([helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"])],
              [vi("x", F, [1, 4, 5, 16]), vi("pos", I64, [1, 5])], [vi("y", F, [1, 4, 5, 16])],
              [init("cos", np.cos(angles)), init("sin", np.sin(angles))], opset=23),
        [rand(1, 4, 5, 16), rope_pos],
    )
    cases["rotary_embedding_23_3d_interleaved_partial"] = (
        model([helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], interleaved=1, num_heads=4,
                                rotary_embedding_dim=4)],
              [vi("x", F, [2, 3, 32]), vi("pos", I64, [2, 3])], [vi("y", F, [2, 3, 32])],
              [init("cos", np.cos(angles[:16, :2])), init("sin", np.sin(angles[:16, :2]))], opset=23),
        [rand(2, 3, 32), np.array([[0, 1, 2], [5, 9, 15]], np.int64)],
    )
    cases["rotary_embedding_23_per_token"] = (
        model([helper.make_node("RotaryEmbedding", ["x", "cos", "sin"], ["y"])],
              [vi("x", F, [1, 2, 3, 8]), vi("cos", F, [1, 3, 4]), vi("sin", F, [1, 3, 4])], [vi("y", F, [1, 2, 3, 8])],
              opset=23),
        [rand(1, 2, 3, 8), np.cos(angles[None, 4:7, :4]), np.sin(angles[None, 4:7, :4])],
    )
    # com.microsoft GroupQueryAttention as onnxruntime-genai's builder writes it: the past is exactly the tokens
    # before the new ones (seqlens_k + 1 - seq rows), total_sequence_length its length plus the new tokens.
    def gqa_case(heads, kv_heads, head, past, seq, packed, half=0, **attrs):
        total = past + seq
        hidden, kv = heads * head, kv_heads * head
        qkv = ["q", "k", "v"] if not packed else ["q", "", ""]
        ins = [vi("q", F, [1, seq, hidden + (2 * kv if packed else 0)])]
        if not packed:
            ins += [vi("k", F, [1, seq, kv]), vi("v", F, [1, seq, kv])]
        ins += [vi("pk", F, [1, kv_heads, past, head]), vi("pv", F, [1, kv_heads, past, head]),
                vi("seqlens", I32, [1])]
        inits = [init("total", np.array([total], np.int32))]
        names = qkv + ["pk", "pv", "seqlens", "total"]
        if half:
            t = np.arange(32)[:, None] / (10000.0 ** (np.arange(half) / half))[None, :]
            inits += [init("cos", np.cos(t).astype(np.float32)), init("sin", np.sin(t).astype(np.float32))]
            names += ["cos", "sin"]
            attrs["do_rotary"] = 1
        node = helper.make_node("GroupQueryAttention", names, ["y", "present_k", "present_v"], domain="com.microsoft",
                                num_heads=heads, kv_num_heads=kv_heads, **attrs)
        data = [rand(1, seq, hidden + (2 * kv if packed else 0))]
        if not packed:
            data += [rand(1, seq, kv), rand(1, seq, kv)]
        data += [rand(1, kv_heads, past, head), rand(1, kv_heads, past, head), np.array([total - 1], np.int32)]
        return ms_model([node], ins, [vi("y", F, None), vi("present_k", F, None), vi("present_v", F, None)], inits), data

    cases["gqa_packed_rotary"] = gqa_case(4, 2, 16, past=3, seq=2, packed=True, half=8)
    cases["gqa_window_softcap_scale"] = gqa_case(4, 2, 16, past=4, seq=3, packed=False, local_window_size=2,
                                                 softcap=5.0, scale=0.3)
    cases["gqa_decode_interleaved_partial_rotary"] = gqa_case(2, 1, 32, past=6, seq=1, packed=True, half=8,
                                                              rotary_interleaved=1)
    # com.microsoft RotaryEmbedding (inputs: input, position_ids, cos_cache, sin_cache): a one-element position_ids
    # (the first token's position) with the heads left to the caches' width, the 4-D form interleaved, and a
    # partial rotary_embedding_dim.
    def ms_rotary(x, pos, half, **attrs):
        node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain="com.microsoft", **attrs)
        inits = [init("cos", np.cos(angles[:, :half])), init("sin", np.sin(angles[:, :half]))]
        return ms_model([node], [vi("x", F, list(x.shape)), vi("pos", I64, list(pos.shape))], [vi("y", F, None)],
                        inits), [x, pos]

    cases["ms_rotary_offset_3d"] = ms_rotary(rand(2, 3, 32), np.array([5], np.int64), 4)
    cases["ms_rotary_4d_interleaved"] = ms_rotary(rand(2, 2, 3, 8), np.array([[0, 4, 9], [3, 2, 1]], np.int64), 4,
                                                  interleaved=1)
    cases["ms_rotary_partial"] = ms_rotary(rand(1, 4, 32), np.array([[6, 7, 8, 9]], np.int64), 2, num_heads=4,
                                           rotary_embedding_dim=4)

    # com.microsoft MultiHeadAttention as onnxruntime's transformers optimizer writes it (no row fully masked:
    # onnxruntime's finite mask_filter_value then averages over every key).
    def mha_case(names, data, outs=("y",), **attrs):
        types = [vi(n, I32 if x.dtype == np.int32 else F, list(x.shape)) for n, x in zip(names, data) if n]
        node = helper.make_node("MultiHeadAttention", list(names), list(outs), domain="com.microsoft", **attrs)
        return ms_model([node], types, [vi(o, F, None) for o in outs], []), [x for n, x in zip(names, data) if n]

    b, s, n, hd, p = 2, 3, 2, 4, 5
    d = n * hd
    padding = np.ones((b, p + s), np.int32)
    padding[1, :2] = 0
    padding[0, -1] = 0
    cases["mha_causal_past_bias"] = mha_case(
        ["q", "k", "v", "bias", "", "", "pk", "pv"],
        [rand(b, s, d), rand(b, s, d), rand(b, s, d), rand(3 * d), None, None, rand(b, n, p, hd), rand(b, n, p, hd)],
        outs=("y", "present_k", "present_v"), num_heads=n, unidirectional=1)
    cases["mha_padding_bias_past_scale"] = mha_case(
        ["q", "k", "v", "", "mask", "attn_bias", "pk", "pv"],
        [rand(b, s, d), rand(b, s, d), rand(b, s, d), None, padding, rand(1, n, s, p + s), rand(b, n, p, hd),
         rand(b, n, p, hd)],
        outs=("y", "present_k", "present_v"), num_heads=n, unidirectional=1, mask_filter_value=-1e9, scale=0.3)
    cases["mha_cross_heads_first"] = mha_case(["q", "k", "v"], [rand(b, s, d), rand(b, n, 7, hd), rand(b, n, 7, hd)],
                                              num_heads=n)
    cases["mha_cross_key_lengths_bias"] = mha_case(
        ["q", "k", "v", "bias", "lengths"],
        [rand(b, s, d), rand(b, 7, d), rand(b, 7, d), rand(3 * d), np.array([6, 3], np.int32)], num_heads=n)

    # A decode step's attention (one query row, 4 heads of 16 over 10 keys), its output projection added to a
    # residual, and that sum read twice: by an RMSNorm into a product and by the residual Add after the next
    # product (a decoder layer's shape; float32 weights, and float16 and 8- and 4-bit ones read through the narrow
    # kernels). Its own generator, so the cases generated after it keep their data.
    def attention_projection(name, h=4, dv=16):
        g = np.random.default_rng(31)
        r = lambda *shape, lo=-1.0, hi=1.0: rand(*shape, lo=lo, hi=hi, rng=g)
        t, e, f = 10, 48, 40
        cases[name] = (
            model([helper.make_node("Transpose", ["kk"], ["kt"], perm=[0, 1, 3, 2]),
                   helper.make_node("MatMul", ["q", "kt"], ["sc"]),
                   helper.make_node("Mul", ["sc", "scale"], ["ss"]),
                   helper.make_node("Softmax", ["ss"], ["pr"], axis=-1),
                   helper.make_node("MatMul", ["pr", "vv"], ["o"]),
                   helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
                   helper.make_node("Reshape", ["ot", "flat"], ["of"]),
                   helper.make_node("MatMul", ["of", "wo"], ["proj_o"]),
                   helper.make_node("Add", ["res", "proj_o"], ["x"])] + rms_chain()
                  + [helper.make_node("MatMul", ["nw", "up"], ["u"]),
                     helper.make_node("Relu", ["u"], ["ur"]),
                     helper.make_node("MatMul", ["ur", "down"], ["dn"]),
                     helper.make_node("Add", ["x", "dn"], ["y"])],
                  [vi("q", F, [1, h, 1, dv]), vi("kk", F, [1, h, t, dv]), vi("vv", F, [1, h, t, dv]),
                   vi("res", F, [1, 1, e])], [vi("y", F, None)],
                  [init("scale", np.float32(0.25)), init("flat", np.array([1, 1, h * dv], np.int64)),
                   init("wo", r(h * dv, e, lo=-0.2, hi=0.2)), init("two", np.float32(2.0)),
                   init("axes", np.array([-1], np.int64)), init("eps", np.float32(1e-5)), init("w", r(e)),
                   init("up", r(e, f, lo=-0.2, hi=0.2)), init("down", r(f, e, lo=-0.2, hi=0.2))],
                  opset=18),
            [r(1, h, 1, dv, lo=-2, hi=2), r(1, h, t, dv), r(1, h, t, dv), r(1, 1, e)],
        )

    attention_projection("attention_projection")
    attention_projection("attention_projection_f16")
    # Codes in blocks: 8 bits, and 4 bits over heads of 32.
    attention_projection("attention_projection_q8")
    attention_projection("attention_projection_q4", h=2, dv=32)

    # One-row products over `--weights q4|q8` whose rows are a whole number of 8-byte loads but not of 16-byte ones
    # (K = 48 in 4 bits, K = 40 in 8 bits: the packed kernel reads vec2<u32>s, its scales a word of them at a time),
    # and whose last block is short.
    def packed_gemv(name, k, n):
        g = np.random.default_rng(32)
        r = lambda *shape, lo=-1.0, hi=1.0: rand(*shape, lo=lo, hi=hi, rng=g)
        cases[name] = (
            model([helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", F, [1, 1, k])], [vi("y", F, None)],
                  [init("w", r(k, n, lo=-0.2, hi=0.2))]),
            [r(1, 1, k)],
        )

    packed_gemv("gemv_q4_two_word_loads", 48, 40)
    packed_gemv("gemv_q8_two_word_loads", 40, 48)
    return cases


# ---- the three models -----------------------------------------------------------------------------------------


def mlp():
    """Gemm -> Gelu -> LayerNormalization -> Gemm, opset 20."""
    d, h, o = 16, 32, 8
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], transB=1),
        helper.make_node("Gelu", ["h1"], ["g"]),
        helper.make_node("LayerNormalization", ["g", "ln_s", "ln_b"], ["n"], axis=-1, epsilon=1e-5),
        helper.make_node("Gemm", ["n", "w2", "b2"], ["y"]),
    ]
    inits = [init("w1", rand(h, d) * 0.5), init("b1", rand(h)), init("ln_s", rand(h, lo=0.5, hi=1.5)),
             init("ln_b", rand(h)), init("w2", rand(h, o) * 0.5), init("b2", rand(o))]
    return model(nodes, [vi("x", F, ["batch", d])], [vi("y", F, ["batch", o])], inits, opset=20), [rand(4, d)]


def cnn():
    """Conv -> BatchNormalization -> Relu -> MaxPool -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm."""
    nodes = [
        helper.make_node("Conv", ["x", "c1w", "c1b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "c2w", "c2b"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["f"]),
        helper.make_node("Gemm", ["f", "fcw", "fcb"], ["y"], transB=1),
    ]
    inits = [init("c1w", rand(8, 3, 3, 3) * 0.5), init("c1b", rand(8)), init("bn_s", rand(8, lo=0.5, hi=1.5)),
             init("bn_b", rand(8)), init("bn_m", rand(8)), init("bn_v", rand(8, lo=0.5, hi=2)),
             init("c2w", rand(16, 8, 3, 3) * 0.3), init("c2b", rand(16)), init("fcw", rand(10, 16)), init("fcb", rand(10))]
    return model(nodes, [vi("x", F, [2, 3, 16, 16])], [vi("y", F, [2, 10])], inits, opset=13), [rand(2, 3, 16, 16)]


def detector_head():
    """A DBNet-style text-detector head (PP-OCR's shape): an FPN merge (Resize nearest x2 + Add), Conv -> BN ->
    Relu, two ConvTranspose 2x2 stride 2 (the second to one channel) with BN -> Relu between, Sigmoid; opset 17."""
    bn = lambda p, c: [init(f"{p}_s", rand(c, lo=0.5, hi=1.5)), init(f"{p}_b", rand(c)), init(f"{p}_m", rand(c)),
                       init(f"{p}_v", rand(c, lo=0.5, hi=2))]
    nodes = [
        helper.make_node("Resize", ["low", "", "scales"], ["up"], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        helper.make_node("Add", ["up", "high"], ["fpn"]),
        helper.make_node("Conv", ["fpn", "c1w"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn1_s", "bn1_b", "bn1_m", "bn1_v"], ["b1"]),
        helper.make_node("Relu", ["b1"], ["r1"]),
        helper.make_node("ConvTranspose", ["r1", "t1w", "t1b"], ["t1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["t1", "bn2_s", "bn2_b", "bn2_m", "bn2_v"], ["b2"]),
        helper.make_node("Relu", ["b2"], ["r2"]),
        helper.make_node("ConvTranspose", ["r2", "t2w", "t2b"], ["t2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Sigmoid", ["t2"], ["y"]),
    ]
    inits = [init("scales", np.array([1, 1, 2, 2], np.float32)), init("c1w", rand(8, 16, 3, 3) * 0.3),
             *bn("bn1", 8), init("t1w", rand(8, 8, 2, 2) * 0.5), init("t1b", rand(8)), *bn("bn2", 8),
             init("t2w", rand(8, 1, 2, 2) * 0.5), init("t2b", rand(1))]
    ins = [vi("low", F, [1, 16, 12, 10]), vi("high", F, [1, 16, 24, 20])]
    return model(nodes, ins, [vi("y", F, [1, 1, 96, 80])], inits, opset=17), [rand(1, 16, 12, 10), rand(1, 16, 24, 20)]


def if_sample_rate(sr):
    """A voice-activity detector's switch on its sample rate (Silero VAD's shape): If(Equal(sr, 16000)) between a
    16 kHz branch (its own initializer, a MatMul reading an outer weight, a nested If on Greater(sr, 12000)) and an
    8 kHz one; opset 17, sr bound with --const."""
    w = rand(8, 4)
    nested = helper.make_node("If", ["big"], ["n"], then_branch=helper.make_graph(
        [helper.make_node("Mul", ["h16", "two"], ["n_then"])], "nested_then", [], [vi("n_then", F, None)],
        [init("two", np.array(2.0, np.float32))]), else_branch=helper.make_graph(
        [helper.make_node("Neg", ["h16"], ["n_else"])], "nested_else", [], [vi("n_else", F, None)]))
    then_branch = helper.make_graph([
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b16"], ["h16"]),
        helper.make_node("Greater", ["sr", "k12"], ["big"]),
        nested,
        helper.make_node("Relu", ["n"], ["out16"]),
    ], "then", [], [vi("out16", F, None)], [init("b16", rand(4)), init("k12", np.array(12000, np.int64))])
    else_branch = helper.make_graph([
        helper.make_node("ReduceMean", ["x"], ["h8"], axes=[1], keepdims=1),
        helper.make_node("Expand", ["h8", "shape4"], ["out8"]),
    ], "else", [], [vi("out8", F, None)], [init("shape4", np.array([2, 4], np.int64))])
    nodes = [
        helper.make_node("Equal", ["sr", "k16"], ["is16"]),
        helper.make_node("If", ["is16"], ["y0"], then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Sigmoid", ["x"], ["h"]),
        helper.make_node("ReduceSum", ["h", "ax1"], ["hs"], keepdims=1),
        helper.make_node("Add", ["y0", "hs"], ["y"]),
    ]
    m = model(nodes, [vi("x", F, [2, 8]), vi("sr", I64, [])], [vi("y", F, [2, 4])],
              [init("w", w), init("k16", np.array(16000, np.int64)), init("ax1", np.array([1], np.int64))])
    return m, [rand(2, 8), np.array(sr, np.int64)]


def transformer():
    """A GPT-2-style block: token + position embedding (Gather), causal self-attention with 4 heads, MLP with the
    erf-form GELU, pre-LayerNorm and residuals, as the TorchScript exporter writes it (opset 17)."""
    vocab, seq, d, heads = 50, 8, 32, 4
    hd = d // heads
    n = []
    inits = [
        init("wte", rand(vocab, d)), init("wpe", rand(seq, d)), init("pos", np.arange(seq, dtype=np.int64)),
        init("ln1_s", rand(d, lo=0.5, hi=1.5)), init("ln1_b", rand(d) * 0.1),
        init("w_qkv", rand(d, 3 * d) * 0.3), init("b_qkv", rand(3 * d) * 0.1),
        init("w_o", rand(d, d) * 0.3), init("b_o", rand(d) * 0.1),
        init("ln2_s", rand(d, lo=0.5, hi=1.5)), init("ln2_b", rand(d) * 0.1),
        init("w_fc", rand(d, 4 * d) * 0.3), init("b_fc", rand(4 * d) * 0.1),
        init("w_proj", rand(4 * d, d) * 0.2), init("b_proj", rand(d) * 0.1),
        init("split", np.array([d, d, d], np.int64)), init("heads_shape", np.array([0, 0, heads, hd], np.int64)),
        init("scale", np.float32(np.sqrt(hd))), init("mask", np.tril(np.ones((seq, seq), bool))[None, None]),
        init("neg", np.float32(-1e9)), init("zero", np.array([0], np.int64)),
        init("minus1", np.array([-1], np.int64)), init("half", np.float32(0.5)), init("sqrt2", np.float32(np.sqrt(2.0))),
        init("onef", np.float32(1.0)),
    ]
    n += [
        helper.make_node("Gather", ["wte", "input_ids"], ["tok"]),
        helper.make_node("Gather", ["wpe", "pos"], ["pe"]),
        helper.make_node("Add", ["tok", "pe"], ["h0"]),
        helper.make_node("LayerNormalization", ["h0", "ln1_s", "ln1_b"], ["a_in"], axis=-1),
        helper.make_node("MatMul", ["a_in", "w_qkv"], ["qkv0"]),
        helper.make_node("Add", ["qkv0", "b_qkv"], ["qkv"]),
        helper.make_node("Split", ["qkv", "split"], ["q0", "k0", "v0"], axis=2),
    ]
    for t in ["q", "k", "v"]:
        n += [helper.make_node("Reshape", [f"{t}0", "heads_shape"], [f"{t}1"]),
              helper.make_node("Transpose", [f"{t}1"], [f"{t}h"], perm=[0, 2, 3, 1] if t == "k" else [0, 2, 1, 3])]
    # The output reshape's target is computed from the input's shape, as exporters do.
    n += [
        helper.make_node("MatMul", ["qh", "kh"], ["att0"]),
        helper.make_node("Div", ["att0", "scale"], ["att1"]),
        helper.make_node("Where", ["mask", "att1", "neg"], ["att2"]),
        helper.make_node("Softmax", ["att2"], ["att"], axis=-1),
        helper.make_node("MatMul", ["att", "vh"], ["ctx0"]),
        helper.make_node("Transpose", ["ctx0"], ["ctx1"], perm=[0, 2, 1, 3]),
        helper.make_node("Shape", ["a_in"], ["ain_shape"]),
        helper.make_node("Slice", ["ain_shape", "zero", "minus1"], ["bt"]),
        helper.make_node("Concat", ["bt", "minus1"], ["ctx_shape"], axis=0),
        helper.make_node("Reshape", ["ctx1", "ctx_shape"], ["ctx"]),
        helper.make_node("MatMul", ["ctx", "w_o"], ["o0"]),
        helper.make_node("Add", ["o0", "b_o"], ["o"]),
        helper.make_node("Add", ["h0", "o"], ["h1"]),
        helper.make_node("LayerNormalization", ["h1", "ln2_s", "ln2_b"], ["m_in"], axis=-1),
        helper.make_node("MatMul", ["m_in", "w_fc"], ["fc0"]),
        helper.make_node("Add", ["fc0", "b_fc"], ["fc"]),
        helper.make_node("Div", ["fc", "sqrt2"], ["g0"]),
        helper.make_node("Erf", ["g0"], ["g1"]),
        helper.make_node("Add", ["g1", "onef"], ["g2"]),
        helper.make_node("Mul", ["fc", "g2"], ["g3"]),
        helper.make_node("Mul", ["g3", "half"], ["gelu"]),
        helper.make_node("MatMul", ["gelu", "w_proj"], ["p0"]),
        helper.make_node("Add", ["p0", "b_proj"], ["p"]),
        helper.make_node("Add", ["h1", "p"], ["y"]),
    ]
    ids = RNG.integers(0, vocab, (1, seq)).astype(np.int64)
    return model(n, [vi("input_ids", I64, [1, seq])], [vi("y", F, [1, seq, d])], inits, opset=17), [ids]


def main():
    only = set(sys.argv[1:])
    for name, (m, ins) in [("mlp", mlp()), ("cnn", cnn()), ("transformer", transformer())]:
        if not only or name in only:
            save_case("models", name, m, ins, meta={"dims": {"batch": 4}} if name == "mlp" else None)
    for name, (m, ins) in ops().items():
        if not only or name in only:
            save_case("ops", name, m, ins, CASE_META.get(name))
    if not only or "detector_head" in only:
        save_case("models", "detector_head", *detector_head())
    for sr in (16000, 8000):
        if not only or f"if_sample_rate_{sr}" in only:
            save_case("ops", f"if_sample_rate_{sr}", *if_sample_rate(sr), consts=("sr",))


if __name__ == "__main__":
    main()
