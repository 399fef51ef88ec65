"""Per-request sampling parameters: one frozen dataclass that validates itself."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, Optional, Union

from sgl_runtime.json_schema_options import JsonSchemaOptions, JsonSchemaSpec
from sgl_runtime.sglang_fields import SAMPLING_PARAMS, UnsupportedFieldError, strip_sglang_fields

SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1  # a signed 64-bit seed (OpenAI's range); seed + n stays < 2**64
BOOL_FIELDS = ("ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim")


class InvalidRequestError(ValueError):
    """A request the runtime refuses (answered with HTTP 400 by the server)."""


ALIASES = {"grammar": "ebnf", "max_tokens": "max_new_tokens", "sampling_seed": "seed"}  # other spellings accepted


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 128
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    stop: tuple = ()
    stop_regex: tuple = ()  # regexes searched on the output's tail; finish_reason.matched is the regex
    stop_token_ids: tuple = ()
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    n: int = 1
    seed: Optional[int] = None  # SGLang spells it sampling_seed
    logit_bias: tuple = ()  # (token_id, bias) pairs added to the logits before sampling
    # Constraints: at most one of these may be set.
    regex: Optional[str] = None
    json_schema: Optional[str] = None
    ebnf: Optional[str] = None
    grammar_syntax: Optional[str] = None  # how to read ebnf: "gbnf" | "lark" (None: detected)
    choices: Optional[tuple] = None
    structural_tag: Optional[str] = None  # JSON: free text with trigger-activated constrained regions
    json_schema_options: Optional[JsonSchemaOptions] = None  # how json_schema serialises (json_schema_options.py)

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> None:
            raise InvalidRequestError(f"sampling_params.{name}: {why}")

        _check_int(self, "max_new_tokens", bad)
        _check_int(self, "min_new_tokens", bad)
        _check_int(self, "top_k", bad)
        _check_int(self, "n", bad)
        for name in ("temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                bad(name, f"must be a number, got {value!r}")
            if not math.isfinite(value):
                bad(name, f"must be a finite number, got {value!r}")
        for name in BOOL_FIELDS:
            if not isinstance(getattr(self, name), bool):
                bad(name, f"must be a boolean (true or false), got {getattr(self, name)!r}")
        if self.max_new_tokens < 0:
            bad("max_new_tokens", f"must be >= 0, got {self.max_new_tokens}")
        if self.min_new_tokens < 0:
            bad("min_new_tokens", f"must be >= 0, got {self.min_new_tokens}")
        if self.min_new_tokens > self.max_new_tokens:
            bad("min_new_tokens", f"must be <= max_new_tokens ({self.max_new_tokens}), got {self.min_new_tokens}")
        if self.temperature < 0:
            bad("temperature", f"must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            bad("top_p", f"must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            bad("top_k", f"must be -1 (disabled) or >= 1, got {self.top_k}")
        if not 0.0 <= self.min_p <= 1.0:
            bad("min_p", f"must be in [0, 1], got {self.min_p}")
        if not -2.0 <= self.frequency_penalty <= 2.0:
            bad("frequency_penalty", f"must be in [-2, 2], got {self.frequency_penalty}")
        if not -2.0 <= self.presence_penalty <= 2.0:
            bad("presence_penalty", f"must be in [-2, 2], got {self.presence_penalty}")
        if not 0.0 < self.repetition_penalty <= 2.0:
            bad("repetition_penalty", f"must be in (0, 2], got {self.repetition_penalty}")
        if self.n < 1:
            bad("n", f"must be >= 1, got {self.n}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            bad("seed", f"must be an integer, got {self.seed!r}")
        if self.seed is not None and not SEED_MIN <= self.seed <= SEED_MAX:
            bad("seed", f"must be a 64-bit signed integer in [{SEED_MIN}, {SEED_MAX}], got {self.seed}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            bad("stop", "must be a non-empty string or a list of non-empty strings")
        for pattern in self.stop_regex:
            _check_regex(pattern, bad)
        if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in self.stop_token_ids):
            bad("stop_token_ids", "must be a list of non-negative integers")
        for token_id, bias in self.logit_bias:
            if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -100 <= bias <= 100:
                bad("logit_bias", f"token {token_id}: the bias must be a number in [-100, 100], got {bias!r}")
        constraints = [
            n for n in ("regex", "json_schema", "ebnf", "choices", "structural_tag") if getattr(self, n) is not None
        ]
        if len(constraints) > 1:
            bad(constraints[1], f"only one constraint may be given, got {', '.join(constraints)}")
        if self.regex is not None and not isinstance(self.regex, str):
            bad("regex", "must be a string")
        if self.ebnf is not None and not isinstance(self.ebnf, str):
            bad("ebnf", "must be a string (GBNF or lark grammar text, or a shipped grammar's name)")
        if self.grammar_syntax is not None:
            if self.grammar_syntax not in ("gbnf", "lark"):
                bad("grammar_syntax", f"must be 'gbnf' or 'lark', got {self.grammar_syntax!r}")
            if self.ebnf is None:
                bad("grammar_syntax", "is only meaningful with ebnf (a grammar)")
        if self.choices is not None and (not self.choices or any(not isinstance(c, str) for c in self.choices)):
            bad("choices", "must be a non-empty list of strings")
        if self.json_schema_options is not None:
            if not isinstance(self.json_schema_options, JsonSchemaOptions):
                bad("json_schema_options", f"must be an object, got {self.json_schema_options!r}")
            if self.json_schema is None:
                bad("json_schema_options", "given without a json_schema constraint")

    @property
    def constraint(self) -> Optional[tuple[str, Any]]:
        """(kind, spec) for `sgl_runtime.constrained.compile_constraint`, or None."""
        if self.regex is not None:
            return ("regex", self.regex)
        if self.json_schema is not None:
            options = self.json_schema_options
            if options is None or not options.compile_options():
                return ("json_schema", self.json_schema)
            return ("json_schema", JsonSchemaSpec(self.json_schema, options))
        if self.ebnf is not None:
            return (self.grammar_syntax or "grammar", self.ebnf)
        if self.choices is not None:
            return ("choices", self.choices)
        if self.structural_tag is not None:
            return ("structural_tag", self.structural_tag)
        return None

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    def replace(self, **changes: Any) -> "SamplingParams":
        return dataclasses.replace(self, **changes)

    @staticmethod
    def from_dict(params: Optional[dict]) -> "SamplingParams":
        """Build from a request's JSON dict; unknown keys and wrong types raise InvalidRequestError."""
        if params is None:
            return SamplingParams()
        if not isinstance(params, dict):
            raise InvalidRequestError(f"sampling_params must be an object, got {type(params).__name__}")
        params = _canonical_names(params)
        params = {k: v for k, v in params.items() if v is not None or k in ("seed",)}
        if "stop" in params:
            params["stop"] = _as_tuple(params["stop"], "stop")
        if "stop_regex" in params:
            params["stop_regex"] = _as_tuple(params["stop_regex"], "stop_regex")
        if "logit_bias" in params:
            params["logit_bias"] = _logit_bias_pairs(params["logit_bias"])
        if "stop_token_ids" in params:
            params["stop_token_ids"] = _as_tuple(params["stop_token_ids"], "stop_token_ids")
        if "choices" in params:
            if not isinstance(params["choices"], (list, tuple)):  # a lone string is not a set of choices
                raise InvalidRequestError(
                    f"sampling_params.choices: must be a non-empty list of strings, got {type(params['choices']).__name__}"
                )
            params["choices"] = tuple(params["choices"])
        if "json_schema" in params and not isinstance(params["json_schema"], str):
            if not isinstance(params["json_schema"], (dict, bool)):
                raise InvalidRequestError("sampling_params.json_schema must be an object, a boolean or a JSON string")
            params["json_schema"] = json.dumps(params["json_schema"])
        if "structural_tag" in params and not isinstance(params["structural_tag"], str):
            if not isinstance(params["structural_tag"], dict):
                raise InvalidRequestError("sampling_params.structural_tag must be an object or a JSON string")
            params["structural_tag"] = json.dumps(params["structural_tag"])
        if "json_schema_options" in params:
            try:
                params["json_schema_options"] = JsonSchemaOptions.from_dict(params["json_schema_options"])
            except (TypeError, ValueError) as exc:
                raise InvalidRequestError(f"sampling_params.json_schema_options: {exc}") from None
        for name in ("max_new_tokens", "min_new_tokens", "top_k", "n"):
            if isinstance(params.get(name), float) and float(params[name]).is_integer():
                params[name] = int(params[name])
        return SamplingParams(**params)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _canonical_names(params: dict) -> dict:
    """Aliases resolved to this runtime's names; SGLang fields that need nothing dropped;
    unsupported or unknown fields raise InvalidRequestError naming them."""
    known = {f.name for f in dataclasses.fields(SamplingParams)}
    try:
        params = strip_sglang_fields(params, SAMPLING_PARAMS, known | set(ALIASES), "sampling_params.")
    except UnsupportedFieldError as exc:
        raise InvalidRequestError(str(exc)) from exc
    for alias, name in ALIASES.items():
        if alias in params:
            value = params.pop(alias)
            if params.get(name) is not None and value is not None and params[name] != value:
                raise InvalidRequestError(f"sampling_params: give either {alias} or {name}, not both")
            if value is not None or name not in params:
                params[name] = value
    return params


def _logit_bias_pairs(value: Any) -> tuple:
    """{"token_id": bias} (string or integer keys, as OpenAI and SGLang send it) -> sorted pairs."""
    if not isinstance(value, dict):
        raise InvalidRequestError("sampling_params.logit_bias must be an object mapping token ids to biases")
    pairs = []
    for key, bias in value.items():
        try:
            token_id = int(key)
        except (TypeError, ValueError):
            raise InvalidRequestError(f"sampling_params.logit_bias: {key!r} is not a token id") from None
        if token_id < 0:
            raise InvalidRequestError(f"sampling_params.logit_bias: token id {token_id} is negative")
        pairs.append((token_id, bias))
    return tuple(sorted(pairs))


def _check_regex(pattern: Any, bad) -> None:
    import re

    if not isinstance(pattern, str) or not pattern:
        bad("stop_regex", "must be a non-empty string or a list of non-empty strings")
    try:
        re.compile(pattern)
    except re.error as exc:
        bad("stop_regex", f"{pattern!r} is not a valid regex: {exc}")


def _as_tuple(value: Union[str, int, list, tuple], name: str) -> tuple:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, (list, tuple)):
        return tuple(value)
    raise InvalidRequestError(f"sampling_params.{name}: must be a value or a list, got {type(value).__name__}")


def _check_int(params: SamplingParams, name: str, bad) -> None:
    value = getattr(params, name)
    if isinstance(value, bool) or not isinstance(value, int):
        bad(name, f"must be an integer, got {value!r}")
