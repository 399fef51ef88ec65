"""Usage: python benchmarks/shared_prefix.py [--model-config llama-3-8b] [--tiny]

Shared-prefix workload through sgl_runtime.Engine on dummy weights: 64 groups x 16 requests, each
group sharing a 2,048-token system prompt, each request adding a 128-token question and generating
256 tokens (ignore_eos, greedy). All requests are submitted at once (no pre-warming: the scheduler
caches a prompt right after its prefill and defers same-prefix requests by a round so they hit it).
Runs once with the radix cache on and once off (each in its own process) and reports throughput, the
speed-up and the cache hit rate. Prints a JSON line and a table.
"""

from __future__ import annotations

import argparse
import json
import random

from bench_utils import (
    ForwardTimer,
    bench_parser,
    environment,
    make_model_dir,
    profiled_generate,
    random_ids,
    report,
    run_isolated,
    start_engine,
    timed_generate,
)


def parse_args(argv=None) -> argparse.Namespace:
    parser = bench_parser(__doc__)
    parser.add_argument("--num-groups", type=int, default=None, help="groups of requests (default 64)")
    parser.add_argument("--max-running-requests", type=int, default=None, help="the engine's (default: its own)")
    parser.add_argument(
        "--profile", action="store_true", help="radix on only, then the workload again under torch.profiler (kernels)"
    )
    args = parser.parse_args(argv)
    # groups, requests per group, system prompt, question, output tokens
    args.shape = (2, 3, 48, 8, 4) if args.tiny else (64, 16, 2048, 128, 256)
    if args.num_groups:
        args.shape = (args.num_groups, *args.shape[1:])
    return args


def workload(args, vocab: int) -> tuple[list[list[int]], list[list[int]], list[dict]]:
    """(system prompts, requests, their sampling params)."""
    groups, per_group, system_len, question_len, out_len = args.shape
    rng = random.Random(args.seed)
    systems, ids = [], []
    for _ in range(groups):
        systems.append(random_ids(rng, system_len, vocab))
        ids.extend(systems[-1] + random_ids(rng, question_len, vocab) for _ in range(per_group))
    params = [{"max_new_tokens": out_len, "ignore_eos": True, "temperature": 0}] * len(ids)
    return systems, ids, params


def run_mode(args, model_dir: str, radix: bool) -> dict:
    extra = {} if args.max_running_requests is None else {"max_running_requests": args.max_running_requests}
    engine, vocab = start_engine(args, model_dir, disable_radix_cache=not radix, **extra)
    timer = ForwardTimer(engine)
    warm = random.Random(args.seed + 99)
    timed_generate(
        engine, [random_ids(warm, n, vocab) for n in (40, 300)], [{"max_new_tokens": 8, "ignore_eos": True}] * 2
    )
    engine.flush_cache()
    _, ids, params = workload(args, vocab)
    out, latency = timed_generate(engine, ids, params, timer)
    prompt = sum(o["meta_info"]["prompt_tokens"] for o in out)
    cached = sum(o["meta_info"]["cached_tokens"] for o in out)
    completion = sum(o["meta_info"]["completion_tokens"] for o in out)
    sched = engine.scheduler
    busy, by_kind = timer.busy_seconds(), timer.by_kind()  # the timed run's, before any profiled run adds to them
    profile = None
    if args.profile:
        engine.flush_cache()
        profile = profiled_generate(engine, ids, params)
    return {
        "profile": profile,
        "seconds": latency,
        "output_tok_s": completion / latency,
        "total_tok_s": (prompt + completion) / latency,
        "cache_hit_rate": cached / prompt,
        "requests": len(out),
        "gpu_busy_fraction": busy / latency,
        "by_kind": by_kind,
        "max_running_requests": sched.max_running_requests,
        "kv_pool_tokens": sched.max_total_num_tokens,
    }


def main(argv=None) -> dict:
    args = parse_args(argv)
    model_dir = make_model_dir(args.model_config, args.tiny)
    on = run_isolated(run_mode, not args.tiny, args, model_dir, True)
    if args.profile:
        print(json.dumps({"benchmark": "shared_prefix_profile", **environment(), "radix_on": on}))
        return on
    off = run_isolated(run_mode, not args.tiny, args, model_dir, False)
    result = {
        "model_config": args.model_config,
        "tiny": args.tiny,
        **environment(),
        "radix_on": on,
        "radix_off": off,
        "speedup": off["seconds"] / on["seconds"],
    }
    report(
        "shared_prefix",
        result,
        [
            ("radix on: output tok/s", on["output_tok_s"]),
            ("radix on: total tok/s", on["total_tok_s"]),
            ("radix on: cache hit rate", on["cache_hit_rate"]),
            ("radix off: output tok/s", off["output_tok_s"]),
            ("radix off: total tok/s", off["total_tok_s"]),
            ("radix off: cache hit rate", off["cache_hit_rate"]),
            ("speed-up (on / off)", result["speedup"]),
        ]
        + [
            (
                f"radix {label}: {kind} batches (reqs, tokens, device ms each)",
                f"{k['batches']} ({k['requests']}, {k['tokens'] / k['batches']:.0f}, {k['device_ms']:.2f})",
            )
            for label, r in (("on", on), ("off", off))
            for kind, k in sorted(r["by_kind"].items())
        ],
    )
    return result


if __name__ == "__main__":
    main()
