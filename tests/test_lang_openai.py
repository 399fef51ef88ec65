"""sgl_lang.OpenAI: API speculative execution and errors against a scripted OpenAI-compatible
server, and the DSL's primitives against the session's shared server through its /v1 endpoints."""

import json
import re

import jsonschema
import pytest
from http_fixtures import JsonHandler, serving

import sgl_lang as sgl

DOCS = ["Profile\nName: Steve\nBirthday: 1955\nJob: CEO\nEND", "Other\nName: Ann\nBorn: 1970\nJob: Pilot\nEND"]
CHAT_SCRIPT = {"Make a profile": "Name: Steve\nBirthday: 1955\nJob: CEO\n"}


def continue_text(prompt: str) -> str:
    """The scripted model: continue whichever document starts with the prompt."""
    for doc in DOCS:
        if doc.startswith(prompt):
            return doc[len(prompt) :]
    return "?\n" + "z" * 200


def cut(text: str, body: dict) -> tuple:
    stops = body.get("stop") or []
    stops = [stops] if isinstance(stops, str) else stops
    found = [text.find(s) for s in stops if s in text]
    if found:
        return text[: min(found)], "stop"
    limit = body.get("max_tokens") or 16
    return (text[:limit], "length") if len(text) > limit else (text, "stop")


class ScriptedOpenAI(JsonHandler):
    calls: list = []
    flaky_failures = 0

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ScriptedOpenAI.calls.append(body)
        if self.headers.get("Authorization") == "Bearer bad":
            return self._reply(401, {"error": {"message": "Incorrect API key provided"}})
        if body["model"] == "missing":
            return self._reply(404, {"error": {"message": "The model `missing` does not exist"}})
        if body["model"] == "flaky" and ScriptedOpenAI.flaky_failures > 0:
            ScriptedOpenAI.flaky_failures -= 1
            return self._reply(429, {"error": {"message": "Rate limit reached"}})
        if body["model"] == "overloaded" and ScriptedOpenAI.flaky_failures > 0:
            ScriptedOpenAI.flaky_failures -= 1
            return self._reply(503, {"error": {"message": "The server is overloaded"}})
        if self.path.endswith("/chat/completions"):
            return self._reply(200, self._chat(body))
        return self._reply(200, self._completion(body))

    def _completion(self, body):
        text, reason = cut(continue_text(body["prompt"]), body)
        logprobs = None
        if body.get("logprobs") is not None:
            logprobs = {
                "tokens": list(text),
                "token_logprobs": [-0.5] * len(text),
                "text_offset": list(range(len(text))),
                "top_logprobs": None,
            }
        return {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "text": text, "finish_reason": reason, "logprobs": logprobs}],
            "usage": {
                "prompt_tokens": len(body["prompt"]),
                "completion_tokens": len(text),
                "total_tokens": len(body["prompt"]) + len(text),
            },
        }

    def _chat(self, body):
        messages = body["messages"]
        users = [m["content"] for m in messages if m["role"] == "user"]
        script = CHAT_SCRIPT.get(users[-1], "?\n")
        if messages[-1]["role"] == "assistant":  # continuing a partial turn
            partial = messages[-1]["content"]
            script = script[len(partial) :] if script.startswith(partial) else "?\n"
        text, reason = cut(script, body)
        prompt_len = sum(len(m["content"]) for m in messages)
        return {
            "id": "chat-1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": reason,
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_len,
                "completion_tokens": len(text),
                "total_tokens": prompt_len + len(text),
            },
        }


@pytest.fixture(scope="module")
def scripted_url():
    with serving(ScriptedOpenAI) as url:
        yield f"{url}/v1"


def character(header: str):
    def body(s):
        s += header + "\nName: " + sgl.gen("name", stop="\n", max_tokens=8)
        s += "\nBirthday: " + sgl.gen("bday", stop="\n", max_tokens=8)
        s += "\nJob: " + sgl.gen("job", stop="\n", max_tokens=8)

    return body


def run_counted(program, backend):
    backend.token_usage.reset()
    ScriptedOpenAI.calls.clear()
    state = program.run(backend=backend, temperature=0)
    return state, backend.token_usage.api_calls, backend.token_usage.prompt_tokens


def test_speculative_execution_fills_chained_gens_from_one_call(scripted_url):
    backend = sgl.OpenAI("scripted", base_url=scripted_url, is_chat_model=False)
    spec_state, spec_calls, spec_prompt = run_counted(
        sgl.function(character("Profile"), num_api_spec_tokens=64), backend
    )
    over_generated = continue_text("Profile\nName: ")[:64]
    plain_state, plain_calls, plain_prompt = run_counted(sgl.function(character("Profile")), backend)
    assert (spec_calls, plain_calls) == (1, 3)
    assert spec_prompt < plain_prompt
    assert over_generated.startswith(
        f"{spec_state['name']}\nBirthday: {spec_state['bday']}\nJob: {spec_state['job']}\n"
    )
    assert (spec_state["name"], spec_state["bday"], spec_state["job"]) == ("Steve", "1955", "CEO")
    assert spec_state.text() == plain_state.text()


def test_speculation_mismatch_falls_back_to_real_calls(scripted_url):
    backend = sgl.OpenAI("scripted", base_url=scripted_url, is_chat_model=False)
    spec_state, spec_calls, _ = run_counted(sgl.function(character("Other"), num_api_spec_tokens=64), backend)
    plain_state, _, _ = run_counted(sgl.function(character("Other")), backend)
    assert spec_state["name"] == "Ann"  # from the first call; "Born:" then mismatches "Birthday:"
    assert spec_calls == 3  # the mismatch costs the extra calls
    assert spec_state.text() == plain_state.text()
    assert (spec_state["bday"], spec_state["job"]) == (plain_state["bday"], plain_state["job"]) == ("?", "?")


def test_speculative_execution_in_one_chat_assistant_turn(scripted_url):
    backend = sgl.OpenAI("scripted", base_url=scripted_url, is_chat_model=True)

    def body(s):
        s += sgl.user("Make a profile")
        s += sgl.assistant(
            "Name: "
            + sgl.gen("name", stop="\n", max_tokens=8)
            + "\nBirthday: "
            + sgl.gen("bday", stop="\n", max_tokens=8)
            + "\nJob: "
            + sgl.gen("job", stop="\n")
        )

    state, calls, _ = run_counted(sgl.function(body, num_api_spec_tokens=64), backend)
    assert calls == 1 and (state["name"], state["bday"], state["job"]) == ("Steve", "1955", "CEO")
    assert state.messages()[-1] == {"role": "assistant", "content": "Name: Steve\nBirthday: 1955\nJob: CEO"}
    with pytest.raises(sgl.ProgramError, match="cannot continue an assistant turn"):
        sgl.function(body).run(backend=backend)


def test_chat_gen_outside_an_assistant_turn_is_a_clear_error(scripted_url):
    backend = sgl.OpenAI("scripted", base_url=scripted_url, is_chat_model=True)
    with pytest.raises(sgl.ProgramError, match="only inside an assistant turn"):
        sgl.function(lambda s: s.__iadd__("Hi" + sgl.gen("x"))).run(backend=backend)


def test_server_errors_surface_and_rate_limits_are_retried(scripted_url):
    program = sgl.function(lambda s: s.__iadd__("Profile\nName: " + sgl.gen("x", stop="\n")))
    with pytest.raises(sgl.ProgramError, match="HTTP 404.*model `missing` does not exist"):
        program.run(backend=sgl.OpenAI("missing", base_url=scripted_url, is_chat_model=False))
    with pytest.raises(sgl.ProgramError, match="HTTP 401.*Incorrect API key"):
        program.run(backend=sgl.OpenAI("x", base_url=scripted_url, api_key="bad", is_chat_model=False))
    ScriptedOpenAI.flaky_failures = 2
    flaky = sgl.OpenAI("flaky", base_url=scripted_url, is_chat_model=False, max_retries=2)
    assert program.run(backend=flaky)["x"] == "Steve"
    ScriptedOpenAI.flaky_failures = 5
    with pytest.raises(sgl.ProgramError, match="HTTP 429.*Rate limit"):
        program.run(backend=sgl.OpenAI("flaky", base_url=scripted_url, is_chat_model=False, max_retries=1))
    assert ScriptedOpenAI.flaky_failures == 3  # bounded: one try plus one retry
    ScriptedOpenAI.flaky_failures = 1
    overloaded = sgl.OpenAI("overloaded", base_url=scripted_url, is_chat_model=False, max_retries=1)
    assert program.run(backend=overloaded)["x"] == "Steve"
    ScriptedOpenAI.flaky_failures = 5
    with pytest.raises(sgl.ProgramError, match="HTTP 503.*overloaded"):
        program.run(backend=sgl.OpenAI("overloaded", base_url=scripted_url, is_chat_model=False, max_retries=0))
    ScriptedOpenAI.flaky_failures = 0


# ---------------------------------------------------------------- the project's own server, via /v1
@pytest.fixture(scope="module")
def native(server):
    """The shared server's native endpoint (its model name, and reference select scores)."""
    return sgl.RuntimeEndpoint(server.url)


@pytest.fixture(scope="module")
def completion(server, native):
    return sgl.OpenAI(native.model_info["served_model_name"], base_url=server.url + "/v1", is_chat_model=False)


@pytest.fixture(scope="module")
def chat(server, native):
    return sgl.OpenAI(native.model_info["served_model_name"], base_url=server.url + "/v1", is_chat_model=True)


SCHEMA = {
    "type": "object",
    "properties": {"k": {"enum": ["x", "y"]}, "b": {"type": "boolean"}},
    "required": ["k", "b"],
    "additionalProperties": False,
}


def test_completion_model_primitives(completion, native):
    @sgl.function
    def prog(s):
        s += "Hello:" + sgl.gen("a", max_tokens=5, stop="\n", frequency_penalty=0.5)
        s += " n=" + sgl.gen_int("n", max_tokens=4)
        s += " j=" + sgl.gen("j", json_schema=SCHEMA, max_tokens=24)
        s += " pick:" + sgl.select("c", choices=[" red", " blue", " green"])

    before = completion.token_usage.prompt_tokens
    state = prog.run(backend=completion, temperature=0)
    assert state.text() == f"Hello:{state['a']} n={state['n']} j={state['j']} pick:{state['c']}"
    assert re.fullmatch(sgl.REGEX_INT, state["n"])
    jsonschema.validate(json.loads(state["j"]), SCHEMA)
    scores = state.get_meta_info("c")["normalized_prompt_logprobs"]
    assert state["c"] == [" red", " blue", " green"][scores.index(max(scores))]
    # The echo/logprobs scores equal the runtime's own select scores for the same prefix.
    native = sgl.function(
        lambda s: s.__iadd__(state.text()[: -len(state["c"])] + sgl.select("c", choices=[" red", " blue", " green"]))
    ).run(backend=native)
    assert scores == pytest.approx(native.get_meta_info("c")["normalized_prompt_logprobs"], abs=1e-4)
    assert completion.token_usage.prompt_tokens > before and completion.token_usage.completion_tokens > 0


def test_chat_model_primitives_and_streaming(chat):
    @sgl.function
    def prog(s):
        s += sgl.system("You are terse.")
        s += sgl.user("Say something.")
        s += sgl.assistant(sgl.gen("r", max_tokens=8))
        s += sgl.user("Pick a colour.")
        s += sgl.assistant(sgl.select("col", choices=["red", "blue"]))
        s += sgl.user("JSON please.")
        s += sgl.assistant(sgl.gen("j", json_schema=SCHEMA, max_tokens=24))

    state = prog.run(backend=chat, temperature=0)
    roles = [m["role"] for m in state.messages()]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert state["col"] in ("red", "blue") and state.get_meta_info("col")["method"] == "constrained_choice"
    jsonschema.validate(json.loads(state["j"]), SCHEMA)
    streamed = prog.run(backend=chat, temperature=0, stream=True)
    assert "".join(streamed.text_iter("r")) == state["r"]
    assert streamed.text() == state.text()


def test_speculative_execution_on_the_demo_model_matches_plain_runs(completion):
    spec_state, _, _ = run_counted(sgl.function(character("Profile"), num_api_spec_tokens=24), completion)
    plain_state, _, _ = run_counted(sgl.function(character("Profile")), completion)
    assert spec_state.text() == plain_state.text()
