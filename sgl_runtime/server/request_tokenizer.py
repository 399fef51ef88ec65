"""Turns a client's request into what the scheduler runs: tokenizes (and renders chat messages
with the chat template), and validates the prompt, the sampling parameters and the constraint,
raising InvalidRequestError (HTTP 400) with a message naming the problem."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from sgl_runtime.io_struct import TokenizedGenerateReqInput
from sgl_runtime.sampling_params import InvalidRequestError, SamplingParams
from sgl_runtime.server.generate_request import SingleRequest
from sgl_runtime.server.json_body import check_json_value
from sgl_runtime.server_args import ServerArgs


@dataclass(frozen=True)
class ModelInfo:
    """What validation needs to know about the served model (read from its config files)."""

    context_length: int
    vocab_size: int
    eos_token_ids: frozenset

    @staticmethod
    def read(server_args: ServerArgs) -> "ModelInfo":
        """Read from the checkpoint's config files (no weights are loaded)."""
        from sgl_runtime.model_config import ModelConfig

        config = ModelConfig.from_path(
            server_args.model_path,
            dtype=server_args.dtype,
            context_length=server_args.context_length,
            device=server_args.resolved_device,
        )
        return ModelInfo(
            context_length=config.context_length,
            vocab_size=config.vocab_size,
            eos_token_ids=frozenset(config.eos_token_ids),
        )


class RequestTokenizer:
    """Owns the front half's tokenizer (loaded from the server args unless one is given)."""

    def __init__(self, server_args: ServerArgs, model_info: ModelInfo, tokenizer=None) -> None:
        from sgl_runtime.tokenizer_utils import load_tokenizer, read_generation_defaults

        self.server_args = server_args
        self.model_info = model_info
        self.tokenizer = tokenizer or load_tokenizer(
            server_args.tokenizer_path or server_args.model_path, server_args.chat_template
        )
        self.sampling_defaults = (
            read_generation_defaults(server_args.model_path)
            if server_args.sampling_defaults == "model" and server_args.model_path
            else {}
        )

    def chat_prompt_ids(
        self, messages: list[dict], tools: Optional[list[dict]] = None, template_kwargs: Optional[dict] = None
    ) -> list[int]:
        """Token ids of `messages` rendered with the chat template, ending with the assistant prompt."""
        return self.tokenizer.encode(self.chat_prompt_text(messages, tools, template_kwargs), add_special_tokens=False)

    def chat_prompt_text(
        self, messages: list[dict], tools: Optional[list[dict]] = None, template_kwargs: Optional[dict] = None
    ) -> str:
        """`messages` (and `tools`, as transformers passes them) rendered with the chat template."""
        from sgl_runtime.tokenizer_utils import get_chat_template

        if not get_chat_template(self.tokenizer):
            raise InvalidRequestError(
                "this model's tokenizer has no chat template; start the server with --chat-template"
            )
        reserved = {"tokenize", "add_generation_prompt", "tools", "conversation"} & set(template_kwargs or {})
        if reserved:
            raise InvalidRequestError(f"chat_template_kwargs: {', '.join(sorted(reserved))} cannot be set")
        try:
            return self.tokenizer.apply_chat_template(
                messages, tools=tools or None, tokenize=False, add_generation_prompt=True, **(template_kwargs or {})
            )
        except Exception as exc:  # jinja2 errors (e.g. raise_exception in the template)
            raise InvalidRequestError(f"messages: the chat template failed: {exc}") from exc

    def prepare(self, single: SingleRequest) -> TokenizedGenerateReqInput:
        """Tokenize and validate one request; raise InvalidRequestError naming the problem."""
        params = SamplingParams.from_dict({**self.sampling_defaults, **single.sampling_params})
        if single.text is not None:
            if not single.text:
                raise InvalidRequestError("text: the prompt is empty")
            check_json_value(single.text, path="text")
            input_ids = self.tokenizer.encode(single.text)
        else:
            input_ids = single.input_ids
            if not input_ids:
                raise InvalidRequestError("input_ids: the prompt is empty (0 tokens)")
        self._check_prompt(input_ids, params)
        self._check_token_ids_logprob(single.token_ids_logprob)
        start = single.logprob_start_len
        return TokenizedGenerateReqInput(
            rid=single.rid,
            input_text=single.text,
            input_ids=list(input_ids),
            sampling_params=params,
            return_logprob=single.return_logprob,
            logprob_start_len=min(start, len(input_ids) - 1) if single.return_logprob else start,
            top_logprobs_num=single.top_logprobs_num,
            token_ids_logprob=single.token_ids_logprob,
            stream=single.stream,
        )

    def _check_token_ids_logprob(self, token_ids: Optional[list[int]]) -> None:
        vocab = self.model_info.vocab_size
        bad = next((t for t in token_ids or () if not 0 <= t < vocab), None)
        if bad is not None:
            raise InvalidRequestError(f"token_ids_logprob: token id {bad} is outside the vocabulary [0, {vocab})")

    def _check_prompt(self, input_ids: list[int], params: SamplingParams) -> None:
        limit = self.model_info.context_length
        if not input_ids:
            raise InvalidRequestError("the prompt is empty (0 tokens)")
        vocab = self.model_info.vocab_size
        for name, ids in (("input_ids", input_ids), ("sampling_params.stop_token_ids", params.stop_token_ids)):
            bad = [t for t in ids if not 0 <= t < vocab]
            if bad:
                raise InvalidRequestError(f"{name}: token id {bad[0]} is outside the vocabulary [0, {vocab})")
        if len(input_ids) >= limit:
            raise InvalidRequestError(f"the prompt has {len(input_ids)} tokens, the model's context length is {limit}")
        if len(input_ids) + params.max_new_tokens > limit:
            raise InvalidRequestError(
                f"sampling_params.max_new_tokens: {len(input_ids)} prompt tokens + {params.max_new_tokens} new tokens "
                f"exceed the model's context length of {limit}"
            )
