"""Profile JSON decoding: where the host time of each scheduler step goes, beside the device time.

Runs json_decode's workload (one mode) through the Engine: a warm pass, then a timed pass with
host timers around the scheduler's phases, and the device time of every forward (CUDA events).
Steps that are not overlapped leave the GPU idle while the host reads the sampled tokens back,
appends them (jump-forward included), schedules and prepares the next batch: the report shows
how the wall time splits into device time and that idle host time, and what the host did.

Usage (GPU, from benchmarks/):  python3 profile_json.py [--mode jump-forward|mixed|overlapped|no-jump-forward|free]
CPU smoke run:                  python benchmarks/profile_json.py --tiny
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import time
from collections import defaultdict

from bench_utils import (
    ForwardTimer,
    add_common_args,
    environment,
    make_model_dir,
    random_ids,
    report,
    start_engine,
)
from json_decode import SCHEMA

MODES = ("jump-forward", "mixed", "overlapped", "no-jump-forward", "free")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, default_config="qwen2.5-7b")
    parser.add_argument("--mode", choices=MODES, default="jump-forward")
    parser.add_argument("--num-requests", type=int, default=None)
    parser.add_argument(
        "--open-schema", action="store_true", help="the schema without additionalProperties: false (grammar form)"
    )
    args = parser.parse_args(argv)
    args.schema = {k: v for k, v in SCHEMA.items() if k != "additionalProperties"} if args.open_schema else SCHEMA
    args.num_requests = args.num_requests or (4 if args.tiny else 128)
    return args


class PhaseTimers:
    """Host seconds and calls per wrapped callable (wrappers installed on objects or classes)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, owner, name: str, label: str) -> None:
        inner = getattr(owner, name)

        @functools.wraps(inner)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - start
                self.calls[label] += 1

        setattr(owner, name, timed)

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def profile(args: argparse.Namespace) -> dict:
    import torch

    from sgl_runtime.constrained.grammar.compiler import GrammarConstraint, GrammarMatcher
    from sgl_runtime.constrained.mask_workers import MaskWorkers
    from sgl_runtime.sampler import Sampler
    from sgl_runtime.scheduler import batch_result, overlap
    from sgl_runtime.scheduler import scheduler as scheduler_module
    from sgl_runtime.scheduler.schedule_batch import ScheduleBatch

    model_dir = make_model_dir(args.model_config, args.tiny)
    engine, vocab = start_engine(args, model_dir, disable_jump_forward=args.mode == "no-jump-forward")
    engine.scheduler.decode = engine.scheduler.decode.replace(
        defer_jump_forward=args.mode != "mixed",
        overlap_jump_forward_min_batch=16 if args.mode == "overlapped" else 0,
        mix_jump_forward_min_batch=1 if args.mode == "mixed" else 0,
    )
    if args.mode == "free":
        params = {"max_new_tokens": 48, "ignore_eos": True, "temperature": 0}
    else:
        params = {"max_new_tokens": 256, "json_schema": json.dumps(args.schema), "temperature": 0}
    rng = random.Random(args.seed)
    prompt_len = 8 if args.tiny else 64
    for _ in range(2):  # compile + warm pass (first masks, kernel shapes)
        engine.generate(
            input_ids=[random_ids(rng, prompt_len, vocab) for _ in range(args.num_requests)],
            sampling_params=[params] * args.num_requests,
        )

    timers = PhaseTimers()
    sched = engine.scheduler
    timers.wrap(sched, "step", "scheduler step (total)")
    timers.wrap(sched, "_get_new_prefill_batch", "schedule: prefill batch")
    timers.wrap(sched, "_get_decode_batch", "schedule: decode batch")
    timers.wrap(sched, "_collect_outputs", "collect outputs")
    timers.wrap(sched, "_read_back", "overlap: read back (incl. wait)")
    timers.wrap(ScheduleBatch, "prepare", "prepare batch (slots, index tensors)")
    timers.wrap(Sampler, "__call__", "sampler launch (masks, penalties)")
    timers.wrap(scheduler_module, "process_batch_logits", "logits -> tokens (sample, wait, append)")
    timers.wrap(batch_result, "jump_forward_", "append forced tokens")
    timers.wrap(overlap.InflightDecode, "token_ids", "overlap: wait for ids")
    timers.wrap(MaskWorkers, "wait", "masks: wait for the mask workers")
    timers.wrap(GrammarConstraint, "bitmask", "masks: grammar bitmask (any thread)")
    timers.wrap(GrammarMatcher, "_budget_plan", "masks: grammar budget plan (any thread)")
    forward_timer = ForwardTimer(engine)  # wraps model_runner.forward (device time per forward)
    timers.wrap(sched.model_runner, "forward", "forward launch (host)")
    prompts = [random_ids(rng, prompt_len, vocab) for _ in range(args.num_requests)]
    forward_timer.reset()
    timers.reset()
    start = time.perf_counter()
    out = engine.generate(input_ids=prompts, sampling_params=[params] * args.num_requests)
    wall = time.perf_counter() - start
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    busy = forward_timer.busy_seconds()
    steps = forward_timer.forwards
    per_step = {label: round(1000 * s / steps, 3) for label, s in sorted(timers.seconds.items(), key=lambda kv: -kv[1])}
    tokens = sum(o["meta_info"]["completion_tokens"] for o in out)
    return {
        "mode": args.mode,
        "open_schema": args.open_schema,
        "model_config": args.model_config,
        "tiny": args.tiny,
        **environment(),
        "wall_s": wall,
        "device_s": busy,
        "idle_s": wall - busy,
        "forwards": steps,
        "output_tokens": tokens,
        "by_kind": forward_timer.by_kind(),
        "host_ms_per_forward": per_step,
        "calls": dict(timers.calls),
    }


def main(argv=None) -> dict:
    args = parse_args(argv)
    result = profile(args)
    rows = [
        ("wall s", result["wall_s"]),
        ("device s (forwards)", result["device_s"]),
        ("GPU idle s", result["idle_s"]),
        ("forwards", result["forwards"]),
        ("output tokens", result["output_tokens"]),
    ]
    rows += [(f"host ms/forward: {label}", ms) for label, ms in result["host_ms_per_forward"].items()]
    report("profile_json", result, rows)
    return result


if __name__ == "__main__":
    main()
