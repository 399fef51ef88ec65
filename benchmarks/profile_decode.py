"""Profile batch-1 decode: where a decode step's time goes (device kernels vs. everything else).

Runs a short prompt with N new tokens through the Engine under torch.profiler, after a warm-up,
and reports the wall time per step, the device-kernel time per step (the sum over kernels, so
idle gaps between kernels show up as the difference), and the kernels that take the most time.

Usage (GPU, from benchmarks/):  python3 profile_decode.py [--model-config llama-3-8b] [--tokens 64]
CPU smoke run:                  python benchmarks/profile_decode.py --tiny
"""

from __future__ import annotations

import argparse
import random
import time

from bench_utils import add_common_args, environment, make_model_dir, random_ids, report, start_engine


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--tokens", type=int, default=64, help="new tokens in the profiled request")
    parser.add_argument("--top", type=int, default=12, help="kernels listed")
    return parser.parse_args(argv)


def profile(args: argparse.Namespace) -> dict:
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    engine, vocab = start_engine(args, make_model_dir(args.model_config, args.tiny))
    rng = random.Random(args.seed)
    params = {"max_new_tokens": args.tokens, "ignore_eos": True, "temperature": 0}
    engine.generate(input_ids=[random_ids(rng, 16, vocab)], sampling_params=[params])  # warm-up (graphs, compiles)
    on_gpu = torch.cuda.is_available() and args.device != "cpu"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with torch_profile(activities=activities) as prof:
        start = time.perf_counter()
        engine.generate(input_ids=[random_ids(rng, 16, vocab)], sampling_params=[params])
        if on_gpu:
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
    engine.shutdown()
    return summarize(prof, wall, args.tokens, on_gpu, args.top)


def summarize(prof, wall: float, steps: int, on_gpu: bool, top: int) -> dict:
    events = [e for e in prof.key_averages() if (e.device_time_total if on_gpu else e.self_cpu_time_total) > 0]
    attr = "device_time_total" if on_gpu else "self_cpu_time_total"
    kernels = [e for e in events if not on_gpu or getattr(e, "device_type", None) is not None]
    if on_gpu:  # device kernels only: their self device time, not the CPU ops that launched them
        kernels = [e for e in events if e.self_device_time_total > 0 and e.cpu_time_total == 0] or kernels
        attr = "self_device_time_total"
    kernels.sort(key=lambda e: getattr(e, attr), reverse=True)
    device_us = sum(getattr(e, attr) for e in kernels)
    return {
        "benchmark": "profile_decode",
        "steps": steps,
        "wall_ms_per_step": 1e3 * wall / steps,
        "kernel_ms_per_step": device_us / 1e3 / steps,
        "kernel_fraction_of_wall": device_us / 1e6 / wall,
        "top_kernels": [
            {"name": e.key[:90], "ms_per_step": getattr(e, attr) / 1e3 / steps, "calls_per_step": e.count / steps}
            for e in kernels[:top]
        ],
    }


def main(argv=None) -> dict:
    args = parse_args(argv)
    result = {**environment(), "model_config": args.model_config, "tiny": args.tiny, **profile(args)}
    rows = [
        ("wall ms / step", result["wall_ms_per_step"]),
        ("kernel ms / step", result["kernel_ms_per_step"]),
        ("kernel time / wall", result["kernel_fraction_of_wall"]),
    ]
    rows += [(f"{k['name'][:40]} (x{k['calls_per_step']:.0f})", k["ms_per_step"]) for k in result["top_kernels"]]
    report("profile_decode", result, rows)
    return result


if __name__ == "__main__":
    main()
