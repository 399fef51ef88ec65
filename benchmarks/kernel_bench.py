"""Usage: python benchmarks/kernel_bench.py   (CUDA only)

Times the Triton attention kernels at serving shapes (Llama-3-8B heads: 32 query / 8 KV heads, dim
128, bf16) over launch-config variants, checks each variant against the torch reference, and prints
achieved bandwidth (decode) or TFLOP/s (extend) per variant, then one JSON line with the winners.
"""

from __future__ import annotations

import functools
import json

import torch
import triton.testing

from sgl_runtime.kernels.decode_attention import (
    DecodeWorkspace,
    decode_attention,
    decode_attention_torch,
    num_splits_for,
)
from sgl_runtime.kernels.extend_attention import extend_attention, extend_attention_torch

H, HKV, D, DT = 32, 8, 128, torch.bfloat16
DECODE_SHAPES = [(1, 1024), (64, 1024), (256, 1024), (128, 4096)]
DECODE_VARIANTS = [(64, 4, 2), (64, 4, 3), (32, 4, 2), (128, 4, 2), (128, 8, 2), (64, 8, 3)]  # block_n, warps, stages
EXTEND_VARIANTS = [(64, 64, 4, 2), (128, 64, 8, 2), (128, 64, 4, 3), (64, 128, 4, 2), (128, 128, 8, 2)]


def pool(bs: int, ctx: int):
    total = bs * ctx
    k = torch.randn(total + 1, HKV, D, device="cuda", dtype=DT)
    v = torch.randn_like(k)
    table = torch.randperm(total, device="cuda").view(bs, ctx).int()
    return k, v, table, torch.arange(bs, device="cuda")


def rel_err(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def bench_decode() -> list[dict]:
    rows = []
    for bs, ctx in DECODE_SHAPES:
        k, v, table, idx = pool(bs, ctx)
        q = torch.randn(bs, H, D, device="cuda", dtype=DT)
        seq = torch.full((bs,), ctx, device="cuda")
        ref = decode_attention_torch(q, k, v, table, idx, [ctx] * bs, D**-0.5) if bs <= 64 else None
        ws = DecodeWorkspace(bs, H, D, "cuda")
        gbytes = bs * ctx * HKV * D * 2 * 2 / 1e9
        splits_options = sorted({num_splits_for(bs, HKV), 4, 8, 16})
        for block_n, warps, stages in DECODE_VARIANTS:
            for splits in splits_options:
                out = torch.empty_like(q)
                fn = functools.partial(
                    decode_attention, q, out, k, v, table, idx, seq, ws, splits, D**-0.5, block_n, warps, stages
                )
                ms = triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")
                err = rel_err(out, ref) if ref is not None else None
                rows.append(
                    dict(
                        kernel="decode",
                        bs=bs,
                        ctx=ctx,
                        block_n=block_n,
                        warps=warps,
                        stages=stages,
                        splits=splits,
                        default_splits=num_splits_for(bs, HKV),
                        ms=ms,
                        gb_s=gbytes / ms * 1e3,
                        rel_err=err,
                    )
                )
        del k, v
    return rows


def bench_extend() -> list[dict]:
    rows = []
    bs, ext = 8, 2048
    k, v, table, idx = pool(bs, ext)
    q = torch.randn(bs * ext, H, D, device="cuda", dtype=DT)
    seq = torch.full((bs,), ext, device="cuda")
    starts = torch.arange(bs, device="cuda") * ext
    ref = extend_attention_torch(q, k, v, table, idx, [ext] * bs, [ext] * bs, D**-0.5)
    tflop = bs * H * ext * ext * D * 2 / 1e12  # causal: half of 4 * ext^2 * D per head
    for config in EXTEND_VARIANTS:
        out = torch.empty_like(q)
        fn = functools.partial(extend_attention, q, out, k, v, table, idx, seq, seq, starts, ext, D**-0.5, config)
        ms = triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")
        rows.append(dict(kernel="extend", config=config, ms=ms, tflop_s=tflop / ms * 1e3, rel_err=rel_err(out, ref)))
    return rows


def main() -> None:
    decode, extend = bench_decode(), bench_extend()
    for r in decode:
        print(
            f"decode bs={r['bs']:>3} ctx={r['ctx']:>4} bn={r['block_n']:>3} w={r['warps']} s={r['stages']} "
            f"splits={r['splits']:>2} (default {r['default_splits']:>2}): {r['ms']:.3f} ms {r['gb_s']:7.0f} GB/s "
            f"err={r['rel_err']}"
        )
    for r in extend:
        print(f"extend 8x2048 {r['config']}: {r['ms']:.3f} ms {r['tflop_s']:.0f} TFLOP/s err={r['rel_err']:.2e}")
    best = {}
    for r in decode:
        key = f"decode_bs{r['bs']}_ctx{r['ctx']}"
        if (r["rel_err"] is None or r["rel_err"] < 1e-2) and (key not in best or r["ms"] < best[key]["ms"]):
            best[key] = r
    best["extend"] = min((r for r in extend if r["rel_err"] < 1e-2), key=lambda r: r["ms"])
    print(json.dumps({"benchmark": "kernel_bench", "best": best}))


if __name__ == "__main__":
    main()
