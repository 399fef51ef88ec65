"""anyOf / oneOf over several object alternatives in the grammar form: one rule per alternative.

`object_union(b, part, branches)` gives each alternative its own object rules (grammar_rules.py)
and a rule choosing between them. The grammar is exact when the lexer never has to choose
between two terminals of one position; GrammarBuilder.build checks it on the whole grammar
(grammar/prefix_free.py) and refuses it otherwise. Where the parser cannot tell by the next token
which alternative the text is in (they open with the same key and a value of the same kind, or
both allow `{}`), the grammar's LALR(1) conflicts are kept and each way is followed
(grammar/forking.py). Alternatives with free keys beside named keys of another fail the lexer
check.

For oneOf the alternatives must also exclude each other, or an object that matches two would be
accepted: each pair needs a key that one requires and the other does not allow (by its own
additionalProperties, patternProperties or propertyNames, or those of its `$ref`, every allOf
member or every anyOf/oneOf branch), a key one requires whose value there cannot be a value the
other allows that key (different const/enum strings, or an object against a string; the other's
`properties` entry, else its matching patternProperties or additionalProperties), or one alternative whose objects
have at least one key (minProperties, required) of a closed set the other allows none of.
"""

from __future__ import annotations

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.one_of import exclusive_alternatives
from sgl_runtime.constrained.json_schema.shapes import OBJECT, literals
from sgl_runtime.constrained.json_schema.strings import pattern_content

# what may stand beside a `$ref` that is followed (the branch admits objects, so its `type` does)
_LISTS_ONLY = ("enum", "const", "$comment", "title", "description", "markdownDescription")  # a `not` of a list
_ANNOTATIONS = ("$ref", "type", "$comment", "title", "description", "markdownDescription", "examples", "default")


def object_union(b, part: str, branches: list) -> str:
    """The rule for the objects of `part` (anyOf or oneOf) over `branches` (ConstraintError where
    oneOf's alternatives may overlap)."""
    if part == "oneOf" and not exclusive(b, branches):
        alternatives = exclusive_alternatives(b, [followed_refs(b, branch) for branch in branches])
        if alternatives is None:
            raise ConstraintError(
                f"oneOf: {len(branches)} alternatives allow objects and the grammar form cannot show that "
                "they exclude each other (it needs, per pair, a key one requires and the other forbids, "
                "or a required key with different const/enum strings)"
            )
        branches = alternatives
        if len(branches) <= 1:
            return b.node(branches[0], frozenset({OBJECT})) if branches else None
    symbols = []
    for target in (followed_refs(b, branch) for branch in branches):
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


def exclusive(b, branches: list, common: tuple = ()) -> bool:
    """Whether no object satisfies two of `branches` (each beside the schemas `common`, which every
    object satisfies too), by the keys they require or allow."""
    alternatives = []
    for branch in branches:
        conjunction = [*common, followed_refs(b, branch)]
        if all(s is not False for s in conjunction):  # (False: no object at all)
            alternatives.append([s for s in conjunction if isinstance(s, dict)])
    return all(
        _excludes(b, x, y) or _excludes(b, y, x) for i, x in enumerate(alternatives) for y in alternatives[i + 1 :]
    )


def followed_refs(b, schema):
    """`schema` with `$ref`s that are all it says followed."""
    for _ in range(64):
        if not isinstance(schema, dict) or "$ref" not in schema or any(k not in _ANNOTATIONS for k in schema):
            return schema
        schema = b.shapes.target(schema)
    raise ConstraintError("$ref: a chain of more than 64 references")


def _excludes(b, x: list, y: list) -> bool:
    """Whether no object satisfies both conjunctions `x` and `y` (lists of schemas) because of the
    keys `x` requires or allows."""
    for key in _required(x):
        if not all(_allows(b, s, key, 0) for s in y):
            return True
        if any(_disjoint_values(b, px, py) for px in _property(x, key) for py in _value_schemas(y, key)):
            return True
    keys = _closed_keys(x)  # an object of x has at least one of these keys, and y allows none of them
    return bool(keys) and _min_keys(x) >= 1 and not any(all(_allows(b, s, key, 0) for s in y) for key in keys)


def _required(conjunction: list) -> set:
    out: set = set()
    for schema in conjunction:
        required = schema.get("required", [])
        if isinstance(required, list):
            out.update(k for k in required if isinstance(k, str))
    return out


def _min_keys(conjunction: list) -> int:
    lows = [s.get("minProperties", 0) for s in conjunction]
    return max([low for low in lows if isinstance(low, int)] + [1 if _required(conjunction) else 0])


def _closed_keys(conjunction: list):
    """Keys that an object of the conjunction may have, by the own keywords of a conjunct that
    closes it (None: none does)."""
    for schema in conjunction:
        props = schema.get("properties", {})
        if (
            schema.get("additionalProperties") is False
            and not schema.get("patternProperties")
            and isinstance(props, dict)
        ):
            return [k for k, sub in props.items() if sub is not False]
    return None


def _allows(b, schema, key: str, depth: int) -> bool:
    """Whether an object satisfying `schema` may have `key` (True when unsure): its own
    properties, patternProperties, additionalProperties and propertyNames, and those of every
    `$ref`/`allOf` member it must also satisfy and of at least one anyOf/oneOf branch."""
    if schema is False:
        return False
    if not isinstance(schema, dict) or depth > 16:
        return True
    if not _allows_own(schema, key):
        return False
    if "$ref" in schema and not _allows(b, b.shapes.target(schema), key, depth + 1):
        return False
    for word in ("allOf", "anyOf", "oneOf"):
        subs = schema.get(word)
        if isinstance(subs, list) and subs:
            found = [_allows(b, sub, key, depth + 1) for sub in subs]
            if not (all(found) if word == "allOf" else any(found)):
                return False
    return True


def _allows_own(schema: dict, key: str) -> bool:
    if _name_verdict(schema.get("propertyNames", True), key) is False:
        return False
    props = schema.get("properties", {})
    if isinstance(props, dict) and key in props:
        return props[key] is not False
    patterns = schema.get("patternProperties", {})
    if not isinstance(patterns, dict) or any(pattern_content(p).accepts(key) for p in patterns):
        return True
    return schema.get("additionalProperties", True) is not False


def _name_verdict(schema, key: str):
    """Whether `key` satisfies the propertyNames schema `schema`: True, False, or None when unsure
    (only pattern, const/enum, not, type, minLength and maxLength are read)."""
    if isinstance(schema, bool):
        return schema
    if not isinstance(schema, dict):
        return None
    verdicts: list = []
    for word, sub in schema.items():
        if word == "pattern" and isinstance(sub, str):
            try:
                verdicts.append(pattern_content(sub).accepts(key))
            except ConstraintError:
                verdicts.append(None)
        elif word in ("const", "enum"):
            values = literals(schema)
            verdicts.append(None if not isinstance(values, list) else key in values)
        elif word == "not":
            inner = _name_verdict(sub, key)
            verdicts.append(None if inner is None else not inner)
        elif word == "type":
            verdicts.append(sub == "string" or isinstance(sub, list) and "string" in sub)
        elif word in ("minLength", "maxLength") and isinstance(sub, int):
            verdicts.append(len(key) >= sub if word == "minLength" else len(key) <= sub)
        elif word not in _ANNOTATIONS:
            verdicts.append(None)
    return False if False in verdicts else None if None in verdicts else True


def _property(conjunction: list, key: str) -> list:
    """The schemas the conjunction's `properties` give `key`."""
    props = [s.get("properties", {}) for s in conjunction]
    return [p[key] for p in props if isinstance(p, dict) and key in p]


def _value_schemas(conjunction: list, key: str) -> list:
    """The schemas a value of `key` must satisfy where the conjunction's object has that key: per
    conjunct, its `properties` entry, else the patternProperties matching the key, else its
    additionalProperties (the patterns that cannot be read are left out: fewer schemas, fewer
    disjoint pairs)."""
    out = []
    for schema in conjunction:
        props, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
        if isinstance(props, dict) and key in props:
            out.append(props[key])
            continue
        matched, unsure = [], not isinstance(patterns, dict)
        for pattern, sub in patterns.items() if isinstance(patterns, dict) else ():
            try:
                if pattern_content(pattern).accepts(key):
                    matched.append(sub)
            except ConstraintError:
                unsure = True
        if unsure:
            out += matched
        else:
            out += matched or [schema.get("additionalProperties", True)]
    return out


def _declared_types(schema: dict) -> set:
    """The JSON types `schema`'s own `type` allows, with "integer" where "number" is (empty
    without a `type`)."""
    declared = schema.get("type")
    types = set([declared] if isinstance(declared, str) else declared if isinstance(declared, list) else [])
    return types | ({"integer"} if "number" in types else set())


def _disjoint_values(b, x, y) -> bool:
    """Whether no value satisfies both `x` and `y`: listed strings (const/enum) that differ or that
    the other's `not` lists, or kinds (objects, arrays, scalars) or declared types that differ."""
    x, y = followed_refs(b, x), followed_refs(b, y)
    if x is None or y is None:
        return False
    if not (b.shapes.admits(x) & b.shapes.admits(y)):
        return True
    if not isinstance(x, dict) or not isinstance(y, dict):
        return False
    if _declared_types(x) and _declared_types(y) and not _declared_types(x) & _declared_types(y):
        return True
    xs, ys = literals(x), literals(y)
    for listed, other in ((xs, y), (ys, x)):  # listed strings that the other's `not` lists too
        negated = other.get("not")
        plain = isinstance(negated, dict) and all(k in _LISTS_ONLY for k in negated)
        excluded = literals(negated) if plain else None  # (a `not` saying more may hold of them)
        if listed and excluded and all(isinstance(v, str) and v in excluded for v in listed):
            return True
    if xs is None or ys is None or not all(isinstance(v, str) for v in (*xs, *ys)):
        return False
    return not set(xs) & set(ys)
