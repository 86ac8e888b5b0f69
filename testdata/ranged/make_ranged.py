#!/usr/bin/env python3
"""Makes testdata/ranged: small ONNX graphs with a symbolic dim `S`, for `--dim S=MIN..MAX`, with onnxruntime's
outputs at several values of S.

    python3 testdata/ranged/make_ranged.py      # needs onnx, onnxruntime, numpy (testdata/requirements.txt)

- `reductions/`: every kind of read across a ranged axis that a range masks: ReduceMax/Min/Sum/Mean/LogSumExp,
  ArgMax, a reversed CumSum and Softmax over S, a product whose K is S, a Conv1d and a MaxPool along S (their
  padding past the end), a Gather of the first row; model.onnx, meta.json (`ranges`), and len_<L>/input_<i>.npy,
  len_<L>/output_<i>.npy for L in LENGTHS.
- `batch2/`: two sequences at once (`[2, S, 8]`), the ranged axis behind the batch axis;
- `tied/`: two symbols the graph forces equal (tied into one dim) beside an independent one of the same range;
- `refused/*.onnx`: graphs a range cannot compile (the last row, a Concat along S, a reshape merging S with an axis
  in front of it); tests expect the error to name the node.
"""

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
LENGTHS = [1, 5, 32]
F = TensorProto.FLOAT


def const(name, arr):
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(arr), name))


def save(model, path):
    model = helper.make_model(model, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def write_case(name, graph, ranges, feed):
    """HERE/<name>/: model.onnx, and for each length L the inputs `feed(L)` gives (in graph-input order) with
    onnxruntime's outputs in len_<L>/, and meta.json with the ranges and lengths."""
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    save(graph, os.path.join(d, "model.onnx"))
    sess = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
    for length in LENGTHS:
        inputs = feed(length)
        ld = os.path.join(d, f"len_{length}")
        os.makedirs(ld, exist_ok=True)
        for i, x in enumerate(inputs.values()):
            np.save(os.path.join(ld, f"input_{i}.npy"), x)
        for i, o in enumerate(sess.run(None, inputs)):
            np.save(os.path.join(ld, f"output_{i}.npy"), o)
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump({"ranges": ranges, "lengths": LENGTHS}, f, indent=1)


def reductions():
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 8, 3)).astype(np.float32)
    nodes = [
        # The runtime zero-fills the padding of inputs; past this Add it holds 1, which no reduction may see.
        helper.make_node("Add", ["x_in", "one"], ["x"]),
        helper.make_node("ReduceMax", ["x"], ["max"], axes=[1], keepdims=0),
        helper.make_node("ReduceMin", ["x"], ["min"], axes=[1], keepdims=0),
        helper.make_node("ReduceSum", ["x", "ax1"], ["sum"], keepdims=0),
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[1], keepdims=0),
        helper.make_node("ReduceLogSumExp", ["x"], ["lse"], axes=[1], keepdims=0),
        helper.make_node("ArgMax", ["x"], ["argmax"], axis=1, keepdims=0),
        helper.make_node("CumSum", ["x", "ax1"], ["rcumsum"], reverse=1),
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        helper.make_node("Softmax", ["xt"], ["softmax"], axis=-1),
        helper.make_node("MatMul", ["xt", "x"], ["gram"]),
        helper.make_node("Conv", ["xt", "w"], ["conv"], pads=[1, 1], kernel_shape=[3]),
        helper.make_node("MaxPool", ["conv"], ["pool"], kernel_shape=[3], pads=[1, 1]),
        helper.make_node("Gather", ["x", "zero"], ["first"], axis=1),
    ]
    outs = [("max", F, [1, 8]), ("min", F, [1, 8]), ("sum", F, [1, 8]), ("mean", F, [1, 8]), ("lse", F, [1, 8]),
            ("argmax", TensorProto.INT64, [1, 8]), ("rcumsum", F, [1, "S", 8]), ("softmax", F, [1, 8, "S"]),
            ("gram", F, [1, 8, 8]), ("pool", F, [1, 4, "S"]), ("first", F, [1, 8])]
    graph = helper.make_graph(
        nodes, "reductions", [helper.make_tensor_value_info("x_in", F, [1, "S", 8])],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outs],
        initializer=[onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(np.array([1]), "ax1"),
                     onnx.numpy_helper.from_array(np.array(1.0, np.float32), "one"),
                     onnx.numpy_helper.from_array(np.array(0), "zero")])
    write_case("reductions", graph, {"S": [1, 32]},
               lambda length: {"x_in": rng.standard_normal((1, length, 8)).astype(np.float32) * 3})


def batch2():
    """Two sequences at once: the ranged axis behind the batch axis (inputs written and outputs read strided, and a
    product whose rows may fold the batch in front of the dim)."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["xwb"]),
        helper.make_node("Relu", ["xwb"], ["y"]),
        helper.make_node("ReduceMean", ["y"], ["mean"], axes=[1], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "batch2", [helper.make_tensor_value_info("x", F, [2, "S", 8])],
        [helper.make_tensor_value_info("y", F, [2, "S", 16]), helper.make_tensor_value_info("mean", F, [2, 16])],
        initializer=[onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")])
    write_case("batch2", graph, {"S": [1, 32]},
               lambda length: {"x": rng.standard_normal((2, length, 8)).astype(np.float32)})


def tied():
    """Two symbols for one length (as torch's dynamo exporter names each input's dim) and a third, independent one
    of the same range: `--dim S1=1..32 --dim S2=1..32 --dim T=1..32` must tie S1 and S2 (the Add forces them equal)
    and keep T apart. len_<L> holds S1 = S2 = L and T = max(1, L - 2)."""
    rng = np.random.default_rng(13)
    nodes = [
        helper.make_node("Add", ["a", "b"], ["y"]),
        helper.make_node("ReduceMax", ["y"], ["m"], axes=[1], keepdims=0),
        helper.make_node("ReduceSum", ["c", "ax1"], ["z"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "tied",
        [helper.make_tensor_value_info("a", F, [1, "S1", 8]), helper.make_tensor_value_info("b", F, [1, "S2", 8]),
         helper.make_tensor_value_info("c", F, [1, "T", 8])],
        [helper.make_tensor_value_info("y", F, [1, "S1", 8]), helper.make_tensor_value_info("m", F, [1, 8]),
         helper.make_tensor_value_info("z", F, [1, 8])],
        initializer=[onnx.numpy_helper.from_array(np.array([1]), "ax1")])
    write_case("tied", graph, {"S1": [1, 32], "S2": [1, 32], "T": [1, 32]},
               lambda length: {"a": rng.standard_normal((1, length, 8)).astype(np.float32) - 2,
                               "b": rng.standard_normal((1, length, 8)).astype(np.float32) - 2,
                               "c": rng.standard_normal((1, max(1, length - 2), 8)).astype(np.float32) + 1})


def refused():
    d = os.path.join(HERE, "refused")
    os.makedirs(d, exist_ok=True)
    x = helper.make_tensor_value_info("x", F, [1, "S", 8])
    cases = {
        "last_row": ([helper.make_node("Gather", ["x", "last"], ["y"], axis=1, name="last_row")], [1, 8],
                     [onnx.numpy_helper.from_array(np.array(-1), "last")]),
        "concat": ([helper.make_node("Concat", ["x", "x"], ["y"], axis=1, name="twice")], [1, "S2", 8], []),
        "merge_front": ([helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
                         helper.make_node("Reshape", ["t", "flat"], ["y"], name="flatten_channels_first")],
                        [1, "N"], [onnx.numpy_helper.from_array(np.array([1, -1]), "flat")]),
    }
    for name, (nodes, shape, inits) in cases.items():
        graph = helper.make_graph(nodes, name, [x], [helper.make_tensor_value_info("y", F, shape)], initializer=inits)
        save(graph, os.path.join(d, f"{name}.onnx"))


if __name__ == "__main__":
    reductions()
    batch2()
    tied()
    refused()
