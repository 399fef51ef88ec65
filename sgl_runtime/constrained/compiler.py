"""Dispatches a constraint spec of a given kind to its compiler and wraps the result.

regex and choices compile here; json_schema goes to `json_schema.language.compile_schema` (a
character FSM, then the same byte DFA path, or the grammar form: a lark grammar whose leaves are
byte DFAs); structural_tag (free text with trigger-activated constrained
regions) goes to `triggered`; grammar goes to `grammar.compile_grammar`.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Iterable, Optional

from sgl_runtime.constrained.byte_dfa import DEFAULT_MAX_STATES, ByteDFA
from sgl_runtime.constrained.constraint import Constraint, DFAConstraint
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.vocabulary import Vocabulary
from sgl_runtime.json_schema_options import JsonSchemaSpec

# Kinds whose automaton does not depend on the tokenizer: compile_workers.py builds them.
DFA_KINDS = ("regex", "json_schema", "choices")
KINDS = (
    "regex",
    "json_schema",
    "grammar",
    "choices",
    "structural_tag",
    "gbnf",
    "lark",
)  # gbnf/lark: grammar, syntax forced
_SCHEMA_OPTIONS = {
    "whitespace",
    "lenient",
    "max_recursion_depth",
    "max_nesting_depth",
    "max_work_states",
    "integral_floats",
    "indent",
    "key_order",
}
_tokenizers_by_path: dict[str, Any] = {}
_path_lock = threading.Lock()


def compile_constraint(
    kind: str,
    spec: Any,
    tokenizer: Any,
    *,
    vocab_size: Optional[int] = None,
    eos_token_ids: Optional[Iterable[int]] = None,
    **options: Any,
) -> Constraint:
    """Compile `spec` into a Constraint over `tokenizer`'s vocabulary (`vocab_size` wide)."""
    if kind not in KINDS:
        raise ConstraintError(f"unknown constraint kind {kind!r}; expected one of {', '.join(KINDS)}")
    vocabulary = Vocabulary.from_tokenizer(resolve_tokenizer(tokenizer), vocab_size, eos_token_ids)
    if kind in ("grammar", "gbnf", "lark"):
        from sgl_runtime.constrained.grammar.compiler import compile_grammar

        if kind != "grammar":
            options["syntax"] = kind
        return compile_grammar(spec, vocabulary, **options)
    if kind == "structural_tag":
        max_states = options.pop("max_states", DEFAULT_MAX_STATES)
        _no_options(kind, options)
        return _structural_tag(spec, vocabulary, max_states)
    dfa, description = build_dfa(kind, spec, options)
    return wrap_built(dfa, vocabulary, description)


def wrap_built(built: Any, vocabulary: Vocabulary, description: str) -> Constraint:
    """The constraint over `vocabulary` of what `build_dfa` built: a ByteDFA, or the grammar form of
    a JSON Schema (a SchemaGrammar, whose lark tables are built here, in the caller's thread)."""
    if isinstance(built, ByteDFA):
        return DFAConstraint(built, vocabulary, description)
    return built.constraint(vocabulary)


def build_dfa(kind: str, spec: Any, options: dict) -> tuple[Any, str]:
    """(byte DFA, description) of a regular constraint (regex, choices, json_schema): the
    expensive, tokenizer-independent part of its compilation. A JSON Schema that needs the
    pushdown form gives a `SchemaGrammar` (grammar text and its leaves' byte DFAs, picklable)
    instead of the byte DFA."""
    options = dict(options)
    max_states = options.pop("max_states", DEFAULT_MAX_STATES)
    if kind == "regex":
        _no_options(kind, options)
        dfa, description = ByteDFA.from_regex(spec, max_states=max_states), f"regex:{spec}"
    elif kind == "choices":
        _no_options(kind, options)
        dfa, description = ByteDFA.from_strings(_check_choices(spec), max_states=max_states), f"choices:{spec}"
    elif kind == "json_schema":
        if isinstance(spec, JsonSchemaSpec):  # a request's json_schema with its json_schema_options
            options = {**spec.options.compile_options(), **options}
            spec = spec.schema
        built, description = _schema_dfa(spec, options, max_states), "json_schema"
        if not isinstance(built, ByteDFA):
            return built, description
        dfa = built
    else:
        raise ConstraintError(f"{kind} constraints have no DFA")
    if dfa.is_empty():
        raise ConstraintError(f"the {kind} constraint matches no string at all")
    return dfa, description


def resolve_tokenizer(tokenizer: Any) -> Any:
    """A tokenizer object as is; a path loads (once per path) the tokenizer stored there."""
    if not isinstance(tokenizer, (str, bytes)) and not hasattr(tokenizer, "__fspath__"):
        return tokenizer
    path = str(tokenizer)
    with _path_lock:
        if path not in _tokenizers_by_path:
            from sgl_runtime.tokenizer_utils import load_tokenizer

            try:
                _tokenizers_by_path[path] = load_tokenizer(path)
            except (OSError, ValueError) as exc:
                raise ConstraintError(f"cannot load a tokenizer from {path!r}: {exc}") from None
        return _tokenizers_by_path[path]


def _schema_dfa(spec: Any, options: dict, max_states: int) -> Any:
    unknown = set(options) - _SCHEMA_OPTIONS
    if unknown:
        raise ConstraintError(f"unknown json_schema option(s): {', '.join(sorted(unknown))}")
    if isinstance(spec, (str, bytes)):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise ConstraintError(f"json_schema is not valid JSON: {exc}") from None
    if not isinstance(spec, (dict, bool)):
        raise ConstraintError(f"json_schema must be an object or a boolean, got {type(spec).__name__}")
    from sgl_runtime.constrained.automata import Dfa, to_interegular
    from sgl_runtime.constrained.json_schema.language import compile_schema

    compiled = compile_schema(spec, **options)
    if not isinstance(compiled, Dfa):
        return compiled  # the grammar form
    return ByteDFA.from_fsm(to_interegular(compiled), max_states=max_states)


def _structural_tag(spec: Any, vocabulary: Vocabulary, max_states: int) -> DFAConstraint:
    from sgl_runtime.constrained.automata import to_interegular
    from sgl_runtime.constrained.triggered import marker_strings, node_to_dfa, parse_spec, with_marker_tokens

    root = parse_spec(spec)["root"]
    dfa = ByteDFA.from_fsm(to_interegular(node_to_dfa(root)), max_states=max_states)
    if dfa.is_empty():
        raise ConstraintError("the structural_tag constraint matches no string at all")
    return DFAConstraint(dfa, with_marker_tokens(vocabulary, marker_strings(root)), "structural_tag")


def _check_choices(spec: Any) -> list[str]:
    if isinstance(spec, str) or not isinstance(spec, (list, tuple)) or not spec:
        raise ConstraintError("choices must be a non-empty list of strings")
    bad = [c for c in spec if not isinstance(c, str)]
    if bad:
        raise ConstraintError(f"choices must be strings, got {bad[0]!r}")
    return list(spec)


def _no_options(kind: str, options: dict) -> None:
    if options:
        raise ConstraintError(f"unknown {kind} option(s): {', '.join(sorted(options))}")
