"""Tool calling over the OpenAI API with the official `openai` SDK, on tiny random Qwen2.5
checkpoints (adversarial: their text is noise, nudged to write <tool_call> often): every returned
call names a declared tool and its arguments validate against that tool's schema, for
tool_choice required, a named tool and auto, streamed and not, with and without jump-forward."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest

from tests.long_form import examples
from tests.server_fixtures import start_server
from tests.tool_fixtures import TOOL_CALL_ID, make_chat_checkpoint

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a place.",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {
                        "type": "object",
                        "properties": {
                            "city": {"type": "string", "maxLength": 12},
                            "country": {"enum": ["FR", "DE", "JP"]},
                        },
                        "required": ["city"],
                        "additionalProperties": False,
                    },
                    "unit": {"enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["location", "unit"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "maxLength": 16},
                    "filters": {
                        "type": "array",
                        "maxItems": 2,
                        "items": {
                            "type": "object",
                            "properties": {
                                "field": {"enum": ["year", "author"]},
                                "value": {"type": "string", "maxLength": 6},
                            },
                            "required": ["field", "value"],
                            "additionalProperties": False,
                        },
                    },
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "book_table",
            "parameters": {
                "type": "object",
                "properties": {
                    "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
                    "guests": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": 2,
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string", "maxLength": 6},
                                "age": {"type": "integer", "minimum": 0, "maximum": 120},
                            },
                            "required": ["name"],
                            "additionalProperties": False,
                        },
                    },
                    "vip": {"type": "boolean"},
                },
                "required": ["date", "guests"],
                "additionalProperties": False,
            },
        },
    },
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
CHOICES = {"required": "required", "named": {"type": "function", "function": {"name": "book_table"}}, "auto": "auto"}
MESSAGES = [{"role": "user", "content": "Plan my evening in Paris."}]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_chat_checkpoint("qwen2", tmp_path_factory.mktemp("qwen25_tools"), {TOOL_CALL_ID: 10.5})


@pytest.fixture(scope="module", params=["jump_forward", pytest.param("no_jump_forward", marks=pytest.mark.slow)])
def client(request, checkpoint):
    extra = ("--disable-jump-forward",) if request.param == "no_jump_forward" else ()
    # a generous compile timeout: on a loaded 2-core machine the first structural-tag compile took over the default 10 s
    server = start_server(
        "--model-path", checkpoint, "--max-running-requests", "16", "--constraint-compile-timeout", "60", *extra
    )
    try:
        yield openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=120)
    finally:
        server.stop()


def ask(client, choice, stream: bool, seed: int, **extra) -> tuple[str, list[tuple[str, str]], str]:
    """(content, [(name, arguments)], finish_reason) of one request."""
    args = dict(
        model="default",
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice=CHOICES[choice],
        max_tokens=120,
        seed=seed,
        stream=stream,
        **extra,
    )
    if not stream:
        choice0 = client.chat.completions.create(**args).choices[0]
        calls = [(c.function.name, c.function.arguments) for c in choice0.message.tool_calls or []]
        return choice0.message.content or "", calls, choice0.finish_reason
    content, calls, reason, ids = "", {}, None, {}
    for chunk in client.chat.completions.create(**args):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for c in delta.tool_calls or []:
            if c.id is not None:
                assert c.index not in ids, "a call's id is sent once"
                ids[c.index] = c.id
                calls[c.index] = [c.function.name, ""]
            calls[c.index][1] += c.function.arguments or ""
        reason = chunk.choices[0].finish_reason or reason
    return content, [tuple(calls[i]) for i in sorted(calls)], reason


def run_many(client, choice, stream: bool, count: int, **extra) -> list:
    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(lambda i: ask(client, choice, stream, i, **extra), range(count)))


def check_calls(results, choice) -> int:
    made = 0
    for content, calls, reason in results:
        if choice != "auto":
            assert calls, f"tool_choice {choice} returned no call (content {content[:80]!r}, finish {reason})"
            assert reason in ("tool_calls", "length")  # length: the budget ran out after a complete call
        if choice == "named":
            assert [name for name, _ in calls] == ["book_table"]
        for name, arguments in calls:
            assert name in SCHEMAS, name
            jsonschema.validate(json.loads(arguments), SCHEMAS[name])
        made += len(calls)
    return made


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("choice", list(CHOICES))
def test_tool_calls_valid_by_construction(client, choice, stream):
    made = check_calls(run_many(client, choice, stream, 10 if choice != "auto" else 16), choice)
    if choice == "auto":
        assert made > 0, "the nudged model should call tools in auto mode now and then"


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("choice", list(CHOICES))
def test_tool_calls_valid_at_scale(client, choice, stream):
    """Many concurrent requests (32; 200 in the long form, SGL_LONG_TESTS=1), 16 at a time."""
    check_calls(run_many(client, choice, stream, examples(32, 200)), choice)


def test_single_call_when_not_parallel(client):
    for _, calls, _ in run_many(client, "required", False, 8, parallel_tool_calls=False):
        assert len(calls) == 1


def test_tool_history_round_trip(client):
    """An assistant tool call and the tool's answer go back into the prompt; tool_choice none
    returns plain text and no calls."""
    history = MESSAGES + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": json.dumps({"location": {"city": "Paris"}, "unit": "celsius"}),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees, sunny"},
    ]
    out = client.chat.completions.create(
        model="default", messages=history, tools=TOOLS, tool_choice="none", max_tokens=8
    )
    assert out.choices[0].message.tool_calls is None and out.choices[0].message.content is not None


def test_bad_tool_input_is_400(client):
    with pytest.raises(openai.BadRequestError, match="nope"):
        client.chat.completions.create(
            model="default",
            messages=MESSAGES,
            tools=TOOLS,
            max_tokens=4,
            tool_choice={"type": "function", "function": {"name": "nope"}},
        )
    bad = [
        {
            "type": "function",
            "function": {
                "name": "weird",
                "parameters": {"type": "object", "properties": {"x": {"type": "string", "pattern": "(a)\\1"}}},
            },
        }
    ]
    with pytest.raises(openai.BadRequestError, match=r"tool 'weird': its parameters cannot be compiled.*pattern"):
        client.chat.completions.create(
            model="default", messages=MESSAGES, tools=bad, tool_choice="required", max_tokens=4
        )


def test_example_tool_call_round_trip(client):
    """examples/tool_call.py against the random model: the call is valid, answered, and the model replies."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "tool_call_example", Path(__file__).parents[1] / "examples/tool_call.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    call, answer = example.converse(client, "default", max_tokens=48)
    assert call["name"] == "get_weather" and call["result"]["city"] == call["arguments"]["city"]
    assert isinstance(answer, str)
