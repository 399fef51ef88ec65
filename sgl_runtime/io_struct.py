"""Every message that crosses a process boundary, named by pipeline stage.

HTTP/Engine --GenerateReqInput--> TokenizerManager --TokenizedGenerateReqInput--> Scheduler
Scheduler --BatchTokenIDOut--> Detokenizer --BatchStrOut--> TokenizerManager

Control messages (AbortReq, FlushCacheReq, ...) travel the same sockets. All messages are
plain dataclasses pickled over zmq; this module imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

from sgl_runtime.sampling_params import SamplingParams


# --------------------------------------------------------------------------------------
# Client -> TokenizerManager
# --------------------------------------------------------------------------------------
@dataclass
class GenerateReqInput:
    """The body of POST /generate (and Engine.generate); may hold one request or a batch."""

    text: Optional[Union[str, list[str]]] = None
    input_ids: Optional[Union[list[int], list[list[int]]]] = None
    sampling_params: Optional[Union[dict, list[dict]]] = None
    rid: Optional[Union[str, list[str]]] = None
    stream: bool = False
    return_logprob: Union[bool, list[bool]] = False
    logprob_start_len: Union[int, list[int]] = -1
    top_logprobs_num: Union[int, list[int]] = 0
    token_ids_logprob: Optional[Union[list[int], list[list[int]]]] = None  # ids scored at every position
    return_text_in_logprobs: bool = False
    timeout: Optional[float] = None  # seconds; past it the request is aborted (default --request-timeout)


# --------------------------------------------------------------------------------------
# TokenizerManager -> Scheduler
# --------------------------------------------------------------------------------------
@dataclass
class TokenizedGenerateReqInput:
    rid: str
    input_text: Optional[str]
    input_ids: list[int]
    sampling_params: SamplingParams
    return_logprob: bool = False
    logprob_start_len: int = -1  # -1: no prompt logprobs; k: prompt logprobs from position k on
    top_logprobs_num: int = 0
    token_ids_logprob: Optional[list[int]] = None  # token ids whose logprobs every scored position reports
    stream: bool = False


@dataclass
class AbortReq:
    rid: str


@dataclass
class FlushCacheReq:
    pass


@dataclass
class FlushCacheOut:
    success: bool
    message: str = ""


@dataclass
class GetStatsReq:
    """Asks the scheduler process for Scheduler.get_stats() (used by /metrics and /get_server_info)."""


@dataclass
class GetStatsOut:
    stats: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------
# Scheduler -> Detokenizer
# --------------------------------------------------------------------------------------
@dataclass
class ReqTokenOutput:
    """What one request produced since its last output message."""

    rid: str
    new_output_ids: list[int]
    finished_reason: Optional[dict]  # None while running; {"type": "length"|"stop"|"abort", ...}
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    # Logprobs, each entry (logprob, token_id) and top entries lists of (logprob, token_id).
    input_token_logprobs: Optional[list] = None  # sent once, with the first output
    input_top_logprobs: Optional[list] = None
    new_output_token_logprobs: Optional[list] = None
    new_output_top_logprobs: Optional[list] = None
    input_token_ids_logprobs: Optional[list] = None  # per position (logprob, id) of each token_ids_logprob id
    new_output_token_ids_logprobs: Optional[list] = None
    error: Optional[str] = None  # a per-request failure (e.g. constraint compile error)
    stop_strs: tuple = ()  # the request's stop strings, so the detokenizer holds back partial matches
    stop_regexes: tuple = ()  # the request's stop_regex patterns, so the detokenizer trims a match
    index: int = 0  # which of the request's n samples this is (n > 1 fans out inside the scheduler)
    forward_passes: int = 0  # forward passes the request took part in (jump-forward makes it < tokens)
    prompt_tail_ids: tuple = ()  # last prompt tokens: context to decode the first output token (SentencePiece)
    queue_time: Optional[float] = None  # seconds the request waited in the scheduler before its first prefill


@dataclass
class BatchTokenIDOut:
    outputs: list[ReqTokenOutput] = field(default_factory=list)


# --------------------------------------------------------------------------------------
# Detokenizer -> TokenizerManager
# --------------------------------------------------------------------------------------
@dataclass
class ReqStrOutput:
    rid: str
    text_delta: str  # new text since the last message (stop strings already trimmed)
    new_output_ids: list[int]
    finished_reason: Optional[dict]
    meta_info: dict[str, Any]


@dataclass
class BatchStrOut:
    outputs: list[ReqStrOutput] = field(default_factory=list)
