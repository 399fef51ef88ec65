"""anyOf / oneOf over several object alternatives in the grammar form: one rule per alternative.

`object_union(b, part, branches)` gives each alternative its own object rules (grammar_rules.py)
and a rule choosing between them. The grammar is exact when the parser can follow every
alternative at once and always knows which one the text is in by the next token, and the lexer
never has to choose between two terminals of one position; GrammarBuilder.build checks both on
the whole grammar (lark's strict LALR(1) table, grammar/prefix_free.py) and refuses it
otherwise. Alternatives told apart by their keys (`{"and": ...}` / `{"or": ...}`, as in
condition trees and CloudFormation's one-of-two-keys objects) pass; alternatives that open with
the same key and a value of the same kind do not.

For oneOf the alternatives must also exclude each other, or an object that matches two would be
accepted: each pair needs a key that one requires and the other does not allow
(additionalProperties false), or a key both require with disjoint string const/enum values.
"""

from __future__ import annotations

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.shapes import OBJECT, literals
from sgl_runtime.constrained.json_schema.strings import pattern_content

# what may stand beside a `$ref` that is followed (the branch admits objects, so its `type` does)
_ANNOTATIONS = ("$ref", "type", "$comment", "title", "description", "markdownDescription", "examples", "default")


def object_union(b, part: str, branches: list) -> str:
    """The rule for the objects of `part` (anyOf or oneOf) over `branches` (ConstraintError where
    oneOf's alternatives may overlap)."""
    if part == "oneOf" and not exclusive(b, branches):
        raise ConstraintError(
            f"oneOf: {len(branches)} alternatives allow objects and the grammar form cannot show that "
            "they exclude each other (it needs, per pair, a key one requires and the other forbids, "
            "or a required key with different const/enum strings)"
        )
    symbols = []
    for target in (_resolved(b, branch) for branch in branches):
        symbols.append(b.container(target, OBJECT) if isinstance(target, dict) else b.node(target, frozenset({OBJECT})))
    return choice(b, part, symbols)


def choice(b, part: str, symbols: list):
    """The rule choosing between the distinct `symbols` (None: no object), checked as `part`'s
    alternatives by GrammarBuilder.build when there are several."""
    distinct = list(dict.fromkeys(s for s in symbols if s is not None))
    if len(distinct) <= 1:
        return distinct[0] if distinct else None
    b.checks.append(part)
    return b.rule([[s] for s in distinct])


def exclusive(b, branches: list) -> bool:
    """Whether no object satisfies two of `branches`, by the keys they require."""
    targets = [_resolved(b, branch) for branch in branches]
    return all(_excludes(b, x, y) or _excludes(b, y, x) for i, x in enumerate(targets) for y in targets[i + 1 :])


def _resolved(b, schema):
    """`schema` with `$ref`s that are all it says followed."""
    for _ in range(64):
        if not isinstance(schema, dict) or "$ref" not in schema or any(k not in _ANNOTATIONS for k in schema):
            return schema
        schema = b.shapes.target(schema)
    raise ConstraintError("$ref: a chain of more than 64 references")


def _excludes(b, x, y) -> bool:
    """Whether no object satisfies both `x` and `y` because of a key `x` requires."""
    if not isinstance(x, dict) or not isinstance(y, dict):
        return False
    required = x.get("required", [])
    for key in required if isinstance(required, list) else []:
        if not isinstance(key, str):
            continue
        if not _allows(y, key):
            return True
        if key in (y.get("required") or []) and _disjoint_strings(b, _property(x, key), _property(y, key)):
            return True
    return False


def _allows(schema: dict, key: str) -> bool:
    """Whether an object satisfying `schema` may have `key` (True when unsure)."""
    props = schema.get("properties", {})
    if isinstance(props, dict) and key in props:
        return props[key] is not False
    patterns = schema.get("patternProperties", {})
    if not isinstance(patterns, dict) or any(pattern_content(p).accepts(key) for p in patterns):
        return True
    return schema.get("additionalProperties", True) is not False


def _property(schema: dict, key: str):
    props = schema.get("properties", {})
    return props.get(key) if isinstance(props, dict) else None


def _disjoint_strings(b, x, y) -> bool:
    """Whether `x` and `y` each allow only listed strings (const/enum) and share none."""
    x, y = _resolved(b, x), _resolved(b, y)
    if not isinstance(x, dict) or not isinstance(y, dict):
        return False
    xs, ys = literals(x), literals(y)
    if xs is None or ys is None or not all(isinstance(v, str) for v in (*xs, *ys)):
        return False
    return not set(xs) & set(ys)
