"""Per-request sampling parameters: one frozen dataclass that validates itself."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Optional, Union


class InvalidRequestError(ValueError):
    """A request the runtime refuses (answered with HTTP 400 by the server)."""


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
    stop_token_ids: tuple = ()
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    n: int = 1
    seed: Optional[int] = None
    # Constraints: at most one of these may be set.
    regex: Optional[str] = None
    json_schema: Optional[str] = None
    ebnf: Optional[str] = None
    choices: Optional[tuple] = None
    structural_tag: Optional[str] = None  # JSON: free text with trigger-activated constrained regions

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
        if any(not isinstance(s, str) or not s for s in self.stop):
            bad("stop", "must be a non-empty string or a list of non-empty strings")
        if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in self.stop_token_ids):
            bad("stop_token_ids", "must be a list of non-negative integers")
        constraints = [n for n in ("regex", "json_schema", "ebnf", "choices", "structural_tag") if getattr(self, n) is not None]
        if len(constraints) > 1:
            bad(constraints[1], f"only one constraint may be given, got {', '.join(constraints)}")
        if self.regex is not None and not isinstance(self.regex, str):
            bad("regex", "must be a string")
        if self.ebnf is not None and not isinstance(self.ebnf, str):
            bad("ebnf", "must be a string (lark grammar text or a shipped grammar's name)")
        if self.choices is not None and (not self.choices or any(not isinstance(c, str) for c in self.choices)):
            bad("choices", "must be a non-empty list of strings")

    @property
    def constraint(self) -> Optional[tuple[str, Any]]:
        """(kind, spec) for `sgl_runtime.constrained.compile_constraint`, or None."""
        if self.regex is not None:
            return ("regex", self.regex)
        if self.json_schema is not None:
            return ("json_schema", self.json_schema)
        if self.ebnf is not None:
            return ("grammar", self.ebnf)
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
        params = dict(params)
        if "grammar" in params:  # accepted alias of ebnf
            if params.get("ebnf") is not None:
                raise InvalidRequestError("sampling_params: give either grammar or ebnf, not both")
            params["ebnf"] = params.pop("grammar")
        if "max_tokens" in params and "max_new_tokens" not in params:  # OpenAI spelling
            params["max_new_tokens"] = params.pop("max_tokens")
        known = {f.name for f in dataclasses.fields(SamplingParams)}
        unknown = sorted(set(params) - known)
        if unknown:
            raise InvalidRequestError(f"sampling_params: unknown parameter(s) {', '.join(unknown)}")
        params = {k: v for k, v in params.items() if v is not None or k in ("seed",)}
        if "stop" in params:
            params["stop"] = _as_tuple(params["stop"], "stop")
        if "stop_token_ids" in params:
            params["stop_token_ids"] = _as_tuple(params["stop_token_ids"], "stop_token_ids")
        if "choices" in params:
            params["choices"] = _as_tuple(params["choices"], "choices")
        if "json_schema" in params and not isinstance(params["json_schema"], str):
            if not isinstance(params["json_schema"], (dict, bool)):
                raise InvalidRequestError("sampling_params.json_schema must be an object, a boolean or a JSON string")
            params["json_schema"] = json.dumps(params["json_schema"])
        if "structural_tag" in params and not isinstance(params["structural_tag"], str):
            if not isinstance(params["structural_tag"], dict):
                raise InvalidRequestError("sampling_params.structural_tag must be an object or a JSON string")
            params["structural_tag"] = json.dumps(params["structural_tag"])
        for name in ("max_new_tokens", "min_new_tokens", "top_k", "n"):
            if isinstance(params.get(name), float) and float(params[name]).is_integer():
                params[name] = int(params[name])
        return SamplingParams(**params)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


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
