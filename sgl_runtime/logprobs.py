"""Log-probabilities of chosen tokens and the top alternatives, from raw model logits."""

from __future__ import annotations

from typing import Sequence

import torch


def token_logprobs(
    logits: torch.Tensor, targets: Sequence[int], top_nums: Sequence[int]
) -> tuple[list[float], list[list[tuple[float, int]]]]:
    """For each row: log p(target) under log_softmax(row), and the row's top `top_nums[i]` (logprob, id).

    logits: [N, V] (the unprocessed model distribution: no temperature, penalties or masks).
    """
    if logits.shape[0] == 0:
        return [], []
    logprobs = torch.log_softmax(logits.float(), dim=-1)  # [N, V]
    index = torch.tensor(list(targets), dtype=torch.int64, device=logits.device)
    chosen = logprobs.gather(1, index[:, None]).squeeze(1).tolist()
    k = max(top_nums) if top_nums else 0
    if k <= 0:
        return chosen, [[] for _ in targets]
    values, ids = logprobs.topk(k, dim=-1)  # [N, k]
    values, ids = values.tolist(), ids.tolist()
    tops = [list(zip(values[i][:n], ids[i][:n])) for i, n in enumerate(top_nums)]
    return chosen, tops
