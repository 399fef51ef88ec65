"""Order of the waiting queue: which requests the scheduler should try to admit first.

Waiting items are duck-typed (no dependency on the scheduler's Req class). Read:
  - `origin_input_ids: list[int]`, `output_ids: list[int]` (their concatenation is the
    request's full sequence, `fill_ids`; output_ids is non-empty for retracted requests),
  - `arrival_time: float` (fcfs order; ties keep queue order),
  - optional `return_logprob: bool` and `logprob_start_len: int` (see `prefix_match_key`).
Written (lpm and dfs-weight only, by `calc_priority`):
  - `prefix_indices: torch.Tensor` (KV slots of the cached prefix) and
    `last_node: TreeNode` (where the match ended), from `RadixCache.match_prefix`.

For fcfs, random, and lpm on a long queue (> LPM_FALLBACK_QUEUE_LEN, where matching every
request each step costs too much), `prefix_indices` / `last_node` are NOT touched: the
scheduler must match at admission. Even after lpm/dfs-weight, admission that evicts can
invalidate the match of a request that is not yet locked, so lock (`inc_lock_ref`) each
admitted request's `last_node` before allocating for the next one.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any, Optional

from sgl_runtime.mem_cache.radix_cache import RadixCache, TreeNode

POLICIES = ("lpm", "dfs-weight", "fcfs", "random")
LPM_FALLBACK_QUEUE_LEN = 128


class SchedulePolicy:
    """Sorts the waiting queue in place according to one of POLICIES."""

    def __init__(self, policy: str, tree_cache: RadixCache, rng: Optional[random.Random] = None) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown schedule policy {policy!r}; supported: {', '.join(POLICIES)}")
        if tree_cache.disable and policy in ("lpm", "dfs-weight"):
            policy = "fcfs"  # without a cache every prefix match is empty
        self.policy = policy
        self.tree_cache = tree_cache
        self.rng = rng or random.Random()

    def calc_priority(self, waiting: list[Any]) -> None:
        """Reorder `waiting` in place (matching prefixes first for lpm / dfs-weight)."""
        policy = self._effective_policy(len(waiting))
        if policy in ("lpm", "dfs-weight"):
            for req in waiting:
                req.prefix_indices, req.last_node = self.tree_cache.match_prefix(prefix_match_key(req))
        if policy == "lpm":
            waiting.sort(key=lambda req: (-len(req.prefix_indices), req.arrival_time))
        elif policy == "dfs-weight":
            waiting[:] = _dfs_weight_order(self.tree_cache.root_node, waiting)
        elif policy == "fcfs":
            waiting.sort(key=lambda req: req.arrival_time)
        else:
            self.rng.shuffle(waiting)

    def _effective_policy(self, queue_len: int) -> str:
        if self.policy == "lpm" and queue_len > LPM_FALLBACK_QUEUE_LEN:
            return "fcfs"
        return self.policy


def prefix_match_key(req: Any) -> list[int]:
    """The longest part of the request's sequence that may come from the cache.

    At least the last token is always recomputed (its logits drive sampling). With
    `return_logprob` and `logprob_start_len = k >= 0`, positions from k - 1 on are recomputed
    too: the logits at position k - 1 score token k, the first prompt logprob asked for.
    """
    fill_ids = list(req.origin_input_ids) + list(req.output_ids)
    max_prefix_len = len(fill_ids) - 1
    start = getattr(req, "logprob_start_len", -1)
    if getattr(req, "return_logprob", False) and start is not None and start >= 0:
        max_prefix_len = min(max_prefix_len, start - 1)
    return fill_ids[: max(max_prefix_len, 0)]


def _dfs_weight_order(root: TreeNode, waiting: list[Any]) -> list[Any]:
    """Requests grouped by subtree: heavier subtrees (more waiting requests) first; within a
    subtree, requests with deeper matches before those ending higher up (post-order)."""
    reqs_at: dict[TreeNode, list[Any]] = defaultdict(list)
    for req in waiting:
        reqs_at[req.last_node].append(req)
    weight = _subtree_weights(reqs_at)
    ordered: list[Any] = []
    stack: list[tuple[TreeNode, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            ordered.extend(reqs_at.get(node, ()))
            continue
        stack.append((node, True))
        children = [c for c in node.children.values() if weight.get(c, 0) > 0]
        children.sort(key=lambda c: weight[c])  # the heaviest ends on top of the stack
        stack.extend((child, False) for child in children)
    placed = {id(req) for req in ordered}
    ordered.extend(req for req in waiting if id(req) not in placed)  # last_node no longer in the tree
    return ordered


def _subtree_weights(reqs_at: dict[TreeNode, list[Any]]) -> dict[TreeNode, int]:
    """Number of waiting requests whose match ends in each node's subtree (nodes on no
    request's path are absent, so the walk never visits the rest of the tree)."""
    weight: dict[TreeNode, int] = defaultdict(int)
    for node, reqs in reqs_at.items():
        while node is not None:
            weight[node] += len(reqs)
            node = node.parent
    return weight
