"""The tp-vs-tp1 harness the tensor-parallel tests share: one workload on CPU engines (gloo) of tp=1 and
tp=2, and the checks that the tp=2 run gives tp=1's tokens and logprobs."""

from __future__ import annotations

import re

import torch

from sgl_runtime.engine import Engine

REGEX = r"(yes|no), because [a-z]{2,6}\."
GREEDY = {"max_new_tokens": 6, "temperature": 0}
LOGPROB_ATOL = 1e-4
CONSTRAINED = 2  # the second round's last requests, under REGEX


def run_workload(path: str, tp_size: int, first: list[list[int]], second: list[list[int]]) -> dict:
    """Three rounds on one engine: greedy `first`; `second` (first's prompts extended: radix-cache hits), its
    last CONSTRAINED requests under REGEX; logprobs of first[:2]. Prompts over 16 tokens prefill in chunks."""
    params = [dict(GREEDY)] * (len(second) - CONSTRAINED) + [
        {"max_new_tokens": 16, "temperature": 0, "regex": REGEX}
    ] * CONSTRAINED
    with Engine(path, device="cpu", tp_size=tp_size, max_total_tokens=4096, chunked_prefill_size=16) as engine:
        out = {"first": engine.generate(input_ids=first, sampling_params=GREEDY)}
        out["second"] = engine.generate(input_ids=second, sampling_params=params)
        out["logprobs"] = engine.generate(
            input_ids=first[:2], sampling_params=GREEDY, return_logprob=True, logprob_start_len=0, top_logprobs_num=3
        )
    return out


def runs_by_tp(path: str, first: list[list[int]], second: list[list[int]]) -> dict[int, dict]:
    return {tp: run_workload(path, tp, first, second) for tp in (1, 2)}


def assert_tokens_equal(runs: dict[int, dict]) -> None:
    for round_ in ("first", "second", "logprobs"):
        assert [r["output_ids"] for r in runs[2][round_]] == [r["output_ids"] for r in runs[1][round_]], round_


def assert_cache_hits_and_jump_forward(runs: dict[int, dict]) -> None:
    for tp in (1, 2):
        second = runs[tp]["second"]
        assert all(r["meta_info"]["cached_tokens"] > 0 for r in second), tp
        for constrained in second[-CONSTRAINED:]:
            assert re.fullmatch(REGEX, constrained["text"]), constrained["text"]
            meta = constrained["meta_info"]
            assert meta["forward_passes"] < meta["completion_tokens"], meta  # ", because " was jumped over


def assert_logprobs_match(runs: dict[int, dict]) -> None:
    """tp=2's input, output and top logprobs equal tp=1's within LOGPROB_ATOL (fp32)."""
    for ours, ref in zip(runs[2]["logprobs"], runs[1]["logprobs"]):
        for key in ("input_token_logprobs", "output_token_logprobs"):
            got = [e[0] for e in ours["meta_info"][key] if e[0] is not None]
            want = [e[0] for e in ref["meta_info"][key] if e[0] is not None]
            assert len(got) == len(want) > 0
            torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=LOGPROB_ATOL, rtol=0)
        top = [[e[0] for e in t] for t in ours["meta_info"]["output_top_logprobs"]]
        top_ref = [[e[0] for e in t] for t in ref["meta_info"]["output_top_logprobs"]]
        torch.testing.assert_close(torch.tensor(top), torch.tensor(top_ref), atol=LOGPROB_ATOL, rtol=0)
