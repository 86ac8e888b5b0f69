#!/usr/bin/env python3
"""Writes testdata/malformed/: models and artifacts that wgslc must refuse with a clear error, never a panic.

Each case is listed in cases.json with the substring its error message must contain. Models are compiled with
`wgslc compile`; artifact cases (directories) are loaded with `wgslc run`. Regenerate with the venv of
testdata/requirements.txt: python testdata/malformed/make_malformed.py
"""

import json
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

D = os.path.dirname(os.path.abspath(__file__))


def relu_model(inputs=None, nodes=None, inits=(), outputs=None, opset=17):
    g = helper.make_graph(
        nodes if nodes is not None else [helper.make_node("Relu", ["x"], ["y"])],
        "m",
        inputs if inputs is not None else [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        outputs if outputs is not None else [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=list(inits),
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def rezip(src, dst, edit, compress=None):
    """Copies ZIP `src` to `dst`, each entry's bytes through `edit(name, data)` (None drops the entry)."""
    import zipfile
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = edit(info.filename, zin.read(info.filename))
            if data is None:
                continue
            if compress and compress(info.filename):
                info.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(info, data)


def pt2_cases(cases):
    """Hostile .pt2 archives, derived from testdata/pt2/mlp (torch ≥ 2.9 layout) and mlp_torch26 (torch 2.6: pickles)."""
    import io
    import zipfile
    src = os.path.join(D, "..", "pt2", "mlp", "model.pt2")
    src26 = os.path.join(D, "..", "pt2", "mlp_torch26", "model.pt2")

    def case(name, expect, edit=None, raw=None, base=src, compress=None):
        path = os.path.join(D, name)
        if raw is not None:
            open(path, "wb").write(raw)
        else:
            rezip(base, path, edit, compress)
        cases.append({"file": name, "kind": "model", "expect": expect})

    def json_edit(entry, f):
        def edit(name, data):
            if name.endswith(entry):
                d = json.loads(data)
                f(d)
                return json.dumps(d).encode()
            return data
        return edit

    case("pt2_random_bytes.pt2", "not a valid .pt2 archive", raw=bytes(range(256)) * 4)
    case("pt2_no_program.pt2", "no program in the archive", lambda n, d: None if n.endswith("model.json") else d)
    case("pt2_schema_v9.pt2", "export schema version 9.0",
         json_edit("models/model.json", lambda d: d.update(schema_version={"major": 9, "minor": 0})))
    case("pt2_bad_program.pt2", "does not match torch's export schema",
         lambda n, d: b'{"graph_module": 3, "schema_version": {"major": 8, "minor": 1}}' if n.endswith("model.json") else d)
    case("pt2_truncated_weight.pt2", "truncated weights",
         lambda n, d: d[:20] if n.endswith("weights/weight_0") else d)
    case("pt2_missing_weight.pt2", "does not hold it",
         json_edit("model_weights_config.json", lambda d: d["config"].pop("fc1.weight")))
    case("pt2_complex_weight.pt2", "complex tensors are not supported",
         json_edit("model_weights_config.json", lambda d: d["config"]["fc1.weight"]["tensor_meta"].update(dtype=10)))
    case("pt2_unknown_op.pt2", "unsupported op 'aten.frobnicate.default'",
         json_edit("models/model.json", lambda d: [n.update(target="torch.ops.aten.frobnicate.default")
                                                  for n in d["graph_module"]["graph"]["nodes"]
                                                  if n["target"] == "torch.ops.aten.gelu.default"]))

    # A compressed program entry whose header claims fewer bytes than it inflates to: reading stops at the claim.
    path = os.path.join(D, "pt2_size_lie.pt2")
    rezip(src, path, lambda n, d: d, compress=lambda n: n.endswith("model.json"))
    b = bytearray(open(path, "rb").read())
    at = 0
    while (at := b.find(b"PK\x01\x02", at)) >= 0:
        name_len = int.from_bytes(b[at + 28:at + 30], "little")
        if b[at + 46:at + 46 + name_len].endswith(b"model.json"):
            b[at + 24:at + 28] = (100).to_bytes(4, "little")
        at += 4
    open(path, "wb").write(bytes(b))
    cases.append({"file": "pt2_size_lie.pt2", "kind": "model", "expect": "not a valid .pt2 archive"})

    # torch 2.6's layout with a state-dict pickle that is not one.
    def bad_pickle(name, data):
        if not name.endswith("serialized_state_dict.pt"):
            return data
        out = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(data)) as zin, zipfile.ZipFile(out, "w") as zout:
            for info in zin.infolist():
                zout.writestr(info, b"\x80\x02\xfe." if info.filename.endswith("data.pkl") else zin.read(info))
        return out.getvalue()
    case("pt2_bad_pickle.pt2", "opcode 0xfe", bad_pickle, base=src26)


# Models the fuzz targets found, kept as they were written (not generated here), with their expected errors.
def narrow_cases(model):
    """Hostile quantized weights: MatMulNBits and GatherBlockQuantized (com.microsoft) and blocked
    DequantizeLinear whose packed data, block size, bit width, scales or zero points do not fit."""

    def nbits(name, expect, k=64, n=8, bits=4, block=32, b_bytes=None, scales=None, zp=None, attrs=None,
              b_input=False):
        kb = (k + block - 1) // block if block > 0 else 1
        blob = block * bits // 8 if bits in (2, 4, 8) and block > 0 else 4
        b = np.zeros(b_bytes if b_bytes is not None else n * kb * blob, np.uint8)
        inits = [numpy_helper.from_array(scales if scales is not None else np.ones(n * kb, np.float32), "s")]
        ins = ["a", "b", "s"]
        inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, k])]
        if b_input:
            inputs.append(helper.make_tensor_value_info("b", TensorProto.UINT8, list(b.shape)))
        else:
            inits.append(numpy_helper.from_array(b, "b"))
        if zp is not None:
            inits.append(numpy_helper.from_array(zp, "zp"))
            ins.append("zp")
        kw = dict(K=k, N=n, bits=bits, block_size=block)
        kw.update(attrs or {})
        kw = {key: v for key, v in kw.items() if v is not None}
        node = helper.make_node("MatMulNBits", ins, ["y"], domain="com.microsoft", **kw)
        m = relu_model(inputs=inputs, nodes=[node], inits=inits)
        m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
        model(name, m, expect)

    nbits("matmul_nbits_short_weight.onnx", "need uint8 [8, 2, 16]", b_bytes=200)
    nbits("matmul_nbits_block_24.onnx", "block_size 24 is not a power of two", block=24)
    nbits("matmul_nbits_3_bits.onnx", "bits 3: 2, 4 and 8 are supported", bits=3)
    nbits("matmul_nbits_scales_shape.onnx", "not 8x2 floats", scales=np.ones(5, np.float32))
    nbits("matmul_nbits_scales_int.onnx", "not 8x2 floats", scales=np.ones(16, np.int32))
    nbits("matmul_nbits_zero_points_shape.onnx", "not 8x1 packed codes", zp=np.zeros(3, np.uint8))
    nbits("matmul_nbits_zero_points_int32.onnx", "zero_points are int32", zp=np.zeros(16, np.int32))
    nbits("matmul_nbits_weight_at_run_time.onnx", "must be an initializer", b_input=True)
    nbits("matmul_nbits_no_k.onnx", "missing attribute 'K'", attrs={"K": None})

    def gbq(name, expect, bits=4, block=16, scales_shape=(4, 2), data_shape=(4, 16)):
        data = numpy_helper.from_array(np.zeros(data_shape, np.uint8), "data")
        s = numpy_helper.from_array(np.ones(scales_shape, np.float32), "s")
        node = helper.make_node("GatherBlockQuantized", ["data", "ids", "s"], ["y"], domain="com.microsoft",
                                bits=bits, block_size=block, gather_axis=0, quantize_axis=1)
        ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [2])
        m = relu_model(inputs=[ids], nodes=[node], inits=[data, s])
        m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
        model(name, m, expect)

    gbq("gather_block_quantized_scales_shape.onnx", "needs [4, 2]", scales_shape=(4, 3))
    gbq("gather_block_quantized_3_bits.onnx", "data of type uint8 with bits 3 is not supported", bits=3)
    gbq("gather_block_quantized_block_8.onnx", "block_size 8 is not a power of two of at least 16", block=8)

    x = helper.make_tensor("wq", TensorProto.INT4, [8, 4], [1] * 32)
    s = numpy_helper.from_array(np.ones((3, 4), np.float32), "ws")
    dq = helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], axis=0, block_size=4)
    mm = helper.make_node("MatMul", ["x", "w"], ["y"])
    inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    model("dequantize_blocked_scale_shape.onnx", relu_model(inputs=[inp], nodes=[dq, mm], inits=[x, s], opset=21),
          "a blocked scale must be [2, 4]")


FOUND = {"resize_huge_sizes.onnx": "is too large (at most", "resize_empty_axis.onnx": "resizes an empty axis"}


def main():
    cases = []
    for f in os.listdir(D):
        p = os.path.join(D, f)
        if f in FOUND:
            continue
        if f.endswith(".onnx") or (os.path.isdir(p) and f.startswith("artifact_")):
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)

    def model(name, m_or_bytes, expect):
        data = m_or_bytes if isinstance(m_or_bytes, bytes) else m_or_bytes.SerializeToString()
        open(os.path.join(D, name), "wb").write(data)
        cases.append({"file": name, "kind": "model", "expect": expect})

    good = relu_model().SerializeToString()
    model("truncated.onnx", good[: len(good) // 2], "not a valid ONNX model")
    model("random_bytes.onnx", bytes(np.random.default_rng(1).integers(0, 256, 300, dtype=np.uint8)), "not a valid ONNX model")
    model("empty.onnx", b"", "the model has no graph")
    big = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    del big.dims[:]
    big.dims.extend([1 << 20, 1 << 20, 1 << 20])
    model("huge_dims.onnx", relu_model(inits=[big]), "too many elements")
    short = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    short.dims[0] = 40
    model("short_raw_data.onnx", relu_model(inits=[short]), "raw data holds 16 bytes")
    neg = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    neg.type.tensor_type.shape.dim[0].dim_value = -4
    model("negative_dim.onnx", relu_model(inputs=[neg]), "negative")
    model("undefined_input.onnx", relu_model(nodes=[helper.make_node("Relu", ["nope"], ["y"])]), "which no node, input or initializer defines")
    model("undefined_output.onnx", relu_model(outputs=[helper.make_tensor_value_info("ghost", TensorProto.FLOAT, None)]), "'ghost'")
    model("duplicate_output.onnx", relu_model(nodes=[helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"])]), "defined more than once")
    cyc = relu_model(nodes=[helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Neg", ["a"], ["b"])],
                     outputs=[helper.make_tensor_value_info("b", TensorProto.FLOAT, None)])
    model("cycle.onnx", cyc, "which no node, input or initializer defines")
    dom = relu_model(nodes=[helper.make_node("Relu", ["x"], ["y"], domain="com.example")])
    model("unknown_domain.onnx", dom, "domain 'com.example'")
    # Found by fuzzing: a LayerNormalization without its required Scale.
    model("layernorm_no_scale.onnx", relu_model(nodes=[helper.make_node("LayerNormalization", ["x"], ["y"])]),
          "missing input 1")
    # Found by fuzzing (third session): an Attention with 3-D Q and 4-D K and V.
    model("attention_rank_mismatch.onnx", relu_model(
        inputs=[helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 4, 8]),
                helper.make_tensor_value_info("k", TensorProto.FLOAT, [1, 2, 4, 4])],
        nodes=[helper.make_node("Attention", ["q", "k", "k"], ["y"], q_num_heads=2, kv_num_heads=2)],
        opset=23), "Q, K and V must have one rank")
    # onnxruntime's attention ops in forms wgslc refuses by node name: MultiHeadAttention with QKV packed into the
    # query (no key or value), RotaryEmbedding with position_ids of another sequence length.
    def ms_model(inputs, node, inits=()):
        m = relu_model(inputs=inputs, nodes=[node], inits=inits)
        m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
        return m

    model("mha_packed_qkv.onnx", ms_model(
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 4, 2, 3, 8])],
        helper.make_node("MultiHeadAttention", ["q"], ["y"], domain="com.microsoft", num_heads=2)),
        "packed QKV or KV")
    model("rotary_positions_shape.onnx", ms_model(
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16]),
         helper.make_tensor_value_info("pos", TensorProto.INT64, [1, 5])],
        helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain="com.microsoft"),
        [numpy_helper.from_array(np.ones((8, 4), np.float32), "cos"),
         numpy_helper.from_array(np.ones((8, 4), np.float32), "sin")]),
        "position_ids are [1, 5], not [1, 3]")
    # Found by fuzzing (third session): a loss node without outputs (its import wrote output 0 directly).
    model("loss_without_outputs.onnx", relu_model(
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5]),
                helper.make_tensor_value_info("t", TensorProto.INT64, [3])],
        nodes=[helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], [])]), "the node has no outputs")
    # Found by fuzzing (fourth session): a scalar input (CumSum's axis) given as an empty tensor.
    model("scalar_input_empty.onnx", relu_model(
        nodes=[helper.make_node("CumSum", ["x", "axis"], ["y"])],
        inits=[numpy_helper.from_array(np.zeros(0, np.int64), "axis")]), "the axis input must hold one value")
    model("unsupported_op.onnx", relu_model(nodes=[helper.make_node("NonZero", ["x"], ["y"])]), "unsupported op 'NonZero'")
    model("dtype_mismatch.onnx", relu_model(
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]), helper.make_tensor_value_info("i", TensorProto.INT64, [2, 3])],
        nodes=[helper.make_node("Add", ["x", "i"], ["y"])]), "input dtypes differ")
    model("unbound_dim.onnx", relu_model(inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])]), "unbound symbolic dimensions")
    model("complex64.onnx", relu_model(inputs=[helper.make_tensor_value_info("x", TensorProto.COMPLEX64, [2, 3])],
                                       outputs=[helper.make_tensor_value_info("y", TensorProto.COMPLEX64, None)]), "complex tensors are not supported")
    model("float8e8m0.onnx", relu_model(nodes=[helper.make_node("Cast", ["x"], ["c"], to=TensorProto.FLOAT8E8M0),
                                               helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT)]), "float8e8m0 tensors are not supported")
    for name, loc, expect in [("external_absolute.onnx", "/etc/passwd", "escapes the model's directory"),
                              ("external_escape.onnx", "../../secret.bin", "escapes the model's directory"),
                              ("external_missing.onnx", "missing.bin", "cannot read external data")]:
        t = numpy_helper.from_array(np.zeros(4, np.float32), "w")
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        for k, v in [("location", loc), ("offset", "0"), ("length", "16")]:
            e = t.external_data.add()
            e.key, e.value = k, v
        model(name, relu_model(inits=[t], nodes=[helper.make_node("Add", ["x", "w"], ["y"])]), expect)
    # If nodes nested 200 deep: each then-branch a graph holding the next If. Python's protobuf refuses to build
    # that, so the wire bytes are written by hand and appended to the model as a second `graph` field (protobuf
    # merges it into the first). Past its recursion limit a decoder must refuse cleanly, not overflow the stack.
    def varint(n):
        out = b""
        while True:
            out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
            n >>= 7
            if not n:
                return out

    def ld(field, payload):
        return varint(field << 3 | 2) + varint(len(payload)) + payload

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "leaf", [], []).SerializeToString()
    for _ in range(200):
        attr = ld(1, b"then_branch") + varint(20 << 3) + varint(5) + ld(6, graph)
        node = ld(1, b"c") + ld(2, b"y") + ld(4, b"If") + ld(5, attr)
        graph = ld(1, node)
    deep = relu_model().SerializeToString() + ld(7, graph)
    model("nested_subgraphs.onnx", deep, "recursion limit reached")
    # Artifacts: one valid artifact is made by the test itself (it needs the compiler); these are tampered plans.
    plan = {"format": "wgslc-plan", "version": 2, "inputs": [], "outputs": [], "buffers": [{"name": "a", "size": 16, "kind": "intermediate"}],
            "weights": [],
            "kernels": [{"name": "k", "wgsl": "kernels/k.wgsl", "entry_point": "main",
                         "bindings": [{"binding": 0, "buffer": 0, "offset": 0, "size": 16, "access": "read_write"}], "workgroups": [1, 1, 1]}],
            "dispatches": [0]}
    wgsl = "@group(0) @binding(0) var<storage, read_write> out: array<f32>;\n@compute @workgroup_size(1)\nfn main() { out[0] = 1.0; }\n"

    def safetensors(tensors):
        """The safetensors format by hand: a little-endian u64 header length, a JSON header, the bytes."""
        header, blob = {}, b""
        for name, arr in tensors.items():
            data = arr.tobytes()
            header[name] = {"dtype": {"float32": "F32", "int32": "I32"}[str(arr.dtype)], "shape": list(arr.shape),
                            "data_offsets": [len(blob), len(blob) + len(data)]}
            blob += data
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        return len(h).to_bytes(8, "little") + h + blob

    def artifact(name, mutate, expect, kernel=wgsl, weights=True):
        d = os.path.join(D, name)
        os.makedirs(os.path.join(d, "kernels"))
        p = json.loads(json.dumps(plan))
        mutate(p)
        json.dump(p, open(os.path.join(d, "plan.json"), "w"))
        if kernel is not None:
            open(os.path.join(d, "kernels", "k.wgsl"), "w").write(kernel)
        if weights:
            tensors = weights if isinstance(weights, dict) else {}
            open(os.path.join(d, "weights.safetensors"), "wb").write(safetensors(tensors))
        cases.append({"file": name, "kind": "artifact", "expect": expect})

    artifact("artifact_bad_version", lambda p: p.update(version=99), "schema version 99")
    artifact("artifact_old_version", lambda p: (p.update(version=1), p.pop("weights")), "schema version 1 is not supported")
    artifact("artifact_binding_outside_buffer", lambda p: p["kernels"][0]["bindings"][0].update(size=64), "outside buffer")
    artifact("artifact_path_escape", lambda p: p["kernels"][0].update(wgsl="../../../etc/passwd"), "outside the artifact")
    artifact("artifact_subgroups_path_escape", lambda p: p["kernels"][0].update(subgroups="kernels/../../k.wgsl"),
             "outside the artifact")
    artifact("artifact_missing_kernel", lambda p: None, "cannot read 'kernels/k.wgsl'", kernel=None)
    artifact("artifact_invalid_wgsl", lambda p: None, "kernel 'k'", kernel="this is not wgsl")
    artifact("artifact_missing_weights", lambda p: None, "weights.safetensors", weights=False)
    weight = {"name": "w", "shape": [4], "storage": "f32", "buffer": 1, "offset": 0}
    add_weight = lambda p, **kw: (p["buffers"].append({"name": "weights0", "size": 16, "kind": "weight"}),
                                  p["weights"].append({**weight, **kw}))
    artifact("artifact_weight_missing_tensor", add_weight, "weight 'w'")
    artifact("artifact_weight_wrong_shape", add_weight, "the plan expects F32 [4]", weights={"w": np.zeros(2, np.float32)})
    artifact("artifact_weight_wrong_dtype", add_weight, "the plan expects F32 [4]", weights={"w": np.zeros(4, np.int32)})
    artifact("artifact_weight_outside_buffer", lambda p: add_weight(p, offset=256), "outside its weight buffer",
             weights={"w": np.zeros(4, np.float32)})
    artifact("artifact_overlapping_writable_bindings", lambda p: p["kernels"][0]["bindings"].append(
        {"binding": 1, "buffer": 0, "offset": 0, "size": 16, "access": "read_write"}), "overlapping writable ranges")
    artifact("artifact_unknown_field", lambda p: p.update(extra=1), "unknown field")
    # A dtype outside the schema's enum (both runtimes read it from the schema: serde's enum, wgslc.js's tables).
    artifact("artifact_unknown_dtype", lambda p: (p["buffers"].append({"name": "x", "size": 16, "kind": "input"}),
             p["inputs"].append({"name": "x", "dtype": "float99", "shape": [4], "storage": "f32", "buffer": 1})),
             "unknown variant `float99`")
    artifact("artifact_too_many_workgroups", lambda p: p["kernels"][0].update(workgroups=[70000, 1, 1]), "workgroups")
    artifact("artifact_reads_and_writes_one_buffer", lambda p: p["kernels"][0]["bindings"].append(
        {"binding": 1, "buffer": 0, "offset": 0, "size": 16, "access": "read"}), "both read-only and read-write")
    # Ranged dims: an input whose ranged axis is not factor · max in its shape, a kernel scaled along a fourth axis.
    def ranged(p, axis=1, extent=8, scale=None):
        p["buffers"].append({"name": "x", "size": 4 * extent, "kind": "input"})
        p["buffers"].append({"name": "dims", "size": 4, "kind": "input"})
        p["inputs"].append({"name": "x", "dtype": "float32", "shape": [1, extent], "storage": "f32", "buffer": 1,
                            "ranged": [{"axis": axis, "dim": 0, "factor": 1}]})
        p["ranges"] = {"dims": [{"name": "S", "min": 1, "max": 32}], "buffer": 2}
        if scale:
            p["kernels"][0]["scale"] = scale
    artifact("artifact_range_axis_mismatch", ranged, "'x' axis 1 does not follow a dim of the plan")
    artifact("artifact_range_bad_scale", lambda p: ranged(p, extent=32, scale={"axis": 3, "dim": 0}),
             "scales its workgroups by a dim or axis the plan lacks")

    # A decoder whose program writes its int64 attention_mask, stored as 32-bit floats: the loop writes its inputs as
    # integers.
    def decoder(p):
        spec = lambda name, dtype, shape, storage, buf: {"name": name, "dtype": dtype, "shape": shape,
                                                         "storage": storage, "buffer": buf}
        p["buffers"] += [{"name": n, "size": s, "kind": "input"} for n, s in [("ids", 4), ("mask", 8), ("row", 4),
                                                                               ("cache", 8)]]
        p["buffers"] += [{"name": n, "size": 4, "kind": "output"} for n in ("logits", "next")]
        p["inputs"] = [spec("input_ids", "int64", [1, 1], "i32", 1), spec("attention_mask", "int64", [1, 2], "f32", 2),
                       spec("wgslc.cache_row", "int64", [1], "i32", 3), spec("past", "float32", [1, 2], "f32", 4)]
        p["outputs"] = [spec("logits", "float32", [1], "f32", 5), spec("next_token", "int64", [1], "i32", 6)]
        p["decoder"] = {"capacity": 2, "rows": 1, "state": [{"input": 3, "axis": 1}],
                        "steps": [{"name": "decode", "tokens": 1, "dispatches": [0], "input_ids": 0,
                                   "attention_mask": 1, "logits": 0, "next_token": 1, "present": [], "cache_row": 2}],
                        "program": {"constants": [], "start": [], "chunk": [], "last": [], "step": [{"run": 0}],
                                    "decode_start": [{"write": {"input": 1, "values": {"mask": {
                                        "len": {"c": 2}, "ranges": [[{}, {"len": 1}]]}}}}]}}
    artifact("artifact_decoder_mask_stored_as_float", decoder, "which is missing or an int64 stored as floats")

    # A decode step that writes the loop's inputs: several steps are one submit, so only the GPU may move them on.
    def writes_per_step(p):
        decoder(p)
        p["inputs"][1]["storage"] = "i32"
        p["decoder"]["program"]["step"].insert(0, {"write": {"input": 2, "values": {"iota": {
            "len": {"c": 1}, "start": {"pos": 1}}}}})
    artifact("artifact_decoder_program_writes_per_step", writes_per_step, "writes after its commands or where it may not")

    # A decode step whose advance kernel (which may write the loop's inputs) is one of the plan's dispatches.
    def advance_dispatched(p):
        decoder(p)
        p["inputs"][1]["storage"] = "i32"
        p["buffers"].append({"name": "tokens", "size": 8, "kind": "input"})
        p["inputs"].append({"name": "wgslc.tokens", "dtype": "int64", "shape": [2], "storage": "i32", "buffer": 7})
        p["decoder"]["tokens"] = 4
        p["decoder"]["steps"][0]["advance"] = {"greedy": 0, "sample": 0}
    artifact("artifact_decoder_advance_dispatched", advance_dispatched, "advances on the GPU")

    def conv_transpose(name, w_shape, expect, **attrs):
        node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])
        w = numpy_helper.from_array(np.ones(w_shape, np.float32), "w")
        model(name, relu_model(inputs=[x], nodes=[node], inits=[w]), expect)

    conv_transpose("convtranspose_channels.onnx", [4, 2, 3, 3], "must have X's 3 input channels first")
    conv_transpose("convtranspose_huge_strides.onnx", [3, 2, 3, 3], "strides, dilations or padding too large",
                   strides=[1 << 62, 1], dilations=[1, 9 * 10**18])
    narrow_cases(model)
    pt2_cases(cases)
    cases.extend({"file": f, "kind": "model", "expect": e} for f, e in FOUND.items())
    json.dump(cases, open(os.path.join(D, "cases.json"), "w"), indent=1)
    print(f"{len(cases)} malformed cases")


if __name__ == "__main__":
    main()
