"""Soundness beyond the suite's own instances: random strings sampled from the automaton of every
compiled JSON-Schema-Test-Suite schema (compact and with whitespace) must be valid under jsonschema."""

import json
import random
import re
from pathlib import Path

import pytest
from json_oracle import DuplicateKey, exact_validator, load_exact

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.compiler import schema_to_dfa
from sgl_runtime.constrained.json_schema.sampling import sample

SUITE = Path(__file__).resolve().parent / "data/json-schema-test-suite/draft2020-12"
SAMPLES_PER_SCHEMA = 4


WHITESPACE_FILES = ("properties.json", "items.json", "not.json", "oneOf.json", "additionalProperties.json")


@pytest.mark.parametrize("whitespace", [None, 1])
def test_sampled_instances_of_suite_schemas_are_valid(whitespace):
    rng = random.Random(2024)
    checked = 0
    for path in sorted(SUITE.glob("*.json")):
        if path.name in ("refRemote.json", "vocabulary.json"):
            continue  # remote refs are unresolvable here; jsonschema ignores custom vocabularies
        if whitespace is not None and path.name not in WHITESPACE_FILES:
            continue
        for case in json.loads(path.read_text()):
            try:
                dfa = schema_to_dfa(case["schema"], whitespace=whitespace)
            except ConstraintError:
                continue
            validator = exact_validator(case["schema"])
            for _ in range(SAMPLES_PER_SCHEMA):
                text = sample(dfa, rng, max_len=60)
                if text is None:
                    break
                try:
                    instance = load_exact(text)
                except DuplicateKey:
                    continue
                try:
                    verdict = validator.is_valid(instance)
                except re.error:  # a \p{..} pattern: jsonschema checks patterns with re, which has no \p
                    assert path.name in ("pattern.json", "patternProperties.json"), path.name
                    break
                assert verdict, (path.name, case["description"], text)
                checked += 1
    assert checked > (1000 if whitespace is None else 100)
