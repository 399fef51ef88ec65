"""ReqToTokenPool and TokenToKVPool: allocation accounting and K/V storage."""

import pytest
import torch

from sgl_runtime.mem_cache.memory_pool import ReqToTokenPool, TokenToKVPool


def test_req_to_token_pool_alloc_free_clear():
    pool = ReqToTokenPool(4, 16, "cpu")
    assert pool.req_to_token.shape == (4, 16) and pool.req_to_token.dtype == torch.int32
    slots = pool.alloc(3)
    assert len(set(slots)) == 3 and pool.available_size() == 1
    assert pool.alloc(2) is None and pool.available_size() == 1
    pool.free(slots[0])
    pool.free(slots[1:])
    assert pool.available_size() == 4
    pool.alloc(4)
    pool.clear()
    assert pool.available_size() == 4


def test_token_to_kv_pool_shapes_and_dummy_slot():
    pool = TokenToKVPool(10, torch.float32, head_num=2, head_dim=4, layer_num=3, device="cpu")
    assert pool.size == 10 and pool.available_size() == 10
    for layer in range(3):
        assert pool.get_key_buffer(layer).shape == (11, 2, 4)
        assert pool.get_value_buffer(layer).shape == (11, 2, 4)
    assert pool.get_key_buffer(0) is not pool.get_key_buffer(1)


def test_token_to_kv_pool_alloc_free_unique():
    pool = TokenToKVPool(8, torch.float32, 1, 2, 1, "cpu")
    a = pool.alloc(5)
    assert a.dtype == torch.int64 and a.numel() == 5
    assert pool.alloc(4) is None and pool.available_size() == 3
    b = pool.alloc(3)
    assert sorted(torch.cat([a, b]).tolist()) == list(range(8))
    assert pool.available_size() == 0 and pool.alloc(1) is None
    pool.free(a[:2])
    pool.free(torch.empty(0, dtype=torch.int64))
    assert pool.available_size() == 2
    c = pool.alloc(2)
    assert sorted(c.tolist()) == sorted(a[:2].tolist())
    pool.clear()
    assert pool.available_size() == 8
    assert pool.alloc(0).numel() == 0


def test_set_kv_buffer_writes_only_given_slots():
    pool = TokenToKVPool(6, torch.float32, 2, 3, 2, "cpu")
    loc = torch.tensor([4, 1])
    k = torch.randn(2, 2, 3)
    v = torch.randn(2, 2, 3)
    pool.set_kv_buffer(1, loc, k, v)
    assert torch.equal(pool.get_key_buffer(1)[loc], k)
    assert torch.equal(pool.get_value_buffer(1)[loc], v)
    assert pool.get_key_buffer(0).abs().sum() == 0
    untouched = [0, 2, 3, 5, 6]
    assert pool.get_key_buffer(1)[untouched].abs().sum() == 0


def test_set_kv_buffer_casts_to_pool_dtype():
    pool = TokenToKVPool(4, torch.bfloat16, 1, 2, 1, "cpu")
    pool.set_kv_buffer(0, torch.tensor([0]), torch.ones(1, 1, 2), torch.ones(1, 1, 2))
    assert pool.get_key_buffer(0).dtype == torch.bfloat16
    assert pool.get_key_buffer(0)[0].float().sum() == 2


def test_invalid_sizes_raise():
    with pytest.raises(ValueError, match="size"):
        TokenToKVPool(0, torch.float32, 1, 1, 1, "cpu")
    with pytest.raises(ValueError, match="size"):
        ReqToTokenPool(0, 4, "cpu")
