"""A seeded generator of malformed or hostile requests, every one of which must get a 4xx: broken
JSON, wrong types, out-of-range values, unknown fields, huge prompts and ids, invalid Unicode,
invalid regexes, schemas and grammars, deep nesting."""

from __future__ import annotations

import json
import random
from typing import Iterator

JSON = {"Content-Type": "application/json"}
CHAT = [{"role": "user", "content": "hi"}]


def _native(rng: random.Random) -> dict:
    bad_params = [
        {"max_new_tokens": rng.choice([-1, "ten", 1.5, None and 0 or [], 10**6])},
        {"temperature": rng.choice([-0.5, "hot", [], {}])},
        {"top_p": rng.choice([0, 1.5, -1, "x"])},
        {"top_k": rng.choice([0, -2, 1.5, "k"])},
        {"min_p": rng.choice([-0.1, 2])},
        {"seed": rng.choice([2**64, -(2**63) - 1, "s", 1.5])},
        {"skip_special_tokens": rng.choice([0, 1, "no", None and 1 or []])},
        {"spaces_between_special_tokens": rng.choice(["yes", 2])},
        {"ignore_eos": rng.choice([1, "true"])},
        {"stop": rng.choice([[1], [""], {"a": 1}])},
        {"stop_token_ids": rng.choice([[-1], [10**9], ["a"]])},
        {"n": rng.choice([0, -1, "2"])},
        {"frequency_penalty": rng.choice([3, -3])},
        {"repetition_penalty": rng.choice([0, 3])},
        {"bogus_" + str(rng.randrange(99)): 1},
        {"regex": rng.choice(["(unclosed", "[z-a]", "a{3,1}", "(?P<x>a)(?P<x>b)", 5])},
        {"json_schema": rng.choice(["{not json", '{"type": "nonsense"}', 7])},
        {"ebnf": rng.choice(["start: (", "start: undefined_rule", 3])},
        {"choices": rng.choice([[], [1, 2], "abc"])},
        {"regex": "a", "choices": ["b"]},
    ]
    bodies = [
        {"text": "x", "sampling_params": rng.choice(bad_params)},
        {"text": rng.choice([5, [], [1, 2], {"a": 1}, True])},
        {"input_ids": rng.choice([[], [-1], [10**9], ["a"], [[1], "b"], [2**64]])},
        {"text": "x", "input_ids": [1]},
        {},
        {"text": "x", "stream": rng.choice(["yes", 1])},
        {"text": "x", "return_logprob": rng.choice(["no", 2])},
        {"text": "x", "top_logprobs_num": -1},
        {"text": "x", "rid": rng.choice([5, "", ["a"]])},
        {"text": ["a", "b"], "rid": ["same", "same"]},
        {"text": "x " * rng.randrange(5000, 9000)},
        {"input_ids": [1] * rng.randrange(5000, 9000)},
        {"text": "x", "unknown_field": rng.randrange(9)},
        {"text": "x", "timeout": rng.choice([0, -1, "soon"])},
        {"text": ["a"] * 3, "sampling_params": [{}, {}]},
    ]
    return rng.choice(bodies)


def _openai(rng: random.Random) -> tuple[str, dict]:
    completion = [
        {"prompt": "x", "max_tokens": rng.choice(["many", -1, 10**6])},
        {"prompt": ""},
        {"prompt": [2**64], "echo": True},
        {"prompt": [[1, -5]]},
        {"prompt": "x", "logit_bias": {"abc": 5}},
        {"prompt": "x", "n": rng.choice([0, 1000])},
        {"prompt": "x", "temperature": rng.choice([-1, "t"])},
        {"prompt": "x", "seed": 2**64},
        {"prompt": "x", "suffix": "s"},
        {"prompt": "x", "logprobs": 50},
        {"prompt": [[1]] * 128, "n": 128},
        {"prompt": 5},
    ]
    chat = [
        {"model": "m"},
        {"messages": []},
        {"messages": [{"role": "wizard", "content": "x"}]},
        {"messages": CHAT, "top_p": 2},
        {"messages": CHAT, "response_format": {"type": "json_schema"}},
        {"messages": CHAT, "response_format": {"type": "xml"}},
        {"messages": CHAT, "json_schema": {"type": "object"}, "response_format": {"type": "json_object"}},
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}]},
        {"messages": CHAT, "regex": "[z-a]", "stream": True},
        {"messages": CHAT, "top_logprobs": 3},
        {"messages": CHAT, "max_completion_tokens": 10**6},
        {"messages": "hi"},
    ]
    if rng.random() < 0.5:
        return "/v1/completions", rng.choice(completion)
    return "/v1/chat/completions", rng.choice(chat)


def _raw(rng: random.Random) -> str:
    return rng.choice(
        [
            '{"text": "unterminated',
            "[" * rng.randrange(100, 100_000),
            '{"text": "x", "rid": ' + "9" * 5000 + "}",
            '{"text": "\\ud800"}',
            '{"text": "x", "rid": "\\udfff"}',
            '{"\\ud83d": 1}',
            "null",
            "[1, 2]",
            '"text"',
            '{"text": "x", "sampling_params": {"temperature": NaN}}',
            '{"text": "x", "sampling_params": {"top_p": Infinity}}',
            '{"text": "x"' + ', "a": {' * 200 + "}" * 200 + "}",
            "",
            "\x00\x01",
        ]
    )


def hostile_requests(count: int, seed: int) -> Iterator[tuple[str, bytes, dict]]:
    """`count` (path, body bytes, headers) triples."""
    rng = random.Random(seed)
    for _ in range(count):
        kind = rng.random()
        if kind < 0.45:
            path, body = "/generate", json.dumps(_native(rng))
        elif kind < 0.8:
            path, body = _openai(rng)
            body = json.dumps(body)
        else:
            path, body = rng.choice(["/generate", "/v1/completions", "/v1/chat/completions"]), _raw(rng)
        yield path, body.encode("utf-8", "surrogatepass"), JSON
