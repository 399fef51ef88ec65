"""How a `json_schema` constraint serialises and how strict it is: one options object, named the
same in `/generate` (`sampling_params.json_schema_options`), the OpenAI API (`json_schema_options`
beside `response_format`, or inside it) and the frontend (`gen(json_schema_options=...)`).

- `whitespace`: "compact" (default: no blanks, as `json.dumps(separators=(",", ":"))`) or
  "any" (up to ANY_WHITESPACE blanks around each punctuation mark, bounded so a model cannot
  loop on them);
- `indent`: N >= 0 gives the `json.dumps(indent=N)` shape: a newline and a multiple of N spaces
  (up to MAX_INDENT_LEVELS levels) after `{`, `[` and `,` and before `}` and `]`, and `": "`
  between a key and its value (the depth of each line is not enforced); excludes "any";
- `lenient`: ignore unsupported keywords instead of refusing the schema (the output may then
  break them);
- `key_order`: "properties" (default: declared keys in the schema's order) or "any";
- `integral_floats`: also allow "81.0" for integral values (default: digits only).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

ANY_WHITESPACE = 4
MAX_INDENT_LEVELS = 8
_WHITESPACE = ("compact", "any")
_KEY_ORDERS = ("properties", "any")


@dataclass(frozen=True)
class JsonSchemaOptions:
    whitespace: str = "compact"
    indent: Optional[int] = None
    lenient: bool = False
    key_order: str = "properties"
    integral_floats: bool = False

    def __post_init__(self) -> None:
        if self.whitespace not in _WHITESPACE:
            raise ValueError(f"whitespace must be one of {', '.join(_WHITESPACE)}, got {self.whitespace!r}")
        if self.indent is not None:
            if isinstance(self.indent, bool) or not isinstance(self.indent, int) or not 0 <= self.indent <= 16:
                raise ValueError(f"indent must be an integer in 0..16, got {self.indent!r}")
            if self.whitespace == "any":
                raise ValueError("give either indent or whitespace='any', not both")
        for name in ("lenient", "integral_floats"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a boolean, got {getattr(self, name)!r}")
        if self.key_order not in _KEY_ORDERS:
            raise ValueError(f"key_order must be one of {', '.join(_KEY_ORDERS)}, got {self.key_order!r}")

    @staticmethod
    def from_dict(options: Any) -> "JsonSchemaOptions":
        """From a request's JSON object; unknown keys and bad values raise ValueError."""
        if isinstance(options, JsonSchemaOptions):
            return options
        if not isinstance(options, dict):
            raise ValueError(f"must be an object, got {type(options).__name__}")
        known = {f.name for f in dataclasses.fields(JsonSchemaOptions)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return JsonSchemaOptions(**options)

    def compile_options(self) -> dict[str, Any]:
        """Keyword arguments for `compile_constraint("json_schema", ...)` (only non-defaults)."""
        out: dict[str, Any] = {}
        if self.indent is not None:
            out["indent"] = self.indent
        elif self.whitespace == "any":
            out["whitespace"] = ANY_WHITESPACE
        if self.lenient:
            out["lenient"] = True
        if self.key_order != "properties":
            out["key_order"] = self.key_order
        if self.integral_floats:
            out["integral_floats"] = True
        return out


@dataclass(frozen=True)
class JsonSchemaSpec:
    """A json_schema constraint's spec when options are given: the schema text and its options."""

    schema: str
    options: JsonSchemaOptions
