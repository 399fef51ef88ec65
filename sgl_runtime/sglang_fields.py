"""The request schema of SGLang 0.5.23, field by field, and what this runtime does with each.

One table per SGLang request model (GenerateReqInput, SamplingParams, the OpenAI Completion and
ChatCompletion requests), each entry the field's SGLang default and one of three treatments:

- honoured: the field works as in SGLang;
- ignored: it only affects what SGLang logs, traces or how it routes, so any value is accepted;
- default_only: accepted at its default (or null); any other value asks for something this runtime
  cannot do and is a 400 naming the field.

A field SGLang does not know either is a 400 naming it ("unknown field(s)"), so typos still fail.
tests/test_sglang_fields.py checks these tables against SGLang's own sources when sglang is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

SGLANG_VERSION = "0.5.23"
REQUIRED = object()  # marks a field without a default (prompt, messages)


class UnsupportedFieldError(ValueError):
    """A request field this runtime cannot honour (or does not know); the server answers 400."""


@dataclass(frozen=True)
class SGLangField:
    default: Any
    treatment: str  # "honoured" | "ignored" | "default_only"
    note: str = ""


def honoured(default: Any) -> SGLangField:
    return SGLangField(default, "honoured")


def ignored(default: Any, note: str) -> SGLangField:
    return SGLangField(default, "ignored", note)


def default_only(default: Any) -> SGLangField:
    return SGLangField(default, "default_only")


def strip_sglang_fields(
    body: dict, table: dict[str, SGLangField], ours: set[str], where: str, extra_ignored: tuple = ()
) -> dict:
    """`body` without the SGLang fields that need no work here (ignored ones, and default_only ones
    at their default); fields in `ours` (what this runtime's own model declares) pass through.
    Raises UnsupportedFieldError naming a default_only field set to something else, or unknown fields."""
    kept, unknown = {}, []
    for name, value in body.items():
        entry: Optional[SGLangField] = table.get(name)
        if name in ours:
            kept[name] = value
        elif name in extra_ignored or (entry is not None and entry.treatment == "ignored"):
            continue
        elif entry is None:
            unknown.append(name)
        elif not _is_default(value, entry.default):
            raise UnsupportedFieldError(
                f"{where}{name}={_short(value)} is not supported by this runtime "
                f"(accepted only at SGLang's default, {_short(entry.default)})"
            )
    if unknown:
        prefix = f"{where.rstrip('.')}: " if where else ""
        raise UnsupportedFieldError(
            f"{prefix}unknown field(s): {', '.join(sorted(unknown))}; expected some of {', '.join(sorted(ours))}"
        )
    return kept


def _is_default(value: Any, default: Any) -> bool:
    if value is None or default is REQUIRED:
        return value is None
    if isinstance(value, bool) or isinstance(default, bool):
        return value is default
    if default is None:
        return value in ([], {}, "")
    return value == default


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# Fields SGLang Model Gateway adds to what it forwards (besides those of the models below).
GATEWAY_ADDED = ("model",)

# ---------------------------------------------------------------- SGLang 0.5.23, generated from its sources
GENERATE_REQ_INPUT: dict[str, SGLangField] = {
    "rid": honoured(None),
    "session_id": default_only(None),
    "text": honoured(None),
    "input_ids": honoured(None),
    "input_embeds": default_only(None),
    "image_data": default_only(None),
    "video_data": default_only(None),
    "audio_data": default_only(None),
    "mm_hashes": default_only(None),
    "mm_content_hashes": default_only(None),
    "use_audio_in_video": default_only(False),
    "video_config": default_only(None),
    "sampling_params": honoured(None),
    "watermark": default_only(None),
    "return_logprob": honoured(None),
    "logprob_start_len": honoured(None),
    "top_logprobs_num": honoured(None),
    "token_ids_logprob": honoured(None),
    "return_sampling_mask": default_only(None),
    "sampling_logprobs_mode": default_only(None),
    "return_text_in_logprobs": honoured(False),
    "return_flat_raw_top_logprobs": default_only(False),
    "return_flat_raw_output_top_logprobs": default_only(False),
    "return_flat_raw_top_logprobs_b64": default_only(False),
    "stream": honoured(False),
    "log_metrics": ignored(True, "logging"),
    "return_hidden_states": default_only(False),
    "return_routed_experts": default_only(False),
    "routed_experts_start_len": default_only(0),
    "return_indexer_topk": default_only(False),
    "modalities": default_only(None),
    "session_params": default_only(None),
    "lora_path": default_only(None),
    "lora_id": default_only(None),
    "custom_logit_processor": default_only(None),
    "positional_embed_overrides": default_only(None),
    "bootstrap_host": default_only(None),
    "bootstrap_port": default_only(None),
    "bootstrap_room": default_only(None),
    "bootstrap_pair_key": default_only(None),
    "decode_tp_size": default_only(None),
    "routed_dp_rank": default_only(None),
    "data_parallel_rank": default_only(None),
    "disagg_prefill_dp_rank": default_only(None),
    "routing_key": ignored(None, "routing"),
    "conversation_id": ignored(None, "routing"),
    "http_worker_ipc": ignored(None, "SGLang's multi-worker HTTP plumbing"),
    "background": default_only(False),
    "require_reasoning": default_only(False),
    "max_thinking_tokens": default_only(None),
    "priority": ignored(None, "scheduling priority (SGLang ignores it too unless --enable-priority-scheduling)"),
    "extra_key": ignored(None, "cache namespacing"),
    "no_logs": ignored(False, "logging"),
    "custom_labels": ignored(None, "metrics labels"),
    "return_bytes": default_only(False),
    "return_entropy": default_only(False),
    "return_prompt_token_ids": default_only(False),
    "external_trace_header": ignored(None, "tracing"),
    "received_time": ignored(None, "timing"),
    "need_wait_for_mm_inputs": default_only(None),
    "num_items_assigned": default_only(None),
    "encoder_urls": default_only(None),
    "max_dynamic_patch": default_only(None),
    "min_dynamic_patch": default_only(None),
    "image_max_dynamic_patch": default_only(None),
    "video_max_dynamic_patch": default_only(None),
    "images_config": default_only(None),
    "mm_processor_kwargs": default_only(None),
    "multi_item_delimiter_indices": default_only(None),
    "token_indices_to_pool": default_only(None),
    "cache_salt": ignored(None, "cache namespacing"),
    "kv_hints": default_only(None),
}
SAMPLING_PARAMS: dict[str, SGLangField] = {
    "max_new_tokens": honoured(128),
    "stop": honoured(None),
    "stop_token_ids": honoured(None),
    "stop_regex": honoured(None),
    "temperature": honoured(1.0),
    "top_p": honoured(1.0),
    "top_k": honoured(-1),
    "min_p": honoured(0.0),
    "frequency_penalty": honoured(0.0),
    "presence_penalty": honoured(0.0),
    "repetition_penalty": honoured(1.0),
    "min_new_tokens": honoured(0),
    "n": honoured(1),
    "beam_width": default_only(None),
    "json_schema": honoured(None),
    "regex": honoured(None),
    "ebnf": honoured(None),
    "structural_tag": default_only(None),
    "ignore_eos": honoured(False),
    "skip_special_tokens": honoured(True),
    "spaces_between_special_tokens": honoured(True),
    "no_stop_trim": honoured(False),
    "stream_interval": ignored(None, "how often a stream flushes"),
    "logit_bias": honoured(None),
    "sampling_seed": honoured(None),
    "custom_params": default_only(None),
    "watermark": default_only(None),
    "stop_strs": default_only(None),
    "stop_regex_strs": default_only(None),
    "stop_str_max_len": default_only(0),
    "stop_regex_max_len": default_only(0),
    "is_normalized": default_only(False),
    "ebnf_full_assistant": default_only(False),
}
COMPLETION_REQUEST: dict[str, SGLangField] = {
    "bootstrap_host": default_only(None),
    "bootstrap_port": default_only(None),
    "bootstrap_room": default_only(None),
    "routed_dp_rank": ignored(None, "routing"),
    "disagg_prefill_dp_rank": ignored(None, "routing"),
    "model": honoured(None),
    "prompt": honoured(REQUIRED),
    "best_of": honoured(None),
    "echo": honoured(False),
    "frequency_penalty": honoured(0.0),
    "logit_bias": honoured(None),
    "logprobs": honoured(None),
    "max_tokens": honoured(16),
    "n": honoured(1),
    "presence_penalty": honoured(0.0),
    "seed": honoured(None),
    "stop": honoured(None),
    "stream": honoured(False),
    "stream_options": honoured(None),
    "suffix": honoured(None),
    "temperature": honoured(1.0),
    "top_p": honoured(1.0),
    "user": honoured(None),
    "return_hidden_states": default_only(False),
    "return_routed_experts": default_only(False),
    "routed_experts_start_len": default_only(0),
    "return_cached_tokens_details": default_only(False),
    "return_spec_tokens_details": default_only(False),
    "return_token_ids": default_only(False),
    "top_k": honoured(-1),
    "min_p": honoured(0.0),
    "min_tokens": honoured(0),
    "json_schema": honoured(None),
    "regex": honoured(None),
    "ebnf": honoured(None),
    "repetition_penalty": honoured(1.0),
    "stop_token_ids": honoured(None),
    "stop_regex": honoured(None),
    "no_stop_trim": honoured(False),
    "ignore_eos": honoured(False),
    "skip_special_tokens": honoured(True),
    "lora_path": default_only(None),
    "session_id": default_only(None),
    "session_params": default_only(None),
    "response_format": honoured(None),
    "custom_params": default_only(None),
    "custom_logit_processor": default_only(None),
    "watermark": default_only(None),
    "images_config": default_only(None),
    "mm_processor_kwargs": default_only(None),
    "data_parallel_rank": ignored(None, "routing"),
    "rid": ignored(None, "request id"),
    "extra_key": ignored(None, "cache namespacing"),
    "cache_salt": ignored(None, "cache namespacing"),
    "priority": ignored(None, "scheduling priority"),
    "custom_labels": ignored(None, "metrics labels"),
}
CHAT_COMPLETION_REQUEST: dict[str, SGLangField] = {
    "bootstrap_host": default_only(None),
    "bootstrap_port": default_only(None),
    "bootstrap_room": default_only(None),
    "routed_dp_rank": ignored(None, "routing"),
    "disagg_prefill_dp_rank": ignored(None, "routing"),
    "messages": honoured(REQUIRED),
    "model": honoured(None),
    "frequency_penalty": honoured(0.0),
    "logit_bias": honoured(None),
    "logprobs": honoured(False),
    "top_logprobs": honoured(None),
    "max_tokens": honoured(None),
    "max_completion_tokens": honoured(None),
    "n": honoured(1),
    "presence_penalty": honoured(0.0),
    "response_format": honoured(None),
    "seed": honoured(None),
    "stop": honoured(None),
    "stream": honoured(False),
    "stream_options": honoured(None),
    "temperature": honoured(None),
    "top_p": honoured(None),
    "user": honoured(None),
    "tools": default_only(None),
    "tool_choice": default_only("auto"),
    "parallel_tool_calls": default_only(True),
    "return_hidden_states": default_only(False),
    "return_routed_experts": default_only(False),
    "routed_experts_start_len": default_only(0),
    "return_cached_tokens_details": default_only(False),
    "return_spec_tokens_details": default_only(False),
    "return_prompt_token_ids": default_only(False),
    "return_token_ids": default_only(False),
    "return_meta_info": default_only(False),
    "return_input_ids_in_sglext": default_only(False),
    "return_output_ids_in_sglext": default_only(False),
    "return_sampling_mask": default_only(False),
    "sampling_logprobs_mode": default_only(None),
    "return_flat_raw_output_top_logprobs": default_only(False),
    "return_flat_raw_top_logprobs_b64": default_only(True),
    "reasoning_effort": default_only(None),
    "thinking": default_only(None),
    "task": default_only(None),
    "top_k": honoured(None),
    "min_p": honoured(None),
    "min_tokens": honoured(0),
    "regex": honoured(None),
    "ebnf": honoured(None),
    "repetition_penalty": honoured(None),
    "stop_token_ids": honoured(None),
    "stop_regex": honoured(None),
    "no_stop_trim": honoured(False),
    "ignore_eos": honoured(False),
    "continue_final_message": default_only(False),
    "skip_special_tokens": honoured(True),
    "lora_path": default_only(None),
    "session_id": default_only(None),
    "session_params": default_only(None),
    "separate_reasoning": default_only(True),
    "stream_reasoning": default_only(True),
    "chat_template_kwargs": default_only(None),
    "max_dynamic_patch": default_only(None),
    "min_dynamic_patch": default_only(None),
    "use_audio_in_video": default_only(False),
    "images_config": default_only(None),
    "video_config": default_only(None),
    "mm_processor_kwargs": default_only(None),
    "custom_logit_processor": default_only(None),
    "custom_params": default_only(None),
    "watermark": default_only(None),
    "input_ids": default_only(None),
    "rid": ignored(None, "request id"),
    "extra_key": ignored(None, "cache namespacing"),
    "cache_salt": ignored(None, "cache namespacing"),
    "priority": ignored(None, "scheduling priority"),
    "data_parallel_rank": ignored(None, "routing"),
}
