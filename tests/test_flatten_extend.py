"""An EXTEND batch run as a DECODE batch of one row per token (forward_batch.flatten_extend, which
lets the decode CUDA graphs serve jump-forward extends) gives the extend's logits for every token.
CPU, torch backend; the graph replay of it is tested in test_kernels_gpu.py."""

from __future__ import annotations

import pytest
import torch
from model_fixtures import load_for_test, make_tiny_checkpoint

from sgl_runtime.forward_batch import ForwardMode, flat_extra_keys, flatten_extend


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    _, harness = load_for_test(make_tiny_checkpoint("llama3", tmp_path_factory.mktemp("flat")))
    return harness


def _logits(harness, batch) -> torch.Tensor:
    return harness.model(batch.input_ids, batch.positions, batch)


def test_flattened_extend_gives_the_extend_logits_for_every_token(harness):
    gen = torch.Generator().manual_seed(0)

    def tokens(n):
        return torch.randint(3, 1000, (n,), generator=gen).tolist()

    slots = [harness.new_request() for _ in range(3)]
    prefill = harness.build_batch(
        [(slots[0], 0, tokens(40)), (slots[1], 0, tokens(1)), (slots[2], 0, tokens(9))],
        ForwardMode.EXTEND,
        all_logits=True,
    )
    flat_prefill = flatten_extend(prefill)
    assert flat_prefill.forward_mode.is_decode() and flat_prefill.batch_size == 50
    assert flat_prefill.seq_lens.tolist() == list(range(1, 41)) + [1] + list(range(1, 10))
    assert flat_prefill.req_pool_indices.tolist() == [slots[0]] * 40 + [slots[1]] + [slots[2]] * 9
    reference = _logits(harness, prefill)  # the extend stores the K/V; the flattened rows rewrite the same values
    torch.testing.assert_close(_logits(harness, flat_prefill), reference, rtol=1e-5, atol=1e-5)

    # jump-forward shapes on cached prefixes: several forced tokens, a plain decode token, a longer span
    step = harness.build_batch(
        [(slots[0], 40, tokens(4)), (slots[1], 1, tokens(1)), (slots[2], 9, tokens(12))],
        ForwardMode.EXTEND,
        all_logits=True,
    )
    reference = _logits(harness, step)
    flat = flatten_extend(step)
    assert flat.seq_lens_cpu == [41, 42, 43, 44, 2] + list(range(10, 22))
    torch.testing.assert_close(_logits(harness, flat), reference, rtol=1e-5, atol=1e-5)
    assert not torch.equal(reference[0], reference[1])  # the rows differ: a real comparison


def test_flat_extra_keys_counts_the_prefix_reads_each_row_repeats(harness):
    slots = [harness.new_request() for _ in range(2)]
    batch = harness.build_batch([(slots[0], 100, [5, 6, 7]), (slots[1], 0, [8])], ForwardMode.EXTEND, all_logits=False)
    # the first request's rows read 101 + 102 + 103 keys against 103 once; the second's 1 against 1
    assert flat_extra_keys(batch) == (101 + 102 + 103) - 103
