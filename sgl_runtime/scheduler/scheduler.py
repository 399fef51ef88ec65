"""The scheduler: continuous batching over one ModelRunner, with a radix prefix cache.

Each `step()` schedules one batch (new requests' prefill, else the running requests' next
tokens), runs it, consumes its logits, and returns what the requests produced. With overlap
scheduling (scheduler/overlap.py) a decode step is left running on the device: the next
`step()` launches the step after it before reading its tokens.
"""

from __future__ import annotations

import itertools
import logging
from typing import Optional

from sgl_runtime.distributed.parallel_state import TensorParallelError
from sgl_runtime.io_struct import (
    AbortReq,
    BatchTokenIDOut,
    FlushCacheOut,
    FlushCacheReq,
    GetStatsOut,
    GetStatsReq,
    TokenizedGenerateReqInput,
)
from sgl_runtime.mem_cache.radix_cache import RadixCache
from sgl_runtime.mem_cache.shared_prefix import SharedPrefixPlanner
from sgl_runtime.model_config import ModelConfig
from sgl_runtime.model_executor.model_runner import ModelRunner, resolve_model_path
from sgl_runtime.sampler import Sampler
from sgl_runtime.scheduler.batch_result import make_token_output, process_batch_logits, should_stream
from sgl_runtime.scheduler.decode_policy import DecodePolicy
from sgl_runtime.scheduler.overlap import InflightDecode, OverlapMixin, launch_forward
from sgl_runtime.scheduler.prefill_adder import AddResult, InBatchPrefixes, NewTokenRatio, PrefillAdder
from sgl_runtime.scheduler.req import Req
from sgl_runtime.scheduler.request_intake import ConstraintWaiter, IntakeMixin
from sgl_runtime.scheduler.schedule_batch import ScheduleBatch, cache_unfinished_req, release_req_kv
from sgl_runtime.scheduler.schedule_policy import SchedulePolicy
from sgl_runtime.scheduler.scheduler_metrics import SchedulerMetrics
from sgl_runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

JUMP_FORWARD_MAX_WAIT = 4  # decode steps a request holding jump-forward tokens may sit out


class Scheduler(IntakeMixin, OverlapMixin):
    """Owns the model, the KV pools and the radix cache; serves requests through handle()/step()."""

    def __init__(self, server_args: ServerArgs) -> None:
        from sgl_runtime.tokenizer_utils import load_tokenizer

        model_path = resolve_model_path(server_args)
        self.server_args = server_args = server_args.replace(model_path=model_path)
        self.model_config = ModelConfig.from_path(
            model_path, server_args.dtype, server_args.context_length, server_args.resolved_device
        )
        self.model_runner = ModelRunner(server_args, self.model_config)
        self.tokenizer = load_tokenizer(server_args.tokenizer_path or model_path, server_args.chat_template)
        self.eos_token_ids = frozenset(self.model_config.eos_token_ids)
        self.req_to_token_pool = self.model_runner.req_to_token_pool
        self.token_to_kv_pool = self.model_runner.token_to_kv_pool
        self.max_total_num_tokens = self.model_runner.max_total_num_tokens
        self.max_running_requests = self.model_runner.max_running_requests
        self.tree_cache = RadixCache(disable=server_args.disable_radix_cache, device=self.model_runner.device)
        self.shared_prefix = None if server_args.disable_cascade_attention else SharedPrefixPlanner(self.tree_cache)
        self.policy = SchedulePolicy(server_args.schedule_policy, self.tree_cache)
        self.sampler = Sampler(server_args.constraint_mask_table_mb << 20)
        self.new_token_ratio = NewTokenRatio(server_args.schedule_conservativeness)
        self.metrics = SchedulerMetrics(server_args.log_interval)
        self.constraints = ConstraintWaiter(self._make_constraint_cache)
        self.chunk_size = None if server_args.chunked_prefill_size == -1 else server_args.chunked_prefill_size
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.chunked_req: Optional[Req] = None
        self.fanout: dict[int, list[Req]] = {}  # id(hidden prefix req) -> its n samples
        self.outbox: list[Req] = []  # finished requests not yet reported
        self._admit_counter = itertools.count()
        self._forced_wait = 0  # decode steps that left jump-forward requests waiting
        self.decode = DecodePolicy.from_server_args(server_args)
        self.inflight: Optional[InflightDecode] = None  # a launched decode step not yet read back

    # ================================================================== public API
    def handle(self, msg: object) -> Optional[object]:
        """Take one control or request message; flush and stats requests are answered at once."""
        if isinstance(msg, TokenizedGenerateReqInput):
            return self._add_request(msg)
        if isinstance(msg, AbortReq):
            return self.abort(msg.rid)
        if isinstance(msg, FlushCacheReq):
            return self.flush_cache()
        if isinstance(msg, GetStatsReq):
            return GetStatsOut(stats=self.get_stats())
        raise TypeError(f"scheduler cannot handle a {type(msg).__name__}")

    def step(self) -> Optional[BatchTokenIDOut]:
        """Schedule and run one batch; return the outputs produced (None when there are none)."""
        self._poll_constraints()
        if self.inflight is not None and self._advance_inflight():
            return self._collect_outputs()
        batch = self._get_new_prefill_batch() or self._get_decode_batch()
        if batch is not None:
            try:
                self._run_batch(batch)
            except Exception as error:  # noqa: BLE001 - fail these requests, keep serving the rest
                self._fail_batch(batch, error)
        return self._collect_outputs()

    def has_work(self) -> bool:
        return bool(
            self.waiting
            or self.running
            or self.chunked_req
            or self.constraints.pending
            or self.outbox
            or self.inflight is not None
        )

    def kv_available_size(self) -> int:
        """Free KV slots in the pool (the radix cache's evictable slots not included)."""
        return self.token_to_kv_pool.available_size()

    def flush_cache(self) -> FlushCacheOut:
        """Drop the radix cache and reset the pools; refused while requests are queued or running."""
        self._finish_inflight()  # a step left running after its requests finished
        if self.waiting or self.running or self.chunked_req or self.constraints.pending:
            return FlushCacheOut(success=False, message="cannot flush the cache while requests are queued or running")
        self.tree_cache.reset()
        self.req_to_token_pool.clear()
        self.token_to_kv_pool.clear()
        self.new_token_ratio.reset()
        return FlushCacheOut(success=True)

    def shutdown(self) -> None:
        """Stop the constraint compiler threads and the other tensor-parallel ranks (the model and
        pools go with the object)."""
        self.constraints.shutdown()
        self.sampler.shutdown()
        self.model_runner.shutdown()

    def abort(self, rid: str) -> None:
        """Abort every sample of request `rid`, wherever it is, freeing its memory."""
        hit = self.constraints.remove(rid) + [r for r in self.waiting if r.rid == rid]
        self.waiting = [r for r in self.waiting if r.rid != rid]
        for key, children in list(self.fanout.items()):
            if children and children[0].rid == rid:
                hit.extend(self.fanout.pop(key))
        for req in [r for r in self.running if r.rid == rid]:
            self.running.remove(req)
            self._release(req)
            hit.append(req)
        if self.chunked_req is not None and self.chunked_req.rid == rid:
            self._release(self.chunked_req)
            hit.append(self.chunked_req)
            self.chunked_req = None
        for req in hit:
            req.finish({"type": "abort", "message": "aborted"})
            if not req.hidden:
                self.outbox.append(req)

    def get_stats(self) -> dict:
        return self.metrics.stats(
            num_running_reqs=len(self.running) + (1 if self.chunked_req else 0),
            num_waiting_reqs=len(self.waiting) + len(self.constraints.pending),
            token_usage=self._token_usage(),
            max_total_num_tokens=self.max_total_num_tokens,
            max_running_requests=self.max_running_requests,
            available_kv_tokens=self.token_to_kv_pool.available_size() + self.tree_cache.evictable_size(),
            context_length=self.model_config.context_length,
            new_token_ratio=self.new_token_ratio.value,
        ) | {"constraint_cache": self.constraints.stats()}

    # ================================================================== scheduling
    def _get_new_prefill_batch(self) -> Optional[ScheduleBatch]:
        if not self.waiting and self.chunked_req is None:
            return None
        if self.chunked_req is None and len(self.running) >= self.max_running_requests:
            return None
        self.policy.calc_priority(self.waiting)
        adder = PrefillAdder(
            self.tree_cache,
            self.token_to_kv_pool,
            self.running,
            self.new_token_ratio.value,
            self.server_args.max_prefill_tokens,
            self.chunk_size,
            self.new_token_ratio.certain,
        )
        if self.chunked_req is not None:
            adder.add_chunked_req(self.chunked_req)
        if adder.new_chunked_req is None:
            self._admit_waiting(adder)
        admitted = {id(r) for r in adder.can_run}
        self.waiting = [r for r in self.waiting if id(r) not in admitted]
        for req in adder.can_run:
            if req is not self.chunked_req:
                req.admit_order = next(self._admit_counter)
        self.chunked_req = adder.new_chunked_req
        if not adder.can_run:
            return None
        self.metrics.on_prefill(adder.hit_tokens, adder.input_tokens)
        batch = self._batch(adder.can_run)
        batch.is_prefill = True
        return batch

    def _admit_waiting(self, adder: PrefillAdder) -> None:
        free_rows = self.req_to_token_pool.available_size()
        in_batch = InBatchPrefixes(self.tree_cache.disable)
        for req in adder.can_run:  # the chunked request's last chunk
            in_batch.add(req)
        for req in list(self.waiting):
            fresh = sum(1 for r in adder.can_run if r.req_pool_idx is None)
            if len(self.running) + len(adder.can_run) >= self.max_running_requests or fresh >= free_rows:
                break
            req.init_next_round_input(self.tree_cache)
            if in_batch.should_defer(req):
                continue
            if adder.add_one_req(req) is not AddResult.CONTINUE:
                break
            in_batch.add(req)

    def _get_decode_batch(self) -> Optional[ScheduleBatch]:
        if not self.running:
            self.new_token_ratio.reset()
            return None
        for req in self.running:
            req.extend_input_len = req.seq_len - req.kv_len
        if self._retract_until_fits():
            self.new_token_ratio.after_retract(self.running)
        else:
            self.new_token_ratio.decay()
        if not self.running:
            return None
        return self._batch(self._decode_step_reqs())

    def _decode_step_reqs(self) -> list[Req]:
        """The running requests this decode step serves. Requests holding jump-forward tokens make a
        batch a multi-token EXTEND, which cannot replay the decode CUDA graph; with defer_jump_forward
        they sit out while they are few (< half the batch) and not kept waiting JUMP_FORWARD_MAX_WAIT
        steps, then run together as one extend while the others wait a step. In batches the decode
        policy mixes, everyone runs: forced tokens inside the decode step."""
        forced = [r for r in self.running if r.extend_input_len > 1]
        if not self.decode.defer_jump_forward or not forced or self.decode.mixes_jump_forward(len(self.running)):
            return list(self.running)
        self._forced_wait += 1
        if 2 * len(forced) >= len(self.running) or self._forced_wait > JUMP_FORWARD_MAX_WAIT:
            self._forced_wait = 0
            return forced
        return [r for r in self.running if r.extend_input_len == 1]

    def _retract_until_fits(self) -> bool:
        """Retract the newest running requests to the queue while the next step's tokens do not fit."""

        def fits() -> bool:
            need = sum(r.extend_input_len for r in self.running)
            return need <= self.token_to_kv_pool.available_size() + self.tree_cache.evictable_size()

        if fits():  # the common case: one pass over the running requests
            return False
        retracted: list[Req] = []
        while not fits() and len(self.running) > 1:
            req = max(self.running, key=lambda r: r.admit_order)
            self.running.remove(req)
            self._release(req)
            retracted.append(req)
        if not fits():  # a single request longer than the whole pool allows
            req = self.running.pop()
            self._release(req)
            req.abort(f"out of KV cache memory: the pool holds {self.max_total_num_tokens} tokens")
            self.outbox.append(req)
        if retracted:
            self.waiting[:0] = retracted
            self.metrics.num_retractions += len(retracted)
            logger.warning("KV cache full: retracted %d request(s) to the queue", len(retracted))
        return bool(retracted)

    def _batch(self, reqs: list[Req]) -> ScheduleBatch:
        return ScheduleBatch(
            reqs,
            self.req_to_token_pool,
            self.token_to_kv_pool,
            self.tree_cache,
            self.model_runner.device,
            shared_prefix=self.shared_prefix,
        )

    # ================================================================== running
    def _run_batch(self, batch: ScheduleBatch) -> None:
        forced = any(r.extend_input_len > 1 for r in batch.reqs)
        if (
            self.decode.overlap
            and not batch.is_prefill
            and (not forced or self._overlap_forced(batch.reqs))
            and self._overlappable(batch.reqs)
        ):
            logits = launch_forward(batch, self.model_runner, None, [False] * len(batch) if forced else None)
            self.inflight = InflightDecode.sample(batch, logits, self.sampler)
            self._on_decode_launch(batch)
            return
        forward_batch = batch.prepare()
        self.sampler.prefetch_masks(batch.reqs)  # host masks build on worker threads during the forward
        logits = self.model_runner.forward(forward_batch)
        batch.commit_forward()
        added = process_batch_logits(batch, logits, self.sampler, self.decode.jump_forward)
        self.metrics.on_tokens(added)
        running = {id(r) for r in self.running} if batch.is_prefill else None  # decode reqs are all running
        for req in batch.reqs:
            if batch.is_prefill and not req.finished:  # share fresh prompts with later admissions at once
                cache_unfinished_req(req, self.req_to_token_pool, self.token_to_kv_pool, self.tree_cache)
            if req.finished:
                self._finish(req)
            elif running is not None and req is not self.chunked_req and id(req) not in running:
                self.running.append(req)
        if forward_batch.forward_mode.is_decode():
            self.metrics.on_decode_step(
                len(batch), sum(forward_batch.seq_lens_cpu), self._token_usage(), len(self.waiting)
            )

    def _finish(self, req: Req) -> None:
        if any(req is r for r in self.running):
            self.running.remove(req)
        self._release(req)
        if req.hidden:
            for child in self.fanout.pop(id(req), []):
                self._enqueue(child)
        else:
            self.outbox.append(req)

    def _release(self, req: Req) -> None:
        release_req_kv(req, self.req_to_token_pool, self.token_to_kv_pool, self.tree_cache)

    def _fail_batch(self, batch: ScheduleBatch, error: Exception) -> None:
        """A forward or its post-processing raised: fail this batch's requests, free their memory.
        A tensor-parallel failure is re-raised: the ranks no longer agree, so nothing can run again."""
        if isinstance(error, TensorParallelError):
            raise error
        logger.exception(
            "batch of %d request(s) failed; aborting them (rid=%s)", len(batch), ",".join(r.rid for r in batch.reqs)
        )
        message = f"internal error: {type(error).__name__}: {error}"
        if batch.out_cache_loc is not None and not batch.committed:
            self.token_to_kv_pool.free(batch.out_cache_loc)
        for req in batch.reqs:
            if req.finished and req.req_pool_idx is None:
                continue  # finished and released before the failure
            if any(req is r for r in self.running):
                self.running.remove(req)
            if req is self.chunked_req:
                self.chunked_req = None
            release_req_kv(req, self.req_to_token_pool, self.token_to_kv_pool, self.tree_cache, cache=False)
            req.abort(message)
            if req.hidden:
                for child in self.fanout.pop(id(req), []):
                    child.abort(message)
                    self.outbox.append(child)
            else:
                self.outbox.append(req)

    def _collect_outputs(self) -> Optional[BatchTokenIDOut]:
        outputs = [make_token_output(r) for r in self.outbox]
        self.outbox = []
        interval = self.server_args.stream_interval
        for req in self.running:
            if should_stream(req, interval):
                outputs.append(make_token_output(req))
        return BatchTokenIDOut(outputs=outputs) if outputs else None

    def _token_usage(self) -> float:
        free = self.token_to_kv_pool.available_size() + self.tree_cache.evictable_size()
        return 1.0 - free / self.max_total_num_tokens
