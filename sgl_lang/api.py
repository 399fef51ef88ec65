"""Public primitives of the language: they build IR nodes and check their arguments, nothing more.

Every sampling keyword of `gen`/`gen_int`/`gen_string` is defined once, in
`sgl_lang.sampling_params.SglSamplingParams` (max_tokens, min_tokens, stop, stop_token_ids,
temperature, top_p, top_k, min_p, frequency_penalty, presence_penalty, ignore_eos, seed,
return_logprob, logprob_start_len, top_logprobs_num, return_text_in_logprobs, dtype, regex,
json_schema, grammar); an unknown keyword or a regex that does not compile raises here.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional

from sgl_lang.choices import ChoicesSamplingMethod, token_length_normalized
from sgl_lang.global_config import resolve_backend
from sgl_lang.ir import SglExprList, SglGen, SglRoleBegin, SglRoleEnd, SglSelect, to_expr
from sgl_lang.program import SglFunction
from sgl_lang.sampling_params import SglSamplingParams


def function(func: Optional[Callable] = None, num_api_spec_tokens: Optional[int] = None):
    """Decorator: `@function` or `@function(num_api_spec_tokens=N)` turns `def prog(s, ...)` into a program."""
    if func is not None:
        return SglFunction(func, num_api_spec_tokens=num_api_spec_tokens)
    return lambda f: SglFunction(f, num_api_spec_tokens=num_api_spec_tokens)


# SGLang's positional order of gen's parameters after `name` (each is a SglSamplingParams field or alias).
GEN_ORDER = (
    "max_tokens",
    "min_tokens",
    "n",
    "stop",
    "stop_token_ids",
    "stop_regex",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "ignore_eos",
    "return_logprob",
    "logprob_start_len",
    "top_logprobs_num",
    "return_text_in_logprobs",
    "dtype",
    "choices",
    "choices_method",
    "regex",
    "json_schema",
)
GEN_INT_ORDER = tuple(n for n in GEN_ORDER[:17] if n != "min_tokens")


def _positional(order: tuple, args: tuple, params: dict, fn: str) -> dict:
    """SGLang's gen takes its parameters positionally too: map them onto their names."""
    if len(args) > len(order):
        raise TypeError(f"{fn}() takes at most {len(order) + 1} positional arguments")
    for key, value in zip(order, args):
        if key in params:
            raise TypeError(f"{fn}() got multiple values for argument {key!r}")
        params[key] = value
    return params


def gen(name: Optional[str] = None, *args: Any, **params: Any):
    """Generate text into variable `name`. With `choices=`, this is `select`."""
    params = _positional(GEN_ORDER, args, params, "gen")
    choices, choices_method = params.pop("choices", None), params.pop("choices_method", None)
    sampling_params = SglSamplingParams.from_kwargs(**params)  # unknown keywords raise even with choices
    if choices is not None:  # other sampling parameters do not apply to scoring, as in SGLang
        temperature = sampling_params.temperature
        return select(
            name, choices, 0.0 if temperature is None else temperature, choices_method or token_length_normalized
        )
    return SglGen(name, sampling_params)


def gen_int(name: Optional[str] = None, *args: Any, **params: Any) -> SglGen:
    """Generate an integer (a regex constraint on the runtime)."""
    return gen(name, **_positional(GEN_INT_ORDER, args, params, "gen_int"), dtype=int)


def gen_string(name: Optional[str] = None, *args: Any, **params: Any) -> SglGen:
    """Generate a double-quoted string (a regex constraint on the runtime)."""
    return gen(name, **_positional(GEN_INT_ORDER, args, params, "gen_string"), dtype=str)


def _signature(order: tuple) -> inspect.Signature:
    """gen's signature as SGLang spells it: `name` then every parameter of `order`, all None."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature([inspect.Parameter(n, kind, default=None) for n in ("name", *order)])


gen.__signature__ = _signature(GEN_ORDER)  # type: ignore[attr-defined]
gen_int.__signature__ = _signature(GEN_INT_ORDER)  # type: ignore[attr-defined]
gen_string.__signature__ = _signature(GEN_INT_ORDER)  # type: ignore[attr-defined]


def select(
    name: Optional[str] = None,
    choices: Optional[list] = None,
    temperature: float = 0.0,
    choices_method: ChoicesSamplingMethod = token_length_normalized,
) -> SglSelect:
    """Pick one of `choices` by scoring each with the model's prompt logprobs."""
    if not choices or not all(isinstance(c, str) for c in choices):
        raise ValueError("select needs a non-empty list of strings as choices")
    if not isinstance(choices_method, ChoicesSamplingMethod):
        raise TypeError(f"choices_method must be a ChoicesSamplingMethod, got {choices_method!r}")
    return SglSelect(name, list(choices), temperature, choices_method)


def _role(role: str, expr: Any = None) -> SglExprList:
    body = [] if expr is None else [to_expr(expr)]
    return SglExprList([SglRoleBegin(role), *body, SglRoleEnd(role)])


def system(expr: Any = None) -> SglExprList:
    return _role("system", expr)


def user(expr: Any = None) -> SglExprList:
    return _role("user", expr)


def assistant(expr: Any = None) -> SglExprList:
    return _role("assistant", expr)


def system_begin() -> SglRoleBegin:
    return SglRoleBegin("system")


def system_end() -> SglRoleEnd:
    return SglRoleEnd("system")


def user_begin() -> SglRoleBegin:
    return SglRoleBegin("user")


def user_end() -> SglRoleEnd:
    return SglRoleEnd("user")


def assistant_begin() -> SglRoleBegin:
    return SglRoleBegin("assistant")


def assistant_end() -> SglRoleEnd:
    return SglRoleEnd("assistant")


def _not_supported(name: str, why: str):
    raise NotImplementedError(f"sgl.{name} is not supported by this runtime ({why})")


def image(expr: Any):
    """SGLang's image input: this runtime serves text-only models, so it raises NotImplementedError."""
    _not_supported("image", "it serves text-only models")


def video(path: str, num_frames: int):
    """SGLang's video input: this runtime serves text-only models, so it raises NotImplementedError."""
    _not_supported("video", "it serves text-only models")


def flush_cache(backend: Optional[Any] = None) -> bool:
    """Empty the backend's prefix cache; False when there is no backend."""
    backend = resolve_backend(backend, required=False)
    if backend is None:
        return False
    backend.flush_cache()
    return True


def get_server_info(backend: Optional[Any] = None) -> Optional[dict]:
    backend = resolve_backend(backend, required=False)
    return None if backend is None else backend.get_server_info()


def Runtime(*args: Any, **kwargs: Any):
    """Launch an sgl_runtime server subprocess (see `sgl_lang.backend.runtime.Runtime`)."""
    from sgl_lang.backend.runtime import Runtime as _Runtime

    return _Runtime(*args, **kwargs)
