"""The grammar form of a schema against jsonschema on a list of instances (for the tests of
narrowing, oneOf rewrites, array conjunctions and unevaluated conjuncts)."""

from __future__ import annotations

import itertools

import jsonschema

from sgl_runtime.constrained.json_schema.language import schema_to_grammar
from sgl_runtime.constrained.json_schema.serialize import compact_json


def small_objects(keys: list, values: list, three: list) -> list:
    """`{}`, every object of one or two of `keys` with every pair of `values`, and of three keys in
    every order with each value triple of `three`."""
    out: list = [{}]
    for n in (1, 2, 3):
        for chosen in itertools.permutations(keys, n):
            for picked in itertools.product(values, repeat=n) if n < 3 else three:
                out.append(dict(zip(chosen, picked)))
    return out


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
