"""A subschema seen on the values of one category only (objects, or arrays), for the grammar form.

On objects, the array and scalar keywords say nothing, and on arrays the object and scalar ones;
an `if` whose subschema the category alone decides is its `then` or its `else` there, and a `not`
of a subschema that admits nothing of the category holds. So `{"not": {"enum": ["a", "b"]}}` on
objects is any object, and CloudFormation's

    {"type": ["string", "array", "boolean"], "if": {"type": ["string", "boolean"]},
     "then": {"$ref": "#/definitions/Boolean"}, "items": {"$ref": "#/definitions/Boolean"}}

on arrays is `{"type": [...], "items": ...}`: a closed array the flat compiler builds as one automaton, where the
`if` alone (a complement, which brings free-form values in) sent the whole schema to the rules,
which cannot complement or intersect.

Nothing is narrowed in a document with `unevaluatedProperties`/`unevaluatedItems`, or that reaches a
metaschema: there the annotations of the members left out (an `anyOf` member that always holds, say)
could count.
"""

from __future__ import annotations

from sgl_runtime.constrained.json_schema.shapes import DYNAMIC, OBJECT, SILENT_ON, members

_CONDITIONAL = ("if", "then", "else")
_UNEVALUATED = object()  # the memo's key for "the document has unevaluated* keywords"


def narrowed(b, schema, c: str):
    """`schema` on values of category `c` (OBJECT or ARRAY): itself where nothing changes, False
    where no such value is valid, else a new schema kept by `b.shapes` with the same verdict on
    every value of `c`."""
    if not isinstance(schema, dict) or any(k in schema for k in DYNAMIC):
        return schema
    if c not in b.shapes.admits(schema):
        return False
    memo = b.shapes.narrowed
    if _UNEVALUATED not in memo:  # the compiler read the document's text once (metaschemas: not read, so kept out)
        memo[_UNEVALUATED] = not b.comp.widen_wildcards or bool(b.comp.refs.loaded)
    if memo[_UNEVALUATED]:
        return schema
    key = (id(schema), c)
    if key in memo:
        found = memo[key]
        return schema if found is None else found  # None: in progress (a cycle stays as written)
    memo[key] = None
    memo[key] = out = _narrowed(b, schema, c)
    return out


def _narrowed(b, schema: dict, c: str):
    out: dict = {}
    target_first: list = []  # the narrowed $ref target, the first allOf member
    extra: list = []  # subschemas that join as the last allOf members
    changed = False
    for keyword, value in schema.items():
        if keyword in SILENT_ON[c] or keyword in _CONDITIONAL:
            changed = changed or keyword in SILENT_ON[c]
            continue
        if keyword == "not":
            inner = narrowed(b, value, c)
            if inner is False:  # holds on every value of c
                changed = True
                continue
            if b.trivial(inner, c):
                return False
            out[keyword] = inner
        elif keyword in ("allOf", "anyOf", "oneOf"):
            subs = members(schema, keyword)
            narrow = [narrowed(b, s, c) for s in subs]
            if keyword == "allOf":
                if any(s is False for s in narrow):
                    return False
                narrow = [s for s in narrow if not b.trivial(s, c)]
            else:
                narrow = [s for s in narrow if s is not False]
                if not narrow:
                    return False
                if keyword == "anyOf" and any(b.trivial(s, c) for s in narrow):
                    narrow = []
            changed = changed or len(narrow) != len(subs) or any(x is not y for x, y in zip(narrow, subs))
            if narrow:
                out[keyword] = narrow
        elif keyword == "$ref":
            target = b.shapes.target(schema)
            inner = narrowed(b, target, c)
            if inner is False:
                return False
            if inner is target:
                out[keyword] = value
            else:
                changed = True
                target_first = [inner]  # where the compiler and serialize.py read a $ref's keys
        else:
            out[keyword] = value
    if "if" in schema:
        test = narrowed(b, schema["if"], c)
        which = "else" if test is False else "then" if b.trivial(test, c) else None
        inner = narrowed(b, schema.get(which, True), c) if which else None
        if which is None or (c == OBJECT and not b.trivial(inner, c)):
            out.update({k: schema[k] for k in _CONDITIONAL if k in schema})  # objects: keep the key order
        else:
            changed = True
            if inner is False:
                return False
            if not b.trivial(inner, c):
                extra.append(inner)
    else:
        changed = changed or any(k in schema for k in ("then", "else"))  # ignored without `if`
    if not changed:
        return schema
    if target_first or extra:
        out["allOf"] = [*target_first, *out.get("allOf", []), *extra]
    copy = b.shapes.keep(out)
    b.comp.refs.base_of[id(copy)] = b.comp.refs.base(schema)  # a $ref inside resolves where it was written
    return copy
