#!/usr/bin/env python3
"""A YOLOv8n-shaped detector (the ultralytics architecture at width 0.25, depth 0.33: Conv+BN+SiLU, C2f, SPPF,
nearest 2x upsampling, the anchor-free Detect head with its DFL softmax and box decoding; random weights, eval
mode) exported as ultralytics exports it (TorchScript exporter, opset 17) and with the dynamo exporter (opset
20), compiled with wgslc, run with `wgslc run`, and compared with onnxruntime (CPU) on the same 640x640 input:

    python3 scripts/yolov8_check.py --wgslc .bin/wgslc [--out /tmp/yolov8] [--size 640]

No ultralytics package is needed (none ships a YOLOv8n .onnx on PyPI; the weights are random, the graph is the
exported one). Prints one markdown row per exporter; exits non-zero on a mismatch. Needs torch, onnx,
onnxruntime, numpy.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
from torch import nn


class Conv(nn.Module):
    def __init__(self, c1, c2, k=1, s=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=1e-3, momentum=0.03)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c, shortcut):
        super().__init__()
        self.cv1, self.cv2, self.add = Conv(c, c, 3), Conv(c, c, 3), shortcut

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    def __init__(self, c1, c2, n=1, shortcut=False):
        super().__init__()
        self.c = c2 // 2
        self.cv1 = Conv(c1, 2 * self.c, 1)
        self.cv2 = Conv((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, c1, c2, k=5):
        super().__init__()
        c_ = c1 // 2
        self.cv1, self.cv2 = Conv(c1, c_, 1), Conv(c_ * 4, c2, 1)
        self.m = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x):
        y = [self.cv1(x)]
        y.extend(self.m(y[-1]) for _ in range(3))
        return self.cv2(torch.cat(y, 1))


class Detect(nn.Module):
    def __init__(self, nc=80, ch=(64, 128, 256), strides=(8, 16, 32)):
        super().__init__()
        self.nc, self.reg_max, self.strides = nc, 16, strides
        c2, c3 = max(16, ch[0] // 4, 64), max(ch[0], min(nc, 100))
        self.cv2 = nn.ModuleList(nn.Sequential(Conv(x, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 64, 1)) for x in ch)
        self.cv3 = nn.ModuleList(nn.Sequential(Conv(x, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, nc, 1)) for x in ch)
        self.register_buffer("proj", torch.arange(16, dtype=torch.float32).view(1, 16, 1, 1))

    def forward(self, xs):
        xs = [torch.cat((self.cv2[i](x), self.cv3[i](x)), 1) for i, x in enumerate(xs)]
        b = xs[0].shape[0]
        anchors, strides = [], []
        for x, s in zip(xs, self.strides):
            h, w = x.shape[2:]
            sy, sx = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
            anchors.append(torch.stack((sx, sy), -1).view(-1, 2))
            strides.append(torch.full((h * w, 1), float(s)))
        anchors, strides = torch.cat(anchors).transpose(0, 1), torch.cat(strides).transpose(0, 1)
        x = torch.cat([xi.view(b, 4 * self.reg_max + self.nc, -1) for xi in xs], 2)
        box, cls = x.split((4 * self.reg_max, self.nc), 1)
        a = box.shape[-1]
        # DFL: the expected bin of a softmax over 16 distance bins per side, as a 1x1 conv with weights 0..15.
        dist = nn.functional.conv2d(box.view(b, 4, 16, a).transpose(2, 1).softmax(1), self.proj).view(b, 4, a)
        lt, rb = dist.chunk(2, 1)
        x1y1, x2y2 = anchors.unsqueeze(0) - lt, anchors.unsqueeze(0) + rb
        dbox = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * strides
        return torch.cat((dbox, cls.sigmoid()), 1)


class YOLOv8n(nn.Module):
    def __init__(self):
        super().__init__()
        self.b = nn.ModuleList([Conv(3, 16, 3, 2), Conv(16, 32, 3, 2), C2f(32, 32, 1, True), Conv(32, 64, 3, 2),
                                C2f(64, 64, 2, True), Conv(64, 128, 3, 2), C2f(128, 128, 2, True),
                                Conv(128, 256, 3, 2), C2f(256, 256, 1, True), SPPF(256, 256)])
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.h12, self.h15 = C2f(384, 128), C2f(192, 64)
        self.d16, self.h18 = Conv(64, 64, 3, 2), C2f(192, 128)
        self.d19, self.h21 = Conv(128, 128, 3, 2), C2f(384, 256)
        self.detect = Detect()

    def forward(self, x):
        feats = []
        for m in self.b:
            x = m(x)
            feats.append(x)
        p4 = self.h12(torch.cat((self.up(feats[9]), feats[6]), 1))
        p3 = self.h15(torch.cat((self.up(p4), feats[4]), 1))
        n4 = self.h18(torch.cat((self.d16(p3), p4), 1))
        n5 = self.h21(torch.cat((self.d19(n4), feats[9]), 1))
        return self.detect([p3, n4, n5])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wgslc", required=True)
    ap.add_argument("--out", default="/tmp/yolov8")
    ap.add_argument("--size", type=int, default=640)
    args = ap.parse_args()
    import onnxruntime as ort

    torch.manual_seed(0)
    m = YOLOv8n().eval()
    # Running statistics as a trained model has them (random, positive variances), so BN is not an identity.
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.1, 0.1)
            mod.running_var.uniform_(0.5, 1.5)
    os.makedirs(args.out, exist_ok=True)
    x = torch.rand(1, 3, args.size, args.size)
    np.save(os.path.join(args.out, "input.npy"), x.numpy())
    rows, bad = [], 0
    for label, kw in [("TorchScript exporter, opset 17 (as ultralytics exports)", dict(dynamo=False, opset_version=17)),
                      ("dynamo exporter, opset 20", dict(dynamo=True, opset_version=20))]:
        tag = "dynamo" if kw["dynamo"] else "ts"
        path = os.path.join(args.out, f"yolov8n_{tag}.onnx")
        try:
            torch.onnx.export(m, (x,), path, input_names=["images"], output_names=["output0"], **kw)
        except Exception as e:  # noqa: BLE001 - an exporter failing is a row, not a crash
            rows.append(f"| {label} | export failed: {str(e).splitlines()[0][:120]} | | |")
            continue
        want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"images": x.numpy()})[0]
        art = os.path.join(args.out, f"art_{tag}")
        c = subprocess.run([args.wgslc, "compile", path, "-o", art, "--quiet"], capture_output=True, text=True)
        if c.returncode:
            bad += 1
            rows.append(f"| {label} | compile error: {c.stderr.strip().splitlines()[-1][:160]} | | |")
            continue
        out = os.path.join(args.out, f"out_{tag}")
        r = subprocess.run([args.wgslc, "run", art, "--input", os.path.join(args.out, "input.npy"), "-o", out,
                            "--quiet"], capture_output=True, text=True)
        if r.returncode:
            bad += 1
            rows.append(f"| {label} | run error: {r.stderr.strip().splitlines()[-1][:160]} | | |")
            continue
        got = np.load(os.path.join(out, "output_0.npy"))
        err = np.abs(got.astype(np.float64) - want)
        ok = got.shape == want.shape and bool(np.all(err <= 1e-3 + 1e-3 * np.abs(want)))
        bad += not ok
        disp = len(json.load(open(os.path.join(art, "plan.json")))["dispatches"])
        rows.append(f"| {label} | {'match' if ok else 'MISMATCH'} {list(got.shape)} | {disp} dispatches | "
                    f"max abs {err.max():.1e}, max rel {(err / (np.abs(want) + 1e-6)).max():.1e} |")
    print("| YOLOv8n-shaped, 640x640 | against onnxruntime | artifact | error |")
    print("| --- | --- | --- | --- |")
    print("\n".join(rows))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
