"""SchedulePolicy: each policy orders a small waiting queue as expected over a real RadixCache."""

import random
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from sgl_runtime.mem_cache.radix_cache import RadixCache
from sgl_runtime.scheduler.schedule_policy import LPM_FALLBACK_QUEUE_LEN, SchedulePolicy, prefix_match_key


@dataclass(eq=False)
class FakeReq:
    name: str
    origin_input_ids: list[int]
    arrival_time: float
    output_ids: list[int] = field(default_factory=list)
    return_logprob: bool = False
    logprob_start_len: int = -1
    prefix_indices: Any = None
    last_node: Any = None


def cache_with(*sequences: list[int]) -> RadixCache:
    tree = RadixCache()
    next_slot = 0
    for seq in sequences:
        value = torch.arange(next_slot, next_slot + len(seq), dtype=torch.int64)
        next_slot += len(seq)
        tree.insert(seq, value)
    return tree


def names(queue: list[FakeReq]) -> list[str]:
    return [req.name for req in queue]


def test_lpm_puts_longest_cached_prefix_first():
    tree = cache_with([1, 2, 3, 4, 5], [7, 8])
    queue = [
        FakeReq("none", [9, 9, 9], 0.0),
        FakeReq("two", [1, 2, 6, 6], 1.0),
        FakeReq("four", [1, 2, 3, 4, 0], 2.0),
        FakeReq("other_two", [7, 8, 1], 3.0),
    ]
    SchedulePolicy("lpm", tree).calc_priority(queue)
    assert names(queue) == ["four", "two", "other_two", "none"]
    assert [len(r.prefix_indices) for r in queue] == [4, 2, 2, 0]
    assert queue[0].prefix_indices.tolist() == [0, 1, 2, 3]
    # "two" split [1..5] at [1, 2], then "four" split the rest at [3, 4]
    assert queue[0].last_node.key == [3, 4] and queue[0].last_node.parent.key == [1, 2]
    assert queue[-1].last_node is tree.root_node
    tree.check_integrity()


def test_prefix_key_keeps_last_token_and_logprob_positions_uncached():
    tree = cache_with([1, 2, 3, 4, 5])
    full = FakeReq("full", [1, 2, 3, 4, 5], 0.0)
    with_output = FakeReq("with_output", [1, 2], 1.0, output_ids=[3, 4, 9])
    logprob = FakeReq("logprob", [1, 2, 3, 4, 5, 6], 2.0, return_logprob=True, logprob_start_len=2)
    assert prefix_match_key(full) == [1, 2, 3, 4]
    assert prefix_match_key(logprob) == [1]
    assert prefix_match_key(FakeReq("one", [5], 0.0)) == []
    queue = [full, with_output, logprob]
    SchedulePolicy("lpm", tree).calc_priority(queue)
    assert [len(r.prefix_indices) for r in queue] == [4, 4, 1]


def test_lpm_falls_back_to_fcfs_on_a_long_queue():
    tree = cache_with([1, 2, 3])
    times = list(range(LPM_FALLBACK_QUEUE_LEN + 1))
    random.Random(0).shuffle(times)
    queue = [FakeReq(str(t), [1, 2, 3, t], float(t), prefix_indices="untouched") for t in times]
    SchedulePolicy("lpm", tree).calc_priority(queue)
    assert [r.arrival_time for r in queue] == sorted(times)
    assert all(r.prefix_indices == "untouched" for r in queue)


def test_fcfs_orders_by_arrival_without_matching():
    tree = cache_with([1, 2, 3])
    queue = [FakeReq("c", [1, 2, 3, 4], 3.0), FakeReq("a", [5], 1.0), FakeReq("b", [1, 2], 2.0)]
    SchedulePolicy("fcfs", tree).calc_priority(queue)
    assert names(queue) == ["a", "b", "c"]
    assert all(r.prefix_indices is None for r in queue)


def test_random_is_a_seeded_permutation():
    tree = cache_with([1, 2, 3])
    queue = [FakeReq(str(i), [i], float(i)) for i in range(20)]
    expected = list(queue)
    random.Random(7).shuffle(expected)
    SchedulePolicy("random", tree, rng=random.Random(7)).calc_priority(queue)
    assert names(queue) == names(expected)
    assert sorted(names(queue), key=int) == [str(i) for i in range(20)]


def test_dfs_weight_visits_heaviest_subtree_first_deepest_matches_first():
    tree = cache_with([1, 1, 1, 1], [2, 2, 2, 2], [2, 2, 3, 3])
    queue = [
        FakeReq("a1", [1, 1, 1, 1, 9], 0.0),
        FakeReq("b3", [2, 2, 5, 5], 1.0),  # ends at the shared [2, 2] node
        FakeReq("z", [5, 5], 2.0),  # no match: ends at the root
        FakeReq("a2", [1, 1, 1, 1, 8], 3.0),
        FakeReq("b1", [2, 2, 2, 2, 9], 4.0),
        FakeReq("b2", [2, 2, 3, 3, 7], 5.0),
        FakeReq("b4", [2, 2, 3, 3, 6], 6.0),
    ]
    SchedulePolicy("dfs-weight", tree).calc_priority(queue)
    # subtree [2,2] holds 4 requests (its child [3,3] holds 2, [2,2] holds 1) > [1,1,1,1] with 2
    assert names(queue) == ["b2", "b4", "b1", "b3", "a1", "a2", "z"]
    tree.check_integrity()


def test_disabled_cache_turns_prefix_policies_into_fcfs():
    tree = RadixCache(disable=True)
    for policy in ("lpm", "dfs-weight"):
        queue = [FakeReq("b", [1, 2], 2.0), FakeReq("a", [1, 2, 3], 1.0)]
        scheduler_policy = SchedulePolicy(policy, tree)
        assert scheduler_policy.policy == "fcfs"
        scheduler_policy.calc_priority(queue)
        assert names(queue) == ["a", "b"]


def test_unknown_policy_is_rejected_with_the_supported_names():
    with pytest.raises(ValueError, match="'lifo'.*lpm, dfs-weight, fcfs, random"):
        SchedulePolicy("lifo", RadixCache())
