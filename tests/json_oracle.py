"""The reference check for JSON-Schema outputs: jsonschema, fed exact numbers.

jsonschema tests `multipleOf` on floats by float division, so 9.02 is judged not to be a
multiple of 0.01 (9.02 / 0.01 == 901.99...). Parsing the schema and the instance with
Decimal keeps the arithmetic exact; integral decimals (14.000) become ints, as JSON Schema
counts them as integers.
"""

import json
from decimal import Decimal

import jsonschema


def exact_number(text: str):
    value = Decimal(text)
    return int(value) if value == value.to_integral_value() else value


class DuplicateKey(ValueError):
    """An object repeats a key: JSON Schema gives such a document no meaning."""


def _no_duplicates(pairs):
    keys = [key for key, _ in pairs]
    if len(keys) != len(set(keys)):
        raise DuplicateKey(keys)
    return dict(pairs)


def load_exact(text: str):
    """Parses JSON text with exact numbers; raises DuplicateKey on a repeated object key."""
    return json.loads(text, parse_float=exact_number, object_pairs_hook=_no_duplicates)


def exact(value):
    """A copy of a Python JSON value whose floats are exact numbers (at their shortest spelling)."""
    if isinstance(value, float):
        return exact_number(repr(value)) if value == value and abs(value) != float("inf") else value
    if isinstance(value, dict):
        return {key: exact(item) for key, item in value.items()}
    if isinstance(value, list):
        return [exact(item) for item in value]
    return value


def exact_validator(schema) -> jsonschema.Draft202012Validator:
    """A draft 2020-12 validator whose schema numbers are exact too (so Decimal meets Decimal)."""
    return jsonschema.Draft202012Validator(exact(schema))


def is_valid(schema, instance) -> bool:
    return exact_validator(schema).is_valid(exact(instance))
