"""Shared pieces of the benchmark scripts: the model directory (a shipped config.json plus the
Qwen2.5 tokenizer, dummy weights), CLI flags, GPU-busy timing, isolated runs and result printing.

Tokenizer note: the Llama-3-8B shape has 128,256 logits while the Qwen2.5 tokenizer has 151,665
ids. Prompts are therefore random token ids below the model's vocab size (passed as input_ids);
every id below 128,256 is an ordinary Qwen token, so outputs detokenize normally. Its config's
eos_token_id (128001) is one of those ids and serves as EOS for constrained requests.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
MODEL_CONFIGS = (
    "llama-3-8b",
    "llama-3-70b",
    "qwen2.5-7b",
    "qwen3-30b-a3b",
)  # llama-3-70b needs --tp-size 2+ on an H200
TINY_OVERRIDES = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 4096,
    "torch_dtype": "float32",
}
TINY_MOE_OVERRIDES = {"moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2}  # configs with experts


def add_common_args(parser: argparse.ArgumentParser, default_config: str = "llama-3-8b") -> None:
    parser.add_argument(
        "--model-config",
        choices=MODEL_CONFIGS,
        default=default_config,
        help="which shipped shape under benchmarks/configs to run",
    )
    parser.add_argument(
        "--load-format", default="dummy", choices=("dummy",), help="weights (only dummy: no checkpoints)"
    )
    parser.add_argument("--tiny", action="store_true", help="a tiny model and few requests (CPU smoke run)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--disable-cuda-graph", action="store_true")
    parser.add_argument("--disable-overlap-schedule", action="store_true")
    parser.add_argument("--disable-cascade-attention", action="store_true", help="no shared-prefix decode attention")
    parser.add_argument("--tp-size", type=int, default=1, help="tensor-parallel ranks (GPUs) for the engine")
    parser.add_argument(
        "--mix-jump-forward-min-batch", type=int, default=None, help="the engine's flag (default: its default)"
    )
    parser.add_argument("--seed", type=int, default=0)


def bench_parser(description: str, default_config: str = "llama-3-8b") -> argparse.ArgumentParser:
    """A script's parser: its Usage docstring as the help text (shown as written) and the shared flags."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, default_config)
    return parser


def make_model_dir(model_config: str, tiny: bool) -> str:
    """A temporary model directory: the shipped config.json (shrunk when tiny) + the Qwen2.5 tokenizer files."""
    from sgl_runtime.model_loader.demo_tokenizer import get_qwen2_tokenizer_dir

    config = json.loads((CONFIG_DIR / model_config / "config.json").read_text())
    if tiny:
        config.update(TINY_OVERRIDES)
        if "num_experts" in config:
            config.update(TINY_MOE_OVERRIDES)
    out = Path(tempfile.mkdtemp(prefix=f"sgl-bench-{model_config}-"))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    tok_dir = Path(get_qwen2_tokenizer_dir())
    for name in os.listdir(tok_dir):
        if (tok_dir / name).is_file():
            shutil.copy(tok_dir / name, out / name)
    return str(out)


def engine_kwargs(args: argparse.Namespace, **extra: Any) -> dict:
    kwargs = dict(
        load_format=args.load_format,
        device=args.device,
        disable_cuda_graph=args.disable_cuda_graph,
        disable_overlap_schedule=args.disable_overlap_schedule,
        disable_cascade_attention=args.disable_cascade_attention,
        random_seed=args.seed,
        log_level="warning",
        tp_size=args.tp_size,
    )
    if args.mix_jump_forward_min_batch is not None:
        kwargs["mix_jump_forward_min_batch"] = args.mix_jump_forward_min_batch
    if args.tiny:
        kwargs.update(max_total_tokens=65536, max_running_requests=64)
    kwargs.update(extra)
    return kwargs


def start_engine(args: argparse.Namespace, model_dir: str, **extra: Any) -> tuple[Any, int]:
    """(an Engine on model_dir with the CLI's settings plus `extra` engine flags, the model's vocab size)."""
    from sgl_runtime.engine import Engine

    return Engine(model_path=model_dir, **engine_kwargs(args, **extra)), vocab_size_of(model_dir)


def random_ids(rng: random.Random, n: int, vocab_size: int) -> list[int]:
    """n token ids in [1000, vocab_size): ordinary tokens, no specials."""
    return [rng.randrange(1000, vocab_size) for _ in range(n)]


def vocab_size_of(model_dir: str) -> int:
    return int(json.loads(Path(model_dir, "config.json").read_text())["vocab_size"])


class ForwardTimer:
    """Wraps the engine's ModelRunner.forward to time every forward on the device (CUDA events)
    or host clock (CPU); `busy_seconds()` sums them for the GPU-busy fraction of a run, and
    `by_kind()` splits the batches into graph-replayable decode steps and extends (prefills,
    jump-forward, mixed), with their device time and token counts."""

    def __init__(self, engine) -> None:
        import torch

        self.torch = torch
        runner = engine.scheduler.model_runner
        self.cuda = runner.device != "cpu"
        self.reset()
        inner = runner.forward

        def timed(forward_batch):
            self.forwards += 1
            kind = "decode" if forward_batch.forward_mode.is_decode() else "extend"
            self.kinds.append((kind, forward_batch.batch_size, int(forward_batch.input_ids.shape[0])))
            if not self.cuda:
                start = time.perf_counter()
                out = inner(forward_batch)
                self.events.append(time.perf_counter() - start)
                return out
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            out = inner(forward_batch)
            end.record()
            self.events.append((begin, end))
            return out

        runner.forward = timed

    def reset(self) -> None:
        self.events: list = []
        self.kinds: list[tuple[str, int, int]] = []  # (decode|extend, requests, tokens) per forward
        self.forwards = 0

    def _seconds(self) -> list[float]:
        if not self.cuda:
            return list(self.events)
        self.torch.cuda.synchronize()
        return [b.elapsed_time(e) / 1000.0 for b, e in self.events]

    def busy_seconds(self) -> float:
        return sum(self._seconds())

    def per_forward(self) -> list[dict]:
        """Each forward of the run: kind, requests, tokens and device ms (host stalls before its
        kernels launch, such as a Triton compile, fall between its events and count too)."""
        return [
            {"kind": kind, "requests": reqs, "tokens": tokens, "ms": round(1000 * seconds, 1)}
            for (kind, reqs, tokens), seconds in zip(self.kinds, self._seconds())
        ]

    def by_kind(self) -> dict:
        """{kind: {batches, requests (mean per batch), tokens, device_ms (mean per batch)}}."""
        out: dict = {}
        for (kind, reqs, tokens), seconds in zip(self.kinds, self._seconds()):
            row = out.setdefault(kind, {"batches": 0, "requests": 0, "tokens": 0, "seconds": 0.0})
            row["batches"] += 1
            row["requests"] += reqs
            row["tokens"] += tokens
            row["seconds"] += seconds
        for row in out.values():
            n = row["batches"]
            row["requests"] = round(row["requests"] / n, 1)
            row["device_ms"] = round(1000 * row.pop("seconds") / n, 3)
        return out


def warm_up(engine, rng: random.Random, vocab: int) -> None:
    """offline_throughput's warm-up: two short requests compile the extend and decode kernels at a few
    shapes (small extends replay the decode graphs on CUDA)."""
    timed_generate(
        engine, [random_ids(rng, n, vocab) for n in (37, 300)], [{"max_new_tokens": 8, "ignore_eos": True}] * 2
    )


def prefill_pass(engine, rng: random.Random, vocab: int, batch: int, length: int, timer=None) -> float:
    """One prefill of `batch` fresh prompts of `length` tokens (one new token each); returns tok/s."""
    prompts = [random_ids(rng, length, vocab) for _ in range(batch)]
    _, seconds = timed_generate(engine, prompts, [{"max_new_tokens": 1, "ignore_eos": True}] * batch, timer)
    return batch * length / seconds


def timed_generate(
    engine, input_ids: list[list[int]], params: list[dict], timer: ForwardTimer | None = None
) -> tuple[list[dict], float]:
    if timer is not None:
        timer.reset()
    start = time.perf_counter()
    out = engine.generate(input_ids=input_ids, sampling_params=params)
    return (out if isinstance(out, list) else [out]), time.perf_counter() - start


def run_isolated(fn: Callable[..., dict], isolate: bool, *args: Any, **kwargs: Any) -> dict:
    """fn(*args, **kwargs) in a fresh spawned process (so each engine gets the whole GPU), or in-process."""
    if not isolate:
        return fn(*args, **kwargs)
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        return pool.submit(fn, *args, **kwargs).result()


KERNEL_GROUPS = (  # (group, substrings of a kernel's name), first match wins
    ("gemm", ("gemm", "nvjet", "cutlass", "cublas", "splitkreduce", "sm90_xmma")),
    ("cascade prefix attention", ("_prefix_stage",)),
    ("decode attention", ("_stage1", "_stage2")),
    ("extend attention", ("_extend",)),
    ("norm", ("rms", "norm")),
    ("rotary / kv store", ("rotary", "rope", "store_kv")),
    ("silu", ("silu", "act_and_mul")),
    ("moe", ("moe",)),
)


def kernel_profile(prof, wall: float, top: int = 12) -> dict:
    """Device kernels of a torch.profiler run: total ms per kernel group (KERNEL_GROUPS, else "other"),
    the top kernels, and the sum against the wall time."""
    events = [e for e in prof.key_averages() if e.self_device_time_total > 0 and e.cpu_time_total == 0]
    events.sort(key=lambda e: e.self_device_time_total, reverse=True)
    groups: dict = {}
    for e in events:
        name = e.key.lower()
        group = next((g for g, keys in KERNEL_GROUPS if any(k in name for k in keys)), "other")
        groups[group] = groups.get(group, 0.0) + e.self_device_time_total / 1e3
    device_ms = sum(groups.values())
    return {
        "wall_ms": 1e3 * wall,
        "kernel_ms": device_ms,
        "kernel_ms_by_group": {g: round(ms, 1) for g, ms in sorted(groups.items(), key=lambda kv: -kv[1])},
        "top_kernels": [
            {"name": e.key[:90], "ms": round(e.self_device_time_total / 1e3, 1), "calls": e.count} for e in events[:top]
        ],
    }


def profiled_generate(engine, input_ids: list[list[int]], params: list[dict], top: int = 12) -> dict:
    """timed_generate under torch.profiler (device kernels when on CUDA); returns kernel_profile's summary."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    on_gpu = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        _, seconds = timed_generate(engine, input_ids, params)
        if on_gpu:
            torch.cuda.synchronize()
    return kernel_profile(prof, seconds, top)


def environment() -> dict:
    import torch

    info = {"torch": torch.__version__, "device": "cpu"}
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name(0)
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    info["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return info


def report(name: str, result: dict, rows: list[tuple[str, Any]]) -> None:
    """One JSON line (machine-readable) then a two-column table."""
    print(json.dumps({"benchmark": name, **result}))
    width = max(len(k) for k, _ in rows)
    print(f"\n{name}")
    print("-" * (width + 16))
    for key, value in rows:
        shown = (f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3f}") if isinstance(value, float) else str(value)
        print(f"{key:<{width}}  {shown:>12}")
