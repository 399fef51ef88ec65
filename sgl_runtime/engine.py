"""The offline API: `Engine(...).generate(...)` runs the Scheduler in-process (no server, no zmq)."""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any, Optional, Union

from sgl_runtime.io_struct import AbortReq, ReqTokenOutput, TokenizedGenerateReqInput
from sgl_runtime.detokenizer.incremental_detokenizer import IncrementalDetokenizer, trim_stop_string
from sgl_runtime.sampling_params import InvalidRequestError, SamplingParams
from sgl_runtime.server_args import ServerArgs


class Engine:
    """Loads the model (the built-in demo model when `model_path` is None) and generates synchronously.

    `server_args` are ServerArgs fields (device="cpu", max_total_tokens=..., ...).

    Constraints are compiled in-process, in the scheduler's worker threads: a compile that
    outlives `constraint_compile_timeout` fails its request, but its thread cannot be killed and
    runs on (holding the GIL) until it finishes. Pass only constraints you trust; the HTTP server
    validates untrusted ones in killable processes first (server/constraint_validator.py).
    """

    def __init__(self, model_path: Optional[str] = None, **server_args: Any) -> None:
        from sgl_runtime.scheduler.scheduler import Scheduler

        self.server_args = ServerArgs.from_kwargs(model_path=model_path, **server_args)
        self.scheduler = Scheduler(self.server_args)
        self.tokenizer = self.scheduler.tokenizer
        self.context_length = self.scheduler.model_config.context_length
        self._ids = itertools.count()

    # ------------------------------------------------------------------ public API
    def generate(
        self,
        prompt: Optional[Union[str, list[str]]] = None,
        sampling_params: Optional[Union[dict, list[dict]]] = None,
        input_ids: Optional[Union[list[int], list[list[int]]]] = None,
        return_logprob: bool = False,
        logprob_start_len: int = -1,
        top_logprobs_num: int = 0,
        return_text_in_logprobs: bool = False,
    ) -> Union[dict, list[dict]]:
        """One result dict per prompt and sample ({text, output_ids, meta_info}); a dict when one
        prompt with n = 1 was given, else a list (prompt-major, then sample index)."""
        single, prompts = _normalize_inputs(prompt, input_ids)
        params_list = _normalize_params(sampling_params, len(prompts))
        messages = [
            self._tokenize(p, params, return_logprob, logprob_start_len, top_logprobs_num)
            for p, params in zip(prompts, params_list)
        ]
        results = self._run(messages, return_text_in_logprobs)
        errors = [r["meta_info"]["error"] for r in results if r["meta_info"].get("error")]
        if errors:
            raise InvalidRequestError(errors[0])
        return results[0] if single and len(results) == 1 else results

    def flush_cache(self) -> bool:
        return self.scheduler.flush_cache().success

    def get_stats(self) -> dict:
        return self.scheduler.get_stats()

    def shutdown(self) -> None:
        if self.scheduler is not None:
            self.scheduler.shutdown()
        self.scheduler = None

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    # ------------------------------------------------------------------ internals
    def _tokenize(self, prompt, params: SamplingParams, return_logprob, logprob_start_len, top_logprobs_num):
        if isinstance(prompt, str):
            if not prompt:
                raise InvalidRequestError("prompt: must be a non-empty string")
            ids, text = self.tokenizer.encode(prompt), prompt
        else:
            ids, text = list(prompt), None
            if any(isinstance(t, bool) or not isinstance(t, int) for t in ids):
                raise InvalidRequestError("input_ids: must be a list of integers")
        if not ids:
            raise InvalidRequestError("input_ids: the prompt is empty")
        if len(ids) >= self.context_length:
            raise InvalidRequestError(
                f"prompt: {len(ids)} tokens is longer than the context length allows ({self.context_length - 1})"
            )
        if top_logprobs_num < 0:
            raise InvalidRequestError(f"top_logprobs_num: must be >= 0, got {top_logprobs_num}")
        if return_logprob and logprob_start_len >= len(ids):
            raise InvalidRequestError(f"logprob_start_len: must be < the prompt length ({len(ids)})")
        return TokenizedGenerateReqInput(
            rid=uuid.uuid4().hex, input_text=text, input_ids=ids, sampling_params=params,
            return_logprob=return_logprob, logprob_start_len=logprob_start_len if return_logprob else -1,
            top_logprobs_num=top_logprobs_num,
        )

    def _run(self, messages: list[TokenizedGenerateReqInput], text_in_logprobs: bool) -> list[dict]:
        start = time.monotonic()
        collectors: dict[tuple[str, int], _Collector] = {}
        for msg in messages:
            for i in range(msg.sampling_params.n):
                collectors[(msg.rid, i)] = _Collector(msg, i)
            self.scheduler.handle(msg)
        remaining = set(collectors)
        try:
            while remaining:
                if not self.scheduler.has_work():
                    raise RuntimeError(f"scheduler went idle with {len(remaining)} request(s) unfinished")
                out = self.scheduler.step()
                for o in out.outputs if out is not None else ():
                    key = (o.rid, o.index)
                    collectors[key].add(o)
                    if o.finished_reason is not None:
                        remaining.discard(key)
        except BaseException:
            for msg in messages:
                self.scheduler.handle(AbortReq(rid=msg.rid))
            raise
        latency = time.monotonic() - start
        return [c.result(self.tokenizer, latency, text_in_logprobs) for c in collectors.values()]


class _Collector:
    """Gathers one sample's streamed outputs into the final result dict."""

    def __init__(self, msg: TokenizedGenerateReqInput, index: int) -> None:
        self.msg = msg
        self.index = index
        self.output_ids: list[int] = []
        self.last: Optional[ReqTokenOutput] = None
        self.input_token_logprobs = self.input_top_logprobs = None
        self.output_token_logprobs: list = []
        self.output_top_logprobs: list = []

    def add(self, out: ReqTokenOutput) -> None:
        self.output_ids.extend(out.new_output_ids)
        self.last = out
        if out.input_token_logprobs is not None:
            self.input_token_logprobs, self.input_top_logprobs = out.input_token_logprobs, out.input_top_logprobs
        self.output_token_logprobs.extend(out.new_output_token_logprobs or [])
        self.output_top_logprobs.extend(out.new_output_top_logprobs or [])

    def result(self, tokenizer, latency: float, text_in_logprobs: bool) -> dict:
        out, params = self.last, self.msg.sampling_params
        detok = IncrementalDetokenizer(tokenizer, self.msg.input_ids, params.skip_special_tokens,
                                       params.spaces_between_special_tokens)
        detok.add(self.output_ids)
        detok.flush()
        meta = {
            "id": self.msg.rid if params.n == 1 else f"{self.msg.rid}-{self.index}",
            "prompt_tokens": out.prompt_tokens,
            "completion_tokens": out.completion_tokens,
            "cached_tokens": out.cached_tokens,
            "finish_reason": out.finished_reason,
            "e2e_latency": latency,
            "forward_passes": out.forward_passes,
        }
        if out.error:
            meta["error"] = out.error
        if self.msg.return_logprob:
            entry = _logprob_entry_maker(tokenizer, text_in_logprobs)
            meta["input_token_logprobs"] = [entry(e) for e in self.input_token_logprobs or []]
            meta["output_token_logprobs"] = [entry(e) for e in self.output_token_logprobs]
            meta["input_top_logprobs"] = [_top(entry, t) for t in self.input_top_logprobs or []]
            meta["output_top_logprobs"] = [_top(entry, t) for t in self.output_top_logprobs]
        text = trim_stop_string(detok.text, out.finished_reason, params.no_stop_trim)
        return {"text": text, "output_ids": list(self.output_ids), "meta_info": meta}


def _logprob_entry_maker(tokenizer, with_text: bool):
    def entry(pair) -> list:
        logprob, token_id = pair
        return [logprob, token_id, tokenizer.decode([token_id]) if with_text else None]

    return entry


def _top(entry, tops) -> Optional[list]:
    return None if tops is None else [entry(pair) for pair in tops]


def _normalize_inputs(prompt, input_ids) -> tuple[bool, list]:
    if (prompt is None) == (input_ids is None):
        raise InvalidRequestError("prompt/input_ids: give exactly one of them")
    if prompt is not None:
        if isinstance(prompt, str):
            return True, [prompt]
        if not isinstance(prompt, list) or not prompt or any(not isinstance(p, str) for p in prompt):
            raise InvalidRequestError("prompt: must be a string or a non-empty list of strings")
        return False, list(prompt)
    if not isinstance(input_ids, list) or not input_ids:
        raise InvalidRequestError("input_ids: must be a non-empty list of token ids (or a list of such lists)")
    if all(isinstance(x, list) for x in input_ids):
        return False, list(input_ids)
    return True, [input_ids]


def _normalize_params(sampling_params, count: int) -> list[SamplingParams]:
    if isinstance(sampling_params, list):
        if len(sampling_params) != count:
            raise InvalidRequestError(f"sampling_params: got {len(sampling_params)} for {count} prompts")
        return [SamplingParams.from_dict(p) for p in sampling_params]
    params = SamplingParams.from_dict(sampling_params)
    return [params] * count
