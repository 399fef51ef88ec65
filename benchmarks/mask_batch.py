"""Usage: python benchmarks/mask_batch.py [--device auto|cpu|cuda] [--batch-sizes 1,8,32,128,256] [--steps 50] [--tiny]

Host CPU time per decode step to put a batch's JSON-Schema masks on the logits' device, by batch
size, with the Qwen2.5 tokenizer (logit width 152,064): the host path (each cursor's cached numpy
mask stacked into a pinned [B, W] buffer, copied to the device) against the device table (each
cursor's state mapped to a slot, the rows gathered on the device), every state visited before;
table_lookup_ms is the slot lookup alone (on CPU the gather is a host copy, on CUDA a device op).
Also the whole sampler masking (apply_constraints_: building plus applying to [B, V] logits) both
ways. Times are the calling thread's CPU time (time.thread_time: the host cost a step pays, not
waits for a core on a shared machine, and on CUDA not the device's time). Cursors sit at the states of
seeded random walks over json_decode's schema. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np
import torch
from bench_utils import environment, report
from json_decode import SCHEMA

from sgl_runtime.constrained import compile_constraint
from sgl_runtime.constrained.device_table import DeviceMaskTable
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer
from sgl_runtime.sampler import MaskStaging, apply_constraints_

VOCAB = 152064


class _Req:
    def __init__(self, matcher) -> None:
        self.matcher = matcher


def _cursors(constraint, rng: random.Random, walks: int) -> list:
    out = []
    for _ in range(walks):
        m = constraint.matcher()
        for _ in range(80):
            ids = np.nonzero(
                np.unpackbits(m.bitmask().view(np.uint8), bitorder="little")[: constraint.vocabulary.size]
            )[0]
            token = int(rng.choice(ids))
            out.append(m.copy())
            m.advance(token)
            if m.finished:
                break
    return out


def _per_step_ms(fn, steps: int, device: torch.device) -> float:
    fn()  # first visits, allocations
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.thread_time()
    for _ in range(steps):
        fn()
    seconds = time.thread_time() - start
    if device.type == "cuda":
        torch.cuda.synchronize()
    return 1000 * seconds / steps


def _measure(reqs: list, width: int, device: torch.device, steps: int) -> dict:
    batch, matchers = len(reqs), [r.matcher for r in reqs]
    table = DeviceMaskTable(device, width, 256 << 20)
    staging = MaskStaging()

    def host_build():
        host = staging.host(batch, width, device)
        np.stack([m.bitmask() for m in matchers], out=host.numpy())
        return host.to(device, non_blocking=True) if device.type == "cuda" else host

    def table_lookup():  # what the host does on CUDA, where the gather itself is a device op
        slots = table.slots([m.constraint for m in matchers], [m.table_state() for m in matchers])
        return torch.tensor(slots, dtype=torch.int64)

    def table_build():
        slots = table.slots([m.constraint for m in matchers], [m.table_state() for m in matchers])
        return table.gather(slots)

    assert torch.equal(host_build().cpu(), table_build().cpu())
    logits = torch.randn(batch, VOCAB, device=device)
    row = {
        "batch": batch,
        "host_build_ms": _per_step_ms(host_build, steps, device),
        "table_build_ms": _per_step_ms(table_build, steps, device),
        "table_lookup_ms": _per_step_ms(table_lookup, steps, device),
        "host_apply_ms": _per_step_ms(lambda: apply_constraints_(logits, reqs, staging), steps, device),
        "table_apply_ms": _per_step_ms(lambda: apply_constraints_(logits, reqs, staging, table), steps, device),
    }
    row["build_ratio"] = row["table_build_ms"] / row["host_build_ms"]
    row["apply_ratio"] = row["table_apply_ms"] / row["host_apply_ms"]
    return row


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--batch-sizes", default="1,8,32,128,256")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tiny", action="store_true", help="batch sizes 1 and 4, 3 steps (CPU smoke run)")
    args = parser.parse_args(argv)
    if args.tiny:
        args.batch_sizes, args.steps = "1,4", 3
    device = torch.device(
        "cuda" if args.device == "auto" and torch.cuda.is_available() else args.device.replace("auto", "cpu")
    )
    constraint = compile_constraint(
        "json_schema", json.dumps(SCHEMA), load_qwen2_tokenizer(), vocab_size=VOCAB, eos_token_ids=[151645]
    )
    rng = random.Random(args.seed)
    pool = _cursors(constraint, rng, 4 if args.tiny else 30)
    width = (VOCAB + 31) // 32
    rows, table_rows = [], []
    for batch in [int(b) for b in args.batch_sizes.split(",")]:
        row = _measure([_Req(rng.choice(pool)) for _ in range(batch)], width, device, args.steps)
        table_rows.append(row)
        rows += [(f"batch {batch}: {k}", v) for k, v in row.items() if k != "batch"]
    result = {**environment(), "steps": args.steps, "per_batch": table_rows}
    report("mask_batch", result, rows)
    return result


if __name__ == "__main__":
    main()
