"""Unit tests for the tool-call formats and parser, the reasoning split, the structural_tag
constraint (on the real Qwen2.5 tokenizer) and sgl_lang.separate_reasoning."""

from __future__ import annotations

import json

import pytest

import sgl_lang as sgl
from sgl_runtime.constrained import ConstraintError, compile_constraint
from sgl_runtime.server.reasoning import get_reasoning_format, split_reasoning
from sgl_runtime.server.tool_calls.constraint import auto_node, required_node, structural_tag
from sgl_runtime.server.tool_calls.formats import FORMATS, detect_format, get_format
from sgl_runtime.server.tool_calls.parser import scan
from tests.test_lang_unit import FakeBackend

CALLS = [("get_weather", '{"city": "a}b\\"<tool_call>"}'), ("noop", "{}")]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_prefix_scans_consistently(name):
    fmt = FORMATS[name]
    text = "Let me check. " + fmt.render(CALLS) + " Done."
    whole = scan(text, fmt)
    assert [(c.name, c.arguments) for c in whole.calls] == CALLS
    assert whole.content.split() == ["Let", "me", "check.", "Done."]
    sent_content, sent_args = "", {}
    for n in range(len(text) + 1):  # what a stream sends only grows, and ends as the whole parse
        part = scan(text[:n], fmt, final=False)
        assert part.content.startswith(sent_content[: len(part.content)]) and len(part.content) >= len(sent_content)
        sent_content = part.content
        for i, call in enumerate(part.calls):
            assert call.arguments.startswith(sent_args.get(i, ""))
            sent_args[i] = call.arguments
    assert [sent_args[i] for i in range(len(CALLS))] == [a for _, a in CALLS]


def test_malformed_block_is_content_and_names_resolve():
    assert scan("hi <tool_call> oops", FORMATS["qwen25"]).content == "hi <tool_call> oops"
    assert get_format("hermes") is FORMATS["qwen25"]
    with pytest.raises(ValueError, match="unknown tool-call parser"):
        get_format("nope")
    assert detect_format("... <tool_call> ...") is FORMATS["qwen25"]
    assert detect_format("{{ '[TOOL_CALLS]' }}") is FORMATS["mistral"]
    assert detect_format("plain chatml") is None


def test_reasoning_split():
    qwen3, r1 = get_reasoning_format("qwen3"), get_reasoning_format("deepseek-r1")
    assert split_reasoning("<think>\nhmm\n</think>\n\nok", qwen3, False) == ("hmm", "ok", True)
    assert split_reasoning("no think", qwen3, False) == ("", "no think", True)
    assert split_reasoning("hmm</think>ok", r1, True) == ("hmm", "ok", True)
    assert split_reasoning("<think>hm</thi", qwen3, False, final=False) == ("hm", "", False)
    assert qwen3.opens_in_reasoning("<|im_start|>assistant\n<think>\n")
    assert not qwen3.opens_in_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n")


@pytest.fixture(scope="module")
def tokenizer():
    from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

    return load_qwen2_tokenizer()


def test_structural_tag_languages(tokenizer):
    fmt = FORMATS["qwen25"]
    tools = [("get_weather", SCHEMA)]
    auto = compile_constraint("structural_tag", structural_tag(auto_node(fmt, tools, True)), tokenizer)
    call = fmt.render([("get_weather", '{"city":"Paris"}')])
    assert auto.accepts("free text " + call + " more " + call)
    assert auto.accepts("no call at all")
    assert not auto.accepts("x " + fmt.render([("get_weather", '{"town":"Paris"}')]))
    assert not auto.accepts("x <tool_call>\nnot json")
    required = compile_constraint("structural_tag", structural_tag(required_node(fmt, tools, False)), tokenizer)
    assert required.accepts(call) and not required.accepts("x" + call) and not required.accepts(call + "\n" + call)
    m = auto.matcher()
    for t in tokenizer.encode("hi "):
        m.advance(t)
    m.advance(tokenizer.convert_tokens_to_ids("<tool_call>"))  # the added token spells the trigger
    assert m.forced_string().startswith('\n{"name": "get_weather", "arguments": {"city":"')
    with pytest.raises(ConstraintError, match="root.sequence"):
        compile_constraint("structural_tag", {"root": {"sequence": [{"bogus": 1}]}}, tokenizer)


def test_sglang_structural_tag_spec(tokenizer):
    spec = {
        "type": "structural_tag",
        "triggers": ["<fn="],
        "structures": [{"begin": "<fn=w>", "schema": SCHEMA, "end": "</fn>"}],
    }
    c = compile_constraint("structural_tag", json.dumps(spec), tokenizer)
    assert c.accepts('a <fn=w>{"city":"x"}</fn> b') and not c.accepts('a <fn=w>{"c":1}</fn>')


def test_frontend_separate_reasoning():
    class Thinking(FakeBackend):
        def generate(self, s, sampling_params):
            return "<think>\nweighing it\n</think>\n\nforty-two", {}

    @sgl.function
    def program(s):
        s += "Q: " + sgl.separate_reasoning(sgl.gen("answer"), model_type="qwen3")

    state = program.run(backend=Thinking())
    assert state["answer"] == "forty-two"
    assert state["answer_reasoning_content"] == "weighing it"
