"""What a (2020-12) schema says about the shape of its values, for the grammar form (grammar_form.py):

- `admits(schema)`: the value categories ("object", "array", "scalar") an instance may have (an
  over-approximation: a category left out has no valid instance);
- `closed(schema)`: whether the flat automaton of the schema is exact, i.e. no free-form value (whose
  nesting the flat compiler bounds) and no recursive `$ref` is reachable from it;
- `scalars(schema)`: a schema without containers that agrees with `schema` on every scalar value
  (`$ref`s inlined, container keywords dropped), whose flat automaton is always exact.
"""

from __future__ import annotations

from jsonschema import validators

from sgl_runtime.constrained.automata import ANY_CHAR, Charset, Dfa, charset
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.values import json_type_of

OBJECT, ARRAY, SCALAR = "object", "array", "scalar"
CATEGORIES = frozenset((OBJECT, ARRAY, SCALAR))
SCALAR_TYPES = ("null", "boolean", "integer", "number", "string")
ALL_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
OBJECT_KEYWORDS = (
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "dependentRequired",
)
ARRAY_KEYWORDS = (
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
)
NUMBER_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
STRING_KEYWORDS = ("minLength", "maxLength", "pattern", "format")
SCALAR_KEYWORDS = NUMBER_KEYWORDS + STRING_KEYWORDS
# in-place applicators whose language needs the universe of all values (a complement)
COMPLEMENTS = ("not", "if", "dependentSchemas", "unevaluatedProperties", "unevaluatedItems")
ASSERTING = frozenset(validators.Draft202012Validator.VALIDATORS)  # every other keyword is an annotation
SILENT_ON = {  # the keywords that say nothing of the values of a category
    OBJECT: frozenset((*ARRAY_KEYWORDS, *SCALAR_KEYWORDS, "unevaluatedItems")),
    ARRAY: frozenset((*OBJECT_KEYWORDS, *SCALAR_KEYWORDS, "unevaluatedProperties", "dependentSchemas")),
}
DYNAMIC = ("$dynamicRef", "$recursiveRef")


def category(value_type: str) -> str:
    return value_type if value_type in (OBJECT, ARRAY) else SCALAR


def types_of(schema: dict, integer_in_number: bool = True) -> tuple:
    """The JSON types `schema`'s `type` names, in ALL_TYPES order (all when absent); "number" also
    names "integer" unless integer_in_number=False (the flat compiler keeps them apart)."""
    declared = schema.get("type")
    if declared is None:
        return ALL_TYPES
    names = [declared] if isinstance(declared, str) else declared
    if not isinstance(names, list) or any(n not in ALL_TYPES for n in names):
        raise ConstraintError(f"type: invalid value {declared!r}")
    return tuple(t for t in ALL_TYPES if t in names or (integer_in_number and t == "integer" and "number" in names))


def whole_categories(types: tuple) -> bool:
    """Whether `types` is a union of whole categories (all scalar types or none of them)."""
    scalars = [t for t in types if t in SCALAR_TYPES]
    return not scalars or len(scalars) == len(SCALAR_TYPES)


def literals(schema: dict):
    """The const/enum values of `schema`, or None."""
    if "const" in schema:
        return [schema["const"]]
    if "enum" in schema:
        if not isinstance(schema["enum"], list):
            raise ConstraintError("enum: expected a list")
        return schema["enum"]
    return None


def members(schema: dict, keyword: str) -> list:
    value = schema.get(keyword, [])
    if not isinstance(value, list) or (keyword in schema and not value):
        raise ConstraintError(f"{keyword}: expected a non-empty list of schemas")
    return value


class Shapes:
    """The three analyses over one schema document (memoized by node identity)."""

    def __init__(self, refs) -> None:
        self.refs = refs
        self._admits: dict = {}
        self._closed: dict = {}
        self._scalars: dict = {}
        self.narrowed: dict = {}  # narrow.py's memo
        self.kept: list = []  # synthesized schemas stay alive (callers key caches by id)

    def target(self, schema: dict):
        ref = schema["$ref"]
        if not isinstance(ref, str):
            raise ConstraintError("$ref: expected a string")
        return self.refs.resolve(ref, schema)

    # ------------------------------------------------------------------ admits
    def admits(self, schema) -> frozenset:
        if schema is True:
            return CATEGORIES
        if schema is False:
            return frozenset()
        if not isinstance(schema, dict):
            raise ConstraintError(f"schema must be an object or a boolean, got {schema!r}")
        key = id(schema)
        if key in self._admits:
            return self._admits[key]
        self._admits[key] = CATEGORIES  # a cycle admits anything (over-approximation)
        cats = frozenset(category(t) for t in types_of(schema))
        values = literals(schema)
        if values is not None:
            cats &= frozenset(category(json_type_of(v)) for v in values)
        if "$ref" in schema:
            cats &= self.admits(self.target(schema))
        for sub in members(schema, "allOf"):
            cats &= self.admits(sub)
        for keyword in ("anyOf", "oneOf"):
            if keyword in schema:
                cats &= frozenset().union(*(self.admits(s) for s in members(schema, keyword)))
        self._admits[key] = cats
        return cats

    # ------------------------------------------------------------------ closed
    def closed(self, schema) -> bool:
        if not isinstance(schema, dict):
            return schema is False
        key = id(schema)
        if key in self._closed:
            return self._closed[key]
        self._closed[key] = False  # recursion is never closed
        self._closed[key] = result = self._closed_dict(schema)
        return result

    def _closed_dict(self, schema: dict) -> bool:
        cats = self.admits(schema)
        if OBJECT not in cats and ARRAY not in cats:
            return True
        values = literals(schema)
        if values is not None:
            if all(category(json_type_of(v)) == SCALAR for v in values):
                return True
            return not any(k in schema for k in (*OBJECT_KEYWORDS, *ARRAY_KEYWORDS, *COMPLEMENTS, "allOf", "anyOf"))
        if any(k in schema for k in (*COMPLEMENTS, *DYNAMIC)):
            return False
        applied = [self.target(schema)] if "$ref" in schema else []
        for keyword in ("allOf", "anyOf", "oneOf"):
            applied += members(schema, keyword)
        if not all(self.closed(s) for s in applied):
            return False
        types = types_of(schema)
        own = any(k in schema for k in (*OBJECT_KEYWORDS, *ARRAY_KEYWORDS, *SCALAR_KEYWORDS))
        if not own:  # the own part is the free-form value, which the flat compiler leaves out
            return bool(applied) and whole_categories(types)
        if "object" in types and not self._object_closed(schema):
            return False
        return "array" not in types or self._array_closed(schema)

    def _object_closed(self, schema: dict) -> bool:
        if "additionalProperties" not in schema or not self.closed(schema["additionalProperties"]):
            return False
        for keyword in ("properties", "patternProperties"):
            subs = schema.get(keyword, {})
            if not isinstance(subs, dict) or not all(self.closed(s) for s in subs.values()):
                return False
        return True

    def _array_closed(self, schema: dict) -> bool:
        prefix = schema.get("prefixItems", [])
        if not isinstance(prefix, list) or not all(self.closed(s) for s in prefix):
            return False
        if "contains" in schema and not self.closed(schema["contains"]):
            return False
        if "items" in schema:
            return self.closed(schema["items"])
        max_items = schema.get("maxItems")
        return isinstance(max_items, int) and max_items <= len(prefix)

    # ------------------------------------------------------------------ scalars
    def scalars(self, schema):
        """A container-free schema with the same scalar instances as `schema`."""
        if schema is True:
            return self.keep({"type": list(SCALAR_TYPES)})
        if not isinstance(schema, dict):
            return False
        key = id(schema)
        if key in self._scalars:
            if self._scalars[key] is None:
                raise ConstraintError("$ref: a reference cycle through allOf/anyOf/oneOf/not/if has no finite meaning")
            return self._scalars[key]
        self._scalars[key] = None
        self._scalars[key] = out = self._scalars_dict(schema)
        return out

    def _scalars_dict(self, schema: dict):
        for keyword in DYNAMIC:
            if keyword in schema:
                raise ConstraintError(f"{keyword}: not supported where the schema needs the grammar form")
        types = [t for t in types_of(schema) if t in SCALAR_TYPES]
        if not types:
            return False
        out: dict = {"type": types}
        out.update({k: schema[k] for k in SCALAR_KEYWORDS if k in schema})
        values = literals(schema)
        if values is not None:
            out["enum"] = [v for v in values if category(json_type_of(v)) == SCALAR]
        applied = [self.scalars(self.target(schema))] if "$ref" in schema else []
        applied += [self.scalars(s) for s in members(schema, "allOf")]
        if applied:
            out["allOf"] = applied
        for keyword in ("anyOf", "oneOf"):
            if keyword in schema:
                out[keyword] = [self.scalars(s) for s in members(schema, keyword)]
        if "not" in schema:
            out["not"] = self.scalars(schema["not"])
        for keyword in ("if", "then", "else"):
            if keyword in schema:
                out[keyword] = self.scalars(schema[keyword])
        return self.keep(out)

    def keep(self, schema: dict) -> dict:
        self.kept.append(schema)
        return schema


def first_char_dfa(cats: frozenset) -> Dfa:
    """Strings whose first character starts a value of one of `cats`."""
    first: Charset = charset("")
    if OBJECT in cats:
        first = first | charset("{")
    if ARRAY in cats:
        first = first | charset("[")
    if SCALAR in cats:
        first = first | ~charset("{[")
    return Dfa((((first, 1),), ((ANY_CHAR, 1),)), frozenset({1}))
