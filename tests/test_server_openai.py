"""The `openai` package's client against the real server's /v1 routes."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
import requests


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


def test_models(client):
    models = client.models.list().data
    assert [m.id for m in models] == ["sgl-demo"]


def test_completion(client):
    r = client.completions.create(model="sgl-demo", prompt="Once upon a time", max_tokens=5, temperature=0)
    assert r.object == "text_completion" and len(r.choices) == 1
    assert r.choices[0].finish_reason == "length" and r.choices[0].text
    assert r.usage.completion_tokens == 5 and r.usage.total_tokens == r.usage.prompt_tokens + 5


def test_completion_batch_and_n(client):
    r = client.completions.create(model="sgl-demo", prompt=["a", "b"], max_tokens=2, n=2, seed=1)
    assert sorted(c.index for c in r.choices) == [0, 1, 2, 3]
    assert r.usage.completion_tokens == 8


def test_completion_echo_logprobs_scores_prompt(client, server):
    """What the frontend's OpenAI backend uses to score choices: echo + logprobs, max_tokens 0."""
    prompt = "The sky is blue"
    r = client.completions.create(model="sgl-demo", prompt=prompt, max_tokens=0, echo=True, logprobs=1)
    choice = r.choices[0]
    assert choice.text == prompt
    lp = choice.logprobs
    assert "".join(lp.tokens) == prompt and lp.token_logprobs[0] is None
    assert all(x < 0 for x in lp.token_logprobs[1:])
    native = requests.post(
        f"{server.url}/generate",
        json={"text": prompt, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True, "logprob_start_len": 0},
    ).json()
    expected = [e[0] for e in native["meta_info"]["input_token_logprobs"]]
    assert lp.token_logprobs[1:] == pytest.approx(expected[1:], abs=1e-4)
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]


def test_completion_stream_with_usage(client):
    stream = client.completions.create(
        model="sgl-demo",
        prompt="Stream",
        max_tokens=4,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert chunks[-1].usage.completion_tokens == 4 and not chunks[-1].choices
    whole = client.completions.create(model="sgl-demo", prompt="Stream", max_tokens=4, temperature=0)
    assert text == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_chat_completion(client):
    r = client.chat.completions.create(
        model="sgl-demo",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}],
        max_tokens=4,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    msg = r.choices[0].message
    assert msg.role == "assistant" and r.usage.completion_tokens == 4
    content = r.choices[0].logprobs.content
    assert len(content) == 4 and "".join(t.token for t in content) == msg.content
    assert all(len(t.top_logprobs) == 2 for t in content)
    assert r.usage.prompt_tokens > 10  # the chat template wraps the messages


def test_chat_stream(client):
    messages = [{"role": "user", "content": "Tell me a story"}]
    chunks = list(
        client.chat.completions.create(
            model="sgl-demo", messages=messages, max_completion_tokens=5, temperature=0, stream=True
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    whole = client.chat.completions.create(model="sgl-demo", messages=messages, max_tokens=5, temperature=0)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"


def test_chat_json_schema_response_format(client):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    r = client.chat.completions.create(
        model="sgl-demo",
        messages=[{"role": "user", "content": "A person as JSON"}],
        max_tokens=60,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
    )
    data = json.loads(r.choices[0].message.content)
    jsonschema.validate(data, schema)  # JSON Schema's "integer" also admits e.g. 5e3


def test_regex_extension(client):
    r = client.completions.create(model="sgl-demo", prompt="Answer:", max_tokens=10, extra_body={"regex": "(yes|no)"})
    assert r.choices[0].text in ("yes", "no")


def test_openai_errors(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="sgl-demo", messages=[{"role": "user", "content": "x"}], temperature=-1)
    assert "temperature" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="sgl-demo", prompt="x", extra_body={"bogus_field": 1})
    assert "bogus_field" in err.value.message
    body = err.value.body
    assert set(body) >= {"message", "type", "param", "code"} or set(body.get("error", {})) >= {"message", "type"}
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="sgl-demo", prompt="x", extra_body={"regex": "(unclosed"})
    assert "regex" in err.value.message
