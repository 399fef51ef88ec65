"""A batch of requests for one forward: KV slot allocation, req_to_token writes, ForwardBatch building.

One code path serves every kind of step. Each request extends by ``extend_input_len`` tokens
on top of ``kv_len`` tokens already in the pool: a fresh prefill (on top of its cached
prefix), the next chunk of a chunked prefill, a decode step (1 token), or a jump-forward
(1 sampled + several forced tokens). When every request extends by exactly one token the
batch runs in DECODE mode, otherwise in EXTEND mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from sgl_runtime.forward_batch import ForwardBatch, ForwardMode
from sgl_runtime.mem_cache.shared_prefix import SharedPrefixPlanner
from sgl_runtime.scheduler.req import Req

__all__ = ["Req", "ScheduleBatch", "LogitsLayout", "alloc_token_slots", "cache_unfinished_req", "release_req_kv"]


class OutOfKVMemory(RuntimeError):
    """Raised when KV slots cannot be found even after evicting the whole unlocked cache."""


def alloc_token_slots(num_tokens: int, token_to_kv_pool, tree_cache) -> torch.Tensor:
    """`num_tokens` free KV slots, evicting unlocked radix-cache leaves when the pool is short."""
    short = num_tokens - token_to_kv_pool.available_size()
    if short > 0:
        token_to_kv_pool.free(tree_cache.evict(short))
    slots = token_to_kv_pool.alloc(num_tokens)
    if slots is None:
        raise OutOfKVMemory(
            f"need {num_tokens} KV slots, {token_to_kv_pool.available_size()} free "
            f"and {tree_cache.evictable_size()} evictable"
        )
    return slots


@dataclass
class LogitsLayout:
    """Which logits rows belong to which request.

    For request i: rows ``[row_start[i], row_end[i])`` of the logits tensor. If it samples
    this step, its sampling row is the last of them. Rows before it (or all of them for a
    partial chunk) score known next tokens: prompt logprobs (`score_targets[i]`).
    """

    row_start: list[int] = field(default_factory=list)
    row_end: list[int] = field(default_factory=list)
    samples: list[bool] = field(default_factory=list)
    score_targets: list[list[int]] = field(default_factory=list)
    score_positions: list[list[int]] = field(default_factory=list)


class ScheduleBatch:
    """The requests of one forward, and the pools it allocates from."""

    def __init__(
        self,
        reqs: list[Req],
        req_to_token_pool,
        token_to_kv_pool,
        tree_cache,
        device,
        shared_prefix: Optional[SharedPrefixPlanner] = None,
    ) -> None:
        """`shared_prefix`: decode batches list the requests that share a cached prefix (cascade attention)."""
        self.reqs = reqs
        self.shared_prefix = None if tree_cache.disable else shared_prefix
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool = token_to_kv_pool
        self.tree_cache = tree_cache
        self.device = device
        self.layout = LogitsLayout()
        self.out_cache_loc: Optional[torch.Tensor] = None  # the new tokens' KV slots, once allocated
        self.committed = False  # the forward ran: those slots now count in each request's kv_len
        self.is_prefill = False  # admitted / chunked prefills: cached in the radix tree after the forward
        self.plain_decode = False  # row i samples request i's next token; no prompt logprobs, no max_new_tokens=0

    def __len__(self) -> int:
        return len(self.reqs)

    # ------------------------------------------------------------------ allocation
    def _assign_req_rows(self) -> None:
        fresh = [r for r in self.reqs if r.req_pool_idx is None]
        if not fresh:
            return
        rows = self.req_to_token_pool.alloc(len(fresh))
        if rows is None:
            raise OutOfKVMemory(f"no free request slot for {len(fresh)} new requests")
        for req, row in zip(fresh, rows):
            req.req_pool_idx = row
            prefix_len = len(req.prefix_indices)
            if prefix_len:
                self.req_to_token_pool.write(row, 0, req.prefix_indices)
            req.kv_len = req.cache_protected_len = prefix_len

    # ------------------------------------------------------------------ building
    def prepare(
        self, next_input_ids: Optional[torch.Tensor] = None, on_device: Optional[list[bool]] = None
    ) -> ForwardBatch:
        """Allocate slots for every request's new tokens and describe the forward.

        `next_input_ids` (int64 on the device) makes this a step after one whose sampled tokens
        are still on the device (overlap scheduling): a request decodes the token at position
        kv_len, which its host-side output_ids do not hold yet. Without `on_device` every request
        does ([B] ids); with it, the requests marked True do (one id each, in batch order) and
        the others extend by tokens their output_ids hold (forced jump-forward text). Either way
        each request samples its last new row.

        Every index tensor the forward needs travels in one (pinned on CUDA) staging buffer and one
        non-blocking copy: a plain torch.tensor(list, device="cuda") would sync the stream each time."""
        self._assign_req_rows()
        reqs = self.reqs
        ext_lens = [r.extend_input_len for r in reqs]
        assert min(ext_lens) > 0, f"every request must extend, got {ext_lens}"
        total = sum(ext_lens)
        bs = len(reqs)
        one_each = total == bs
        if on_device is None and next_input_ids is not None:
            on_device = [True] * bs
        chained = on_device is not None
        assert not chained or all(n == 1 for n, d in zip(ext_lens, on_device) if d), "a device input is one token"
        assert next_input_ids is None or len(next_input_ids) == sum(on_device), "one device id per device input"
        out_cache_loc = self.out_cache_loc = alloc_token_slots(total, self.token_to_kv_pool, self.tree_cache)
        prefix_lens = [r.kv_len for r in reqs]
        if chained:
            self._decode_layout()  # one sampling row per request: its last new token
            self._row_offsets = [(n - 1, 1) for n in ext_lens]
        else:
            self._build_layout(prefix_lens, ext_lens, one_each)
        is_decode = one_each and self.layout.row_end[-1] == bs  # one logits row per request
        ids, positions, seq_lens, starts = self._columns(prefix_lens, ext_lens, on_device or [False] * bs)
        rows = [r.req_pool_idx for r in reqs]
        logits_rows = starts if is_decode else self._logits_indices(starts)
        all_device = chained and all(on_device)
        device_at = [start for start, d in zip(starts, on_device) if d] if chained and not all_device else []
        (input_ids, positions_t, rows_t, seq_lens_t, prefix_t, ext_t, starts_t, logits_t, device_at_t) = (
            self._to_device(
                [
                    [] if all_device else ids,
                    positions,
                    rows,
                    seq_lens,
                    prefix_lens,
                    ext_lens,
                    starts,
                    logits_rows,
                    device_at,
                ]
            )
        )
        if all_device:
            input_ids = next_input_ids  # one device id per request, in row order
        elif device_at:
            input_ids.index_copy_(0, device_at_t, next_input_ids)
        self._write_table(out_cache_loc, rows_t, positions_t, prefix_lens, ext_lens, one_each)
        return ForwardBatch(
            forward_mode=ForwardMode.DECODE if is_decode else ForwardMode.EXTEND,
            batch_size=bs,
            input_ids=input_ids,
            positions=positions_t,
            req_pool_indices=rows_t,
            seq_lens=seq_lens_t,
            extend_prefix_lens=prefix_t,
            extend_seq_lens=ext_t,
            extend_start_loc=starts_t,
            out_cache_loc=out_cache_loc.to(self.device),
            seq_lens_cpu=seq_lens,
            extend_prefix_lens_cpu=prefix_lens,
            extend_seq_lens_cpu=ext_lens,
            logits_indices=logits_t,
            logits_indices_cpu=logits_rows,
            shared_prefix_groups=self._shared_prefix_groups() if is_decode else None,
        )

    def _shared_prefix_groups(self) -> Optional[list[tuple[int, list[int]]]]:
        if self.shared_prefix is None or len(self.reqs) < 2:
            return None
        return self.shared_prefix.groups([r.last_node if r.node_locked else None for r in self.reqs]) or None

    def _columns(self, prefix_lens: list[int], ext_lens: list[int], on_device: list[bool]):
        """(ids, positions, seq_lens, starts) of the new tokens; a device input's id is a placeholder 0."""
        ids: list[int] = []
        positions: list[int] = []
        starts: list[int] = []
        for req, start, n, device in zip(self.reqs, prefix_lens, ext_lens, on_device):
            starts.append(len(ids))
            ids.extend([0] if device else req.ids_between(start, start + n))
            positions.extend(range(start, start + n))
        seq_lens = [p + n for p, n in zip(prefix_lens, ext_lens)]
        return ids, positions, seq_lens, starts

    def _to_device(self, columns: list[list[int]]) -> list[torch.Tensor]:
        """int64 host lists -> device tensors (views of one buffer) through one staging copy. Each
        column starts 16-byte aligned, as Triton kernels specialise on pointer alignment."""
        flat: list[int] = []
        bounds: list[tuple[int, int]] = []
        for column in columns:
            if len(flat) % 2:
                flat.append(0)
            bounds.append((len(flat), len(flat) + len(column)))
            flat.extend(column)
        pin = torch.device(self.device).type == "cuda"
        host = torch.empty(len(flat), dtype=torch.int64, pin_memory=pin)
        host.numpy()[:] = flat
        # The caching host allocator keeps the pinned block until this copy is done.
        packed = host.to(self.device, non_blocking=True) if pin else host
        return [packed[start:end] for start, end in bounds]

    def _write_table(self, out_cache_loc, rows_t, positions_t, prefix_lens, ext_lens, one_each: bool) -> None:
        """Point each new token's req_to_token entry at its KV slot (device ops, no sync)."""
        pool = self.req_to_token_pool
        if one_each:
            pool.write_cells(rows_t, positions_t, out_cache_loc)
            return
        offset = 0
        for req, start, n in zip(self.reqs, prefix_lens, ext_lens):
            pool.write(req.req_pool_idx, start, out_cache_loc[offset : offset + n])
            offset += n

    def _build_layout(self, prefix_lens: list[int], ext_lens: list[int], one_each: bool = False) -> None:
        if one_each and all(r.kv_len + 1 == r.seq_len and not r.need_input_logprobs for r in self.reqs):
            self._decode_layout()
            return
        layout = LogitsLayout()
        self._row_offsets: list[tuple[int, int]] = []  # (first new-token offset, row count) per request
        row = 0
        for req, start, n in zip(self.reqs, prefix_lens, ext_lens):
            end = start + n
            samples = end == req.seq_len
            positions = self._score_positions(req, start, end)
            first = positions[0] - start if positions else n - 1
            stop = n if samples else (positions[-1] - start + 1 if positions else first)
            assert not (samples and positions) or positions[-1] == end - 2, "prompt logprobs must abut the sampled row"
            self._row_offsets.append((first, stop - first))
            layout.row_start.append(row)
            row += stop - first
            layout.row_end.append(row)
            layout.samples.append(samples)
            layout.score_positions.append(positions)
            fill = req.fill_ids if positions else []
            layout.score_targets.append([fill[p + 1] for p in positions])
        self.layout = layout

    def _decode_layout(self) -> None:
        """Every request samples its one new token, no prompt logprobs: row i is request i's sampling row."""
        bs = len(self.reqs)
        self.layout = LogitsLayout(
            row_start=list(range(bs)),
            row_end=list(range(1, bs + 1)),
            samples=[True] * bs,
            score_targets=[[] for _ in range(bs)],
            score_positions=[[] for _ in range(bs)],
        )
        self.plain_decode = all(r.max_new_tokens > 0 for r in self.reqs)
        self._row_offsets = [(0, 1)] * bs

    @staticmethod
    def _score_positions(req: Req, start: int, end: int) -> list[int]:
        """Prompt positions p in [start, end) whose logits score a requested prompt token p + 1
        (tokens logprob_start_len .. prompt_len - 1; token 0 has no logprob)."""
        if not req.need_input_logprobs:
            return []
        prompt_len = len(req.origin_input_ids)
        lo = max(req.logprob_start_len - 1, 0, start)
        hi = min(end, prompt_len - 1)
        return list(range(lo, hi))

    def _logits_indices(self, starts: list[int]) -> list[int]:
        rows: list[int] = []
        for base, (first, count) in zip(starts, self._row_offsets):
            rows.extend(range(base + first, base + first + count))
        return rows

    def commit_forward(self, count_passes: bool = True) -> None:
        """After the forward: the new tokens' KV is in the pool. (An overlapped decode step counts a
        request's forward pass only once its token is used: a request that finished on the step
        before computes one token that is dropped.)"""
        self.committed = True
        for req in self.reqs:
            req.kv_len += req.extend_input_len
            req.forward_passes += count_passes
            req.extend_input_len = 0


def release_req_kv(req: Req, req_to_token_pool, token_to_kv_pool, tree_cache, cache: bool = True) -> None:
    """Give back everything the request holds: its computed KV goes to the radix cache (duplicates
    freed) or, with cache=False, is freed; the cache path is unlocked and the row freed."""
    if req.req_pool_idx is None:  # admitted (maybe locked) but never allocated a row
        _unlock(req, tree_cache)
        req.reset_kv_state()
        return
    row = req_to_token_pool.req_to_token[req.req_pool_idx, : req.kv_len].to(torch.int64)
    protected = req.cache_protected_len
    if tree_cache.disable or not cache:
        token_to_kv_pool.free(row[protected:])
    else:
        already = tree_cache.insert(req.fill_ids[: req.kv_len], row.clone())
        if already > protected:
            token_to_kv_pool.free(row[protected:already])
    req_to_token_pool.free(req.req_pool_idx)
    _unlock(req, tree_cache)
    req.reset_kv_state()


def cache_unfinished_req(req: Req, req_to_token_pool, token_to_kv_pool, tree_cache) -> None:
    """Put a still-running request's computed tokens into the radix cache (SGLang's
    cache_unfinished_req): its duplicate slots are freed, its row re-pointed at the tree's slots,
    and its lock moved to the new last node, so later admissions share its prefix at once."""
    if tree_cache.disable or req.req_pool_idx is None or req.kv_len <= req.cache_protected_len:
        return
    kv_len, protected = req.kv_len, req.cache_protected_len
    table = req_to_token_pool.req_to_token
    key = req.fill_ids[:kv_len]
    row = table[req.req_pool_idx, :kv_len].to(torch.int64)
    already = tree_cache.insert(key, row.clone())
    if already > protected:
        token_to_kv_pool.free(row[protected:already])
    indices, node = tree_cache.match_prefix(key)
    assert len(indices) == kv_len, f"cached {len(indices)} of {kv_len} tokens just inserted"
    if already > protected:
        req_to_token_pool.write(req.req_pool_idx, protected, indices[protected:already])
    tree_cache.inc_lock_ref(node)
    _unlock(req, tree_cache)
    req.last_node, req.node_locked = node, True
    req.prefix_indices = indices
    req.cache_protected_len = kv_len


def _unlock(req: Req, tree_cache) -> None:
    if req.node_locked:
        tree_cache.dec_lock_ref(req.last_node)
        req.node_locked = False
