"""json_schema_options end to end through the server on the random demo model: every output parses
and validates with jsonschema, and its whitespace / key order / number spelling follows the
option, for /generate, the OpenAI API (response_format extension) and a bad option's 400."""

import json
import re

import jsonschema
import pytest
import requests

N = 8
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["id", "name", "tags", "score"],
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 999},
        "name": {"type": "string", "maxLength": 6},
        "tags": {"type": "array", "items": {"type": "integer"}, "maxItems": 2},
        "score": {"type": "number", "minimum": 0, "maximum": 9},
    },
}
STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def generate(url: str, options, max_new_tokens: int = 64) -> list[str]:
    extra = {} if options is None else {"json_schema_options": options}
    params = [
        {"max_new_tokens": max_new_tokens, "temperature": 1.0, "seed": 77 + i, "json_schema": SCHEMA, **extra}
        for i in range(N)
    ]
    r = requests.post(f"{url}/generate", json={"text": ["Record: "] * N, "sampling_params": params}, timeout=600)
    assert r.status_code == 200, r.text
    texts = [o["text"] for o in r.json()]
    for text in texts:
        jsonschema.validate(json.loads(text), SCHEMA)
    return texts


def blanks(text: str) -> list[str]:
    """The whitespace runs outside string literals."""
    return re.findall(r"[ \t\n\r]+", STRING.sub('""', text))


@pytest.mark.slow
def test_whitespace_key_order_and_integers(server):
    for text in generate(server.url, None):  # compact, declared order, integers as digits
        value = json.loads(text)
        assert blanks(text) == [] and list(value) == list(SCHEMA["properties"]), text
        assert all(type(x) is int for x in [value["id"], *value["tags"]]), text
    spaced = generate(server.url, {"whitespace": "any"})
    assert all(len(run) <= 8 for t in spaced for run in blanks(t))  # up to 4 on each side of a mark
    assert any(blanks(t) for t in spaced)  # the random model does take the blanks it is offered
    for text in generate(server.url, {"indent": 2}, max_new_tokens=96):
        assert ", " not in STRING.sub('""', text) and '":' not in STRING.sub('""', text).replace('": ', "")
        assert all(run == " " or re.fullmatch(r"(\n(  )*)+", run) for run in blanks(text)), text
    orders = {tuple(json.loads(t)) for t in generate(server.url, {"key_order": "any"})}
    assert len(orders) > 1  # keys come in more than the declared order


@pytest.mark.slow
def test_openai_response_format_extension_and_bad_options(server):
    body = {
        "prompt": "Record: ",
        "max_tokens": 96,
        "temperature": 1.0,
        "seed": 5,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "r", "schema": SCHEMA},
            "json_schema_options": {"indent": 2},
        },
    }
    r = requests.post(f"{server.url}/v1/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    text = r.json()["choices"][0]["text"]
    jsonschema.validate(json.loads(text), SCHEMA)
    assert all(run == " " or re.fullmatch(r"(\n(  )*)+", run) for run in blanks(text)), text
    bad = {"text": "x", "sampling_params": {"json_schema": SCHEMA, "json_schema_options": {"indnt": 2}}}
    r = requests.post(f"{server.url}/generate", json=bad, timeout=60)
    assert r.status_code == 400 and "json_schema_options: unknown option(s) indnt" in r.text
    unique = {"type": "array", "items": {"type": "object"}, "uniqueItems": True, "maxItems": 2}  # free-form items
    indented = {"json_schema": unique, "max_new_tokens": 8, "json_schema_options": {"indent": 2}}  # not compact
    strict = {"text": "x", "sampling_params": indented}
    assert requests.post(f"{server.url}/generate", json=strict, timeout=60).status_code == 400
    lenient = {
        "text": "x",
        "sampling_params": {**indented, "json_schema_options": {"indent": 2, "lenient": True}},
    }
    r = requests.post(f"{server.url}/generate", json=lenient, timeout=60)
    assert r.status_code == 200, r.text
