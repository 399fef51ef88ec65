"""JSON-Schema-Test-Suite (draft2020-12, required tests) through compile_schema (one automaton or the
grammar form): no invalid instance may be accepted, and the number of correctly decided instances must
not regress."""

import importlib.util
import json
import re
from collections import Counter
from pathlib import Path

import jsonschema
import pytest

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "tests/data/json-schema-test-suite/draft2020-12"
MIN_CORRECT = 1175  # of 1,299 (xgrammar 0.2.9: 888; llguidance 1.9.1: 584)
MAX_FALSE_REJECTS = 9  # enforced formats (an annotation in the suite); deep free-form values are exact (grammar form)


def _runner():
    spec = importlib.util.spec_from_file_location("schema_conformance", REPO / "benchmarks/schema_conformance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def outcomes():
    runner = _runner()
    results = []
    for path in sorted(SUITE.glob("*.json")):
        for case in json.loads(path.read_text()):
            results += [(path.name, case, outcome, test, detail) for outcome, test, detail in runner.run_case(case)]
    return results


def test_no_false_accepts_and_correct_floor(outcomes):
    counts = Counter(o[2] for o in outcomes)
    false_accepts = [(o[0], o[1]["description"], o[3]["description"], o[4]) for o in outcomes if o[2] == "false_accept"]
    assert false_accepts == []
    assert sum(counts.values()) == 1299
    assert counts["correct"] >= MIN_CORRECT, counts
    assert counts["false_reject"] <= MAX_FALSE_REJECTS, counts


def test_suite_labels_agree_with_jsonschema(outcomes):
    """Sanity: on every compiled case, jsonschema's verdict equals the suite's expected validity
    (except custom-metaschema $vocabulary cases, which jsonschema does not implement)."""
    mismatches, unverifiable = [], set()
    for name, case, outcome, test, _ in outcomes:
        if outcome == "unsupported":
            continue
        try:
            verdict = jsonschema.Draft202012Validator(case["schema"]).is_valid(test["data"])
        except re.error:  # \p{..} patterns: jsonschema checks `pattern` with Python's re, which has no \p
            unverifiable.add(name)
            continue
        if verdict != test["valid"]:
            mismatches.append((name, case["description"], test["description"]))
    assert unverifiable <= {"pattern.json", "patternProperties.json"}, unverifiable
    assert {m[0] for m in mismatches} <= {"vocabulary.json"}, mismatches  # custom metaschemas are refused now
    assert len(mismatches) <= 1


def test_compact_serialisation_orders_keys_by_schema():
    from sgl_runtime.constrained.json_schema.serialize import compact_json

    schema = {"properties": {"b": {"properties": {"y": {}, "x": {}}}, "a": {}}}
    text = compact_json({"z": "é", "a": 1, "b": {"x": 1, "y": [1.5]}}, schema)
    assert text == '{"b":{"y":[1.5],"x":1},"a":1,"z":"é"}'


def test_compact_serialisation_orders_undeclared_keys_values_by_their_schema():
    """An undeclared key's value follows the patternProperties entry its name matches, else
    additionalProperties, also where only a oneOf branch that allows objects says so."""
    from sgl_runtime.constrained.json_schema.serialize import compact_json

    job = {"type": "object", "properties": {"name": {}, "uses": {}}}
    jobs = {"patternProperties": {"^j": job}, "additionalProperties": {"properties": {"b": {}, "a": {}}}}
    value = {"j1": {"uses": 1, "name": 2}, "k": {"a": 1, "b": 2}}
    assert compact_json(value, jobs) == '{"j1":{"name":2,"uses":1},"k":{"b":2,"a":1}}'
    branches = {"oneOf": [{"type": "array"}, {"type": "object", "additionalProperties": job}]}
    assert compact_json({"x": {"uses": 1, "name": 2}}, branches) == '{"x":{"name":2,"uses":1}}'
