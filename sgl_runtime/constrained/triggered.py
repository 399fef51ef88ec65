"""Trigger-activated constraints ("structural tags"): free text until a marker, then a constrained
region (literal wrappers, JSON Schemas, regexes), then free again, composed into one regular language.

A spec is a tree of nodes (JSON):

    {"text": "<tool_call>"}                       the literal string
    {"json_schema": {...}}                        compact JSON valid for the schema ("label": what
                                                  to call it in an error, e.g. a tool's name)
    {"regex": "\\n{0,2}"}                          Python `re` syntax
    {"free_text": {"excluding": ["<tool_call>"]}} any text that contains none of these strings
    {"sequence": [node, ...]}   {"any_of": [node, ...]}   {"optional": node}
    {"repeat": node, "min": 0, "max": null, "separator": node}

wrapped as {"type": "triggered", "root": node}. SGLang's structural tag
({"type": "structural_tag", "structures": [{"begin", "schema", "end"}], "triggers": [...]}) is
accepted too and translated. Because free text excludes the trigger, the first trigger the model
writes switches the automaton into the constrained region; tokens that straddle the boundary are
masked exactly, jump-forward forces the wrapper text, and the token budget closes an open region
in time. Added tokens spelling a literal of the spec (`<tool_call>`, `</think>`) may be sampled.
"""

from __future__ import annotations

import json
import weakref
from typing import Any

from sgl_runtime.constrained.automata import ANY_CHAR, EPSILON, Dfa, char_dfa, literal, work_budget
from sgl_runtime.constrained.automata_ops import concat, difference, optional, repeat, union
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.vocabulary import Vocabulary

MAX_WORK_STATES = 400_000
_NODE_KINDS = ("text", "json_schema", "regex", "free_text", "sequence", "any_of", "optional", "repeat")
_augmented: "weakref.WeakKeyDictionary[Vocabulary, dict]" = weakref.WeakKeyDictionary()


def parse_spec(spec: Any) -> dict:
    """The spec as a node tree ({"type": "triggered", "root": ...}); ConstraintError if malformed."""
    if isinstance(spec, (str, bytes)):
        try:
            spec = json.loads(spec)
        except ValueError as exc:
            raise ConstraintError(f"structural_tag is not valid JSON: {exc}") from None
    if not isinstance(spec, dict):
        raise ConstraintError("structural_tag must be a JSON object")
    if spec.get("type") == "structural_tag" or "structures" in spec:
        return {"type": "triggered", "root": from_sglang_structural_tag(spec)}
    if "root" not in spec:
        raise ConstraintError("structural_tag needs either 'root' (a node tree) or 'structures' and 'triggers'")
    return {"type": "triggered", "root": spec["root"]}


def from_sglang_structural_tag(spec: dict) -> dict:
    """SGLang's legacy structural tag as a node tree: free text with the triggers excluded, where a
    trigger starts one of the structures (begin + schema + end)."""
    structures, triggers = spec.get("structures"), spec.get("triggers")
    if not isinstance(structures, list) or not structures or not isinstance(triggers, list) or not triggers:
        raise ConstraintError("structural_tag needs a non-empty 'structures' list and a non-empty 'triggers' list")
    calls = []
    for i, s in enumerate(structures):
        if not isinstance(s, dict) or not isinstance(s.get("begin"), str) or not isinstance(s.get("end"), str):
            raise ConstraintError(f"structural_tag.structures[{i}] needs string 'begin' and 'end'")
        if not any(s["begin"].startswith(t) for t in triggers):
            raise ConstraintError(f"structural_tag.structures[{i}].begin does not start with any trigger")
        calls.append({"sequence": [{"text": s["begin"]}, {"json_schema": s.get("schema", True)}, {"text": s["end"]}]})
    free = {"free_text": {"excluding": list(triggers)}}
    call = {"any_of": calls}
    if spec.get("at_least_one"):
        body: dict = {"repeat": call, "min": 1, "max": 1 if spec.get("stop_after_first") else None}
        return body
    if spec.get("stop_after_first"):
        return {"sequence": [free, {"optional": {"sequence": [call, free]}}]}
    return {"sequence": [{"repeat": {"sequence": [free, call]}, "min": 0, "max": None}, free]}


def node_to_dfa(node: Any, path: str = "root") -> Dfa:
    """The character Dfa of a node tree (ConstraintError naming the bad node)."""
    with work_budget(MAX_WORK_STATES):
        return _dfa(node, path)


def marker_strings(node: Any) -> set[str]:
    """Every literal and excluded string of the tree (the texts added tokens may spell)."""
    found: set[str] = set()
    if isinstance(node, dict):
        if isinstance(node.get("text"), str):
            found.add(node["text"])
        free = node.get("free_text")
        if isinstance(free, dict):
            found.update(s for s in free.get("excluding", []) if isinstance(s, str))
        for key in ("sequence", "any_of"):
            for child in node.get(key) or []:
                found |= marker_strings(child)
        for key in ("optional", "repeat", "separator"):
            if key in node:
                found |= marker_strings(node[key])
    return found


def with_marker_tokens(vocab: Vocabulary, markers: set[str]) -> Vocabulary:
    """`vocab` plus the added tokens whose text is one of `markers` (or sits inside one), so a
    model may write `<tool_call>` as its single token; the base vocabulary is left as is."""
    tokenizer = vocab.tokenizer
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    extra = {
        i: t.content.encode("utf-8")
        for i, t in decoder.items()
        if i < vocab.size
        and i not in vocab.eos_token_ids
        and vocab.token_bytes[i] is None
        and t.content
        and any(t.content in m for m in markers)
    }
    if not extra:
        return vocab
    key = tuple(sorted(extra))
    per_vocab = _augmented.setdefault(vocab, {})
    if key not in per_vocab:
        token_bytes = list(vocab.token_bytes)
        for i, data in extra.items():
            token_bytes[i] = data
        per_vocab[key] = Vocabulary(token_bytes, vocab.eos_token_ids, tokenizer=tokenizer, kind=vocab.kind)
    return per_vocab[key]


# ---- private ---------------------------------------------------------------------------------


def _dfa(node: Any, path: str) -> Dfa:
    if not isinstance(node, dict):
        raise ConstraintError(f"structural_tag {path}: a node must be an object, got {type(node).__name__}")
    kinds = [k for k in _NODE_KINDS if k in node]
    if len(kinds) != 1:
        raise ConstraintError(f"structural_tag {path}: a node needs exactly one of {', '.join(_NODE_KINDS)}")
    kind = kinds[0]
    value = node[kind]
    if kind == "text":
        if not isinstance(value, str):
            raise ConstraintError(f"structural_tag {path}.text must be a string")
        return literal(value)
    if kind == "json_schema":
        return _schema(value, node.get("label") or f"structural_tag {path}.json_schema")
    if kind == "regex":
        return _regex(value, path)
    if kind == "free_text":
        return _free_text(value, path)
    if kind == "optional":
        return optional(_dfa(value, f"{path}.optional"))
    if kind == "repeat":
        return _repeat(node, path)
    if not isinstance(value, list) or not value:
        raise ConstraintError(f"structural_tag {path}.{kind} must be a non-empty list of nodes")
    parts = [_dfa(child, f"{path}.{kind}[{i}]") for i, child in enumerate(value)]
    return concat(*parts) if kind == "sequence" else union(*parts)


def _schema(schema: Any, where: str) -> Dfa:
    """`where` names the schema in errors: its path, or the node's "label" (e.g. the tool it is)."""
    from sgl_runtime.constrained.json_schema.compiler import schema_to_dfa

    try:
        return schema_to_dfa(schema)
    except ConstraintError as exc:
        raise ConstraintError(f"{where}: {exc}") from None


def _regex(pattern: Any, path: str) -> Dfa:
    import interegular

    from sgl_runtime.constrained.automata import from_interegular

    if not isinstance(pattern, str):
        raise ConstraintError(f"structural_tag {path}.regex must be a string")
    try:
        return from_interegular(interegular.parse_pattern(pattern).to_fsm())
    except Exception as exc:  # noqa: BLE001 - interegular raises several types for bad patterns
        raise ConstraintError(f"structural_tag {path}.regex {pattern!r}: {exc or type(exc).__name__}") from None


def _free_text(value: Any, path: str) -> Dfa:
    excluding = value.get("excluding", []) if isinstance(value, dict) else None
    if not isinstance(excluding, list) or any(not isinstance(s, str) or not s for s in excluding):
        raise ConstraintError(f"structural_tag {path}.free_text.excluding must be a list of non-empty strings")
    anything = repeat(char_dfa(ANY_CHAR), 0, None)
    if not excluding:
        return anything
    containing = concat(anything, union(*(literal(s) for s in excluding)), anything)
    return difference(anything, containing)


def _repeat(node: dict, path: str) -> Dfa:
    lo, hi = node.get("min", 0), node.get("max")
    if (
        isinstance(lo, bool)
        or not isinstance(lo, int)
        or lo < 0
        or (hi is not None and (isinstance(hi, bool) or not isinstance(hi, int) or hi < lo))
    ):
        raise ConstraintError(f"structural_tag {path}.repeat: need 0 <= min <= max (max null = unbounded)")
    sep = _dfa(node["separator"], f"{path}.separator") if "separator" in node else None
    return repeat(_dfa(node["repeat"], f"{path}.repeat"), lo, hi, sep) if hi != 0 or lo else EPSILON
