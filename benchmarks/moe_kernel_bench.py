"""Usage: python benchmarks/moe_kernel_bench.py   (CUDA only)

Times the fused-MoE Triton kernel (sgl_runtime/kernels/fused_moe.py) on one Qwen3-30B-A3B layer
(128 experts, top 8, hidden 2048, expert intermediate 768, bf16) from decode to prefill token counts,
over tile-config variants, checks each against the torch reference, and prints per variant the time,
the weight bandwidth (bytes of the experts the batch touches) and TFLOP/s, then one JSON line with the
fastest correct variant per token count and the one `block_config` picks.
"""

from __future__ import annotations

import json

import torch
import triton.testing

from sgl_runtime.kernels.fused_moe import block_config, fused_experts, fused_experts_torch
from sgl_runtime.layers.moe import select_experts

E, K, H, I, DT = 128, 8, 2048, 768, torch.bfloat16  # noqa: E741 - I: the expert intermediate size
TOKENS = [1, 8, 32, 128, 256, 1024, 4096, 16384]
VARIANTS = [  # BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages
    (16, 64, 128, 1, 4, 3),
    (16, 128, 128, 1, 4, 3),
    (32, 64, 128, 8, 4, 3),
    (32, 128, 64, 8, 4, 4),
    (64, 64, 64, 8, 4, 3),
    (64, 128, 64, 8, 8, 3),
    (64, 128, 128, 8, 8, 3),
    (128, 128, 64, 8, 8, 3),
]
KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")


def rel_err(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def bench(tokens: int, w13, w2) -> list[dict]:
    gen = torch.Generator(device="cuda").manual_seed(tokens)
    x = torch.randn(tokens, H, device="cuda", dtype=DT, generator=gen)
    weights, ids = select_experts(torch.randn(tokens, E, device="cuda", generator=gen), K, True)
    ref = fused_experts_torch(x, w13, w2, weights, ids) if tokens <= 4096 else None
    touched = int(ids.unique().numel())
    gbytes = touched * 3 * H * I * 2 / 1e9  # gate, up and down weights of the experts in use
    tflop = tokens * K * 3 * H * I * 2 / 1e12
    chosen = block_config(tokens * K, E)
    rows = []
    for variant in VARIANTS:
        config = dict(zip(KEYS, variant))
        try:
            out = fused_experts(x, w13, w2, weights, ids, config)
            ms = triton.testing.do_bench(
                lambda: fused_experts(x, w13, w2, weights, ids, config),  # noqa: B023
                warmup=10,
                rep=50,
                return_mode="median",
            )
        except Exception as exc:  # e.g. out of shared memory for a variant: report and go on
            rows.append(dict(tokens=tokens, config=variant, error=f"{type(exc).__name__}: {exc}"[:120]))
            continue
        rows.append(
            dict(
                tokens=tokens,
                config=variant,
                ms=ms,
                gb_s=gbytes / ms * 1e3,
                tflop_s=tflop / ms * 1e3,
                rel_err=rel_err(out, ref) if ref is not None else None,
                default=config == chosen,
            )
        )
    return rows


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    w13 = torch.randn(E, 2 * I, H, device="cuda", dtype=DT, generator=gen) / H**0.5
    w2 = torch.randn(E, H, I, device="cuda", dtype=DT, generator=gen) / I**0.5
    rows = [row for tokens in TOKENS for row in bench(tokens, w13, w2)]
    for r in rows:
        if "error" in r:
            print(f"tokens={r['tokens']:>5} {r['config']}: {r['error']}")
            continue
        err = "n/a" if r["rel_err"] is None else f"{r['rel_err']:.1e}"
        print(
            f"tokens={r['tokens']:>5} {r['config']}{' *' if r['default'] else '  '}: {r['ms']:.3f} ms "
            f"{r['gb_s']:6.0f} GB/s {r['tflop_s']:6.1f} TFLOP/s err={err}"
        )
    best, default = {}, {}
    for r in rows:
        if "error" in r or (r["rel_err"] is not None and r["rel_err"] > 2e-2):
            continue
        key = f"tokens{r['tokens']}"
        if key not in best or r["ms"] < best[key]["ms"]:
            best[key] = r
        if r["default"]:
            default[key] = r
    print(
        json.dumps(
            {
                "benchmark": "moe_kernel_bench",
                "shape": {"E": E, "top_k": K, "H": H, "I": I},
                "best": best,
                "default": default,
            }
        )
    )


if __name__ == "__main__":
    main()
