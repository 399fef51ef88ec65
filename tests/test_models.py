"""Every supported architecture, loaded through the real loader, matches transformers' logits (float32)
for a batched prefill, decode steps, an extend on a cached prefix and a mixed extend batch."""

from __future__ import annotations

import pytest
import torch
from model_fixtures import ARCH_NAMES, hf_reference_logits, load_for_test, make_tiny_checkpoint

from sgl_runtime.forward_batch import ForwardMode

ATOL = 2e-4
PROMPTS = [[5, 17, 300, 9000, 42, 7, 151000, 3, 99, 1000, 2], [11, 12, 13], [151644, 8948, 198, 2610, 525]]


@pytest.fixture(scope="module", params=list(ARCH_NAMES) + ["llama3-sharded"])
def checkpoint(request, tmp_path_factory):
    name = request.param
    arch = name.replace("-sharded", "")
    return make_tiny_checkpoint(arch, tmp_path_factory.mktemp(name), sharded=name.endswith("-sharded"))


def assert_close(ours: torch.Tensor, path: str, ids: list[int], rows: slice = slice(None)):
    ref = hf_reference_logits(path, ids)[rows]
    assert ours.shape == ref.shape
    assert ref.abs().max() > 1.0  # the comparison means something
    torch.testing.assert_close(ours, ref, atol=ATOL, rtol=1e-4)


def test_prefill_batch_of_different_lengths(checkpoint):
    model, harness = load_for_test(checkpoint)
    slots = [harness.new_request() for _ in PROMPTS]
    logits = harness.run_forward([(s, 0, ids) for s, ids in zip(slots, PROMPTS)])
    for ids, out in zip(PROMPTS, logits):
        assert_close(out, checkpoint, ids)


def test_decode_steps(checkpoint):
    model, harness = load_for_test(checkpoint)
    seqs = [list(p) for p in PROMPTS]
    slots = [harness.new_request() for _ in seqs]
    harness.run_forward([(s, 0, ids) for s, ids in zip(slots, seqs)], all_logits=False)
    for step in range(4):
        new = [[(1000 + 37 * step + 11 * i) % 151000] for i in range(len(seqs))]
        reqs = [(s, len(seq), tok) for s, seq, tok in zip(slots, seqs, new)]
        logits = harness.run_forward(reqs, mode=ForwardMode.DECODE)
        for seq, tok, out in zip(seqs, new, logits):
            seq += tok
            assert_close(out, checkpoint, seq, slice(-1, None))


def test_extend_on_cached_prefix_and_mixed_batch(checkpoint):
    model, harness = load_for_test(checkpoint)
    first = harness.new_request()
    shared = PROMPTS[0][:8]
    harness.run_forward([(first, 0, shared)], all_logits=False)
    # A second request reuses the first's KV for the shared prefix and extends 5 new tokens, batched with
    # the first request extending one token (a decode-like row inside an extend batch).
    second = harness.new_request()
    harness.share_prefix(first, second, len(shared))
    tail = [77, 88, 99, 1234, 4321]
    extra = [555]
    logits = harness.run_forward([(first, len(shared), extra), (second, len(shared), tail)])
    assert_close(logits[0], checkpoint, shared + extra, slice(-1, None))
    assert_close(logits[1], checkpoint, shared + tail, slice(len(shared), None))
