#!/usr/bin/env python3
"""Greedy decoding of an onnxruntime-genai builder model by onnxruntime-genai itself on onnxruntime's WebGPU
provider: the loop the builder's format is tuned for (the provider's kernels, its shared past/present buffer, its own
search), as a web_decode_bench.py row.

    PYTHONPATH=STACK python3 scripts/ort_genai_decode.py MODEL_DIR PROMPT.npy NEW ROUNDS [VARIANT ...]

STACK holds `onnxruntime_genai/` (the onnxruntime-genai wheel's package) and `onnxruntime/` holding only
`capi/libonnxruntime.so.*` from the onnxruntime-webgpu wheel (onnxruntime-genai loads the library of the first
`onnxruntime` package on the path) and an empty `__init__.py`. A VARIANT is `builder` (genai_config.json's provider
options as the builder writes them), `fast` (WebGPU validation off) or `capture` (graph capture on too, where every
node of the model runs on the provider). Prints one JSON line per variant: tok/s of each round (the tokens after the first over
the decode loop's time, as `wgslc generate` counts them), the median, the prefill time and the tokens.
"""

import json
import statistics
import sys
import time

import numpy as np

VARIANTS = {
    "builder": {},
    "fast": {"validationMode": "disabled"},
    "capture": {"enableGraphCapture": "1", "validationMode": "disabled"},
}


def main():
    model, prompt_path, new, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    variants = sys.argv[5:] or list(VARIANTS)
    import onnxruntime_genai as og

    prompt = np.load(prompt_path).reshape(-1).astype(np.int32).tolist()
    for v in variants:
        row = {"runtime": f"onnxruntime-genai {og.__version__}, WebGPU provider ({v})"}
        try:
            cfg = og.Config(model)
            cfg.clear_providers()
            cfg.append_provider("webgpu")
            for k, val in VARIANTS[v].items():
                cfg.set_provider_option("webgpu", k, val)
            t = time.perf_counter()
            m = og.Model(cfg)
            row["load_ms"] = (time.perf_counter() - t) * 1e3
            runs, prefill = [], []
            for r in range(rounds + 1):  # the first round untimed: the GPU's clocks rise while it runs
                p = og.GeneratorParams(m)
                p.set_search_options(max_length=len(prompt) + new, do_sample=False)
                g = og.Generator(m, p)
                t0 = time.perf_counter()
                g.append_tokens(prompt)
                t1 = time.perf_counter()
                while not g.is_done():
                    g.generate_next_token()
                t2 = time.perf_counter()
                tokens = [int(x) for x in g.get_sequence(0)][len(prompt):]
                if r > 0:
                    runs.append((len(tokens) - 1) / (t2 - t1))
                    prefill.append((t1 - t0) * 1e3)
                del g
            row.update(tok_s=statistics.median(runs), runs=runs, prefill_ms=statistics.median(prefill), tokens=tokens)
        except Exception as e:  # a variant the model or the adapter does not take is reported, not fatal
            row["error"] = str(e).strip().splitlines()[-1][:400]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
