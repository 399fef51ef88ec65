"""The realistic schemas in benchmarks/schemas/ all compile, accept their `examples`, and every
string sampled from their automata is valid under jsonschema."""

import json
import random
from pathlib import Path

import pytest
from json_oracle import DuplicateKey, exact, exact_validator, load_exact

from sgl_runtime.constrained.json_schema.compiler import schema_to_dfa
from sgl_runtime.constrained.json_schema.sampling import sample
from sgl_runtime.constrained.json_schema.serialize import compact_json

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "benchmarks/schemas"
SCHEMAS = sorted(SCHEMA_DIR.glob("*.json"))


def test_at_least_fifty_realistic_schemas():
    assert len(SCHEMAS) >= 50
    kinds = {p.name.split("_")[0] for p in SCHEMAS}
    assert kinds == {"fn", "api", "config"}


@pytest.mark.parametrize("path", SCHEMAS, ids=[p.stem for p in SCHEMAS])
def test_schema_compiles_and_accepts_its_examples(path):
    schema = json.loads(path.read_text())
    examples = schema.get("examples")
    assert examples, f"{path.name} needs an `examples` entry"
    dfa = schema_to_dfa(schema)
    validator = exact_validator(schema)
    for example in examples:
        validator.validate(exact(example))
        assert dfa.accepts(compact_json(example, schema)), path.name
    rng = random.Random(path.name)
    for _ in range(5):
        text = sample(dfa, rng, max_len=400)
        try:
            instance = load_exact(text)
        except DuplicateKey:
            continue  # only free-form keys can repeat; see json_schema.py's docstring
        assert validator.is_valid(instance), (path.name, text)
