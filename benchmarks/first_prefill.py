"""Usage: python benchmarks/first_prefill.py [--passes 3] [--tiny]

What the first long prefill after start-up pays that later ones do not. offline_throughput's
prefill workload (8 fresh prompts of 2,048 tokens, one new token each) is run several times after
its warm-up; each pass reports its time, every forward's device time, and the Triton kernels
compiled during it (new entries of the Triton cache directory: point TRITON_CACHE_DIR at an empty
directory to see them all). On the H200 the first pass has run about 1 s slower (a Triton
recompile of store_kv and extend attention for a new index-tensor alignment, since fixed).
Prints a JSON line and a table.
"""

from __future__ import annotations

import argparse
import glob
import os
import random

from bench_utils import (
    ForwardTimer,
    bench_parser,
    environment,
    make_model_dir,
    prefill_pass,
    report,
    start_engine,
    warm_up,
)


def parse_args(argv=None) -> argparse.Namespace:
    parser = bench_parser(__doc__)
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args(argv)
    args.prefill_batch, args.prefill_len = (2, 16) if args.tiny else (8, 2048)
    return args


def _cache_files() -> set[str]:
    root = os.environ.get("TRITON_CACHE_DIR", os.path.expanduser("~/.triton/cache"))
    return {
        os.path.basename(path)
        for path in glob.glob(os.path.join(root, "*", "*.json"))
        if not os.path.basename(path).startswith("__grp__")
    }


def main(argv=None) -> dict:
    args = parse_args(argv)
    engine, vocab = start_engine(args, make_model_dir(args.model_config, args.tiny))
    rng = random.Random(args.seed + 1)
    warm_up(engine, rng, vocab)  # offline_throughput's
    timer = ForwardTimer(engine)
    passes = []
    for _ in range(args.passes):
        before = _cache_files()
        tok_s = prefill_pass(engine, rng, vocab, args.prefill_batch, args.prefill_len, timer)
        passes.append({"tok_s": tok_s, "forwards": timer.per_forward(), "compiled": sorted(_cache_files() - before)})
    result = {"model_config": args.model_config, "tiny": args.tiny, **environment(), "passes": passes}
    rows = [
        (
            f"pass {i}: tok/s, forward ms, kernels compiled",
            f"{p['tok_s']:,.0f}, {[f['ms'] for f in p['forwards']]}, {p['compiled'] or 'none'}",
        )
        for i, p in enumerate(passes)
    ]
    report("first_prefill", result, rows)
    return result


if __name__ == "__main__":
    main()
