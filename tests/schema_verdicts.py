"""The grammar form of a schema against jsonschema on a list of instances (for the tests of
narrowing, oneOf rewrites, array conjunctions and unevaluated conjuncts)."""

from __future__ import annotations

import jsonschema

from sgl_runtime.constrained.json_schema.language import schema_to_grammar
from sgl_runtime.constrained.json_schema.serialize import compact_json


def disagreements(schema, instances, orders=lambda instance: [instance]) -> tuple[list, int]:
    """([(jsonschema's verdict, compact text)] for the instances where the grammar form disagrees,
    the number of valid instances). An instance is accepted when one of `orders(instance)` is."""
    language = schema_to_grammar(schema)
    validator = jsonschema.Draft202012Validator(schema)
    wrong, valid = [], 0
    for instance in instances:
        expected = validator.is_valid(instance)
        valid += expected
        if any(language.accepts(compact_json(x, schema)) for x in orders(instance)) != expected:
            wrong.append((expected, compact_json(instance, schema)))
    return wrong, valid
