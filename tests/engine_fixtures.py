"""Helpers shared by the engine tests: tiny checkpoints, engines on them, transformers references."""

from __future__ import annotations

import contextlib
import random
from typing import Iterator, Sequence

import torch
from model_fixtures import _hf_model, make_tiny_checkpoint

from sgl_runtime.engine import Engine

# One intra-op thread: the tiny models are latency-bound, and CI machines are shared.
torch.set_num_threads(1)


_CHECKPOINTS: dict[str, str] = {}

# The constrained-decoding engine tests' schema: a closed object with a bounded string, an integer, a boolean.
PERSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}, "ok": {"type": "boolean"}},
    "required": ["name", "age", "ok"],
    "additionalProperties": False,
}


def checkpoint(tmp_path_factory, arch: str) -> str:
    """The session's tiny checkpoint for `arch` (built once and shared read-only by every module,
    so transformers' reference model for it is loaded once too)."""
    if arch not in _CHECKPOINTS:
        _CHECKPOINTS[arch] = make_tiny_checkpoint(arch, tmp_path_factory.mktemp(arch))
    return _CHECKPOINTS[arch]


def random_prompts(lengths: Sequence[int], seed: int = 0, vocab: int = 150000) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(n)] for n in lengths]


def hf_greedy(path: str, prompt: Sequence[int], max_new_tokens: int) -> list[int]:
    """transformers' greedy continuation (argmax of its logits, recomputed each step; never stops early)."""
    model = _hf_model(path)
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(max_new_tokens):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


def hf_logprobs(path: str, token_ids: Sequence[int]) -> torch.Tensor:
    """[len, vocab] log_softmax of transformers' logits for one sequence."""
    model = _hf_model(path)
    with torch.no_grad():
        logits = model(torch.tensor([list(token_ids)])).logits[0].float()
    return torch.log_softmax(logits, dim=-1)


def engine_4k(path: str, device: str = "cpu", **overrides) -> Engine:
    """An Engine with a 4096-token KV pool on `path`; `overrides` are further ServerArgs fields."""
    return Engine(path, device=device, max_total_tokens=4096, **overrides)


@contextlib.contextmanager
def recorded_extend_lens(engine: Engine) -> Iterator[list[set[int]]]:
    """Within the block, each forward pass of `engine` appends the set of its rows' extend lengths
    (a decode row is 1, a forced-text or prefill row more) to the yielded list."""
    model_runner = engine.scheduler.model_runner
    real_forward, kinds = model_runner.forward, []

    def recording(forward_batch):
        kinds.append(set(forward_batch.extend_seq_lens_cpu))
        return real_forward(forward_batch)

    model_runner.forward = recording
    try:
        yield kinds
    finally:
        model_runner.forward = real_forward
