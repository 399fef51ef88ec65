"""Cascade (shared-prefix) decode attention on the CPU: the torch reference against plain attention,
the host-side grouping from the radix tree, the chunk planning for the Triton path, the Triton
kernels under the interpreter, and greedy engine output with the cascade on equal to it off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from engine_fixtures import checkpoint, random_prompts

from sgl_runtime.engine import Engine
from sgl_runtime.kernels.cascade_attention import (
    cascade_decode_attention_torch,
    members_per_chunk,
    prefix_starts,
    split_groups,
)
from sgl_runtime.kernels.decode_attention import decode_attention_torch
from sgl_runtime.layers.attention import torch_backend
from sgl_runtime.layers.attention.cascade_metadata import CascadePlanner, graph_chunks_for
from sgl_runtime.mem_cache.radix_cache import RadixCache
from sgl_runtime.mem_cache.shared_prefix import SharedPrefixPlanner, shared_prefix_groups


def shared_pool(lens: list[int], shares: list[tuple[int, list[int]]], kv_heads=2, dim=16, seed=0):
    """KV buffers and a req_to_token table where each (prefix_len, rows) of `shares` holds the same
    slots in [0, prefix_len) (nested shares allowed: later ones overwrite), the rest private."""
    gen = torch.Generator().manual_seed(seed)
    size = sum(lens) + 1
    k_buf, v_buf = torch.randn(size, kv_heads, dim, generator=gen), torch.randn(size, kv_heads, dim, generator=gen)
    perm = torch.randperm(size - 1, generator=gen).to(torch.int32)
    table = torch.zeros(len(lens), max(lens) + 1, dtype=torch.int32)
    table[:] = -1
    used = 0
    for prefix_len, rows in shares:
        slots = perm[used : used + prefix_len]
        used += prefix_len
        for r in rows:
            table[r, :prefix_len] = slots
    for r, n in enumerate(lens):
        free = int((table[r, :n] < 0).sum())
        table[r, :n][table[r, :n] < 0] = perm[used : used + free]
        used += free
    assert used <= size - 1
    return k_buf, v_buf, table


CASES = {
    "two groups, different prefix lengths, one alone": (
        [90, 75, 130, 101, 150, 40],
        [(70, [0, 1, 2]), (100, [3, 4])],
        [(70, [0, 1, 2]), (100, [3, 4])],
    ),
    "no sharing": ([12, 40, 7], [], []),
    "nested: a short preamble for all, a long prompt for some": (
        [300, 280, 260, 90, 95],
        [(20, [0, 1, 2, 3, 4]), (250, [0, 1, 2])],
        [(250, [0, 1, 2]), (20, [3, 4])],
    ),
    "a group of twenty (more than one chunk)": ([64 + i for i in range(20)], [(60, list(range(20)))], None),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (8, 1), (4, 4)])
def test_reference_equals_plain_attention(case, heads, kv_heads):
    lens, shares, groups = CASES[case]
    groups = shares[-1:] if groups is None else groups
    k_buf, v_buf, table = shared_pool(lens, shares, kv_heads)
    q = torch.randn(len(lens), heads, 16, generator=torch.Generator().manual_seed(1))
    rows = torch.arange(len(lens))
    plain = decode_attention_torch(q, k_buf, v_buf, table, rows, lens, 0.3)
    cascade = cascade_decode_attention_torch(q, k_buf, v_buf, table, rows, lens, groups, 0.3)
    torch.testing.assert_close(cascade, plain, atol=1e-5, rtol=1e-5)
    # The Triton path's chunks are groups too: the same result through them.
    chunks = split_groups(groups, members_per_chunk(heads, kv_heads))
    chunked = cascade_decode_attention_torch(q, k_buf, v_buf, table, rows, lens, chunks, 0.3)
    torch.testing.assert_close(chunked, plain, atol=1e-5, rtol=1e-5)


def test_reference_reads_each_group_prefix_once(monkeypatch):
    """What makes it cascade: a group's prefix keys are gathered once, not once per member."""
    from sgl_runtime.kernels import cascade_attention

    lens, shares, groups = CASES["two groups, different prefix lengths, one alone"]
    k_buf, v_buf, table = shared_pool(lens, shares)
    reads = []
    real = cascade_attention.attention_with_lse_torch
    monkeypatch.setattr(
        cascade_attention, "attention_with_lse_torch", lambda q, k, v, s: reads.append(len(k)) or real(q, k, v, s)
    )
    q = torch.randn(len(lens), 4, 16)
    cascade_decode_attention_torch(q, k_buf, v_buf, table, torch.arange(6), lens, groups, 0.3)
    assert sum(reads) == 70 + 100 + sum(lens) - 3 * 70 - 2 * 100


def test_split_groups_balances_chunks_and_drops_singletons():
    assert split_groups([(50, list(range(17)))], 16) == [(50, list(range(9))), (50, list(range(9, 17)))]
    assert split_groups([(50, [3])], 16) == []
    assert split_groups([(50, [0, 1, 2])], 2) == [(50, [0, 1])]  # the lone third member attends on its own
    assert members_per_chunk(32, 8) == 16 and members_per_chunk(28, 4) == 8 and members_per_chunk(64, 1) == 1
    with pytest.raises(AssertionError):
        prefix_starts([(5, [0]), (6, [0])], 2)
    with pytest.raises(AssertionError):  # a member needs a key of its own past the prefix
        prefix_starts([(5, [0, 1])], 2, [9, 5])


def test_planner_tensors_and_graph_capacity():
    planner = CascadePlanner(heads=4, kv_heads=2, device="cpu", max_batch=64)  # 32 members per chunk
    eager = planner.eager([(40, [0, 2]), (90, [1, 3, 4])], 6)
    assert eager.kv_start.tolist() == [40, 90, 40, 90, 90, 0]
    assert eager.chunk_prefix.tolist() == [90, 40]  # the larger saving first
    assert eager.chunk_members[0, :4].tolist() == [1, 3, 4, -1] and eager.chunk_members.shape == (2, 32)
    assert planner.eager(None, 6) is None and planner.eager([], 6) is None
    static = planner.static(16)
    assert graph_chunks_for(16) == 2 and static.chunk_prefix.shape == (2,) and static.kv_start.shape == (16,)
    groups = [(100 + i, [2 * i, 2 * i + 1]) for i in range(4)]  # four chunks, room for two
    assert planner.fill(groups, 8, 16) == 2
    assert static.chunk_prefix.tolist() == [103, 102]
    assert static.kv_start.tolist() == [0, 0, 0, 0, 102, 102, 103, 103] + [0] * 8
    assert planner.fill(None, 8, 16) == 0
    assert static.kv_start.tolist() == [0] * 16 and static.chunk_prefix.tolist() == [0, 0]
    assert (static.chunk_members == -1).all()
    # graphs past max_batch (the flattened-extend sizes of the ladder) capture no cascade: the backend asks first
    with pytest.raises(ValueError, match="a graph of 128 rows exceeds the cascade buffers' 64"):
        planner.static(128)


def test_graphs_without_shared_prefixes_replay_the_variant_without_cascade_launches():
    """Graphs of 16+ rows are captured twice; a batch with no shared prefix (or only groups too small
    to chunk) replays the plain one, so its decode launches no empty prefix stage."""
    from types import SimpleNamespace

    from sgl_runtime.layers.attention.triton_backend import TritonAttentionBackend

    pool = SimpleNamespace(head_num=2, device="cpu")
    backend = TritonAttentionBackend(pool, SimpleNamespace(size=64), num_heads=4, max_batch=64, cascade=True)
    assert backend.graph_variants(8) == (None,) and backend.graph_variants(128) == (None,)
    assert backend.graph_variants(16) == (None, "cascade") and backend.graph_variants(64) == (None, "cascade")
    batch = SimpleNamespace(batch_size=8, shared_prefix_groups=[(100, [0, 1]), (50, [2, 3])])
    assert backend.fill_graph_metadata(batch, 16) == "cascade"
    assert backend.planner.static(16).chunk_prefix.tolist() == [100, 50]
    assert backend.fill_graph_metadata(SimpleNamespace(batch_size=8, shared_prefix_groups=None), 16) is None
    assert backend.fill_graph_metadata(SimpleNamespace(batch_size=8, shared_prefix_groups=[(9, [4])]), 16) is None
    assert backend.fill_graph_metadata(batch, 8) is None  # graphs under 16 rows have no cascade launch
    plain = TritonAttentionBackend(pool, SimpleNamespace(size=64), num_heads=4, max_batch=64, cascade=False)
    assert plain.graph_variants(16) == (None,) and plain.fill_graph_metadata(batch, 16) is None


def _node(cache: RadixCache, tokens: list[int]):
    cache.insert(tokens, torch.arange(len(tokens)) + 1000 * tokens[0])
    return cache.match_prefix(tokens)[1]


def test_groups_from_the_radix_tree():
    cache = RadixCache()
    system_a, system_b = list(range(1, 65)), list(range(500, 540))
    nodes = [_node(cache, system_a + [900 + i]) for i in range(3)]  # 65-token paths through a 64-token node
    nodes += [_node(cache, system_b + [950 + i, 7]) for i in range(2)]
    nodes += [_node(cache, [5000, 5001]), None]  # a short private prompt; a request that locked nothing
    assert shared_prefix_groups(nodes) == [(64, [0, 1, 2]), (40, [3, 4])]
    assert shared_prefix_groups(nodes, min_prefix=50) == [(64, [0, 1, 2])]
    assert shared_prefix_groups(nodes[:1] + nodes[3:4]) == []  # nothing shared
    # A common 10-token preamble under everything: the deeper prompts save more and win.
    cache = RadixCache()
    preamble = list(range(9000, 9040))
    nodes = [_node(cache, preamble + system_a + [900 + i]) for i in range(2)]
    nodes += [_node(cache, preamble + system_b + [950 + i]) for i in range(2)]
    assert shared_prefix_groups(nodes) == [(104, [0, 1]), (80, [2, 3])]
    nodes.append(_node(cache, preamble + [1]))
    nodes.append(_node(cache, preamble + [2]))
    # Now one group on the preamble saves 5 x 40 reads, more than the deeper pairs' 104 + 80 (+ 40).
    assert shared_prefix_groups(nodes) == [(40, [0, 1, 2, 3, 4, 5])]


def test_groups_follow_chunked_prefill_state():
    """A request mid-way through a chunked prefill has its chunks in the tree (cache_unfinished_req):
    a later request matching part of them splits the node, and both paths then share the split point."""
    cache = RadixCache()
    prompt = list(range(1, 101))
    first = _node(cache, prompt[:48])  # chunk 1 of the long prompt, cached unfinished
    first = _node(cache, prompt[:96])  # chunk 2 extends the same path
    other = _node(cache, prompt[:70] + [7, 8])  # another request shares 70 tokens: the 96-token path splits
    assert shared_prefix_groups([first, other]) == [(70, [0, 1])]


GREEDY = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return checkpoint(tmp_path_factory, "llama3")


def test_engine_greedy_output_with_cascade_equals_without(model_path, monkeypatch):
    """Two groups on shared prompts of different lengths plus a loner, all submitted together, the
    prompts prefilled in chunks: the decode steps run the cascade path (counted), and every output
    equals the run with it disabled."""
    calls = []
    real = torch_backend.cascade_decode_attention_torch
    monkeypatch.setattr(torch_backend, "cascade_decode_attention_torch", lambda *a: calls.append(len(a[6])) or real(*a))
    shared_a, shared_b, *tails = random_prompts((60, 40, 3, 5, 4, 6, 2, 9), seed=5)
    prompts = [shared_a + t for t in tails[:3]] + [shared_b + t for t in tails[3:5]] + [tails[5] * 4]
    kwargs = dict(device="cpu", max_total_tokens=2048, chunked_prefill_size=24)
    outputs = [
        r["output_ids"] for r in Engine(model_path, **kwargs).generate(input_ids=prompts, sampling_params=GREEDY)
    ]
    assert calls and max(calls) == 2, calls  # decode steps saw both groups
    calls.clear()
    plain = Engine(model_path, disable_cascade_attention=True, **kwargs)
    assert [r["output_ids"] for r in plain.generate(input_ids=prompts, sampling_params=GREEDY)] == outputs
    assert not calls


INTERPRETED = r"""
import torch
from sgl_runtime.kernels.cascade_attention import shared_prefix_attention
from sgl_runtime.kernels.decode_attention import DecodeWorkspace, decode_attention, decode_attention_torch
from sgl_runtime.layers.attention.cascade_metadata import CascadePlanner
from test_cascade_attention import CASES, shared_pool

lens, shares, groups = CASES["two groups, different prefix lengths, one alone"]
k_buf, v_buf, table = shared_pool(lens, shares)
q = torch.randn(len(lens), 4, 16)
rows, seq_lens = torch.arange(len(lens)), torch.tensor(lens)
plain = decode_attention_torch(q, k_buf, v_buf, table, rows, lens, 0.3)
planner = CascadePlanner(4, 2, "cpu", 16)
workspace = DecodeWorkspace(16, 4, 16, "cpu", cascade=True)
for cascade in (planner.eager(groups, len(lens)), planner.static(16)):
    planner.fill(groups, len(lens), 16)
    out = torch.empty_like(q)
    shared_prefix_attention(q, k_buf, v_buf, table, rows, cascade.chunk_prefix, cascade.chunk_members, workspace, 0.3)
    decode_attention(q, out, k_buf, v_buf, table, rows, seq_lens, workspace, 2, 0.3, kv_start=cascade.kv_start[:6])
    torch.testing.assert_close(out, plain, atol=1e-5, rtol=1e-5)
print("ok")
"""


@pytest.mark.slow
def test_triton_kernels_under_the_interpreter_match_plain_attention():
    """The Triton prefix and suffix kernels, run by Triton's CPU interpreter (~20 s): eager chunks, and
    a graph's static buffers with unused chunk slots."""
    pytest.importorskip("triton")
    here = Path(__file__).parent
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": f"{here.parent}{os.pathsep}{here}"}
    done = subprocess.run([sys.executable, "-c", INTERPRETED], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_planner_remembers_groups_until_a_split_changes_a_path():
    cache = RadixCache()
    system = list(range(1, 81))
    nodes = [_node(cache, system + [900 + i]) for i in range(2)]
    planner = SharedPrefixPlanner(cache)
    assert planner.groups(nodes) == [(80, [0, 1])] == planner.groups(nodes)
    version = cache.structure_version
    _node(cache, system[:50] + [7])  # splits the shared 80-token node at 50: the paths get one more node
    assert cache.structure_version > version
    assert planner.groups(nodes) == [(80, [0, 1])]  # recomputed over the new paths, same sharing
    assert planner.groups(nodes + [_node(cache, system[:50] + [7])]) == [(50, [0, 1, 2])]  # 50 x 2 > 80 x 1
    assert planner.groups(nodes[:1]) == []


def test_graphs_capture_cascade_only_within_the_static_buffers():
    """The graph ladder goes past the largest decode batch (to twice it, for flattened extends); those
    larger graphs capture no cascade launch instead of overrunning the static buffers (small KV pools)."""
    from types import SimpleNamespace

    from sgl_runtime.layers.attention.triton_backend import TritonAttentionBackend

    pools = SimpleNamespace(head_num=2, device="cpu"), SimpleNamespace(size=22)  # max_running_requests 20
    backend = TritonAttentionBackend(*pools, num_heads=4, cascade=True)
    assert [backend._graph_cascade(rows) for rows in (8, 16, 22, 24, 84)] == [False, True, True, False, False]
