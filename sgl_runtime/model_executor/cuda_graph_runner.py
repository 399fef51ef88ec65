"""Decode under CUDA graphs: one graph per batch size of a ladder, replayed with padding.

Only the model forward (embeddings to float32 logits) is captured; sampling and grammar masks run
after it on the device, on the returned logits. A batch is padded to the next captured size; the
padded entries write their K/V into the pool's dummy slot and attend one key, and their logits are
dropped.
"""

from __future__ import annotations

import bisect
import logging
import time

import torch

from sgl_runtime.model_executor.forward_batch import ForwardBatch, ForwardMode

logger = logging.getLogger(__name__)


def batch_size_ladder(max_bs: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 8 up to max_bs (max_bs itself included)."""
    sizes = [s for s in (1, 2, 4, 8) if s <= max_bs] + list(range(16, max_bs + 1, 8))
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sizes


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
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self.pool = None
        self._alloc_buffers(model_runner.device)
        start = time.monotonic()
        self.capture()
        logger.info("captured %d CUDA graphs (batch sizes up to %d) in %.1f s",
                    len(self.graphs), self.max_bs, time.monotonic() - start)

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
            forward_mode=ForwardMode.DECODE, batch_size=bs, input_ids=self.input_ids[:bs],
            positions=self.positions[:bs], req_pool_indices=self.req_pool_indices[:bs], seq_lens=self.seq_lens[:bs],
            extend_prefix_lens=self.seq_lens[:bs] - 1, extend_seq_lens=self.ones[:bs], extend_start_loc=self.start_loc[:bs],
            out_cache_loc=self.out_cache_loc[:bs], seq_lens_cpu=[1] * bs, extend_prefix_lens_cpu=[0] * bs,
            extend_seq_lens_cpu=[1] * bs, logits_indices=self.start_loc[:bs],
            attn_backend=self.attn_backend, req_to_token=self.req_to_token,
        )

    def _run_model(self, batch: ForwardBatch) -> torch.Tensor:
        self.attn_backend.init_forward_metadata(batch)
        return self.model(batch.input_ids, batch.positions, batch)

    @torch.inference_mode()
    def capture(self) -> None:
        """Largest first, so the smaller graphs reuse the largest one's memory pool."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for bs in reversed(self.batch_sizes):
                batch = self._static_batch(bs)
                for _ in range(2):  # warm-up: Triton compilation, cuBLAS handles, lazy workspaces
                    self._run_model(batch)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=self.pool, stream=stream):
                    self.outputs[bs] = self._run_model(batch)
                self.pool = graph.pool() if self.pool is None else self.pool
                self.graphs[bs] = graph
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
        self.graphs[padded].replay()
        return self.outputs[padded][:bs]
