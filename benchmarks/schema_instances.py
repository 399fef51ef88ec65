"""Valid and invalid instances of a JSON Schema, each checked by jsonschema (the validator of the
schema's declared draft, with patterns read as ECMA-262 regexes, as JSON Schema specifies: the
regress library, not Python's re). JSON Schema lets a validator treat `format` as an annotation
(the default) or as an assertion, so an instance is kept only where both readings give it the same
label (jsonschema's format checker, with the format-nongpl extra's checkers, for the second).

Valid candidates come from walking the schema (required keys, some optional ones, enum/const/
examples, formats, patterns through rstr, numeric bounds, free-form values nested a few levels);
invalid candidates mutate a valid one at one place (a dropped required key, an unexpected key,
a value of the wrong type, a value out of range or enum). Only the candidates jsonschema labels as
intended are kept, so the generator may be wrong without the labels being wrong.
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
import random
import re
from typing import Any, Iterator

import jsonschema
import regex
import regress
import rstr
from jsonschema_specifications import REGISTRY
from referencing import Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

FORMATS = {
    "date-time": "2024-05-06T07:08:09Z",
    "date": "2024-05-06",
    "time": "07:08:09Z",
    "email": "ada@example.com",
    "idn-email": "ada@example.com",
    "uri": "https://example.com/a/b",
    "uri-reference": "https://example.com/a",
    "iri": "https://example.com/a",
    "url": "https://example.com/a",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
    "ipv4": "192.168.0.1",
    "ipv6": "2001:db8::1",
    "hostname": "example.com",
    "duration": "P1D",
    "regex": "^a+$",
    "json-pointer": "/a/b",
}
FREE_VALUES = [
    {"name": "x", "tags": ["a", {"k": [1, 2, {"deep": None}]}]},
    [1, "two", {"three": [3, [4, [5]]]}],
    {"a": {"b": {"c": {"d": [True]}}}},
    "free text",
    42,
    {},
    [],
]
NO_VALUE = object()


class _ShortXeger(rstr.Rstr):
    """rstr's pattern sampler, `x*` / `x+` / `x{n,}` repeating at most 4 more times than required."""

    def _handle_repeat(self, start_range: int, end_range: int, value) -> str:
        end_range = min(end_range, start_range + 4)
        return "".join(
            "".join(self._handle_state(i) for i in value) for _ in range(self._random.randint(start_range, end_range))
        )


importlib.import_module("rstr.xeger").STAR_PLUS_LIMIT = 10**9  # _ShortXeger bounds the repeats itself


class SlowPattern(Exception):
    """A `pattern` backtracks too long on an instance: that instance is left out of the corpus."""


@functools.lru_cache(maxsize=4096)
def _ecma(pattern: str):
    """The ECMA-262 regex of `pattern` with the `u` flag JSON Schema recommends (regress), or None
    where that is not a valid pattern (Python's `\\Z`, `(?i)`: the schema was written for re)."""
    try:
        return regress.Regex(pattern, flags="u")
    except regress.RegressError:
        return None


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches somewhere in `text`: ECMA-262, as JSON Schema says patterns are
    (`.` and `$` stop at a carriage return, `\\d` is ASCII), where it is a valid ECMA-262 pattern;
    Python's re (jsonschema's own verdict) where it is not."""
    compiled = _ecma(pattern)
    if compiled is None:
        return re.search(pattern, text) is not None
    return compiled.find(text) is not None


def _guarded_pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string"):
        try:
            regex.search(pattern, instance, timeout=0.5)
        except TimeoutError:
            raise SlowPattern(pattern) from None
        except regex.error:
            pass
        if not search(pattern, instance):
            yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, patterns, instance, schema):
    if validator.is_type(instance, "object"):
        for pattern, subschema in patterns.items():
            for key, value in instance.items():
                if search(pattern, key):
                    yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator, additional, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    declared, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extras = [k for k in instance if k not in declared and not any(search(p, k) for p in patterns)]
    if validator.is_type(additional, "object"):
        for key in extras:
            yield from validator.descend(instance[key], additional, path=key)
    elif not additional and extras:
        yield jsonschema.ValidationError(f"additional properties are not allowed ({extras!r} were unexpected)")


def validator_for(schema: Any, formats: bool = False) -> jsonschema.protocols.Validator:
    """jsonschema's validator of the schema's draft, with ECMA-262 patterns (`search`); `formats`
    asserts `format` (the draft's format checker) instead of reading it as an annotation."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    ecma = {
        "pattern": _guarded_pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    }
    guarded = jsonschema.validators.extend(cls, ecma)
    checker = guarded.FORMAT_CHECKER if formats else None
    return guarded(schema, registry=_registry(schema, cls), format_checker=checker)


class Labeller:
    """An instance's label under `schema`: True (valid) or False (invalid) where the label is the
    same whether `format` is an annotation or an assertion; None where it is not (the spec leaves
    the choice to the validator) or a pattern backtracks too long."""

    def __init__(self, schema: Any) -> None:
        self.plain, self.formats = validator_for(schema), validator_for(schema, formats=True)

    def __call__(self, instance) -> bool | None:
        try:
            plain = self.plain.is_valid(instance)
            return plain if self.formats.is_valid(instance) == plain else None
        except SlowPattern:
            return None


def instances(schema: Any, seed: int, want: int = 4, tries: int = 16) -> tuple[list, list]:
    """(valid instances, invalid instances), at most `want` of each, all labelled by jsonschema."""
    label = Labeller(schema)
    walker = _Walker(schema, random.Random(seed))
    valid, invalid, seen = [], [], set()
    for attempt in range(tries):
        if len(valid) >= want:
            break
        walker.variant = attempt % 4
        try:
            candidate = walker.value(schema, walker.root_resolver, 0)
        except (
            Unresolvable,
            RecursionError,
            ValueError,
            TypeError,
            KeyError,
            IndexError,
            re.error,
            OverflowError,
            UnicodeEncodeError,
        ):
            continue
        key = json.dumps(candidate, sort_keys=True)
        if candidate is not NO_VALUE and key not in seen and label(candidate):
            seen.add(key)
            valid.append(candidate)
    rng = random.Random(seed + 1)
    for base in valid:
        for mutant in _mutants(base, rng):
            key = json.dumps(mutant, sort_keys=True)
            if key not in seen and label(mutant) is False:
                seen.add(key)
                invalid.append(mutant)
                break
    for base in valid:  # a second mutant per valid instance if there is room
        if len(invalid) >= want:
            break
        for mutant in list(_mutants(base, rng))[::-1]:
            key = json.dumps(mutant, sort_keys=True)
            if key not in seen and label(mutant) is False:
                seen.add(key)
                invalid.append(mutant)
                break
    return valid, invalid[:want]


def _registry(schema, cls):
    spec = getattr(cls, "META_SCHEMA", None)
    default = DRAFT202012
    if isinstance(spec, dict):
        from referencing.jsonschema import specification_with

        default = specification_with(spec.get("$schema", ""), default=DRAFT202012)
    resource = Resource.from_contents(schema, default_specification=default) if isinstance(schema, dict) else None
    return REGISTRY if resource is None else REGISTRY.with_resource(resource.id() or "", resource)


class _Walker:
    def __init__(self, root, rng: random.Random) -> None:
        self.rng = rng
        self.xeger = _ShortXeger(rng).xeger
        self.variant = 0
        self.registry = _registry(
            root, jsonschema.validators.validator_for(root, default=jsonschema.Draft202012Validator)
        )
        base = root.get("$id", root.get("id", "")) if isinstance(root, dict) else ""
        self.root_resolver = self.registry.resolver(base_uri=base if isinstance(base, str) else "")

    def value(self, schema, resolver, depth: int):
        if depth > 12:
            raise ValueError("too deep")
        if schema is True or schema == {}:
            return self.rng.choice(FREE_VALUES) if self.variant else "x"
        if not isinstance(schema, dict) or schema is False:
            raise ValueError("no value")
        if isinstance(schema.get("$id"), str) and not schema["$id"].startswith("#"):
            resolver = resolver.in_subresource(Resource.from_contents(schema, default_specification=DRAFT202012))
        if "$ref" in schema:
            resolved = resolver.lookup(schema["$ref"])
            merged = {**resolved.contents, **{k: v for k, v in schema.items() if k != "$ref"}}
            if not isinstance(resolved.contents, dict):
                return self.value(resolved.contents, resolved.resolver, depth + 1)
            return self.value(merged, resolved.resolver, depth + 1)
        if "const" in schema:
            return copy.deepcopy(schema["const"])
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return copy.deepcopy(self.rng.choice(schema["enum"]))
        if isinstance(schema.get("examples"), list) and schema["examples"] and self.variant == 3:
            return copy.deepcopy(self.rng.choice(schema["examples"]))
        if "default" in schema and self.variant == 2 and self.rng.random() < 0.5:
            return copy.deepcopy(schema["default"])
        for key in ("allOf",):
            if isinstance(schema.get(key), list):
                merged = dict(schema)
                for sub in merged.pop(key):
                    merged = _merge(merged, self._deref(sub, resolver))
                return self.value(merged, resolver, depth + 1)
        for key in ("oneOf", "anyOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                branch = self.rng.choice(schema[key])
                rest = {k: v for k, v in schema.items() if k != key}
                return self.value(_merge(rest, self._deref(branch, resolver)), resolver, depth + 1)
        kind = self._type(schema)
        return getattr(self, "_" + kind)(schema, resolver, depth)

    def _deref(self, sub, resolver):
        if isinstance(sub, dict) and "$ref" in sub:
            resolved = resolver.lookup(sub["$ref"])
            if isinstance(resolved.contents, dict):
                return {**resolved.contents, **{k: v for k, v in sub.items() if k != "$ref"}}
        return sub

    def _type(self, schema: dict) -> str:
        declared = schema.get("type")
        if isinstance(declared, list) and declared:
            declared = self.rng.choice(declared)
        if isinstance(declared, str):
            if declared not in ("string", "object", "array", "integer", "number", "boolean", "null"):
                raise ValueError(f"type {declared!r}")
            return declared
        if any(k in schema for k in ("properties", "required", "additionalProperties", "patternProperties")):
            return "object"
        if any(k in schema for k in ("items", "prefixItems", "minItems", "contains")):
            return "array"
        if any(k in schema for k in ("pattern", "minLength", "maxLength", "format")):
            return "string"
        if any(k in schema for k in ("minimum", "maximum", "multipleOf", "exclusiveMinimum")):
            return "number"
        return self.rng.choice(["string", "object", "integer"])

    def _object(self, schema, resolver, depth):
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = [k for k in schema.get("required", []) if isinstance(k, str)]
        names = list(required)
        optional = [k for k in props if k not in required]
        if self.variant == 1:
            names += optional
        elif self.variant >= 2:
            names += [k for k in optional if self.rng.random() < 0.4]
        out = {}
        for name in names:
            sub = props.get(name, _pattern_schema(schema, name))
            if sub is False:
                continue
            out[name] = self.value(sub if sub is not None else True, resolver, depth + 1)
        extra = schema.get("additionalProperties", True)
        want = schema.get("minProperties", 0)
        patterns = [(p, s) for p, s in (schema.get("patternProperties") or {}).items() if s is not False]
        while len(out) < want and isinstance(want, int) and want < 20:
            name, sub = f"extra{len(out)}", extra if isinstance(extra, dict) else True
            if patterns and (extra is False or self.rng.random() < 0.7):
                pattern, sub = self.rng.choice(patterns)
                name = self.xeger(pattern)
            out[name] = self.value(sub, resolver, depth + 1)
        if (
            self.variant == 3
            and extra is not False
            and isinstance(extra, (dict, bool))
            and "propertyNames" not in schema
        ):
            out["x_extra"] = self.value(extra if isinstance(extra, dict) else True, resolver, depth + 1)
        return out

    def _array(self, schema, resolver, depth):
        prefix = schema.get("prefixItems", schema.get("items") if isinstance(schema.get("items"), list) else [])
        items = schema.get("items", True) if not isinstance(schema.get("items"), list) else True
        low = schema.get("minItems", 0) if isinstance(schema.get("minItems"), int) else 0
        high = schema.get("maxItems", low + 2) if isinstance(schema.get("maxItems"), int) else low + 2
        count = max(len(prefix) if self.variant else 0, self.rng.randint(low, max(low, min(high, low + 2))))
        count = min(count, high)
        out = []
        for i in range(count):
            sub = prefix[i] if i < len(prefix) else items
            out.append(self.value(sub, resolver, depth + 1))
        if "contains" in schema and isinstance(schema["contains"], dict):
            out.append(self.value(schema["contains"], resolver, depth + 1))
        if schema.get("uniqueItems"):
            unique = []
            for v in out:
                if v not in unique:
                    unique.append(v)
            out = unique
        return out

    def _string(self, schema, resolver, depth):
        fmt = schema.get("format")
        if "pattern" in schema and isinstance(schema["pattern"], str):
            low, high = schema.get("minLength", 0), schema.get("maxLength", 200)
            for _ in range(8):
                text = self.xeger(schema["pattern"])
                if isinstance(low, int) and isinstance(high, int) and low <= len(text) <= high:
                    text.encode("utf-8")  # UnicodeEncodeError on a sampled surrogate
                    return text
            raise ValueError("no pattern sample within the length bounds")
        if isinstance(fmt, str) and fmt in FORMATS:
            return FORMATS[fmt]
        low = schema.get("minLength", 0) if isinstance(schema.get("minLength"), int) else 0
        high = schema.get("maxLength", max(low, 12)) if isinstance(schema.get("maxLength"), int) else max(low, 12)
        length = self.rng.randint(low, max(low, min(high, low + 8)))
        return "".join(self.rng.choice("abcdefghij xyz") for _ in range(length)).strip() or "a" * max(low, 1)

    def _integer(self, schema, resolver, depth):
        return int(self._number(schema, resolver, depth, integer=True))

    def _number(self, schema, resolver, depth, integer=False):
        low = _num(schema.get("minimum"), _num(schema.get("exclusiveMinimum"), None, 1), 0)
        high = _num(schema.get("maximum"), _num(schema.get("exclusiveMaximum"), None, -1), 0)
        if low is None:
            low = min(0, high) if high is not None else 0
        if high is None:
            high = low + 100
        step = schema.get("multipleOf")
        if isinstance(step, (int, float)) and step > 0:
            k = self.rng.randint(int(-(-low // step)), max(int(-(-low // step)), int(high // step)))
            return k * step
        value = self.rng.randint(int(-(-low // 1)), max(int(-(-low // 1)), int(high // 1)))
        if not integer and self.variant == 2 and value + 0.5 <= high:
            return value + 0.5
        return value

    def _boolean(self, schema, resolver, depth):
        return self.rng.random() < 0.5

    def _null(self, schema, resolver, depth):
        return None


def _num(value, fallback, shift):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return fallback
    return value + shift if shift else value


def _pattern_schema(schema, name):
    for pattern, sub in (schema.get("patternProperties") or {}).items():
        try:
            import re

            if re.search(pattern, name):
                return sub
        except re.error:
            return None
    return None


def _merge(a: dict, b) -> dict:
    if not isinstance(b, dict):
        return a
    out = dict(a)
    for key, value in b.items():
        if key == "properties" and isinstance(out.get(key), dict) and isinstance(value, dict):
            out[key] = {**out[key], **value}
        elif key == "required" and isinstance(out.get(key), list) and isinstance(value, list):
            out[key] = out[key] + [k for k in value if k not in out[key]]
        elif key not in out:
            out[key] = value
    return out


WRONG = [12345, "not-the-right-value", None, True, [], {}, 0.5, -1]


def _mutants(instance, rng: random.Random) -> Iterator:
    """Single-place mutations of `instance`, most likely to violate a schema first."""
    paths = list(_paths(instance, ()))
    rng.shuffle(paths)
    for path, node in paths:
        if isinstance(node, dict):
            for key in list(node):
                yield _set(instance, path, {k: v for k, v in node.items() if k != key})
            yield _set(instance, path, {**node, "zz_unexpected": 1})
        elif isinstance(node, list):
            yield _set(instance, path, node + [node[0]] if node else [12345])
            if node:
                yield _set(instance, path, node[1:])
        elif isinstance(node, str):
            yield _set(instance, path, node + "\u00e9!~" * 40)
            yield _set(instance, path, "")
        elif isinstance(node, (int, float)) and not isinstance(node, bool):
            yield _set(instance, path, node + 0.5)
            yield _set(instance, path, -(10**12))
            yield _set(instance, path, 10**12)
        for wrong in rng.sample(WRONG, 3):
            yield _set(instance, path, wrong)


def _paths(node, path):
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, path + (i,))


def _set(instance, path, value):
    if not path:
        return value
    out = copy.deepcopy(instance)
    node = out
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return out
