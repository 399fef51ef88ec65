"""Public primitives of the language: they build IR nodes and check their arguments, nothing more.

Every sampling keyword of `gen`/`gen_int`/`gen_string` is defined once, in
`sgl_lang.sampling_params.SglSamplingParams` (max_tokens, min_tokens, stop, stop_token_ids,
temperature, top_p, top_k, min_p, frequency_penalty, presence_penalty, ignore_eos, seed,
return_logprob, logprob_start_len, top_logprobs_num, return_text_in_logprobs, dtype, regex,
json_schema, grammar); an unknown keyword or a regex that does not compile raises here.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from sgl_lang.choices import ChoicesSamplingMethod, token_length_normalized
from sgl_lang.program import SglFunction
from sgl_lang.global_config import resolve_backend
from sgl_lang.ir import SglExprList, SglGen, SglRoleBegin, SglRoleEnd, SglSelect, to_expr
from sgl_lang.sampling_params import SglSamplingParams


def function(func: Optional[Callable] = None, num_api_spec_tokens: Optional[int] = None):
    """Decorator: `@function` or `@function(num_api_spec_tokens=N)` turns `def prog(s, ...)` into a program."""
    if func is not None:
        return SglFunction(func, num_api_spec_tokens=num_api_spec_tokens)
    return lambda f: SglFunction(f, num_api_spec_tokens=num_api_spec_tokens)


def gen(name: Optional[str] = None, *, choices: Optional[list] = None,
        choices_method: Optional[ChoicesSamplingMethod] = None, **params: Any):
    """Generate text into variable `name`. With `choices=`, this is `select`."""
    sampling_params = SglSamplingParams.from_kwargs(**params)  # unknown keywords raise even with choices
    if choices is not None:  # other sampling parameters do not apply to scoring, as in SGLang
        temperature = sampling_params.temperature
        return select(name, choices, 0.0 if temperature is None else temperature,
                      choices_method or token_length_normalized)
    return SglGen(name, sampling_params)


def gen_int(name: Optional[str] = None, **params: Any) -> SglGen:
    """Generate an integer (a regex constraint on the runtime)."""
    return gen(name, **params, dtype=int)


def gen_string(name: Optional[str] = None, **params: Any) -> SglGen:
    """Generate a double-quoted string (a regex constraint on the runtime)."""
    return gen(name, **params, dtype=str)


def select(name: Optional[str] = None, choices: Optional[list] = None, temperature: float = 0.0,
           choices_method: ChoicesSamplingMethod = token_length_normalized) -> SglSelect:
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


def _unsupported(name: str):
    def primitive(*args: Any, **kwargs: Any):
        raise NotImplementedError(f"sgl.{name} is not supported by sgl_lang yet (text-only models)")

    primitive.__name__ = name
    return primitive


image = _unsupported("image")
video = _unsupported("video")


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
