"""Log-probabilities of chosen tokens, the top alternatives and requested token ids, from raw model logits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch


@dataclass
class RowLogprobs:
    """Per row of the logits: log p(target), the top entries and the requested ids' entries."""

    chosen: list[float]
    tops: list[list[tuple[float, int]]]  # (logprob, token_id), best first
    token_ids: list[Optional[list[tuple[float, int]]]]  # (logprob, token_id) in request order; None if none asked


def token_logprobs(
    logits: torch.Tensor,
    targets: Sequence[int],
    top_nums: Sequence[int],
    token_ids: Optional[Sequence[Optional[Sequence[int]]]] = None,
) -> RowLogprobs:
    """For each row: log p(target) under log_softmax(row), the row's top `top_nums[i]` (logprob, id),
    and (logprob, id) of each id in `token_ids[i]` (SGLang's token_ids_logprob).

    logits: [N, V] (the unprocessed model distribution: no temperature, penalties or masks).
    """
    wanted = list(token_ids) if token_ids is not None else [None] * len(targets)
    if logits.shape[0] == 0:
        return RowLogprobs([], [], [])
    logprobs = torch.log_softmax(logits.float(), dim=-1)  # [N, V]
    index = torch.tensor(list(targets), dtype=torch.int64, device=logits.device)
    chosen = logprobs.gather(1, index[:, None]).squeeze(1).tolist()
    return RowLogprobs(chosen, _tops(logprobs, top_nums), _token_ids(logprobs, wanted))


def _tops(logprobs: torch.Tensor, top_nums: Sequence[int]) -> list[list[tuple[float, int]]]:
    k = max(top_nums) if top_nums else 0
    if k <= 0:
        return [[] for _ in top_nums]
    values, ids = logprobs.topk(k, dim=-1)  # [N, k]
    values, ids = values.tolist(), ids.tolist()
    return [list(zip(values[i][:n], ids[i][:n])) for i, n in enumerate(top_nums)]


def _token_ids(logprobs: torch.Tensor, wanted: list) -> list[Optional[list[tuple[float, int]]]]:
    rows = [i for i, ids in enumerate(wanted) if ids]
    if not rows:
        return [None] * len(wanted)
    width = max(len(wanted[i]) for i in rows)
    padded = [list(wanted[i]) + [0] * (width - len(wanted[i])) for i in rows]
    row_index = torch.tensor(rows, dtype=torch.int64, device=logprobs.device)
    id_index = torch.tensor(padded, dtype=torch.int64, device=logprobs.device)  # [R, W]
    values = logprobs[row_index[:, None], id_index].tolist()  # [R, W]
    out: list[Optional[list[tuple[float, int]]]] = [None] * len(wanted)
    for r, i in enumerate(rows):
        out[i] = list(zip(values[r][: len(wanted[i])], wanted[i]))
    return out
