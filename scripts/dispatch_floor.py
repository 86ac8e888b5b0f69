#!/usr/bin/env python3
"""What one dependent dispatch costs on this adapter: chains of N Add nodes (each reads the one before), compiled
with --no-fuse so that every node is a dispatch of its own, replayed by `wgslc bench` (submits of up to 64
dispatches, a pass each):

    python3 scripts/dispatch_floor.py --wgslc .bin/wgslc [--lengths 1,32,128] [--elements 256,1048576]

The slope of the replay's median time over N is the cost of a dispatch that waits on the one before it (wgpu puts
a barrier between them): launch, barrier and the kernel's own latency, with next to no work at 256 elements.
"""
import argparse, json, os, subprocess
import onnx
from onnx import TensorProto as T, helper


def chain(path, n, elements):
    nodes, prev = [], "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        nodes.append(helper.make_node("Add", [prev, "x"], [out], name=f"add_{i}"))
        prev = out
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", T.FLOAT, [1, elements])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, elements])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wgslc", required=True)
    ap.add_argument("--out", default="/tmp/dispatch_floor")
    ap.add_argument("--lengths", default="1,32,128")
    ap.add_argument("--elements", default="256,1048576")
    ap.add_argument("--iterations", default="200")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for e in map(int, a.elements.split(",")):
        points = []
        for n in map(int, a.lengths.split(",")):
            path, art = os.path.join(a.out, f"chain_{n}_{e}.onnx"), os.path.join(a.out, f"chain_{n}_{e}")
            chain(path, n, e)
            subprocess.run(["rm", "-rf", art], check=True)
            subprocess.run([a.wgslc, "compile", path, "-o", art, "--no-fuse", "--quiet"], check=True)
            r = subprocess.run([a.wgslc, "bench", art, "--iterations", a.iterations], capture_output=True, text=True,
                               check=True)
            first = json.loads(r.stdout.strip().splitlines()[0])
            points.append((n, first.get("dispatches"), first["median_ms"]))
        (n0, _, t0), (n1, _, t1) = points[0], points[-1]
        print(json.dumps({"elements": e, "points": points, "us_per_dispatch": round((t1 - t0) * 1e3 / (n1 - n0), 2)}),
              flush=True)


if __name__ == "__main__":
    main()
