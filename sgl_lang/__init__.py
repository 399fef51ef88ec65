"""sgl_lang: an SGLang-compatible frontend language for LM programs (`import sgl_lang as sgl`).

Needs only requests, tqdm and jinja2; never imports torch or the runtime.
"""

from sgl_lang.api import (
    Runtime,
    assistant,
    assistant_begin,
    assistant_end,
    flush_cache,
    function,
    gen,
    gen_int,
    gen_string,
    get_server_info,
    image,
    select,
    system,
    system_begin,
    system_end,
    user,
    user_begin,
    user_end,
    video,
)
from sgl_lang.backend.base import BackendError, BaseBackend
from sgl_lang.backend.runtime_endpoint import RuntimeEndpoint
from sgl_lang.choices import (
    ChoicesDecision,
    ChoicesSamplingMethod,
    greedy_token_selection,
    token_length_normalized,
    unconditional_likelihood_normalized,
)
from sgl_lang.global_config import get_default_backend, global_config, set_default_backend
from sgl_lang.interpreter import ProgramError
from sgl_lang.program import SglFunction
from sgl_lang.program_state import ProgramState, ProgramStateGroup
from sgl_lang.sampling_params import REGEX_BOOL, REGEX_FLOAT, REGEX_INT, REGEX_STR, SglSamplingParams


def __getattr__(name: str):
    """`sgl_lang.OpenAI` imports the optional openai package only when first used."""
    if name == "OpenAI":
        from sgl_lang.backend.openai import OpenAI

        return OpenAI
    raise AttributeError(f"module 'sgl_lang' has no attribute {name!r}")


from sgl_lang.reasoning import separate_reasoning  # noqa: E402

__all__ = [
    "OpenAI",
    "Runtime",
    "RuntimeEndpoint",
    "BaseBackend",
    "BackendError",
    "ProgramError",
    "ProgramState",
    "ProgramStateGroup",
    "SglFunction",
    "SglSamplingParams",
    "function",
    "gen",
    "gen_int",
    "gen_string",
    "select",
    "system",
    "user",
    "assistant",
    "system_begin",
    "system_end",
    "user_begin",
    "user_end",
    "assistant_begin",
    "assistant_end",
    "set_default_backend",
    "get_default_backend",
    "flush_cache",
    "get_server_info",
    "ChoicesDecision",
    "ChoicesSamplingMethod",
    "token_length_normalized",
    "greedy_token_selection",
    "unconditional_likelihood_normalized",
    "REGEX_INT",
    "REGEX_FLOAT",
    "REGEX_BOOL",
    "REGEX_STR",
    "image",
    "video",
    "separate_reasoning",
    "global_config",
]
