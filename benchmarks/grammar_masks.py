"""Usage: python benchmarks/grammar_masks.py [--walks 50] [--grammars json arithmetic sql]

Grammar-constraint mask latency on the Qwen2.5 vocabulary (151,665 tokens): compile time,
then seeded random walks (random tokens, then closing tokens until EOS). Per grammar it
reports bitmask() times in three passes over the same token sequences: `cold` (each distinct
state's first mask: lexer contexts and vocabulary walks built on demand), `new_state` (each
distinct state's mask again after clearing the per-state mask cache, the shared vocabulary
walks kept: a new parser stack whose lexer situations were seen before) and `cached` (every
call, states revisited). Prints a table and
one JSON line per grammar.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time

import numpy as np

from sgl_runtime.constrained.grammar.compiler import compile_grammar
from sgl_runtime.constrained.grammar.sampling import CLOSERS, closer_ids, pick_walk_token
from sgl_runtime.constrained.vocabulary import Vocabulary
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer


def walk(c, vocab, rng: random.Random, closers: list[int], random_steps: int, times: list) -> list[int]:
    m, out, eos = c.matcher(), [], vocab.eos_token_ids[0]
    for step in range(random_steps + 150):
        miss = m.state not in c._cache
        t0 = time.perf_counter()
        mask = m.bitmask()
        if miss:
            times.append(time.perf_counter() - t0)
        ids = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little")[: vocab.size])
        pick = pick_walk_token(ids, step, random_steps, c.table.lens, eos, closers, rng)
        m.advance(int(pick))
        out.append(int(pick))
        if pick == eos:
            break
    return out


def replay(c, seq: list[int], times: list, only_misses: bool) -> None:
    m = c.matcher()
    for tid in seq:
        miss = m.state not in c._cache
        t0 = time.perf_counter()
        m.bitmask()
        if miss or not only_misses:
            times.append(time.perf_counter() - t0)
        m.advance(tid)


def stats(times: list) -> dict:
    ms = np.array(times) * 1e3
    return {
        "n": len(ms),
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
        "max_ms": round(float(ms.max()), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--walks", type=int, default=50)
    ap.add_argument("--grammars", nargs="+", default=list(CLOSERS))
    args = ap.parse_args()
    vocab = Vocabulary.from_tokenizer(load_qwen2_tokenizer())
    for name in args.grammars:
        t0 = time.perf_counter()
        c = compile_grammar(name, vocab, warmup_s=float(__import__("os").environ.get("WARMUP", "1")))
        compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        c.matcher().bitmask()
        first_mask_s = time.perf_counter() - t0
        rng, closers = random.Random(1234), closer_ids(name, vocab)
        cold, seqs = [], []
        for i in range(args.walks):
            seqs.append(walk(c, vocab, rng, closers, 4 + i % 12, cold))
        c._cache.clear()
        new_state, cached = [], []
        for seq in seqs:
            replay(c, seq, new_state, True)
        for seq in seqs:
            replay(c, seq, cached, False)
        row = {
            "grammar": name,
            "vocab": vocab.size,
            "compile_s": round(compile_s, 3),
            "first_mask_ms": round(first_mask_s * 1e3, 1),
            "cold": stats(cold),
            "new_state": stats(new_state),
            "cached": stats(cached),
            "python": platform.python_version(),
            "machine": platform.machine(),
            "date": time.strftime("%Y-%m-%d"),
        }
        print(
            f"{name:11s} compile {compile_s:.2f}s first mask {first_mask_s * 1e3:.0f}ms | "
            + " | ".join(
                f"{k} p50 {row[k]['p50_ms']}ms p99 {row[k]['p99_ms']}ms max {row[k]['max_ms']}ms"
                for k in ("cold", "new_state", "cached")
            )
        )
        print(json.dumps(row))


if __name__ == "__main__":
    main()
