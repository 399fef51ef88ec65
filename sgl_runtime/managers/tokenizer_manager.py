"""The main process's side of the runtime: tokenizes and validates requests, sends them to the
scheduler, and hands the detokenizer's outputs back to the waiting HTTP handlers (asyncio)."""

from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import dataclass
from typing import Any, AsyncIterator, Optional

import zmq
import zmq.asyncio

from sgl_runtime.io_struct import (
    AbortReq, BatchStrOut, FlushCacheOut, FlushCacheReq, GenerateReqInput, GetStatsOut, GetStatsReq,
    TokenizedGenerateReqInput,
)
from sgl_runtime.managers.generate_request import SingleRequest, split_generate_request
from sgl_runtime.managers.ipc import IpcAddresses, make_socket
from sgl_runtime.managers.request_state import ReqState
from sgl_runtime.sampling_params import InvalidRequestError, SamplingParams
from sgl_runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

DISCONNECT_CHECK_S = 1.0
CONTROL_TIMEOUT_S = 30.0


class ClientDisconnected(Exception):
    """The HTTP client went away; its requests have been aborted."""


@dataclass(frozen=True)
class ModelInfo:
    context_length: int
    vocab_size: int
    eos_token_ids: frozenset


class TokenizerManager:
    def __init__(self, server_args: ServerArgs, model_info: ModelInfo, addresses: IpcAddresses, metrics=None) -> None:
        from sgl_runtime.tokenizer_utils import load_tokenizer

        self.server_args = server_args
        self.model_info = model_info
        self.metrics = metrics
        self.tokenizer = load_tokenizer(server_args.tokenizer_path or server_args.model_path, server_args.chat_template)
        self.states: dict[str, ReqState] = {}
        self._pending_control: dict[type, collections.deque] = {FlushCacheOut: collections.deque(),
                                                                GetStatsOut: collections.deque()}
        self._addresses = addresses
        self._constraint_cache = None
        self._receiver: Optional[asyncio.Task] = None

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Open the sockets and start receiving outputs (call inside the server's event loop)."""
        context = zmq.asyncio.Context(1)
        self._to_scheduler = make_socket(context, zmq.PUSH, self._addresses.tokenizer_to_scheduler, bind=False)
        self._from_detokenizer = make_socket(context, zmq.PULL, self._addresses.detokenizer_to_tokenizer, bind=True)
        self._receiver = asyncio.create_task(self._receive_loop())

    async def _receive_loop(self) -> None:
        while True:
            message = await self._from_detokenizer.recv_pyobj()
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
        prepared = [self._prepare(single) for single in singles]
        # Constraints are compiled here (a bad one is a 400) while the scheduler, which compiles
        # them too before scheduling the request, already has it: the two compiles overlap.
        checks = asyncio.gather(*(self._check_constraint(t.sampling_params) for t in prepared))
        updates: asyncio.Queue = asyncio.Queue()
        states: list[ReqState] = []
        try:
            for single, tokenized in zip(singles, prepared):
                await self._warm_prefix_for_n(tokenized, updates, request)
                for copy in _expand_n(tokenized):
                    states.append(self._register(copy, single, updates, len(states)))
            await checks
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
            if not checks.done():
                checks.cancel()
            elif not checks.cancelled():
                checks.exception()  # retrieved (it may be the error being raised)
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
        self._to_scheduler.send_pyobj(AbortReq(rid=rid))

    def abort_by_client(self, rid: str) -> int:
        """Abort the request `rid` (and its n > 1 samples); return how many were running."""
        rids = [r for r, state in self.states.items() if not state.finished and (r == rid or r.startswith(rid + "-"))]
        for r in rids:
            self.abort(r)
        return len(rids)

    def _prepare(self, single: SingleRequest) -> TokenizedGenerateReqInput:
        """Tokenize and validate one request; raise InvalidRequestError naming the problem."""
        params = SamplingParams.from_dict(single.sampling_params)
        if single.text is not None:
            if not single.text:
                raise InvalidRequestError("text: the prompt is empty")
            input_ids = self.tokenizer.encode(single.text)
        else:
            input_ids = single.input_ids
        self._check_prompt(input_ids, params)
        if single.rid in self.states:
            raise InvalidRequestError(f"rid: a request with id {single.rid!r} is already running")
        start = single.logprob_start_len
        return TokenizedGenerateReqInput(
            rid=single.rid, input_text=single.text, input_ids=list(input_ids), sampling_params=params,
            return_logprob=single.return_logprob,
            logprob_start_len=min(start, len(input_ids) - 1) if single.return_logprob else start,
            top_logprobs_num=single.top_logprobs_num, stream=single.stream,
        )

    def _check_prompt(self, input_ids: list[int], params: SamplingParams) -> None:
        limit = self.model_info.context_length
        if not input_ids:
            raise InvalidRequestError("the prompt is empty (0 tokens)")
        bad = [t for t in input_ids if not 0 <= t < self.model_info.vocab_size]
        if bad:
            raise InvalidRequestError(
                f"input_ids: token id {bad[0]} is outside the vocabulary [0, {self.model_info.vocab_size})")
        if len(input_ids) >= limit:
            raise InvalidRequestError(f"the prompt has {len(input_ids)} tokens, the model's context length is {limit}")
        if len(input_ids) + params.max_new_tokens > limit:
            raise InvalidRequestError(
                f"sampling_params.max_new_tokens: {len(input_ids)} prompt tokens + {params.max_new_tokens} new tokens "
                f"exceed the model's context length of {limit}")

    async def _check_constraint(self, params: SamplingParams) -> None:
        """Compile the constraint (cached) so a bad one is a 400 before anything is scheduled."""
        if params.constraint is None:
            return
        from sgl_runtime.constrained import ConstraintError

        kind, spec = params.constraint
        try:
            # shield: cancelling this wait must not cancel the cache's shared future
            await asyncio.shield(asyncio.wrap_future(self._constraints().submit(kind, spec)))
        except ConstraintError as exc:
            field = {"grammar": "ebnf"}.get(kind, kind)
            raise InvalidRequestError(f"sampling_params.{field}: {exc}") from exc

    def _constraints(self):
        if self._constraint_cache is None:
            from sgl_runtime.constrained.cache import ConstraintCache

            self._constraint_cache = ConstraintCache(
                self.tokenizer, self.model_info.vocab_size, set(self.model_info.eos_token_ids),
                max_size=self.server_args.constrained_cache_size,
                compile_timeout=self.server_args.constraint_compile_timeout,
            )
        return self._constraint_cache

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
        self._to_scheduler.send_pyobj(tokenized)
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
        self._to_scheduler.send_pyobj(message)
        return await asyncio.wait_for(future, timeout=CONTROL_TIMEOUT_S)

    # ---------------------------------------------------------------- chat
    def apply_chat_template(self, messages: list[dict]) -> list[int]:
        """Token ids of `messages` rendered with the chat template, ending with the assistant prompt."""
        from sgl_runtime.tokenizer_utils import get_chat_template

        if not get_chat_template(self.tokenizer):
            raise InvalidRequestError(
                "this model's tokenizer has no chat template; start the server with --chat-template")
        try:
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as exc:  # jinja2 errors (e.g. raise_exception in the template)
            raise InvalidRequestError(f"messages: the chat template failed: {exc}") from exc
        return self.tokenizer.encode(text, add_special_tokens=False)


def _expand_n(tokenized: TokenizedGenerateReqInput) -> list[TokenizedGenerateReqInput]:
    params = tokenized.sampling_params
    if params.n == 1:
        return [tokenized]
    copies = []
    for j in range(params.n):
        seed = None if params.seed is None else params.seed + j
        copies.append(TokenizedGenerateReqInput(
            rid=f"{tokenized.rid}-{j}", input_text=tokenized.input_text, input_ids=tokenized.input_ids,
            sampling_params=params.replace(n=1, seed=seed), return_logprob=tokenized.return_logprob,
            logprob_start_len=tokenized.logprob_start_len, top_logprobs_num=tokenized.top_logprobs_num,
            stream=tokenized.stream,
        ))
    return copies


def _raise_if_failed(state: ReqState) -> None:
    if state.error:
        raise InvalidRequestError(state.error)
