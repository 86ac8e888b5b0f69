#!/usr/bin/env python3
"""Writes the ONNX backend node test suite (1,884 cases with onnx==1.23.2) in the ONNX repo's layout:

    OUT/<case>/model.onnx
    OUT/<case>/test_data_set_<n>/input_<i>.pb, output_<i>.pb
    OUT/<case>/meta.json            {"rtol": …, "atol": …}

Run it from a venv with conformance/requirements.txt. The generated files are not committed.
"""

import json
import os
import shutil
import sys
import warnings

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test.case import node


def to_proto(x, name):
    if isinstance(x, onnx.TensorProto):
        return x
    if isinstance(x, (np.ndarray, np.generic)):
        return numpy_helper.from_array(np.asarray(x), name)
    return None  # sequences, optionals, maps: the runner reports them as unsupported


def main():
    out = sys.argv[1]
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)
    for case in cases:
        d = os.path.join(out, case.name)
        os.makedirs(d)
        onnx.save(case.model, os.path.join(d, "model.onnx"))
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump({"rtol": case.rtol, "atol": case.atol}, f)
        for n, (inputs, outputs) in enumerate(case.data_sets):
            sd = os.path.join(d, f"test_data_set_{n}")
            os.makedirs(sd)
            for kind, values in (("input", inputs), ("output", outputs)):
                for i, x in enumerate(values):
                    p = to_proto(x, f"{kind}_{i}")
                    path = os.path.join(sd, f"{kind}_{i}.pb")
                    if p is None:
                        open(path + ".unsupported", "w").write(type(x).__name__)
                    else:
                        open(path, "wb").write(p.SerializeToString())
    print(f"{len(cases)} cases written to {out}")


if __name__ == "__main__":
    main()
