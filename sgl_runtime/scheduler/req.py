"""One request inside the scheduler: its tokens, its KV bookkeeping, and when it is finished."""

from __future__ import annotations

import re
import time
from typing import Optional

import torch

from sgl_runtime.detokenizer.incremental_detokenizer import IncrementalDetokenizer
from sgl_runtime.sampling_params import SamplingParams

_EMPTY = torch.empty(0, dtype=torch.int64)
STOP_REGEX_WINDOW = 256  # characters of earlier output a stop_regex match may span (SGLang bounds it too)


class Req:
    """A request's state across scheduling rounds.

    KV bookkeeping: positions ``[0, cache_protected_len)`` of the request's row in
    req_to_token hold radix-cache slots (locked through ``last_node``); positions
    ``[cache_protected_len, kv_len)`` hold slots the request owns. ``fill_ids`` is the
    whole sequence (prompt + output); tokens ``fill_ids[kv_len:]`` still need a forward.
    """

    def __init__(
        self,
        rid: str,
        origin_input_ids: list[int],
        sampling_params: SamplingParams,
        *,
        index: int = 0,
        return_logprob: bool = False,
        logprob_start_len: int = -1,
        top_logprobs_num: int = 0,
        token_ids_logprob: Optional[list[int]] = None,
        stream: bool = False,
        eos_token_ids: frozenset = frozenset(),
        max_new_tokens: Optional[int] = None,
        tokenizer=None,
        hidden: bool = False,
    ) -> None:
        self.rid = rid
        self.index = index
        self.origin_input_ids = list(origin_input_ids)
        self.output_ids: list[int] = []
        self.sampling_params = sampling_params
        self.max_new_tokens = sampling_params.max_new_tokens if max_new_tokens is None else max_new_tokens
        self.stream = stream
        self.hidden = hidden  # internal prefix-caching request of an n > 1 fan-out: never reported
        self.arrival_time = time.monotonic()
        self.admit_order = 0

        # KV bookkeeping
        self.prefix_indices: torch.Tensor = _EMPTY
        self.last_node = None
        self.node_locked = False  # last_node's path is locked in the radix cache
        self.req_pool_idx: Optional[int] = None
        self.kv_len = 0
        self.cache_protected_len = 0
        self.extend_input_len = 0
        self.cached_tokens: Optional[int] = None  # prefix hit at first admission
        self.queue_time: Optional[float] = None  # seconds from arrival in the scheduler to first admission

        # Outcome and reporting
        self.finished_reason: Optional[dict] = None
        self.error: Optional[str] = None
        self.forward_passes = 0
        self.sent_len = 0

        # Logprobs (entries (logprob, token_id); top entries lists of (logprob, token_id))
        self.return_logprob = return_logprob
        self.logprob_start_len = logprob_start_len
        self.top_logprobs_num = top_logprobs_num
        self.input_token_logprobs: Optional[list] = None  # complete once the prompt is prefilled
        self.input_top_logprobs: Optional[list] = None
        self.input_logprobs_acc: list = []
        self.input_top_acc: list = []
        self.input_logprobs_sent = False
        self.output_token_logprobs: list = []
        self.output_top_logprobs: list = []
        self.token_ids_logprob = token_ids_logprob  # SGLang's token_ids_logprob: ids scored at every position
        self.input_token_ids_logprobs: Optional[list] = None
        self.input_token_ids_acc: list = []
        self.output_token_ids_logprobs: list = []

        # Sampling and constraints
        self.eos_token_ids = eos_token_ids
        # Greedy without penalties: with no constraint and min_new_tokens reached, sampling is one argmax.
        self.plain_greedy = (
            sampling_params.is_greedy
            and sampling_params.repetition_penalty == 1.0
            and (sampling_params.frequency_penalty == 0.0 and sampling_params.presence_penalty == 0.0)
            and not sampling_params.logit_bias
        )
        self.generator: Optional[torch.Generator] = None
        if sampling_params.seed is not None:
            self.generator = torch.Generator().manual_seed(sampling_params.seed + index)
        self.constraint_future = None
        self.matcher = None
        self.detokenizer = None
        if (sampling_params.stop or sampling_params.stop_regex) and tokenizer is not None:
            self.detokenizer = IncrementalDetokenizer(
                tokenizer,
                origin_input_ids,
                sampling_params.skip_special_tokens,
                sampling_params.spaces_between_special_tokens,
            )
            self._max_stop_len = max((len(s) for s in sampling_params.stop), default=0)
            self._stop_regexes = [re.compile(p) for p in sampling_params.stop_regex]

    # ------------------------------------------------------------------ sequence views
    @property
    def fill_ids(self) -> list[int]:
        return self.origin_input_ids + self.output_ids

    @property
    def seq_len(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)

    def ids_between(self, start: int, end: int) -> list[int]:
        """fill_ids[start:end] without building fill_ids (a copy of the whole sequence)."""
        prompt_len = len(self.origin_input_ids)
        if start >= prompt_len:
            return self.output_ids[start - prompt_len : end - prompt_len]
        if end <= prompt_len:
            return self.origin_input_ids[start:end]
        return self.origin_input_ids[start:] + self.output_ids[: end - prompt_len]

    @property
    def finished(self) -> bool:
        return self.finished_reason is not None

    @property
    def need_input_logprobs(self) -> bool:
        return self.return_logprob and self.logprob_start_len >= 0 and self.input_token_logprobs is None

    def max_prefix_len(self) -> int:
        """How much of fill_ids may come from the cache: at least the last token is computed, and
        with prompt logprobs from k on, every position from k - 1 (whose logits score token k)."""
        limit = self.seq_len - 1
        if self.need_input_logprobs:
            limit = min(limit, self.logprob_start_len - 1)
        return max(limit, 0)

    def init_next_round_input(self, tree_cache) -> None:
        """Match the cache for a (re)admission; sets prefix_indices, last_node, extend_input_len."""
        key = self.fill_ids[: self.max_prefix_len()]
        self.prefix_indices, self.last_node = tree_cache.match_prefix(key)
        self.extend_input_len = self.seq_len - len(self.prefix_indices)

    def reset_kv_state(self) -> None:
        """Forget every KV slot (after release): the request will be prefilled again."""
        self.prefix_indices = _EMPTY
        self.last_node = None
        self.req_pool_idx = None
        self.kv_len = 0
        self.cache_protected_len = 0

    # ------------------------------------------------------------------ finishing
    def finish(self, reason: dict, error: Optional[str] = None) -> None:
        if self.finished_reason is None:
            self.finished_reason = reason
            self.error = error

    def abort(self, message: str) -> None:
        self.finish({"type": "abort", "message": message}, error=message)

    def append_token(self, token_id: int) -> None:
        """Add one sampled or forced token, advance the constraint, and check stop conditions."""
        self.output_ids.append(token_id)
        if self.matcher is not None and not self._advance_matcher(token_id):
            return
        self._check_finished(token_id)

    def _advance_matcher(self, token_id: int) -> bool:
        if token_id in self.eos_token_ids and self.matcher.is_accepting():
            return True
        try:
            self.matcher.advance(token_id)
        except ValueError as e:  # ConstraintError
            self.abort(f"constraint violated by token {token_id}: {e}")
            return False
        return True

    def _check_finished(self, token_id: int) -> None:
        params = self.sampling_params
        if token_id in params.stop_token_ids:
            return self.finish({"type": "stop", "matched": token_id})
        if not params.ignore_eos and token_id in self.eos_token_ids:
            return self.finish({"type": "stop", "matched": token_id})
        if self.detokenizer is not None:
            new_text = self.detokenizer.add([token_id])
            if new_text:
                tail = self.detokenizer.text[-(self._max_stop_len + len(new_text)) :]
                for stop in params.stop:
                    if stop in tail:
                        return self.finish({"type": "stop", "matched": stop})
                regex_tail = self.detokenizer.text[-(STOP_REGEX_WINDOW + len(new_text)) :]
                for pattern in self._stop_regexes:
                    if pattern.search(regex_tail):
                        return self.finish({"type": "stop", "matched": pattern.pattern})
        if len(self.output_ids) >= self.max_new_tokens:
            return self.finish({"type": "length", "length": self.max_new_tokens})
        if self.matcher is not None and self.matcher.is_terminated():
            return self.finish({"type": "stop", "matched": min(self.eos_token_ids) if self.eos_token_ids else None})

    def __repr__(self) -> str:
        return f"Req(rid={self.rid!r}, index={self.index}, in={len(self.origin_input_ids)}, out={len(self.output_ids)})"
