"""Owns the model on its device: loads it, sizes the KV pools, picks the attention backend, runs forwards."""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import Optional

import torch

from sgl_runtime.distributed.layout import local_device_index
from sgl_runtime.distributed.parallel_state import TensorParallelError, TPGroup, init_tp_group
from sgl_runtime.forward_batch import ForwardBatch, ForwardMode
from sgl_runtime.mem_cache.memory_pool import ReqToTokenPool, TokenToKVPool
from sgl_runtime.model_config import ModelConfig
from sgl_runtime.model_executor.tp_batch_channel import BatchChannel
from sgl_runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

# CPU defaults: the KV pool may use this share of the free RAM, up to this many tokens.
CPU_KV_RAM_FRACTION = 0.2
CPU_DEFAULT_MAX_TOKENS = 65536
# The CUDA default matches the decode graphs' ladder (batch_size_ladder goes to twice
# cuda_graph_max_bs): past 256 the KV pool usually binds first, except where requests share
# prefixes in the radix cache, which is where larger batches pay (benchmarks/shared_prefix.py).
DEFAULT_MAX_RUNNING_REQUESTS = {"cpu": 64, "cuda": 512}


class ModelRunner:
    """Runs `forward(ForwardBatch) -> logits` and holds the memory pools the scheduler allocates from.

    `cuda_graph_runner`, when set (an object with `can_run(forward_batch) -> bool` and
    `replay(forward_batch) -> logits`, plus `can_run_extend` / `replay_extend` for small EXTEND
    batches), serves those batches instead of the eager model.

    With tp_size > 1 there is one ModelRunner per rank, each holding its shard of the weights and of
    the KV heads. Rank 0's (the scheduler's) `forward` first broadcasts the batch; the other ranks sit
    in `serve_as_worker`, running every forward rank 0 sends, until it stops.
    """

    def __init__(self, server_args: ServerArgs, model_config: ModelConfig, tp_rank: int = 0) -> None:
        from sgl_runtime.model_loader.loader import load_model

        self.server_args = server_args
        self.model_config = model_config
        self.device = server_args.resolved_device
        self.tp = self._join_tp_group(tp_rank)
        self.channel = BatchChannel(self.tp, self.device) if self.tp is not None else None
        torch.manual_seed(server_args.random_seed)
        self.model = load_model(
            model_config.model_path,
            model_config.dtype,
            self.device,
            server_args.load_format,
            server_args.random_seed,
            self.tp,
        )
        self.num_kv_heads = _local_kv_heads(model_config.num_kv_heads, server_args.tp_size)
        self.max_total_num_tokens = self._kv_pool_size()
        if self.tp is not None:  # rank 0 allocates slots for every rank: the smallest pool binds
            self.max_total_num_tokens = self.tp.min_int(self.max_total_num_tokens)
        self.max_running_requests = self._max_running_requests()
        self.req_to_token_pool = ReqToTokenPool(self.max_running_requests + 2, self._table_width(), self.device)
        self.req_to_token_pool.record_writes = self.tp is not None and self.tp.is_driver
        self.token_to_kv_pool = TokenToKVPool(
            self.max_total_num_tokens,
            model_config.dtype,
            self.num_kv_heads,
            model_config.head_dim,
            model_config.num_layers,
            self.device,
        )
        self.attn_backend = self._make_attention_backend()
        self.cuda_graph_runner = self._make_cuda_graph_runner()
        logger.info(
            "model loaded on %s (%s%s): KV pool %d tokens, up to %d running requests, %s attention",
            self.device,
            model_config.dtype,
            f", tp rank {tp_rank} of {server_args.tp_size}" if self.tp else "",
            self.max_total_num_tokens,
            self.max_running_requests,
            type(self.attn_backend).__name__,
        )

    def forward(self, forward_batch: ForwardBatch) -> torch.Tensor:
        """logits [L, vocab] float32 for the rows in forward_batch.logits_indices (on every rank)."""
        if self.tp is None:
            return self._forward(forward_batch)
        try:
            self.channel.send(forward_batch, self.req_to_token_pool.take_writes())
            return self._forward(forward_batch)
        except Exception as exc:  # the ranks no longer agree (a collective failed, or rank 0 alone raised)
            raise TensorParallelError(f"tensor-parallel forward failed on rank 0 (a rank died?): {exc}") from exc

    def heartbeat(self) -> None:
        """Rank 0, while idle: check that every rank still answers (TensorParallelError if one died)."""
        if self.tp is None:
            return
        try:
            self.channel.send_ping()
        except Exception as exc:
            raise TensorParallelError(f"a tensor-parallel rank stopped answering rank 0: {exc}") from exc

    def serve_as_worker(self) -> None:
        """Ranks 1..N-1: run each forward rank 0 broadcasts until it stops (TensorParallelError if it dies)."""
        while True:
            try:
                received = self.channel.receive()
                if received is None:
                    return
                forward_batch, writes = received
                self.req_to_token_pool.apply_writes(writes)
                self._forward(forward_batch)
            except Exception as exc:
                raise TensorParallelError(f"tensor-parallel rank {self.tp.rank} lost the group: {exc}") from exc

    def shutdown(self) -> None:
        """Rank 0 tells the other ranks to stop; every rank leaves the process group."""
        if self.tp is None:
            return
        try:
            if self.tp.is_driver:
                self.channel.send_stop()
        except RuntimeError as exc:  # another rank is gone already
            logger.warning("tensor-parallel stop not delivered: %s", exc)
        self.tp.destroy()
        self.tp = None

    @torch.inference_mode()
    def _forward(self, forward_batch: ForwardBatch) -> torch.Tensor:
        forward_batch.attn_backend = self.attn_backend
        forward_batch.req_to_token = self.req_to_token_pool.req_to_token
        graph = self.cuda_graph_runner
        if graph is not None:
            if forward_batch.forward_mode.is_decode() and graph.can_run(forward_batch):
                return graph.replay(forward_batch)
            if graph.can_run_extend(forward_batch):  # small extends replay the decode graphs, one row per token
                return graph.replay_extend(forward_batch)
        self.attn_backend.init_forward_metadata(forward_batch)
        return self.model(forward_batch.input_ids, forward_batch.positions, forward_batch)

    def _join_tp_group(self, tp_rank: int) -> Optional[TPGroup]:
        args = self.server_args
        if args.tp_size == 1:
            return None
        if self.device != "cpu":
            torch.cuda.set_device(local_device_index(tp_rank, args.tp_size, args.nnodes))
        return init_tp_group(tp_rank, args.tp_size, args.dist_init_addr, self.device)

    def release(self) -> None:
        """Drop the CUDA graphs, attention backend, pools and model (Engine.shutdown frees their memory)."""
        self.cuda_graph_runner = None
        self.attn_backend = None
        self.req_to_token_pool = self.token_to_kv_pool = None
        self.model = None

    # ------------------------------------------------------------------ sizing
    def kv_bytes_per_token(self) -> int:
        """KV bytes per token on this rank (its share of the KV heads)."""
        cfg = self.model_config
        element = torch.tensor([], dtype=cfg.dtype).element_size()
        return 2 * cfg.num_layers * self.num_kv_heads * cfg.head_dim * element

    def _kv_pool_size(self) -> int:
        if self.server_args.max_total_tokens is not None:
            return self.server_args.max_total_tokens
        per_token = self.kv_bytes_per_token()
        if self.device == "cpu":
            budget = int(_available_ram_bytes() * CPU_KV_RAM_FRACTION) // per_token
            size = min(budget, max(CPU_DEFAULT_MAX_TOKENS, self.model_config.context_length))
        else:
            size = self._gpu_kv_tokens(per_token)
        if size <= 0:
            raise RuntimeError(
                f"no memory left for the KV cache ({per_token} bytes per token); "
                "lower the model size, raise --mem-fraction-static or set --max-total-tokens"
            )
        return int(size)

    def _gpu_kv_tokens(self, per_token: int) -> int:
        """KV tokens that fit in mem_fraction_static of the device after the weights and the peak
        activations of a warm-up forward of one full prefill chunk (nano-vllm's rule)."""
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        self.warmup_forward(self._warmup_tokens())
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        used = total - free
        activations = torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated()
        budget = total * self.server_args.mem_fraction_static - used - activations
        return int(budget // per_token)

    def _table_width(self) -> int:
        """Positions per req_to_token row: the whole context, plus one."""
        return self.model_config.context_length + 1

    def _warmup_tokens(self) -> int:
        args = self.server_args
        chunk = args.chunked_prefill_size if args.chunked_prefill_size > 0 else args.max_prefill_tokens
        return max(1, min(chunk, args.max_prefill_tokens, self.model_config.context_length - 1))

    @torch.inference_mode()
    def warmup_forward(self, num_tokens: int) -> torch.Tensor:
        """One prefill of `num_tokens` dummy tokens through temporary pools (used to measure peak memory).
        Its req_to_token row is as wide as the real pool's: the kernels are compiled for that row stride
        here, not again inside the first long prefill (Triton specialises integers divisible by 16)."""
        cfg = self.model_config
        req_pool = ReqToTokenPool(1, self._table_width(), self.device)
        kv_pool = TokenToKVPool(num_tokens, cfg.dtype, self.num_kv_heads, cfg.head_dim, cfg.num_layers, self.device)
        slots = kv_pool.alloc(num_tokens)
        req_pool.req_to_token[0, :num_tokens] = slots.to(torch.int32)

        def t(values: list[int]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.int64, device=self.device)

        batch = ForwardBatch(
            forward_mode=ForwardMode.EXTEND,
            batch_size=1,
            input_ids=torch.zeros(num_tokens, dtype=torch.int64, device=self.device),
            positions=torch.arange(num_tokens, dtype=torch.int64, device=self.device),
            req_pool_indices=t([0]),
            seq_lens=t([num_tokens]),
            extend_prefix_lens=t([0]),
            extend_seq_lens=t([num_tokens]),
            extend_start_loc=t([0]),
            out_cache_loc=slots,
            seq_lens_cpu=[num_tokens],
            extend_prefix_lens_cpu=[0],
            extend_seq_lens_cpu=[num_tokens],
            logits_indices=t([num_tokens - 1]),
            attn_backend=self._attention_backend_class()(kv_pool, req_pool),
            req_to_token=req_pool.req_to_token,
        )
        batch.attn_backend.init_forward_metadata(batch)
        return self.model(batch.input_ids, batch.positions, batch)

    def _max_running_requests(self) -> int:
        if self.server_args.max_running_requests is not None:
            return self.server_args.max_running_requests
        default = DEFAULT_MAX_RUNNING_REQUESTS["cpu" if self.device == "cpu" else "cuda"]
        return max(1, min(default, self.max_total_num_tokens // 2))

    def _make_attention_backend(self):
        cls = self._attention_backend_class()
        cascade = not self.server_args.disable_cascade_attention
        if cls.__name__ == "TritonAttentionBackend":  # its cascade tiles need the query heads up front
            heads = self.model_config.num_attention_heads // self.server_args.tp_size
            return cls(self.token_to_kv_pool, self.req_to_token_pool, num_heads=heads, cascade=cascade)
        return cls(self.token_to_kv_pool, self.req_to_token_pool, cascade=cascade)

    def _attention_backend_class(self) -> type:
        choice = self.server_args.attention_backend
        use_triton = (
            self.device != "cpu"
            and choice in ("auto", "triton")
            and _has_module("sgl_runtime.layers.attention.triton_backend")
        )
        if choice == "triton" and not use_triton:
            raise ValueError("attention_backend='triton' needs a CUDA device and the Triton backend")
        if use_triton:
            from sgl_runtime.layers.attention.triton_backend import TritonAttentionBackend

            return TritonAttentionBackend
        from sgl_runtime.layers.attention.torch_backend import TorchAttentionBackend

        return TorchAttentionBackend

    def _make_cuda_graph_runner(self):
        """Decode CUDA graphs on CUDA with the Triton backend, unless --disable-cuda-graph."""
        if self.device == "cpu" or self.server_args.disable_cuda_graph:
            return None
        from sgl_runtime.layers.attention.triton_backend import TritonAttentionBackend

        if not isinstance(self.attn_backend, TritonAttentionBackend):
            return None
        from sgl_runtime.model_executor.cuda_graph_runner import CudaGraphRunner

        return CudaGraphRunner(self, min(self.server_args.cuda_graph_max_bs, self.max_running_requests))


def _local_kv_heads(num_kv_heads: int, tp_size: int) -> int:
    """KV heads per rank: a split of them, or one (replicated) when there are fewer heads than ranks."""
    return num_kv_heads // tp_size if num_kv_heads >= tp_size else 1


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _available_ram_bytes() -> int:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not a POSIX system
        return 4 << 30


def resolve_model_path(server_args: ServerArgs) -> str:
    """A local model directory for --model-path (the demo model when none is given; see model_source)."""
    from sgl_runtime.model_loader.model_source import resolve_model_path as resolve

    return resolve(server_args.model_path, server_args.load_format, server_args.revision, server_args.download_dir)
