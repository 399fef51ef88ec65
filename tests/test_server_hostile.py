"""Requests that used to kill the server or get a 5xx (issue 15): each must be a 4xx in the API's
error shape naming the field, and the server must keep serving the next request."""

from __future__ import annotations

import pytest
import requests

CHAT = [{"role": "user", "content": "hi"}]
HUGE_SEED = 2**64

# (path, raw body text or JSON-able body, words the message must contain)
HOSTILE = [
    # used to kill the scheduler (torch.Generator seeded before validation)
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 4, "seed": HUGE_SEED}}, ["seed"]),
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 4, "seed": -(2**63) - 1}}, ["seed"]),
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 4, "seed": 2**64 - 1, "n": 2}}, ["seed"]),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 2, "seed": HUGE_SEED}, ["seed"]),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "seed": HUGE_SEED}, ["seed"]),
    # used to kill the detokenizer (non-boolean flags)
    (
        "/generate",
        {"text": "hi", "sampling_params": {"max_new_tokens": 2, "skip_special_tokens": 0}},
        ["skip_special_tokens"],
    ),
    (
        "/generate",
        {"text": "hi", "sampling_params": {"max_new_tokens": 2, "skip_special_tokens": "no"}},
        ["skip_special_tokens"],
    ),
    (
        "/generate",
        {"text": "hi", "sampling_params": {"max_new_tokens": 2, "spaces_between_special_tokens": "x"}},
        ["spaces_between_special_tokens"],
    ),
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2, "ignore_eos": 1}}, ["ignore_eos"]),
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2, "no_stop_trim": "y"}}, ["no_stop_trim"]),
    (
        "/generate",
        {"text": "hi", "sampling_params": {"max_new_tokens": 2, "stop_token_ids": [10**9]}},
        ["stop_token_ids", "vocabulary"],
    ),
    # used to be 5xx
    ("/v1/completions", {"prompt": [2**64], "echo": True, "max_tokens": 1}, ["prompt", "vocabulary"]),
    ("/v1/completions", {"prompt": [[5, 10**7]], "max_tokens": 1}, ["prompt", "vocabulary"]),
    ("/generate", "[" * 100_000, ["nested"]),
    ("/generate", '{"text": "hi", "rid": ' + "9" * 5000 + "}", ["json"]),
    ("/generate", '{"text": "\\ud800"}', ["text", "surrogate"]),
    ("/generate", '{"text": "hi", "rid": "\\udfff"}', ["rid", "surrogate"]),
    ("/generate", '{"text": "hi", "\\ud800": 1}', ["surrogate"]),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "\\ud800"}]}', ["surrogate"]),
    # used to be accepted
    ("/v1/completions", '{"prompt": "hi", "temperature": NaN}', ["temperature"]),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', ["temperature"]),
    ("/generate", '{"text": "hi", "sampling_params": {"temperature": NaN}}', ["temperature"]),
    ("/generate", '{"text": "hi", "sampling_params": {"top_p": Infinity}}', ["top_p"]),
    (
        "/v1/chat/completions",
        {"messages": CHAT, "json_schema": {"type": "object"}, "response_format": {"type": "json_object"}},
        ["response_format", "json_schema"],
    ),
    ("/v1/completions", {"prompt": [[1]] * 128, "n": 128, "max_tokens": 1}, ["sequences"]),
    # OpenAI field names in OpenAI errors
    ("/v1/completions", {"prompt": "hi", "max_tokens": 100_000}, ["max_tokens"]),
    ("/v1/chat/completions", {"messages": CHAT, "max_completion_tokens": 100_000}, ["max_completion_tokens"]),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
        ["images are not supported by this server"],
    ),
]


def post(server, path, body):
    if isinstance(body, str):
        return requests.post(
            f"{server.url}{path}",
            data=body.encode("utf-8", "surrogatepass"),
            headers={"Content-Type": "application/json"},
            timeout=120,
        )
    return requests.post(f"{server.url}{path}", json=body, timeout=120)


@pytest.mark.parametrize("path,body,words", HOSTILE, ids=[f"{i}-{p}" for i, (p, _, _) in enumerate(HOSTILE)])
def test_hostile_request_is_4xx_and_server_survives(server, path, body, words):
    r = post(server, path, body)
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert all(w.lower() in error["message"].lower() for w in words), error
    if path.startswith("/v1"):
        assert "sampling_params" not in error["message"] and "max_new_tokens" not in error["message"], error
    ok = requests.post(
        f"{server.url}/generate", json={"text": "alive", "sampling_params": {"max_new_tokens": 1}}, timeout=120
    )
    assert ok.status_code == 200, ok.text


def test_openai_error_names_the_openai_param(server):
    r = post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 100_000})
    assert r.json()["error"]["param"] == "max_tokens"


@pytest.mark.parametrize(
    "method,path,status",
    [("GET", "/nope", 404), ("GET", "/v1/nope", 404), ("GET", "/generate", 405), ("DELETE", "/v1/completions", 405)],
)
def test_unknown_routes_and_methods_in_error_shape(server, method, path, status):
    r = requests.request(method, f"{server.url}{path}", timeout=30)
    assert r.status_code == status
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == status


def test_body_size_limit_is_413(server):
    r = requests.post(f"{server.url}/generate", data=b'{"text": "' + b"a" * (65 * 2**20) + b'"}', timeout=120)
    assert r.status_code == 413 and "body" in r.json()["error"]["message"]
