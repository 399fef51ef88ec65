"""ConstraintCache (LRU bound, worker-thread compile, timeout) and bitmask application to logits."""

import threading
import time

import numpy as np
import pytest
import torch

from sgl_runtime.constrained import ConstraintError
from sgl_runtime.constrained import cache as cache_module
from sgl_runtime.constrained.bitmask import apply_token_bitmask_, apply_token_bitmask_torch_, stack_bitmasks
from sgl_runtime.constrained.cache import ConstraintCache
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_qwen2_tokenizer()


def test_cache_hits_and_lru_bound(tok):
    cache = ConstraintCache(tok, vocab_size=151936, eos_token_ids=[151645], max_size=2)
    a = cache.get("regex", "[0-9]+")
    assert cache.get("regex", "[0-9]+") is a
    assert cache.submit("regex", "[0-9]+").done()  # warmed and cached: no new compile
    cache.get("choices", ["x", "y"])
    cache.get("regex", "[a-z]+")  # evicts the least recently used ("[0-9]+")
    assert len(cache) == 2
    assert cache.get("regex", "[0-9]+") is not a
    assert cache.get("choices", ["x", "y"]).accepts("y")
    assert cache.get("regex", "[a-z]+").accepts("abc")
    cache.shutdown()


def test_start_builds_the_vocabulary_tables_ahead_of_the_first_constraint(tok):
    from sgl_runtime.constrained.grammar.walk import TokenTable

    cache = ConstraintCache(tok, vocab_size=151936, eos_token_ids=[151645])
    try:
        cache.start_workers()
        cache._prepared.result(timeout=120)
        vocabulary = cache._vocabulary()
        assert "_walk_table" in vocabulary.__dict__  # built (cached_property), not waiting for a request
        assert TokenTable._shared.get(vocabulary) is not None
    finally:
        cache.shutdown()


def test_compile_errors_are_constraint_errors(tok):
    cache = ConstraintCache(tok)
    with pytest.raises(ConstraintError, match="invalid regex"):
        cache.get("regex", "(")
    with pytest.raises(ConstraintError, match="unknown constraint kind"):
        cache.get("yaml", "a: b")
    cache.shutdown()


def test_compile_runs_off_thread_and_times_out(tok, monkeypatch):
    release = threading.Event()
    compiled_on = []

    def slow_compile(kind, spec, tokenizer, **options):
        compiled_on.append(threading.current_thread().name)
        release.wait(5)
        raise ConstraintError("never reached in time")

    monkeypatch.setattr(cache_module, "compile_constraint", slow_compile)
    cache = ConstraintCache(tok, compile_timeout=0.3)
    started = time.monotonic()
    future = cache.submit("regex", "a+")
    assert time.monotonic() - started < 0.2 and not future.done()  # submit never blocks
    with pytest.raises(ConstraintError, match="took longer than"):
        future.result(timeout=5)
    assert time.monotonic() - started < 2
    assert compiled_on and compiled_on[0].startswith("constraint-compile")
    release.set()
    cache.shutdown()


def _reference_mask(logits: torch.Tensor, allowed: list[set[int]]) -> torch.Tensor:
    out = torch.full_like(logits, float("-inf"))
    for row, ids in enumerate(allowed):
        for i in ids:
            out[row, i] = logits[row, i]
    return out


def test_apply_token_bitmask_matches_reference():
    rng = np.random.default_rng(0)
    vocab = 100  # 4 words, the last one partly past the vocabulary
    allowed = [set(rng.choice(vocab, size=k, replace=False).tolist()) for k in (1, 17, 64, 99)]
    masks = []
    for ids in allowed:
        bits = np.zeros(128, dtype=bool)
        bits[list(ids)] = True
        masks.append(np.packbits(bits, bitorder="little").view("<i4").astype(np.int32))
    logits = torch.randn(4, vocab)
    expected = _reference_mask(logits, allowed)
    got = apply_token_bitmask_(logits.clone(), stack_bitmasks(masks, 4))
    assert torch.equal(got, expected)
    assert torch.equal(apply_token_bitmask_torch_(logits.clone(), stack_bitmasks(masks, 4)), expected)


def test_stack_bitmasks_unconstrained_rows_and_narrow_masks():
    stacked = stack_bitmasks([None, np.zeros(2, dtype=np.int32)], 2)
    assert stacked.dtype == torch.int32 and stacked.shape == (2, 2)
    logits = torch.zeros(2, 70)  # wider than 2 * 32: the extra columns are masked
    apply_token_bitmask_(logits, stacked)
    assert torch.isfinite(logits[0, :64]).all() and torch.isinf(logits[0, 64:]).all()
    assert torch.isinf(logits[1]).all()
    with pytest.raises(ValueError):
        stack_bitmasks([np.zeros(3, dtype=np.int32)], 2)
    with pytest.raises(ValueError):
        apply_token_bitmask_(torch.zeros(2, 8), torch.zeros(1, 1, dtype=torch.int32))


def test_qwen_matcher_mask_applied_to_logits(tok):
    from sgl_runtime.constrained import compile_constraint

    c = compile_constraint("regex", "[0-9]{3}", tok, vocab_size=151936, eos_token_ids=[151645])
    logits = torch.randn(1, 151936)
    apply_token_bitmask_(logits, stack_bitmasks([c.matcher().bitmask()], c.vocabulary.num_words))
    survivors = torch.nonzero(torch.isfinite(logits[0])).flatten().tolist()
    assert survivors and all(tok.decode([i]).isdigit() and len(tok.decode([i])) <= 3 for i in survivors)
    assert len(survivors) == 10  # Qwen2.5 splits digits one per token
