"""One front half: the offline Engine and the HTTP server's /generate give the same answers
(greedy) and the same errors for the same 20 requests, because both go through the same
TokenizerManager (parsing, validation, constraint compilation, n > 1, stop strings,
detokenization)."""

from __future__ import annotations

import pytest
import requests

from sgl_runtime.engine import Engine
from sgl_runtime.sampling_params import InvalidRequestError

GREEDY = {"temperature": 0, "max_new_tokens": 8}

# (body of POST /generate): the Engine gets the same fields (text -> prompt).
REQUESTS = [
    {"text": "The capital of France is", "sampling_params": GREEDY},
    {"text": "Once upon a time", "sampling_params": {**GREEDY, "max_new_tokens": 3}},
    {"text": ["a", "b c"], "sampling_params": GREEDY},
    {"input_ids": [1, 2, 3, 4, 5], "sampling_params": GREEDY},
    {"text": "Count:", "sampling_params": {**GREEDY, "n": 2}},
    {"text": "x", "sampling_params": {**GREEDY, "stop": [" the", "e"]}},
    {"text": "Digits:", "sampling_params": {**GREEDY, "regex": "[0-9]{3}-[a-z]{2}"}},
    {"text": "Pick:", "sampling_params": {**GREEDY, "choices": ["red", "green", "blue"]}},
    {
        "text": "JSON:",
        "sampling_params": {
            **GREEDY,
            "max_new_tokens": 24,
            "json_schema": '{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}',
        },
    },
    {
        "text": "Logprobs",
        "sampling_params": GREEDY,
        "return_logprob": True,
        "top_logprobs_num": 2,
        "logprob_start_len": 0,
    },
    {"text": "Seeded", "sampling_params": {"temperature": 1.0, "seed": 7, "max_new_tokens": 6}},
    # bad requests: the same 400 message from both
    {"text": "hi", "sampling_params": {"max_new_tokenz": 3}},
    {"text": "hi", "sampling_params": {"temperature": -1}},
    {"text": "hi", "sampling_params": {"top_p": 0}},
    {"text": "", "sampling_params": GREEDY},
    {"input_ids": [], "sampling_params": GREEDY},
    {"input_ids": [10**9], "sampling_params": GREEDY},
    {"text": "hi", "sampling_params": {"max_new_tokens": 10**6}},
    {"text": "hi", "sampling_params": {"regex": "(unclosed"}},
    {"text": "hi", "sampling_params": {"json_schema": '{"type": "object", "required": 5}'}},
]


@pytest.fixture(scope="module")
def engine():
    # the shared server's settings (tests/server_fixtures.DEFAULT_ARGS), on the same demo model
    e = Engine("random-demo", device="cpu", max_total_tokens=16384)
    yield e
    e.shutdown()


def _engine_answer(engine: Engine, body: dict):
    kwargs = {("prompt" if key == "text" else key): value for key, value in body.items()}
    try:
        return engine.generate(**kwargs)
    except InvalidRequestError as exc:
        return {"error": str(exc)}


def _http_answer(url: str, body: dict):
    response = requests.post(f"{url}/generate", json=body, timeout=120)
    if response.status_code == 400:
        return {"error": response.json()["error"]["message"]}
    assert response.status_code == 200, response.text
    return response.json()


def _comparable(answer):
    if isinstance(answer, list):
        return [_comparable(a) for a in answer]
    if "error" in answer:
        return answer
    meta = {
        key: value
        for key, value in answer["meta_info"].items()
        if key not in ("id", "e2e_latency", "cached_tokens", "forward_passes")
    }
    return {"text": answer["text"], "output_ids": answer["output_ids"], "meta_info": meta}


def test_engine_and_server_agree_on_twenty_requests(engine, server):
    assert len(REQUESTS) == 20
    errors = 0
    for body in REQUESTS:
        ours, theirs = _engine_answer(engine, body), _http_answer(server.url, body)
        assert _comparable(ours) == _comparable(theirs), body
        errors += isinstance(ours, dict) and "error" in ours
    assert errors == 9  # every bad request was refused by both, with the same message
