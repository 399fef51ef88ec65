"""The decode step's host fast paths give exactly what the general paths give: ScheduleBatch.prepare
(one staging copy, single-token layout) and plain-greedy sampling (one argmax)."""

from __future__ import annotations

import pytest
import torch

from sgl_runtime.forward_batch import ForwardMode
from sgl_runtime.mem_cache.memory_pool import ReqToTokenPool, TokenToKVPool
from sgl_runtime.mem_cache.radix_cache import RadixCache
from sgl_runtime.sampler import Sampler
from sgl_runtime.sampling_params import SamplingParams
from sgl_runtime.scheduler.req import Req
from sgl_runtime.scheduler.schedule_batch import ScheduleBatch


def _pools():
    return ReqToTokenPool(8, 64, "cpu"), TokenToKVPool(256, torch.float32, 1, 4, 1, "cpu"), RadixCache(disable=True)


def _prefilled(prompt: list[int], outputs: list[int], pools, **params) -> Req:
    """A request whose prompt + outputs[:-1] are in the KV pool; its last output still needs a forward."""
    req_pool, kv_pool, cache = pools
    req = Req("r", prompt, SamplingParams(max_new_tokens=32, **params))
    req.extend_input_len = len(prompt)
    batch = ScheduleBatch([req], req_pool, kv_pool, cache, "cpu")
    batch.prepare()
    batch.commit_forward()
    for token in outputs:
        req.output_ids.append(token)
    req.extend_input_len = req.seq_len - req.kv_len
    return req


def test_decode_prepare_matches_expected_tensors_and_table():
    pools = _pools()
    a = _prefilled([5, 6, 7], [9], pools)
    b = _prefilled([1, 2], [3], pools)
    batch = ScheduleBatch([a, b], *pools, "cpu")
    fb = batch.prepare()
    assert fb.forward_mode == ForwardMode.DECODE and batch.plain_decode
    assert fb.input_ids.tolist() == [9, 3]
    assert fb.positions.tolist() == [3, 2] == fb.extend_prefix_lens.tolist()
    assert fb.seq_lens.tolist() == [4, 3] and fb.seq_lens_cpu == [4, 3]
    assert fb.req_pool_indices.tolist() == [a.req_pool_idx, b.req_pool_idx]
    assert fb.extend_seq_lens.tolist() == [1, 1] and fb.extend_start_loc.tolist() == [0, 1]
    assert fb.logits_indices.tolist() == [0, 1]
    table = pools[0].req_to_token
    assert table[a.req_pool_idx, 3].item() == fb.out_cache_loc[0].item()
    assert table[b.req_pool_idx, 2].item() == fb.out_cache_loc[1].item()


def test_mixed_extend_prepare_keeps_general_layout():
    pools = _pools()
    a = _prefilled([5, 6, 7], [9], pools)
    b = _prefilled([1, 2], [3, 4], pools)  # jump-forward: two tokens to compute (3 in all: odd)
    batch = ScheduleBatch([a, b], *pools, "cpu")
    fb = batch.prepare()
    assert fb.forward_mode == ForwardMode.EXTEND and not batch.plain_decode
    assert fb.input_ids.tolist() == [9, 3, 4]
    assert fb.positions.tolist() == [3, 2, 3]
    assert fb.extend_start_loc.tolist() == [0, 1] and fb.logits_indices.tolist() == [0, 2]
    table = pools[0].req_to_token
    assert table[b.req_pool_idx, 2:4].tolist() == fb.out_cache_loc[1:].tolist()
    fields = (
        fb.input_ids,
        fb.positions,
        fb.req_pool_indices,
        fb.seq_lens,
        fb.extend_prefix_lens,
        fb.extend_seq_lens,
        fb.extend_start_loc,
        fb.logits_indices,
    )
    assert all(t.data_ptr() % 16 == 0 for t in fields)  # odd column lengths are padded: Triton alignment


def test_plain_greedy_is_argmax_but_min_new_tokens_still_masks_eos():
    logits = torch.tensor([[0.0, 1.5, 1.0], [3.0, 0.0, 1.0]])
    plain = Req("p", [1], SamplingParams(temperature=0.0, max_new_tokens=4), eos_token_ids=frozenset({1}))
    assert Sampler()(logits.clone(), [plain, plain]).tolist() == [1, 0]
    held = Req(
        "h", [1], SamplingParams(temperature=0.0, max_new_tokens=4, min_new_tokens=2), eos_token_ids=frozenset({1})
    )
    assert Sampler()(logits.clone(), [held, plain]).tolist() == [2, 0]  # EOS (1) banned before 2 tokens
    penalized = Req("q", [1], SamplingParams(temperature=0.0, max_new_tokens=4, repetition_penalty=2.0))
    assert not penalized.plain_greedy and plain.plain_greedy
    assert Sampler()(logits.clone(), [penalized, plain]).tolist() == [2, 0]  # prompt token 1 penalized


def test_chained_prepare_decodes_the_device_ids_at_kv_len():
    """Overlap scheduling: after a committed decode step whose tokens the host has not read, the next
    step takes its input ids from the device and decodes position kv_len (== seq_len)."""
    pools = _pools()
    a = _prefilled([5, 6, 7], [9], pools)
    b = _prefilled([1, 2], [3], pools)
    first = ScheduleBatch([a, b], *pools, "cpu")
    first.prepare()
    first.commit_forward(count_passes=False)
    assert (a.kv_len, a.seq_len, a.forward_passes) == (4, 4, 1)  # the prefill counted; this step not yet
    for req in (a, b):
        req.extend_input_len = 1
    chained = ScheduleBatch([a, b], *pools, "cpu")
    fb = chained.prepare(next_input_ids=torch.tensor([11, 12]))
    assert fb.forward_mode == ForwardMode.DECODE and chained.plain_decode
    assert fb.input_ids.tolist() == [11, 12]
    assert fb.positions.tolist() == [4, 3] and fb.seq_lens.tolist() == [5, 4] == fb.seq_lens_cpu
    table = pools[0].req_to_token
    assert table[a.req_pool_idx, 4].item() == fb.out_cache_loc[0].item()
    assert table[b.req_pool_idx, 3].item() == fb.out_cache_loc[1].item()


def test_to_device_keeps_values_and_dtype():
    from sgl_runtime.host_to_device import to_device

    t = to_device([1, 2, 3], torch.int64, "cpu")
    assert t.dtype == torch.int64 and t.tolist() == [1, 2, 3]
    assert to_device([0.5, 2.0], torch.float32, "cpu").tolist() == [0.5, 2.0]
    assert to_device(torch.tensor([[1, 0]]), torch.float32, "cpu").tolist() == [[1.0, 0.0]]
    assert to_device([True, False], torch.bool, "cpu").tolist() == [True, False]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_sampling_without_top_p_never_syncs_the_stream():
    """Temperature, top-k, min-p, seeds, penalties and the min_new_tokens stop mask all run on the
    device without a host sync (so overlapped decode steps stay overlapped); top-p's rejection
    rounds are the one documented exception."""
    reqs = [
        Req("a", [1, 2], SamplingParams(temperature=0.7, top_k=20, min_p=0.05, seed=3, max_new_tokens=8)),
        Req(
            "b",
            [3],
            SamplingParams(
                temperature=1.0, frequency_penalty=0.5, presence_penalty=0.2, repetition_penalty=1.3, max_new_tokens=8
            ),
            eos_token_ids=frozenset({7}),
        ),
        Req(
            "c", [4], SamplingParams(temperature=0.0, max_new_tokens=8, min_new_tokens=4), eos_token_ids=frozenset({5})
        ),
    ]
    for req in reqs:
        req.output_ids = [9, 10]
    logits = torch.randn(3, 1000, device="cuda")
    sampler = Sampler()
    sampler(logits.clone(), reqs)  # first call: creates the seeded request's CUDA generator
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        tokens = sampler(logits.clone(), reqs)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert tokens.shape == (3,) and int(tokens[2]) != 5 and all(0 <= t < 1000 for t in tokens.tolist())


def test_ids_between_slices_prompt_and_output_without_building_fill_ids():
    from sgl_runtime.sampling_params import SamplingParams
    from sgl_runtime.scheduler.req import Req

    req = Req("r", [1, 2, 3, 4], SamplingParams(max_new_tokens=8))
    req.output_ids = [5, 6, 7]
    for start in range(8):
        for end in range(start, 8):
            assert req.ids_between(start, end) == req.fill_ids[start:end], (start, end)
