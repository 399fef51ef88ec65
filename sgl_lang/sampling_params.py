"""The one definition of every `gen` parameter: names, aliases, validation and the wire format.

`gen`, `gen_int`, `gen_string`, `ProgramFunction.run` and `run_batch` all take these fields as
keyword arguments and hand them to `SglSamplingParams.from_kwargs`; nothing re-lists them.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

# Regexes that `dtype=` maps to (served by the runtime's constrained decoding).
REGEX_INT = r"[-+]?[0-9]{1,18}"
REGEX_FLOAT = r"[-+]?[0-9]{1,15}(\.[0-9]{1,15})?"
REGEX_BOOL = r"(True|False)"
REGEX_STR = r"\"[^\"\\\n]*\""

_DTYPE_REGEX = {"int": REGEX_INT, "float": REGEX_FLOAT, "bool": REGEX_BOOL, "str": REGEX_STR}

SAMPLING = "sampling"  # goes into the request's sampling_params
REQUEST = "request"  # goes at the request's top level
LOCAL = "local"  # handled by the frontend itself


def _param(dest: str, types: tuple, help: str, wire: Optional[str] = None, alias: Optional[str] = None):
    """A field carrying where it goes on the wire, its accepted types and its user-facing alias."""
    return field(default=None, metadata={"dest": dest, "types": types, "help": help, "wire": wire, "alias": alias})


_NUM = (int, float)


@dataclass(frozen=True)
class SglSamplingParams:
    """Sampling parameters of one `gen`; None means "use the program's (or the server's) default"."""

    max_new_tokens: Optional[int] = _param(SAMPLING, (int,), "most tokens to generate", alias="max_tokens")
    min_new_tokens: Optional[int] = _param(SAMPLING, (int,), "fewest tokens before EOS/stop", alias="min_tokens")
    n: Optional[int] = _param(
        SAMPLING,
        (int,),
        "number of samples: n > 1 makes the variable a list of n texts (the first continues the program)",
    )
    stop: Optional[Any] = _param(SAMPLING, (str, list, tuple), "stop string or list of stop strings")
    stop_token_ids: Optional[Any] = _param(SAMPLING, (list, tuple), "token ids that stop generation")
    stop_regex: Optional[Any] = _param(SAMPLING, (str, list, tuple), "regex or list of regexes that stop generation")
    temperature: Optional[float] = _param(SAMPLING, _NUM, "sampling temperature (0 = greedy)")
    top_p: Optional[float] = _param(SAMPLING, _NUM, "nucleus sampling mass")
    top_k: Optional[int] = _param(SAMPLING, (int,), "top-k sampling (-1 = off)")
    min_p: Optional[float] = _param(SAMPLING, _NUM, "min-p sampling")
    frequency_penalty: Optional[float] = _param(SAMPLING, _NUM, "frequency penalty")
    presence_penalty: Optional[float] = _param(SAMPLING, _NUM, "presence penalty")
    ignore_eos: Optional[bool] = _param(SAMPLING, (bool,), "keep generating past EOS")
    seed: Optional[int] = _param(SAMPLING, (int,), "per-request sampling seed")
    return_logprob: Optional[bool] = _param(REQUEST, (bool,), "return token logprobs in meta info")
    logprob_start_len: Optional[int] = _param(REQUEST, (int,), "first prompt position to return logprobs for")
    top_logprobs_num: Optional[int] = _param(REQUEST, (int,), "top-k alternatives per position")
    return_text_in_logprobs: Optional[bool] = _param(REQUEST, (bool,), "include token text in logprobs")
    dtype: Optional[Any] = _param(LOCAL, (type, str), "int/float/bool/str: constrain the output to that type")
    regex: Optional[str] = _param(SAMPLING, (str,), "regular expression the output must match")
    json_schema: Optional[Any] = _param(SAMPLING, (str, dict, bool), "JSON schema the output must match")
    grammar: Optional[str] = _param(
        SAMPLING, (str,), "GBNF or lark grammar text, or a shipped grammar name", wire="ebnf"
    )
    grammar_syntax: Optional[str] = _param(
        SAMPLING, (str,), "how to read grammar: 'gbnf' or 'lark' (default: detected)"
    )
    json_schema_options: Optional[dict] = _param(
        SAMPLING,
        (dict,),
        "json_schema serialisation: whitespace ('compact'/'any'), indent, lenient, key_order "
        "('properties'/'any'), integral_floats",
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            types = f.metadata["types"]
            if isinstance(value, bool) and bool not in types:
                raise TypeError(f"{f.name} must be {_type_names(types)}, got {value!r}")
            if not isinstance(value, types):
                raise TypeError(f"{f.name} must be {_type_names(types)}, got {type(value).__name__}")
        self._check_constraints()

    def _check_constraints(self) -> None:
        given = [n for n in ("dtype", "regex", "json_schema", "grammar") if getattr(self, n) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of dtype/regex/json_schema/grammar, got {', '.join(given)}")
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as e:
                raise ValueError(f"regex {self.regex!r} does not compile: {e}") from e
        if isinstance(self.json_schema, str):
            try:
                json.loads(self.json_schema)
            except json.JSONDecodeError as e:
                raise ValueError(f"json_schema is not valid JSON: {e}") from e
        if self.grammar_syntax is not None and self.grammar_syntax not in ("gbnf", "lark"):
            raise ValueError(f"grammar_syntax must be 'gbnf' or 'lark', got {self.grammar_syntax!r}")
        if self.grammar_syntax is not None and self.grammar is None:
            raise ValueError("grammar_syntax is only meaningful with grammar=")
        if self.json_schema_options is not None and self.json_schema is None:
            raise ValueError("json_schema_options given without json_schema")
        if self.dtype is not None and _dtype_name(self.dtype) not in _DTYPE_REGEX:
            raise ValueError(f"dtype must be one of int, float, bool, str, got {self.dtype!r}")

    # Construction
    @classmethod
    def field_names(cls) -> set[str]:
        """Every accepted keyword: field names plus their aliases (max_tokens, min_tokens)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return names | {f.metadata["alias"] for f in dataclasses.fields(cls) if f.metadata["alias"]}

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> "SglSamplingParams":
        """Build from user keywords (aliases accepted); an unknown keyword raises TypeError."""
        aliases = {f.metadata["alias"]: f.name for f in dataclasses.fields(cls) if f.metadata["alias"]}
        values: dict[str, Any] = {}
        for key, value in kwargs.items():
            name = aliases.get(key, key)
            if name not in cls.__dataclass_fields__:
                known = ", ".join(sorted(cls.field_names()))
                raise TypeError(f"unknown sampling parameter {key!r}; known: {known}")
            if name in values and value is not None and values[name] is not None:
                raise TypeError(f"sampling parameter {name} given twice (once as {key})")
            if value is not None or name not in values:
                values[name] = value
        return cls(**values)

    def override(self, other: "SglSamplingParams") -> "SglSamplingParams":
        """These values, with every field `other` sets taking precedence."""
        changes = {
            f.name: getattr(other, f.name) for f in dataclasses.fields(other) if getattr(other, f.name) is not None
        }
        return dataclasses.replace(self, **changes)

    def replace(self, **changes: Any) -> "SglSamplingParams":
        return dataclasses.replace(self, **changes)

    # Wire format
    @property
    def effective_regex(self) -> Optional[str]:
        """The regex constraint, with `dtype` mapped to its regex."""
        if self.dtype is not None:
            return _DTYPE_REGEX[_dtype_name(self.dtype)]
        return self.regex

    def to_request(self) -> tuple[dict, dict]:
        """(sampling_params, top-level request fields) for the runtime's /generate, Nones dropped."""
        sampling: dict[str, Any] = {}
        request: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or f.metadata["dest"] == LOCAL:
                continue
            target = sampling if f.metadata["dest"] == SAMPLING else request
            target[f.metadata["wire"] or f.name] = list(value) if isinstance(value, tuple) else value
        if self.dtype is not None:
            sampling["regex"] = self.effective_regex
        if isinstance(sampling.get("json_schema"), (dict, bool)):
            sampling["json_schema"] = json.dumps(sampling["json_schema"])
        return sampling, request


# The program-level defaults `run()` starts from (SGLang's defaults).
DEFAULT_SAMPLING = SglSamplingParams(max_new_tokens=128, temperature=1.0)


def _dtype_name(dtype: Any) -> str:
    return dtype.__name__ if isinstance(dtype, type) else str(dtype)


def _type_names(types: tuple) -> str:
    return " or ".join(t.__name__ for t in types)


def split_sampling_kwargs(kwargs: dict) -> tuple[dict, dict]:
    """Split keywords into (sampling parameters, everything else)."""
    names = SglSamplingParams.field_names()
    sampling = {k: v for k, v in kwargs.items() if k in names}
    return sampling, {k: v for k, v in kwargs.items() if k not in names}
