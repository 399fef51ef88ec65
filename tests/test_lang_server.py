"""sgl_lang against a real sgl_runtime server on the demo model (the session's shared server, through
`RuntimeEndpoint`; `sgl_lang.Runtime` launching its own server is tested in test_server_lifecycle.py
and by the README demo in test_examples.py)."""

import json
import re

import jsonschema
import pytest
import requests
from jinja2.sandbox import ImmutableSandboxedEnvironment
from server_fixtures import wait_idle

import sgl_lang as sgl


@pytest.fixture(scope="module")
def backend(server):
    return sgl.RuntimeEndpoint(server.url)


@pytest.fixture(scope="module")
def tokenizer():
    from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

    return load_qwen2_tokenizer()


def _generate(backend, body):
    res = requests.post(backend.base_url + "/generate", json=body, timeout=120)
    assert res.status_code == 200, res.text
    return res.json()


def test_text_is_the_concatenation_of_constants_and_variables(backend):
    choices = [" red", " green", " blue"]

    @sgl.function
    def prog(s):
        s += "Colour:" + sgl.select("colour", choices=choices)
        s += "\nWords: " + sgl.gen("words", max_tokens=8, stop="\n")
        s += "\nCount: " + sgl.gen_int("count", max_tokens=4)
        s += "\nFlag: " + sgl.gen("flag", dtype=bool)
        s += "\nAlso: " + sgl.gen("alias", choices=["yes", "no"])

    state = prog.run(backend=backend, temperature=0)
    expected = (
        f"Colour:{state['colour']}\nWords: {state['words']}\nCount: {state['count']}"
        f"\nFlag: {state['flag']}\nAlso: {state['alias']}"
    )
    assert state.text() == expected
    assert state["colour"] in choices and state["alias"] in ("yes", "no")
    assert re.fullmatch(sgl.REGEX_INT, state["count"]) and state["flag"] in ("True", "False")
    meta = state.get_meta_info("words")
    assert meta["completion_tokens"] >= 1 and meta["prompt_tokens"] > 0


def test_roles_follow_the_models_chat_template(backend):
    @sgl.function
    def chat(s):
        s += sgl.user("Hello")
        s += sgl.assistant(sgl.gen("reply", max_tokens=6))
        with s.user():
            s += "And then?"
        s += sgl.assistant(sgl.gen("reply2", max_tokens=6))

    state = chat.run(backend=backend, temperature=0)
    messages = state.messages()
    assert [m["role"] for m in messages][-4:] == ["user", "assistant", "user", "assistant"]
    assert messages[-1]["content"] == state["reply2"] and messages[-3]["content"] == state["reply"]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(backend.model_info["chat_template"])
    rendered = template.render(messages=messages[-4:], add_generation_prompt=False, bos_token="", eos_token="")
    assert state.text() == rendered


@pytest.mark.parametrize(
    "method", ["token_length_normalized", "greedy_token_selection", "unconditional_likelihood_normalized"]
)
def test_select_scores_equal_direct_prompt_logprobs(backend, tokenizer, method):
    prefix = "The weather today is"
    choices = [" sunny", " rainy and cold", " unknown"]

    @sgl.function
    def prog(s):
        s += prefix + sgl.select("w", choices=choices, choices_method=getattr(sgl, method))

    state = prog.run(backend=backend)
    meta = state.get_meta_info("w")
    prefix_len = len(tokenizer.encode(prefix))
    direct = []
    for choice in choices:
        out = _generate(
            backend,
            {
                "text": prefix + choice,
                "sampling_params": {"max_new_tokens": 0},
                "return_logprob": True,
                "logprob_start_len": prefix_len,
            },
        )
        values = [entry[0] for entry in out["meta_info"]["input_token_logprobs"]]
        assert len(values) == len(tokenizer.encode(prefix + choice)) - prefix_len
        direct.append(sum(values) / len(values))
    assert meta["normalized_prompt_logprobs"] == pytest.approx(direct, abs=1e-4)
    assert state["w"] in choices
    if method == "token_length_normalized":
        assert state["w"] == choices[direct.index(max(direct))]
    if method == "unconditional_likelihood_normalized":
        assert len(meta["normalized_unconditional_prompt_logprobs"]) == len(choices)


def test_fork_branches_hit_the_cached_prefix(backend, tokenizer):
    prefix = "A shared instruction that every forked branch reuses. " * 8

    @sgl.function
    def prog(s):
        s += prefix
        forks = s.fork(4)
        forks += [f"Branch {i}:" for i in range(4)]
        forks += sgl.gen("out", max_tokens=4)
        forks.join()
        return [f.get_meta_info("out") for f in forks]

    wait_idle(backend.base_url)
    sgl.flush_cache(backend)
    state = prog.run(backend=backend, temperature=0)
    prefix_tokens = len(tokenizer.encode(prefix))
    assert len(state["out"]) == 4
    for meta in state.ret_value:
        assert meta["cached_tokens"] >= prefix_tokens - 1, meta


def test_run_batch_of_32_keeps_input_order(backend):
    @sgl.function
    def prog(s, i):
        s += f"Item {i}:" + sgl.gen("x", max_tokens=3)

    states = prog.run_batch([{"i": i} for i in range(32)], backend=backend, temperature=0, progress_bar=True)
    assert len(states) == 32
    for i, state in enumerate(states):
        assert state.error() is None
        assert state.text() == f"Item {i}:" + state["x"]


def test_streaming_matches_non_streaming(backend):
    @sgl.function
    def prog(s):
        s += "Once upon a time" + sgl.gen("story", max_tokens=16)

    streamed = prog.run(backend=backend, stream=True, temperature=0)
    chunks = list(streamed.text_iter("story"))
    plain = prog.run(backend=backend, temperature=0)
    assert "".join(chunks) == streamed["story"] == plain["story"]
    assert streamed.text() == plain.text()


def test_regex_and_json_schema_constraints(backend):
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"enum": ["x", "y"]}},
        "required": ["a", "b"],
        "additionalProperties": False,
    }

    @sgl.function
    def prog(s):
        s += "Phone: " + sgl.gen("phone", regex=r"[0-9]{3}-[0-9]{4}", max_tokens=16)
        s += "\nJSON: " + sgl.gen("obj", json_schema=schema, max_tokens=48)

    state = prog.run(backend=backend, temperature=0)
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", state["phone"])
    jsonschema.validate(json.loads(state["obj"]), schema)


def test_server_error_surfaces_with_its_message(backend):
    @sgl.function
    def prog(s):
        s += "x" + sgl.gen("y", regex=r"(a)\1")  # `re` compiles a backreference; a DFA cannot

    with pytest.raises(sgl.ProgramError, match="HTTP 400") as info:
        prog.run(backend=backend)
    assert "regex" in str(info.value).split("HTTP 400", 1)[1]
    assert isinstance(info.value.state.error(), sgl.BackendError)


def test_server_info_flush_cache_and_prefix_precaching(backend, tokenizer):
    assert isinstance(sgl.get_server_info(backend), dict)
    wait_idle(backend.base_url)
    assert sgl.flush_cache(backend) is True

    @sgl.function
    def prog(s, question):
        s += "You answer questions about geography in one word. " * 4
        s += "Q: " + question + "\nA:" + sgl.gen("a", max_tokens=2)

    prefix = prog.cache_prefix(backend)
    assert prefix == "You answer questions about geography in one word. " * 4 + "Q: "
    state = prog.run(question="Capital of France?", backend=backend, temperature=0)
    assert state.get_meta_info("a")["cached_tokens"] >= len(tokenizer.encode(prefix)) - 2
