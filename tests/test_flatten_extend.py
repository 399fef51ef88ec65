"""An EXTEND batch run as a DECODE batch of one row per token (forward_batch.flatten_extend, which
lets the decode CUDA graphs serve jump-forward extends) gives the extend's logits for every token.
CPU, torch backend; the graph replay of it is tested in test_kernels_gpu.py."""

from __future__ import annotations

import json

import pytest
import torch

from sgl_runtime.model_executor.forward_batch import ForwardBatch, ForwardMode, flat_extra_keys, flatten_extend

CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "vocab_size": 512, "max_position_embeddings": 1024, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
    "torch_dtype": "float32", "eos_token_id": 2,
}


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    from sgl_runtime.model_config import ModelConfig
    from sgl_runtime.model_executor.model_runner import ModelRunner
    from sgl_runtime.server_args import ServerArgs

    path = tmp_path_factory.mktemp("flat-model")
    (path / "config.json").write_text(json.dumps(CONFIG))
    args = ServerArgs(model_path=str(path), load_format="dummy", device="cpu", attention_backend="torch",
                      max_total_tokens=2048, max_running_requests=8)
    return ModelRunner(args, ModelConfig.from_path(str(path), "auto", None, "cpu"))


def _extend(runner, reqs) -> ForwardBatch:
    """reqs: [(row, prefix_len, new token ids)]: slots allocated and written to req_to_token; logits for every token."""
    ext = [len(t) for _, _, t in reqs]
    loc = runner.token_to_kv_pool.alloc(sum(ext))
    table = runner.req_to_token_pool.req_to_token
    ids, positions, starts, offset = [], [], [], 0
    for (row, prefix, tokens), n in zip(reqs, ext):
        table[row, prefix : prefix + n] = loc[offset : offset + n].to(table.dtype)
        ids += tokens
        positions += range(prefix, prefix + n)
        starts.append(offset)
        offset += n

    def t(values):
        return torch.tensor(values, dtype=torch.int64)

    every = list(range(offset))
    return ForwardBatch(
        forward_mode=ForwardMode.EXTEND, batch_size=len(reqs), input_ids=t(ids), positions=t(positions),
        req_pool_indices=t([r for r, _, _ in reqs]), seq_lens=t([p + n for (_, p, _), n in zip(reqs, ext)]),
        extend_prefix_lens=t([p for _, p, _ in reqs]), extend_seq_lens=t(ext), extend_start_loc=t(starts),
        out_cache_loc=loc, seq_lens_cpu=[p + n for (_, p, _), n in zip(reqs, ext)],
        extend_prefix_lens_cpu=[p for _, p, _ in reqs], extend_seq_lens_cpu=ext, logits_indices=t(every),
        logits_indices_cpu=every,
    )


def test_flattened_extend_gives_the_extend_logits_for_every_token(runner):
    gen = torch.Generator().manual_seed(0)

    def tokens(n):
        return torch.randint(3, 512, (n,), generator=gen).tolist()

    prefill = _extend(runner, [(0, 0, tokens(40)), (1, 0, tokens(1)), (2, 0, tokens(9))])
    flat_prefill = flatten_extend(prefill)
    assert flat_prefill.forward_mode.is_decode() and flat_prefill.batch_size == 50
    assert flat_prefill.seq_lens.tolist() == list(range(1, 41)) + [1] + list(range(1, 10))
    assert flat_prefill.req_pool_indices.tolist() == [0] * 40 + [1] + [2] * 9
    reference = runner.forward(prefill)
    torch.testing.assert_close(runner.forward(flat_prefill), reference, rtol=1e-5, atol=1e-5)

    # jump-forward shapes on cached prefixes: several forced tokens, a plain decode token, a longer span
    step = _extend(runner, [(0, 40, tokens(4)), (1, 1, tokens(1)), (2, 9, tokens(12))])
    reference = runner.forward(step)
    flat = flatten_extend(step)
    assert flat.seq_lens_cpu == [41, 42, 43, 44, 2] + list(range(10, 22))
    torch.testing.assert_close(runner.forward(flat), reference, rtol=1e-5, atol=1e-5)
    assert not torch.equal(reference[0], reference[1])  # the rows differ: a real comparison


def test_flat_extra_keys_counts_the_prefix_reads_each_row_repeats(runner):
    batch = _extend(runner, [(3, 100, [5, 6, 7]), (4, 0, [8])])
    # request 3: rows read 101 + 102 + 103 keys against 103 once; request 4: 1 against 1
    assert flat_extra_keys(batch) == (101 + 102 + 103) - 103
