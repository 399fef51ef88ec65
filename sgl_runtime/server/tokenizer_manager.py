"""The main process's side of the runtime (asyncio): sends tokenized requests to the scheduler,
tracks them by rid, and hands the detokenizer's outputs back to the waiting HTTP handlers,
as whole answers or streams; aborts requests whose client went away."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import time
from typing import Any, AsyncIterator, Optional

from sgl_runtime.io_struct import (
    AbortReq,
    BatchStrOut,
    FlushCacheOut,
    FlushCacheReq,
    GenerateReqInput,
    GetStatsOut,
    GetStatsReq,
    TokenizedGenerateReqInput,
)
from sgl_runtime.sampling_params import InvalidRequestError, SamplingParams
from sgl_runtime.server.generate_request import SingleRequest, split_generate_request
from sgl_runtime.server.overload import (
    AdmissionGate,
    RequestTimeoutError,
    ServerBusyError,
    request_deadline,
    seconds_left,
)
from sgl_runtime.server.request_log import log_request_arrival, log_request_finish
from sgl_runtime.server.request_state import ReqState
from sgl_runtime.server.request_tokenizer import ModelInfo, RequestTokenizer
from sgl_runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

DISCONNECT_CHECK_S = 1.0
ERROR_TYPES = {400: "invalid_request_error", 408: "timeout_error", 500: "server_error", 503: "server_error"}
CONTROL_TIMEOUT_S = 30.0


class ClientDisconnected(Exception):
    """The HTTP client went away; its requests have been aborted."""


class TokenizerManager:
    """rid -> ReqState for every request in flight; tokenizing and validation are RequestTokenizer's."""

    def __init__(self, server_args: ServerArgs, model_info: ModelInfo, transport, metrics=None, tokenizer=None) -> None:
        self.server_args = server_args
        self.model_info = model_info
        self.metrics = metrics
        self.requests = RequestTokenizer(server_args, model_info, tokenizer)
        self.admission = AdmissionGate(
            server_args.max_queued_requests,
            server_args.max_sequences_per_request,
            capacity=server_args.max_running_requests or 0,
        )
        self.tokenizer = self.requests.tokenizer
        self.states: dict[str, ReqState] = {}
        self._pending_control: dict[type, collections.deque] = {
            FlushCacheOut: collections.deque(),
            GetStatsOut: collections.deque(),
        }
        self._transport = transport  # server.transport.ZmqTransport, or in_process.InProcessTransport
        self._receiver: Optional[asyncio.Task] = None

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Start receiving outputs (call inside the event loop that serves the requests)."""
        self._transport.start()
        self._receiver = asyncio.create_task(self._receive_loop())

    async def stop(self) -> None:
        """Stop receiving outputs (the Engine's shutdown; the server's event loop just ends)."""
        if self._receiver is not None:
            self._receiver.cancel()
            try:
                await self._receiver
            except asyncio.CancelledError:
                pass
            self._receiver = None

    def not_ready_reason(self) -> str:
        """Why the server cannot serve yet ("" when it can). The children reported ready before the
        HTTP port opened; the hook is where a later start-up stage of the main side would report."""
        return ""

    async def _receive_loop(self) -> None:
        while True:
            for message in await self._transport.recv():
                self._handle(message)

    def _handle(self, message: object) -> None:
        if isinstance(message, BatchStrOut):
            for out in message.outputs:
                state = self.states.get(out.rid)
                if state is not None:
                    self._apply_output(state, out)
        elif type(message) in self._pending_control:
            waiters = self._pending_control[type(message)]
            if waiters:
                future = waiters.popleft()
                if not future.done():
                    future.set_result(message)
        else:
            logger.warning("unexpected message from the detokenizer: %r", type(message).__name__)

    def _apply_output(self, state: ReqState, out) -> None:
        """Merge one output into its request; a failure here fails that request, not the loop."""
        had_output = state.first_output_time is not None
        try:
            state.apply(out)
            if state.error and state.finished:
                self.abort(state.rid)  # failed downstream (detokenizer): stop the scheduler's work on it
            if self.metrics is not None:
                self.metrics.observe(state, first_output=not had_output and state.first_output_time is not None)
        except Exception as exc:  # a bug must reach the client as an error, not hang it
            logger.exception("cannot process the output of request %s", state.rid)
            state.fail(f"internal error while processing the output: {type(exc).__name__}: {exc}")
            self.abort(state.rid)

    # ---------------------------------------------------------------- generation
    async def generate(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        """Yield the answer: one dict (or list of dicts for a batch or n > 1); when streaming,
        one cumulative dict per update (with "index" when there are several requests)."""
        arrival = time.perf_counter()  # latencies count from here, validation included
        singles, is_batch = split_generate_request(obj)
        if len({single.rid for single in singles}) < len(singles):
            raise InvalidRequestError("rid: the ids of a batch must be distinct")
        deadline = request_deadline(getattr(obj, "timeout", None), self.server_args.request_timeout, arrival)
        prepared = [self.requests.prepare(single) for single in singles]
        sequences = sum(t.sampling_params.n for t in prepared)
        self.admission.check_size(sequences, len(prepared))
        self.admission.admit(sequences)
        try:
            async for result in self._generate(obj, singles, prepared, is_batch, request, arrival, deadline):
                yield result
        finally:
            self.admission.release(sequences)

    async def _generate(
        self,
        obj: GenerateReqInput,
        singles: list[SingleRequest],
        prepared: list[TokenizedGenerateReqInput],
        is_batch: bool,
        request: Any,
        arrival: float,
        deadline: Optional[float],
    ) -> AsyncIterator[Any]:
        self._check_rids_free(prepared)
        updates: asyncio.Queue = asyncio.Queue()
        states: list[ReqState] = []
        try:
            for single, tokenized in zip(singles, prepared):
                await self._warm_prefix_for_n(tokenized, updates, request)
                for copy in _expand_n(tokenized):
                    states.append(self._register(copy, single, updates, len(states), arrival))
            multi = is_batch or len(states) > 1
            if obj.stream:
                async for state in self._updates(states, updates, request, deadline):
                    yield self._chunk(state, multi)
            else:
                async for _ in self._updates(states, updates, request, deadline):
                    pass
                for state in states:
                    _raise_if_failed(state)
                results = [state.response() for state in states]
                yield results if multi else results[0]
        finally:
            for state in states:
                if not state.finished:
                    self.abort(state.rid)
                    self._count_abort()
                self.states.pop(state.rid, None)

    def _count_abort(self) -> None:
        if self.metrics is not None:
            self.metrics.aborted.inc()

    async def open_stream(self, obj: GenerateReqInput) -> tuple[dict, AsyncIterator[dict]]:
        """Start a streaming generate and return its first chunk and the rest; a request that
        fails before producing anything raises InvalidRequestError (a 400, not a 200 stream)."""
        chunks = self.generate(obj, None)
        first = await chunks.__anext__()
        if "error" in first:
            await chunks.aclose()
            raise InvalidRequestError(first["error"]["message"])
        return first, chunks

    def abort(self, rid: str) -> None:
        self._transport.send(AbortReq(rid=rid))

    def abort_by_client(self, rid: str) -> int:
        """Abort the request `rid` (and its n > 1 samples); return how many were running."""
        rids = [r for r, state in self.states.items() if not state.finished and (r == rid or r.startswith(rid + "-"))]
        for r in rids:
            self.abort(r)
        return len(rids)

    def _check_rids_free(self, prepared: list[TokenizedGenerateReqInput]) -> None:
        for tokenized in prepared:
            if tokenized.rid in self.states:
                raise InvalidRequestError(f"rid: a request with id {tokenized.rid!r} is already running")

    def apply_chat_template(self, messages: list[dict]) -> list[int]:
        return self.requests.chat_prompt_ids(messages)

    async def _warm_prefix_for_n(self, tokenized: TokenizedGenerateReqInput, updates, request) -> None:
        """For n > 1, prefill the prompt once first so the n samples share its cached KV."""
        if tokenized.sampling_params.n <= 1 or self.server_args.disable_radix_cache:
            return
        prefill = TokenizedGenerateReqInput(
            rid=f"{tokenized.rid}-prefill",
            input_text=tokenized.input_text,
            input_ids=tokenized.input_ids,
            sampling_params=SamplingParams(max_new_tokens=0),
        )
        state = self._register(prefill, None, asyncio.Queue(), 0)
        try:
            async for _ in self._updates([state], state.updates, request):
                pass
        finally:
            if not state.finished:
                self.abort(state.rid)
            self.states.pop(state.rid, None)

    def _register(
        self,
        tokenized: TokenizedGenerateReqInput,
        single: Optional[SingleRequest],
        updates: asyncio.Queue,
        index: int,
        arrival: Optional[float] = None,
    ) -> ReqState:
        state = ReqState(
            request=tokenized,
            updates=updates,
            index=index,
            return_text_in_logprobs=bool(single and single.return_text_in_logprobs),
            created=arrival if arrival is not None else time.perf_counter(),
        )
        self.states[tokenized.rid] = state
        if self.server_args.log_requests and single is not None:
            log_request_arrival(tokenized)
        self._transport.send(tokenized)
        return state

    async def _updates(
        self, states: list[ReqState], updates: asyncio.Queue, request: Any, deadline: Optional[float] = None
    ) -> AsyncIterator[ReqState]:
        """Yield each state as it changes until all have finished; abort all if the client leaves;
        past the deadline, fail (and abort) the unfinished ones with a timeout error."""
        unfinished = {state.rid for state in states}
        seen: dict[str, int] = {}
        while unfinished:
            left = seconds_left(deadline)
            if left is not None and left <= 0:
                for state in states:
                    if state.rid in unfinished and not state.finished:
                        state.fail(
                            f"the request timed out after {self._timeout_of(deadline, state):.3g} s and was aborted",
                            code=408,
                        )
                        self.abort(state.rid)
                        self._count_abort()
                deadline = None
            if not updates.empty():  # the common case under load: no timer, no task
                state = updates.get_nowait()
            else:
                try:
                    wait = DISCONNECT_CHECK_S if left is None else max(0.0, min(DISCONNECT_CHECK_S, left))
                    state = await asyncio.wait_for(updates.get(), timeout=wait)
                except asyncio.TimeoutError:
                    if request is not None and await request.is_disconnected():
                        raise ClientDisconnected() from None
                    continue
            if seen.get(state.rid) == state.version or state.rid not in unfinished:
                continue
            seen[state.rid] = state.version
            if state.finished:
                unfinished.discard(state.rid)
                if self.server_args.log_requests:
                    log_request_finish(state)
            yield state

    @staticmethod
    def _timeout_of(deadline: float, state: ReqState) -> float:
        return deadline - state.created

    def in_flight_count(self) -> int:
        return sum(1 for state in self.states.values() if not state.finished)

    def fail_all(self, message: str, code: int = 503) -> int:
        """End every request in flight with `message` (server stopping, a child died); return how many."""
        failed = 0
        for state in list(self.states.values()):
            if not state.finished:
                state.fail(message, code=code)
                self._count_abort()
                failed += 1
        return failed

    def _chunk(self, state: ReqState, multi: bool) -> dict[str, Any]:
        if state.error:
            return {
                "error": {
                    "message": state.error,
                    "type": ERROR_TYPES.get(state.error_code, "invalid_request_error"),
                    "param": None,
                    "code": state.error_code,
                }
            }
        chunk = state.response()
        if multi:
            chunk["index"] = state.index
        return chunk

    # ---------------------------------------------------------------- control
    async def flush_cache(self) -> FlushCacheOut:
        return await self._control(FlushCacheReq(), FlushCacheOut)

    async def get_stats(self) -> dict[str, Any]:
        return (await self._control(GetStatsReq(), GetStatsOut)).stats

    async def _control(self, message: object, reply_type: type):
        future = asyncio.get_running_loop().create_future()
        self._pending_control[reply_type].append(future)
        self._transport.send(message)
        return await asyncio.wait_for(future, timeout=CONTROL_TIMEOUT_S)


def _expand_n(tokenized: TokenizedGenerateReqInput) -> list[TokenizedGenerateReqInput]:
    params = tokenized.sampling_params
    if params.n == 1:
        return [tokenized]
    copies = []
    for j in range(params.n):
        seed = None if params.seed is None else params.seed + j
        copies.append(
            dataclasses.replace(tokenized, rid=f"{tokenized.rid}-{j}", sampling_params=params.replace(n=1, seed=seed))
        )
    return copies


def _raise_if_failed(state: ReqState) -> None:
    if not state.error:
        return
    if state.error_code == 408:
        raise RequestTimeoutError(state.error)
    if state.error_code == 503:
        raise ServerBusyError(state.error)
    if state.error_code >= 500:
        raise RuntimeError(state.error)
    raise InvalidRequestError(state.error)
