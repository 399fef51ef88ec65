"""The main process's side of the runtime (asyncio): sends tokenized requests to the scheduler,
tracks them by rid, and hands the detokenizer's outputs back to the waiting HTTP handlers,
as whole answers or streams; aborts requests whose client went away."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from typing import Any, AsyncIterator, Optional

from sgl_runtime.io_struct import (
    AbortReq, BatchStrOut, FlushCacheOut, FlushCacheReq, GenerateReqInput, GetStatsOut, GetStatsReq,
    TokenizedGenerateReqInput,
)
from sgl_runtime.server.generate_request import SingleRequest, split_generate_request
from sgl_runtime.server.request_state import ReqState
from sgl_runtime.server.request_tokenizer import ModelInfo, RequestTokenizer
from sgl_runtime.sampling_params import InvalidRequestError, SamplingParams
from sgl_runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

DISCONNECT_CHECK_S = 1.0
CONTROL_TIMEOUT_S = 30.0


class ClientDisconnected(Exception):
    """The HTTP client went away; its requests have been aborted."""


class TokenizerManager:
    """rid -> ReqState for every request in flight; tokenizing and validation are RequestTokenizer's."""

    def __init__(self, server_args: ServerArgs, model_info: ModelInfo, transport, metrics=None,
                 tokenizer=None) -> None:
        self.server_args = server_args
        self.model_info = model_info
        self.metrics = metrics
        self.requests = RequestTokenizer(server_args, model_info, tokenizer)
        self.tokenizer = self.requests.tokenizer
        self.states: dict[str, ReqState] = {}
        self._pending_control: dict[type, collections.deque] = {FlushCacheOut: collections.deque(),
                                                                GetStatsOut: collections.deque()}
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

    async def _receive_loop(self) -> None:
        while True:
            message = await self._transport.recv()
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
        singles, is_batch = split_generate_request(obj)
        if len({single.rid for single in singles}) < len(singles):
            raise InvalidRequestError("rid: the ids of a batch must be distinct")
        prepared = [self.requests.prepare(single) for single in singles]
        self._check_rids_free(prepared)
        updates: asyncio.Queue = asyncio.Queue()
        states: list[ReqState] = []
        try:
            for single, tokenized in zip(singles, prepared):
                await self._warm_prefix_for_n(tokenized, updates, request)
                for copy in _expand_n(tokenized):
                    states.append(self._register(copy, single, updates, len(states)))
            multi = is_batch or len(states) > 1
            if obj.stream:
                async for state in self._updates(states, updates, request):
                    yield self._chunk(state, multi)
            else:
                async for _ in self._updates(states, updates, request):
                    pass
                for state in states:
                    _raise_if_failed(state)
                results = [state.response() for state in states]
                yield results if multi else results[0]
        finally:
            for state in states:
                if not state.finished:
                    self.abort(state.rid)
                self.states.pop(state.rid, None)

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
            rid=f"{tokenized.rid}-prefill", input_text=tokenized.input_text, input_ids=tokenized.input_ids,
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

    def _register(self, tokenized: TokenizedGenerateReqInput, single: Optional[SingleRequest],
                  updates: asyncio.Queue, index: int) -> ReqState:
        state = ReqState(request=tokenized, updates=updates, index=index,
                         return_text_in_logprobs=bool(single and single.return_text_in_logprobs))
        self.states[tokenized.rid] = state
        self._transport.send(tokenized)
        return state

    async def _updates(self, states: list[ReqState], updates: asyncio.Queue, request: Any) -> AsyncIterator[ReqState]:
        """Yield each state as it changes until all have finished; abort all if the client leaves."""
        unfinished = {state.rid for state in states}
        seen: dict[str, int] = {}
        while unfinished:
            try:
                state = await asyncio.wait_for(updates.get(), timeout=DISCONNECT_CHECK_S)
            except asyncio.TimeoutError:
                if request is not None and await request.is_disconnected():
                    raise ClientDisconnected()
                continue
            if seen.get(state.rid) == state.version or state.rid not in unfinished:
                continue
            seen[state.rid] = state.version
            if state.finished:
                unfinished.discard(state.rid)
            yield state

    def _chunk(self, state: ReqState, multi: bool) -> dict[str, Any]:
        if state.error:
            return {"error": {"message": state.error, "type": "invalid_request_error", "param": None, "code": 400}}
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
        copies.append(dataclasses.replace(tokenized, rid=f"{tokenized.rid}-{j}",
                                          sampling_params=params.replace(n=1, seed=seed)))
    return copies


def _raise_if_failed(state: ReqState) -> None:
    if state.error:
        raise InvalidRequestError(state.error)
