"""Usage: python benchmarks/jump_forward_overlap.py [--batch-sizes 1,2,4,...] [--tiny]

When should jump-forward requests run in overlapped steps? json_decode's JSON workload at several
batch sizes, in one engine, with overlapped jump-forward off (forced text extended step by
step, the host reading each step back before the next launches) and on (forced text joins the
chain of overlapped steps one step late). At batch 1 the step a forced span waits costs more than
the host round trip; at large batch the round trip leaves the GPU idle for every request. Reports
the median of several passes of fresh prompts per (batch size, mode): characters/s and the
overlapped/step-by-step ratio. Prints a JSON line and a table. The scheduler's default
(overlap_jump_forward_min_batch) comes from this crossover on the H200.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics

from bench_utils import (
    bench_parser,
    environment,
    make_model_dir,
    random_ids,
    report,
    start_engine,
    timed_generate,
)
from json_decode import SCHEMA


def parse_args(argv=None) -> argparse.Namespace:
    parser = bench_parser(__doc__, default_config="qwen2.5-7b")
    parser.add_argument("--batch-sizes", default=None, help="comma-separated (default 1,2,4,8,16,32,64,128)")
    parser.add_argument("--passes", type=int, default=None, help="timed passes per batch size and mode (default 3)")
    args = parser.parse_args(argv)
    default = "1,2" if args.tiny else "1,2,4,8,16,32,64,128"
    args.batch_sizes = [int(b) for b in (args.batch_sizes or default).split(",")]
    args.passes = args.passes or (1 if args.tiny else 3)
    args.prompt_len, args.max_tokens = (8, 96) if args.tiny else (64, 256)
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    engine, vocab = start_engine(args, make_model_dir(args.model_config, args.tiny))
    scheduler = engine.scheduler
    params = {"max_new_tokens": args.max_tokens, "json_schema": json.dumps(SCHEMA), "temperature": 0}
    rng = random.Random(args.seed)
    for overlapped in (False, True):  # compiles the schema and every shape of both modes
        scheduler.decode = scheduler.decode.replace(
            overlap_jump_forward_min_batch=int(overlapped), mix_jump_forward_min_batch=0
        )
        timed_generate(
            engine,
            [random_ids(rng, args.prompt_len, vocab) for _ in range(max(args.batch_sizes))],
            [params] * max(args.batch_sizes),
        )
    sweep = []
    for batch in args.batch_sizes:
        row = {"batch": batch}
        for overlapped in (False, True):
            scheduler.decode = scheduler.decode.replace(
                overlap_jump_forward_min_batch=int(overlapped), mix_jump_forward_min_batch=0
            )
            chars_s = []
            for _ in range(args.passes):
                out, seconds = timed_generate(
                    engine, [random_ids(rng, args.prompt_len, vocab) for _ in range(batch)], [params] * batch
                )
                chars_s.append(sum(len(o["text"]) for o in out) / seconds)
            row["overlapped_chars_s" if overlapped else "step_chars_s"] = statistics.median(chars_s)
        row["ratio"] = row["overlapped_chars_s"] / row["step_chars_s"]
        sweep.append(row)
    result = {
        "model_config": args.model_config,
        "tiny": args.tiny,
        **environment(),
        "passes": args.passes,
        "sweep": sweep,
    }
    rows = [
        (
            f"batch {r['batch']}: chars/s step by step / overlapped (ratio)",
            f"{r['step_chars_s']:,.0f} / {r['overlapped_chars_s']:,.0f} ({r['ratio']:.3f})",
        )
        for r in sweep
    ]
    report("jump_forward_overlap", result, rows)
    return result


if __name__ == "__main__":
    main()
