"""Decode under CUDA graphs: one graph per batch size of a ladder, replayed with padding.

Only the model forward (embeddings to float32 logits) is captured; sampling and grammar masks run
after it on the device, on the returned logits. A batch is padded to the next captured size; the
padded entries write their K/V into the pool's dummy slot and attend one key, and their logits are
dropped.

Small EXTEND batches (jump-forward text, decode steps mixed with it, short prefills) replay the
same graphs with one row per new token (forward_batch.flatten_extend), in up to
MAX_EXTEND_REPLAYS replays of at most the largest captured size (the ladder goes on past the
largest decode batch to twice it, in steps of 64, for them). The eager forward they replace
costs more in kernel launches than the GPU spends on such a batch (about 18 ms against 5 ms for
~300 tokens of a 7B model on the H200). Each flattened row reads its own prefix, so an extend
whose rows would read more than MAX_EXTRA_KEYS keys beyond the extend's own (long prefixes,
long prompts) runs eagerly.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import time

import torch

from sgl_runtime.forward_batch import ForwardBatch, ForwardMode, flat_extra_keys, flatten_extend
from sgl_runtime.host_to_device import to_device

logger = logging.getLogger(__name__)

MAX_EXTEND_REPLAYS = 2
MAX_EXTRA_KEYS = 65536  # per layer and KV head: ~2 ms of extra reads for Llama-3-8B on an H200


def batch_size_ladder(max_bs: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 8 up to max_bs (max_bs itself included), then steps of
    64 up to twice max_bs: sizes no decode batch reaches, for flattened extends."""
    sizes = [s for s in (1, 2, 4, 8) if s <= max_bs] + list(range(16, max_bs + 1, 8))
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sizes + list(range(max_bs + 64, 2 * max_bs + 1, 64))


class CudaGraphRunner:
    """Captures `model_runner.model` for DECODE batches; `can_run` + `replay` as ModelRunner expects."""

    def __init__(self, model_runner, max_bs: int) -> None:
        self.model_runner = model_runner
        self.model = model_runner.model
        self.attn_backend = model_runner.attn_backend
        self.req_to_token = model_runner.req_to_token_pool.req_to_token
        self.dummy_slot = model_runner.token_to_kv_pool.size  # the pool's padding slot
        self.batch_sizes = batch_size_ladder(max_bs)
        self.max_bs = self.batch_sizes[-1]
        self.flatten_extends = True  # serve small extends from the decode graphs (see the module doc)
        self.graphs: dict[tuple, torch.cuda.CUDAGraph] = {}  # (batch size, attention backend's variant)
        self.outputs: dict[tuple, torch.Tensor] = {}
        self.pool = None
        self._alloc_buffers(model_runner.device)
        start = time.monotonic()
        self.capture()
        logger.info(
            "captured %d CUDA graphs (batch sizes up to %d) in %.1f s",
            len(self.graphs),
            self.max_bs,
            time.monotonic() - start,
        )

    def _alloc_buffers(self, device) -> None:
        n = self.max_bs

        def zeros() -> torch.Tensor:
            return torch.zeros(n, dtype=torch.int64, device=device)

        self.input_ids, self.positions, self.req_pool_indices = zeros(), zeros(), zeros()
        self.seq_lens, self.out_cache_loc = zeros() + 1, zeros() + self.dummy_slot
        self.ones = zeros() + 1
        self.start_loc = torch.arange(n, dtype=torch.int64, device=device)
        self._dirty_upto = 0  # entries [0, _dirty_upto) may hold a past batch's values, the rest padding

    # ------------------------------------------------------------------ capture
    def _static_batch(self, bs: int) -> ForwardBatch:
        return ForwardBatch(
            forward_mode=ForwardMode.DECODE,
            batch_size=bs,
            input_ids=self.input_ids[:bs],
            positions=self.positions[:bs],
            req_pool_indices=self.req_pool_indices[:bs],
            seq_lens=self.seq_lens[:bs],
            extend_prefix_lens=self.seq_lens[:bs] - 1,
            extend_seq_lens=self.ones[:bs],
            extend_start_loc=self.start_loc[:bs],
            out_cache_loc=self.out_cache_loc[:bs],
            seq_lens_cpu=[1] * bs,
            extend_prefix_lens_cpu=[0] * bs,
            extend_seq_lens_cpu=[1] * bs,
            logits_indices=self.start_loc[:bs],
            attn_backend=self.attn_backend,
            req_to_token=self.req_to_token,
        )

    def _run_model(self, batch: ForwardBatch, variant=None) -> torch.Tensor:
        self.attn_backend.init_graph_metadata(batch, variant)
        return self.model(batch.input_ids, batch.positions, batch)

    @torch.inference_mode()
    def capture(self) -> None:
        """Largest first, so the smaller graphs reuse the largest one's memory pool."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for bs in reversed(self.batch_sizes):
                batch = self._static_batch(bs)
                for variant in self.attn_backend.graph_variants(bs):
                    for _ in range(2):  # warm-up: Triton compilation, cuBLAS handles, lazy workspaces
                        self._run_model(batch, variant)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, pool=self.pool, stream=stream):
                        self.outputs[bs, variant] = self._run_model(batch, variant)
                    self.pool = graph.pool() if self.pool is None else self.pool
                    self.graphs[bs, variant] = graph
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()

    # ------------------------------------------------------------------ replay
    def can_run(self, forward_batch: ForwardBatch) -> bool:
        return forward_batch.forward_mode.is_decode() and 0 < forward_batch.batch_size <= self.max_bs

    def replay(self, forward_batch: ForwardBatch) -> torch.Tensor:
        """logits [bs, vocab] float32 (a view of the graph's output, valid until the next replay)."""
        bs = forward_batch.batch_size
        padded = self.batch_sizes[bisect.bisect_left(self.batch_sizes, bs)]
        dirty = self._dirty_upto
        if dirty > bs:  # a larger batch left real entries past bs: reset them to padding
            self.seq_lens[bs:dirty].fill_(1)
            self.req_pool_indices[bs:dirty].zero_()
            self.out_cache_loc[bs:dirty].fill_(self.dummy_slot)
            self.positions[bs:dirty].zero_()
            self.input_ids[bs:dirty].zero_()
        self._dirty_upto = bs
        self.input_ids[:bs].copy_(forward_batch.input_ids, non_blocking=True)
        self.positions[:bs].copy_(forward_batch.positions, non_blocking=True)
        self.req_pool_indices[:bs].copy_(forward_batch.req_pool_indices, non_blocking=True)
        self.seq_lens[:bs].copy_(forward_batch.seq_lens, non_blocking=True)
        self.out_cache_loc[:bs].copy_(forward_batch.out_cache_loc, non_blocking=True)
        variant = self.attn_backend.fill_graph_metadata(forward_batch, padded)
        self.graphs[padded, variant].replay()
        return self.outputs[padded, variant][:bs]

    def can_run_extend(self, forward_batch: ForwardBatch) -> bool:
        """Whether an EXTEND batch is small enough to replay flattened (see the module doc)."""
        return (
            self.flatten_extends
            and forward_batch.forward_mode.is_extend()
            and forward_batch.logits_indices_cpu is not None
            and 0 < forward_batch.num_tokens <= MAX_EXTEND_REPLAYS * self.max_bs
            and flat_extra_keys(forward_batch) <= MAX_EXTRA_KEYS
        )

    def replay_extend(self, forward_batch: ForwardBatch) -> torch.Tensor:
        """logits [L, vocab] float32 for forward_batch.logits_indices, as the eager extend returns."""
        flat = flatten_extend(forward_batch)
        total = flat.batch_size
        if total <= self.max_bs:
            return self.replay(flat).index_select(0, forward_batch.logits_indices)
        wanted = forward_batch.logits_indices_cpu
        out = None
        for start in range(0, total, self.max_bs):  # in order: later rows attend to K/V the earlier replays stored
            end = min(total, start + self.max_bs)
            logits = self.replay(_rows(flat, start, end))
            picks = [(k, row - start) for k, row in enumerate(wanted) if start <= row < end]
            if out is None:
                out = torch.empty((len(wanted), logits.shape[1]), dtype=logits.dtype, device=logits.device)
            if picks:
                dst = to_device([k for k, _ in picks], torch.int64, logits.device)
                src = to_device([r for _, r in picks], torch.int64, logits.device)
                out.index_copy_(0, dst, logits.index_select(0, src))
        return out


def _rows(flat: ForwardBatch, start: int, end: int) -> ForwardBatch:
    """Rows [start, end) of a flattened (DECODE) batch: the fields a replay reads."""
    return dataclasses.replace(
        flat,
        batch_size=end - start,
        input_ids=flat.input_ids[start:end],
        positions=flat.positions[start:end],
        req_pool_indices=flat.req_pool_indices[start:end],
        seq_lens=flat.seq_lens[start:end],
        out_cache_loc=flat.out_cache_loc[start:end],
        seq_lens_cpu=flat.seq_lens_cpu[start:end],
        extend_prefix_lens=flat.extend_prefix_lens[start:end],
        extend_seq_lens=flat.extend_seq_lens[start:end],
        extend_start_loc=flat.extend_start_loc[: end - start],
        extend_prefix_lens_cpu=flat.extend_prefix_lens_cpu[start:end],
        extend_seq_lens_cpu=flat.extend_seq_lens_cpu[start:end],
        logits_indices=flat.logits_indices[: end - start],
        logits_indices_cpu=list(range(end - start)),
    )
