"""Unit tests of sgl_lang's IR, interpreter and ProgramState against an in-process fake backend."""

import subprocess
import sys
import threading
import time

import pytest

import sgl_lang as sgl
from sgl_lang.backend.base import BackendError, BaseBackend
from sgl_lang.backend.runtime_endpoint import choice_token_logprobs
from sgl_lang.chat_template import PLAIN_TEMPLATE, chat_template_from_jinja
from sgl_lang.ir import SglSelect

CHATML = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nBe nice.<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class FakeBackend(BaseBackend):
    """Answers gen with "<k>" (k = call number); fails on prompts containing FAIL; records calls."""

    def __init__(self, template=PLAIN_TEMPLATE, delay=0.0, stream_chunks=("he", "ll", "o")):
        self.template, self.delay, self.stream_chunks = template, delay, stream_chunks
        self.calls, self.lock = [], threading.Lock()

    def get_chat_template(self):
        return self.template

    def _record(self, kind, text, **extra):
        with self.lock:
            self.calls.append({"kind": kind, "text": text, **extra})
            return len(self.calls)

    def commit_lazy_operations(self, s):
        self._record("commit", s.text_)

    def generate(self, s, sampling_params):
        k = self._record("gen", s.text_, params=sampling_params)
        time.sleep(self.delay)
        if "FAIL" in s.text_:
            raise BackendError("HTTP 400: the server refused FAIL", 400)
        return f"<{k}>", {"prompt_tokens": len(s.text_), "cached_tokens": 0}

    def generate_stream(self, s, sampling_params):
        self._record("stream", s.text_, params=sampling_params)
        for chunk in self.stream_chunks:
            time.sleep(self.delay)
            yield chunk, {}

    def select(self, s, choices, temperature, choices_method):
        self._record("select", s.text_)
        scores = [-float(len(c)) for c in choices]  # shortest choice wins
        entries = [[[score, 1, c]] for score, c in zip(scores, choices)]
        return choices_method(
            choices=choices,
            normalized_prompt_logprobs=scores,
            input_token_logprobs=entries,
            output_token_logprobs=[[] for _ in choices],
        )


@pytest.fixture
def backend():
    return FakeBackend()


def test_text_order_and_variables(backend):
    @sgl.function
    def prog(s, topic):
        s += "About " + topic + ": "
        s += sgl.gen("a", max_tokens=5)
        s += " then " + sgl.gen("b", stop="\n") + "."

    state = prog.run(topic="cats", backend=backend)
    assert state["a"] == "<1>" and state["b"] == "<2>"
    assert state.text() == "About cats: <1> then <2>."
    assert [c["text"] for c in backend.calls] == ["About cats: ", "About cats: <1> then "]
    assert backend.calls[0]["params"].max_new_tokens == 5
    assert backend.calls[1]["params"].stop == "\n" and backend.calls[1]["params"].max_new_tokens == 128


def test_a_finished_state_can_be_extended(backend):
    @sgl.function
    def prog(s):
        s += "A" + sgl.gen("x")

    state = prog.run(backend=backend)
    state += "B" + sgl.gen("y")
    assert state.text() == "A<1>B<2>" and state["y"] == "<2>"
    assert backend.calls[1]["params"].max_new_tokens == 128


def test_run_sampling_defaults_are_overridden_by_gen(backend):
    @sgl.function
    def prog(s):
        s += sgl.gen("a") + sgl.gen("b", temperature=0.5)

    prog.run(backend=backend, temperature=0, max_new_tokens=7)
    first, second = (c["params"] for c in backend.calls)
    assert (first.temperature, first.max_new_tokens) == (0, 7)
    assert (second.temperature, second.max_new_tokens) == (0.5, 7)


def test_roles_plain_template_and_messages(backend):
    @sgl.function
    def chat(s):
        s += sgl.system("Sys.")
        s += sgl.user("Hi")
        s += sgl.assistant(sgl.gen("reply"))
        with s.user():
            s += "More"
        s += sgl.assistant_begin() + sgl.gen("again") + sgl.assistant_end()

    state = chat.run(backend=backend)
    assert state.text() == "Sys.\n\nQuestion: Hi\n\nAnswer: <1>\n\nQuestion: More\n\nAnswer: <2>\n\n"
    assert state.messages() == [
        {"role": "system", "content": "Sys."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<1>"},
        {"role": "user", "content": "More"},
        {"role": "assistant", "content": "<2>"},
    ]
    assert backend.calls[0]["text"].endswith("Answer: ")


def test_chat_template_from_jinja_adds_default_system_prompt():
    template = chat_template_from_jinja(CHATML)
    assert template.get_prefix_and_suffix("user") == ("<|im_start|>user\n", "<|im_end|>\n")
    assert template.get_prefix_and_suffix("assistant") == ("<|im_start|>assistant\n", "<|im_end|>\n")
    assert template.default_system_prompt == "Be nice."
    backend = FakeBackend(template)

    @sgl.function
    def chat(s):
        s += sgl.user("Hi") + sgl.assistant(sgl.gen("r"))

    state = chat.run(backend=backend)
    expected = (
        "<|im_start|>system\nBe nice.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<1><|im_end|>\n"
    )
    assert state.text() == expected
    assert state.messages()[0] == {"role": "system", "content": "Be nice."}
    # Rendering the template itself for the same conversation gives the same text.
    from jinja2 import Template

    assert Template(CHATML).render(messages=state.messages()[1:], add_generation_prompt=False) == expected


def test_fork_commits_prefix_runs_branches_concurrently_and_join_gathers():
    backend = FakeBackend(delay=0.3)

    @sgl.function
    def prog(s):
        s += "Q: "
        forks = s.fork(4)
        forks += [f"branch {i}: " for i in range(4)]
        forks += sgl.gen("ans")
        forks.join()
        s += "done"

    start = time.monotonic()
    state = prog.run(backend=backend)
    elapsed = time.monotonic() - start
    assert elapsed < 4 * 0.3, f"branches ran one after another ({elapsed:.2f}s)"
    assert backend.calls[0] == {"kind": "commit", "text": "Q: "}
    assert sorted(c["text"] for c in backend.calls[1:]) == [f"Q: branch {i}: " for i in range(4)]
    assert sorted(state["ans"]) == sorted(f"<{k}>" for k in range(2, 6))
    assert state.text() == "Q: done"


def test_fork_branch_variables_and_copy(backend):
    @sgl.function
    def prog(s):
        s += "X"
        forks = s.fork(2)
        for i, f in enumerate(forks):
            f += str(i) + sgl.gen("v")
        s += forks[0]["v"] + forks[1]["v"]
        forks.join()

    state = prog.run(backend=backend)
    assert set(state["v"]) == {"<2>", "<3>"}
    copy = state.copy()
    copy += "Y"
    assert copy.text() == state.text() + "Y"


def test_backend_error_surfaces_in_run_and_state(backend):
    @sgl.function
    def prog(s, word):
        s += word + sgl.gen("x")
        s += sgl.gen("y")

    with pytest.raises(sgl.ProgramError, match="server refused FAIL") as info:
        prog.run(word="FAIL", backend=backend)
    state = info.value.state
    assert isinstance(state.error(), BackendError)
    with pytest.raises(sgl.ProgramError):
        state["x"]
    assert [c["kind"] for c in backend.calls] == ["gen"]  # the queue stops at the failure


def test_run_batch_keeps_order_and_isolates_errors():
    backend = FakeBackend(delay=0.01)

    @sgl.function
    def prog(s, word):
        s += word + ":" + sgl.gen("x")

    words = [f"w{i}" for i in range(10)]
    words[3] = "FAIL"
    states = prog.run_batch([{"word": w} for w in words], backend=backend, progress_bar=True, num_threads=4)
    assert len(states) == 10
    for word, state in zip(words, states):
        if word == "FAIL":
            assert "server refused" in str(state.error())
        else:
            assert state.error() is None and state.text().startswith(word + ":<")


def test_invalid_arguments_raise_before_any_request(backend):
    @sgl.function
    def prog(s, word):
        s += word + sgl.gen("x")

    with pytest.raises(TypeError, match="unknown sampling parameter 'max_tokenz'"):
        sgl.gen("x", max_tokenz=3)
    with pytest.raises(ValueError, match="does not compile"):
        sgl.gen("x", regex="(unclosed")
    with pytest.raises(TypeError, match="temperature must be"):
        sgl.gen("x", temperature="hot")
    with pytest.raises(ValueError, match="at most one"):
        sgl.gen("x", regex="a", json_schema={"type": "string"})
    with pytest.raises(TypeError, match="unexpected keyword"):
        prog.run(word="a", colour="red", backend=backend)
    with pytest.raises(TypeError, match="top_k must be"):
        prog.run(word="a", top_k=1.5, backend=backend)
    with pytest.raises(TypeError):
        prog.run_batch([{"word": "a"}, {"wrd": "b"}], backend=backend)
    assert backend.calls == []


def test_dtype_and_gen_int_map_to_regex_on_the_wire():
    sampling, request = sgl.gen_int("n", max_tokens=4).sampling_params.to_request()
    assert sampling == {"max_new_tokens": 4, "regex": sgl.REGEX_INT}
    sampling, _ = sgl.gen("f", dtype=float).sampling_params.to_request()
    assert sampling["regex"] == sgl.REGEX_FLOAT
    sampling, _ = sgl.gen_string("s").sampling_params.to_request()
    assert sampling["regex"] == sgl.REGEX_STR
    sampling, request = sgl.gen("g", grammar="json", return_logprob=True, stop=["a", "b"]).sampling_params.to_request()
    assert sampling == {"ebnf": "json", "stop": ["a", "b"]} and request == {"return_logprob": True}
    sampling, _ = sgl.gen("j", json_schema={"type": "integer"}).sampling_params.to_request()
    assert sampling == {"json_schema": '{"type": "integer"}'}


def test_select_and_gen_choices_alias(backend):
    @sgl.function
    def prog(s):
        s += "Pick: " + sgl.select("a", choices=["long one", "short"]) + " / "
        s += sgl.gen("b", choices=["xx", "y", "zzz"], choices_method=sgl.greedy_token_selection)

    state = prog.run(backend=backend)
    assert (state["a"], state["b"]) == ("short", "y")
    assert state.text() == "Pick: short / y"
    assert state.get_meta_info("a")["normalized_prompt_logprobs"] == [-8.0, -5.0]
    assert "greedy_logprob_matrix" in state.get_meta_info("b")


def test_choices_methods_on_hand_made_logprobs():
    choices = ["organ", "organism", "antidisestablishmentarianism"]
    inputs = [[[-0.1, 1, None]], [[-0.1, 1, None], [-0.3, 2, None]], [[-0.4, 3, None], [-0.05, 4, None]]]
    normalized = [-0.1, -0.2, -0.225]
    common = dict(
        choices=choices,
        normalized_prompt_logprobs=normalized,
        input_token_logprobs=inputs,
        output_token_logprobs=[[], [], []],
    )
    assert sgl.token_length_normalized(**common).decision == "organ"
    greedy = sgl.greedy_token_selection(**common)
    # organ and organism tie on the first token; organ is padded with its mean (-0.1) > -0.3.
    assert greedy.decision == "organ" and greedy.meta_info["greedy_logprob_matrix"][0] == [-0.1, -0.1]
    unconditional = [[[None, 1, None]], [[None, 1, None], [-2.0, 2, None]], [[None, 3, None], [-0.1, 4, None]]]
    decision = sgl.unconditional_likelihood_normalized(**common, unconditional_token_logprobs=unconditional)
    assert decision.meta_info["normalized_unconditional_prompt_logprobs"] == pytest.approx([-0.1, 0.8, -0.175])
    assert decision.decision == "organism"
    with pytest.raises(ValueError):
        sgl.unconditional_likelihood_normalized(**common)


def test_choice_token_logprobs_drops_the_prefix_token_unless_healed():
    entries = [[-1.0, 10, "Answer:"], [-2.0, 11, " Paris"]]
    assert choice_token_logprobs("Q? Answer:", entries, prompt_len=3) == entries[1:]
    healed = [[-1.5, 12, " Par"], [-2.0, 13, "is"]]  # the boundary token spans prefix and choice
    assert choice_token_logprobs("Q? Answer: ", healed, prompt_len=3) == healed
    assert choice_token_logprobs("", entries, prompt_len=0) == entries


def test_streaming_text_iter_matches_final_text():
    backend = FakeBackend(delay=0.05)

    @sgl.function
    def prog(s):
        s += "Say: " + sgl.gen("word") + "!"

    state = prog.run(backend=backend, stream=True)
    chunks = list(state.text_iter())
    assert "".join(chunks) == state.text() == "Say: hello!"
    assert len(chunks) >= 2  # text arrives in pieces (pieces that arrive together may merge)
    var_state = prog.run(backend=backend, stream=True)
    assert "".join(var_state.text_iter("word")) == "hello"
    assert var_state["word"] == "hello"


def test_async_text_iter():
    import asyncio

    backend = FakeBackend(delay=0.01)

    @sgl.function
    def prog(s):
        s += "A" + sgl.gen("w")

    async def collect():
        state = prog.run(backend=backend, stream=True)
        return [chunk async for chunk in state.text_async_iter("w")]

    assert "".join(asyncio.run(collect())) == "hello"


def test_var_scope_bind_and_trace(backend):
    @sgl.function
    def prog(s, name, tone="kind"):
        s += sgl.system("You are " + tone + ".")
        with s.var_scope("greeting"):
            s += "Hello " + name
        s += sgl.user("Tell me more") + sgl.assistant(sgl.gen("more"))

    state = prog.bind(name="Ann").run(backend=backend)
    assert state["greeting"] == "Hello Ann"
    traced = prog.trace(backend=backend)
    assert traced.prefix == "You are kind.\n\nHello "
    full = prog.trace(name="Bob", backend=backend)
    assert full.prefix == "You are kind.\n\nHello BobQuestion: Tell me more\n\nAnswer: "
    assert full.model_calls == ["gen"]
    assert backend.calls == [backend.calls[0]]  # tracing sent nothing


def test_run_batch_precaches_the_constant_prefix():
    class CachingBackend(FakeBackend):
        def cache_prefix(self, prefix):
            self._record("cache_prefix", prefix)

    backend = CachingBackend()

    @sgl.function
    def prog(s, q):
        s += "Shared instructions. " + q + sgl.gen("a")

    prog.run_batch([{"q": "a"}, {"q": "b"}], backend=backend)
    assert backend.calls[0] == {"kind": "cache_prefix", "text": "Shared instructions. "}


def test_unknown_variable_and_default_backend(backend):
    @sgl.function
    def prog(s):
        s += sgl.gen("x")

    sgl.set_default_backend(backend)
    try:
        state = prog.run()
    finally:
        sgl.set_default_backend(None)
    with pytest.raises(KeyError):
        state["nope"]
    assert "x" in state and sgl.flush_cache() is False


def test_import_does_not_pull_torch_or_runtime():
    code = (
        "import sgl_lang, sys; heavy = {'torch', 'sgl_runtime', 'openai', 'transformers'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_speculative_text_cuts_at_stop_token_limit_and_eos():
    from sgl_lang.speculative import SpeculativeText

    params = sgl.SglSamplingParams(stop="\n", max_new_tokens=4)
    spec = SpeculativeText()
    spec.reset("ab\nX: cdef\nrest", token_offsets=list(range(15)))
    assert spec.take(params) == "ab"
    spec.consume_constant("\nX: ")
    assert spec.take(params) == "cdef"  # stop at 4 chars, equal to the 4-token limit
    spec.consume_constant("\nY: ")  # mismatch: "\nrest" does not start with it
    assert spec.text == "" and spec.take(params) is None
    spec.reset("abcdefgh\n", token_offsets=[0, 2, 4, 6, 8])
    assert spec.take(params) == "abcdefgh"  # the 4-token cap falls on the stop itself
    spec.reset("abcdefghij", token_offsets=[0, 2, 4, 6, 8])
    assert spec.take(sgl.SglSamplingParams(stop="\n", max_new_tokens=2)) == "abcd"
    spec.reset("tail", ends_at_eos=True)
    assert spec.take(sgl.SglSamplingParams(stop="\n")) == "tail"  # the model stopped by itself
    spec.reset("no stop here")
    assert spec.take(sgl.SglSamplingParams(stop="\n")) is None  # cannot know where it ends
    assert not SpeculativeText.eligible(sgl.SglSamplingParams(stop="\n", regex="a+"))
    assert not SpeculativeText.eligible(sgl.SglSamplingParams())


def test_speculation_on_a_backend_without_it_makes_plain_calls(backend):
    @sgl.function(num_api_spec_tokens=16)
    def prog(s):
        s += "A" + sgl.gen("x", stop="\n") + "B" + sgl.gen("y", stop="\n")

    state = prog.run(backend=backend)
    assert state.text() == "A<1>B<2>" and len(backend.calls) == 2


def test_gen_with_choices_ignores_other_sampling_params_but_checks_names(backend):
    node = sgl.gen("c", choices=["a", "b"], max_tokens=5, temperature=0)
    assert isinstance(node, SglSelect) and node.choices == ["a", "b"] and node.temperature == 0
    with pytest.raises(TypeError, match="unknown sampling parameter"):
        sgl.gen("c", choices=["a"], max_tokenz=5)


def test_multimodal_primitives_say_they_are_unsupported():
    with pytest.raises(NotImplementedError, match="sgl.image is not supported"):
        sgl.image("cat.png")
