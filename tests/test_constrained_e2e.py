"""End to end through the real server on the demo model (random weights: an adversarial model).

64 generations (200 in the long form, SGL_LONG_TESTS=1) at temperature 1 for each of 3 regexes, 4 JSON Schemas and the json and
arithmetic grammars, with jump-forward on (the shared server) and off (a server started with
--disable-jump-forward): every output satisfies its constraint, checked with Python's `re`,
`jsonschema` and lark. Budget-aware completion makes outputs end on a sentence before
max_new_tokens even though the model almost never samples EOS while other tokens are allowed.
"""

import json
import re

import jsonschema
import lark
import pytest
import requests
from long_form import examples
from server_fixtures import start_server

from sgl_runtime.constrained.grammar.source import grammar_text

N = examples(64, 200)
MAX_NEW_TOKENS = 12

REGEXES = [r"[a-z]+@[a-z]+\.com", r'\{"x": \[[0-9]+(, [0-9]+)*\]\}', r"\d{3}-\d{2,4}( ext\. \w+)?"]
SCHEMAS = [
    {
        "type": "object",
        "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["name", "tags"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "color": {"enum": ["red", "green", "blue"]},
            "size": {"type": "integer", "minimum": 1, "maximum": 99},
        },
        "required": ["color", "size"],
        "additionalProperties": False,
    },
    {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 5},
    {  # CloudFormation-style tags: unique items of several tokens each, with long strings (the grammar form)
        "type": "array",
        "uniqueItems": True,
        "maxItems": 3,
        "items": {
            "type": "object",
            "properties": {"Key": {"type": "string", "maxLength": 128}, "Value": {"type": "string", "maxLength": 256}},
            "required": ["Key", "Value"],
            "additionalProperties": False,
        },
    },
]
GRAMMARS = ["json", "arithmetic"]


@pytest.fixture(scope="module")
def no_jump_server():
    server = start_server("--disable-jump-forward")
    yield server
    server.stop()


@pytest.fixture(params=["jump_forward", "no_jump_forward"])
def url(request) -> str:
    name = "server" if request.param == "jump_forward" else "no_jump_server"
    return request.getfixturevalue(name).url


def generate(url: str, prompt: str, constraint: dict) -> list[str]:
    """N constrained generations in one batched /generate call, each with its own seed."""
    params = [{"max_new_tokens": MAX_NEW_TOKENS, "temperature": 1.0, "seed": 1000 + i, **constraint} for i in range(N)]
    r = requests.post(f"{url}/generate", json={"text": [prompt] * N, "sampling_params": params}, timeout=600)
    assert r.status_code == 200, r.text
    out = r.json()
    assert len(out) == N
    for o in out:
        assert o["meta_info"]["finish_reason"]["type"] in ("stop", "length"), o
    return [o["text"] for o in out]


@pytest.mark.parametrize("pattern", REGEXES)
def test_regex_outputs_fullmatch(url, pattern):
    for text in generate(url, "Write it:", {"regex": pattern}):
        assert re.fullmatch(pattern, text, re.ASCII), text


@pytest.mark.parametrize("schema", SCHEMAS, ids=["strings_array", "enum_bounds", "number_array", "unique_tags"])
def test_json_schema_outputs_validate(url, schema):
    for text in generate(url, "JSON:", {"json_schema": json.dumps(schema)}):
        jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize("name", GRAMMARS)
def test_grammar_outputs_parse(url, name):
    parser = lark.Lark(grammar_text(name), parser="lalr")
    for text in generate(url, "Expression:", {"ebnf": name}):
        parser.parse(text)  # raises if the text is not a sentence of the grammar
