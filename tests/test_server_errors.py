"""Bad input gets a 4xx naming the problem, never disturbs a concurrent well-formed request,
and the server keeps serving."""

from __future__ import annotations

import json
import threading

import pytest
import requests

# (path, body or raw text, expected status, words the message must contain)
BAD_REQUESTS = [
    ("/generate", '{"text": "unterminated', 400, ["not valid json"]),
    ("/generate", [1, 2, 3], 400, ["json object"]),
    ("/generate", {"text": 5}, 400, ["text"]),
    ("/generate", {"text": "x", "stream": "yes"}, 400, ["stream", "boolean"]),
    ("/generate", {"text": "x", "sampling_params": {"max_new_tokens": "ten"}}, 400, ["max_new_tokens"]),
    ("/generate", {"text": "x", "sampling_params": "hot"}, 400, ["sampling_params"]),
    ("/generate", {"text": "x", "bogus": 1}, 400, ["unknown", "bogus"]),
    ("/generate", {"text": "x", "sampling_params": {"bogus": 1}}, 400, ["unknown", "bogus"]),
    ("/generate", {"text": "x", "sampling_params": {"temperature": -1}}, 400, ["temperature"]),
    ("/generate", {"text": "x", "sampling_params": {"top_p": 0}}, 400, ["top_p"]),
    ("/generate", {"text": "x", "sampling_params": {"max_new_tokens": -1}}, 400, ["max_new_tokens"]),
    ("/generate", {"text": "x", "sampling_params": {"top_k": 0}}, 400, ["top_k"]),
    ("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 5000}}, 400, ["context length"]),
    ("/generate", {"input_ids": [1] * 5000}, 400, ["context length"]),
    ("/generate", {"text": ""}, 400, ["empty"]),
    ("/generate", {"input_ids": []}, 400, ["empty"]),
    ("/generate", {"text": "x", "input_ids": [1]}, 400, ["exactly one"]),
    ("/generate", {}, 400, ["exactly one"]),
    ("/generate", {"input_ids": [10**9]}, 400, ["vocabulary"]),
    ("/generate", {"text": "x", "return_logprob": "no"}, 400, ["return_logprob"]),
    ("/generate", {"text": "x", "sampling_params": {"regex": "(unclosed"}}, 400, ["regex"]),
    ("/generate", {"text": "x", "sampling_params": {"json_schema": "{not json"}}, 400, ["json_schema"]),
    ("/generate", {"text": "x", "stream": True, "sampling_params": {"regex": "(unclosed"}}, 400, ["regex"]),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "stream": True, "regex": "[z-a]"},
        400,
        ["regex"],
    ),
    ("/generate", {"text": "x", "sampling_params": {"regex": "a", "choices": ["b"]}}, 400, ["one constraint"]),
    ("/generate", {"text": ["a", "b"], "sampling_params": [{}]}, 400, ["sampling_params", "2"]),
    ("/generate", {"text": ["a", "b"], "rid": ["same", "same"]}, 400, ["rid", "distinct"]),
    ("/v1/completions", '{"prompt": ', 400, ["json"]),
    ("/v1/completions", {"prompt": "x", "max_tokens": "many"}, 400, ["max_tokens"]),
    ("/v1/completions", {"prompt": "x", "unknown_field": 1}, 400, ["unknown_field"]),
    ("/v1/completions", {"prompt": ""}, 400, ["empty"]),
    ("/v1/completions", {"prompt": "x", "lora_path": "adapter"}, 400, ["lora_path", "not supported"]),
    ("/v1/chat/completions", {"model": "m"}, 400, ["messages"]),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400, ["role"]),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_p": 2}, 400, ["top_p"]),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}},
        400,
        ["schema"],
    ),
]


def send(server, path, body):
    if isinstance(body, str):
        return requests.post(f"{server.url}{path}", data=body, headers={"Content-Type": "application/json"}, timeout=60)
    return requests.post(f"{server.url}{path}", json=body, timeout=60)


def test_bad_inputs_get_4xx_while_a_good_request_completes(server):
    good: dict = {}
    body = {
        "text": "A well-formed request",
        "stream": True,
        "sampling_params": {"max_new_tokens": 48, "ignore_eos": True, "temperature": 0},
    }

    def run_good():
        with requests.post(f"{server.url}/generate", json=body, stream=True, timeout=300) as r:
            lines = [line for line in r.iter_lines(decode_unicode=True) if line]
        good["last"] = json.loads(lines[-2][len("data: ") :])
        good["done"] = lines[-1]

    thread = threading.Thread(target=run_good)
    thread.start()
    failures = []
    for path, bad, status, words in BAD_REQUESTS:
        r = send(server, path, bad)
        message = (
            r.json().get("error", {}).get("message", "")
            if r.headers.get("content-type", "").startswith("application/json")
            else r.text
        )
        if r.status_code != status or not all(w.lower() in message.lower() for w in words):
            failures.append((path, bad if len(str(bad)) < 80 else str(bad)[:80], r.status_code, message))
        else:
            assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    thread.join(300)
    assert not failures, "\n".join(map(str, failures))
    assert good["done"] == "data: [DONE]"
    assert good["last"]["meta_info"]["completion_tokens"] == 48
    ok = requests.post(f"{server.url}/generate", json={"text": "still alive", "sampling_params": {"max_new_tokens": 2}})
    assert ok.status_code == 200 and ok.json()["meta_info"]["completion_tokens"] == 2


@pytest.mark.parametrize("path", ["/nope", "/v1/nope"])
def test_unknown_route_is_404(server, path):
    assert requests.get(f"{server.url}{path}").status_code == 404


def test_wrong_method_is_405(server):
    assert requests.get(f"{server.url}/generate").status_code == 405
