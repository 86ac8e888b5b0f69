"""The CUDA kernels a PyTorch callable runs and their GPU time (torch.profiler), for scripts that set torch.compile's
kernels beside `wgslc bench ART --profile`: bench_models.py --torch-profile, torch_prefill_baseline.py --profile."""
import torch


def torch_kernels(fn, args, iters):
    """The CUDA kernels one call of `fn` runs, slowest first: name, launches and GPU µs per call (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn(*args)
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if us > 0 and e.count:
            rows.append({"kernel": e.key[:90], "launches": e.count / iters, "us": round(us / iters, 1)})
    rows.sort(key=lambda r: -r["us"])
    total = sum(r["us"] for r in rows)
    print(f"torch kernels: {total:.1f} us of GPU time per call", flush=True)
    for r in rows[:25]:
        print(f"  {r['us']:9.1f} us  x{r['launches']:<5g} {r['kernel']}", flush=True)
    return {"total_us": round(total, 1), "kernels": rows}
