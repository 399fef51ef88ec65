"""RuntimeEndpoint's wire protocol against a tiny in-process HTTP server with character tokens.

The fake server follows the runtime's /generate contract: one token per character (id = ord),
prompt logprob entries [logprob, id, text] for tokens from logprob_start_len on (None for
token 0), list in -> list out, SSE streaming with cumulative text, JSON errors.
"""

import json

import pytest
from http_fixtures import JsonHandler, serving

import sgl_lang as sgl

CHAT_TEMPLATE = "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}[/]{% endfor %}"


def char_logprob(ch: str) -> float:
    return -((ord(ch) % 7) + 1) / 10


def prompt_entries(ids: list, start: int) -> list:
    """Tokens start .. len-1, each scored given those before it; token 0 has no logprob."""
    return [[None if i == 0 else char_logprob(chr(t)), t, chr(t)] for i, t in enumerate(ids) if i >= start]


class FakeRuntime(JsonHandler):
    requests_seen: list = []

    def do_GET(self):
        if self.path == "/get_model_info":
            return self._reply(200, {"model_path": "fake", "chat_template": CHAT_TEMPLATE})
        return self._reply(200, {"version": "fake"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        if self.headers.get("Authorization") != "Bearer secret":
            return self._reply(401, {"error": {"message": "invalid API key"}})
        FakeRuntime.requests_seen.append(body)
        if self.path != "/generate":
            return self._reply(200, {})
        params = body.get("sampling_params", {})
        if params.get("regex") == "BAD":
            return self._reply(400, {"error": {"message": "regex BAD is not supported"}})
        prompts = body.get("text", body.get("input_ids"))
        single = isinstance(prompts, str) or (prompts and isinstance(prompts[0], int))
        outs = [self._one(p, body) for p in ([prompts] if single else prompts)]
        if body.get("stream"):
            return self._stream(outs[0])
        return self._reply(200, outs[0] if single else outs)

    def _one(self, prompt, body) -> dict:
        ids = [ord(c) for c in prompt] if isinstance(prompt, str) else list(prompt)
        n = body.get("sampling_params", {}).get("max_new_tokens", 128)
        text = "xyz"[:n]
        meta = {"prompt_tokens": len(ids), "completion_tokens": len(text), "cached_tokens": 0}
        if body.get("return_logprob"):
            meta["input_token_logprobs"] = prompt_entries(ids, body.get("logprob_start_len", -1))
            meta["output_token_logprobs"] = []
        return {"text": text, "meta_info": meta}

    def _stream(self, out: dict) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(1, len(out["text"]) + 1):
            self.wfile.write(f"data: {json.dumps({'text': out['text'][:i], 'meta_info': {}})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture(scope="module")
def backend():
    with serving(FakeRuntime) as url:
        yield sgl.RuntimeEndpoint(url, api_key="secret")


def test_gen_sends_the_full_text_and_roles_use_the_reported_template(backend):
    @sgl.function
    def prog(s):
        s += sgl.user("hi") + sgl.assistant(sgl.gen("a", max_tokens=2, stop=["\n"], return_logprob=True))

    FakeRuntime.requests_seen.clear()
    state = prog.run(backend=backend)
    assert state.text() == "[user]hi[/][assistant]xy[/]"
    request = FakeRuntime.requests_seen[0]
    assert request["text"] == "[user]hi[/][assistant]"
    assert request["sampling_params"] == {"max_new_tokens": 2, "temperature": 1.0, "stop": ["\n"]}
    assert request["return_logprob"] is True


@pytest.mark.parametrize("method", [sgl.token_length_normalized, sgl.unconditional_likelihood_normalized])
def test_select_is_one_commit_and_one_batched_scoring_request(backend, method):
    prefix, choices = "Pick:", [" ab", " c", " zzzz"]

    @sgl.function
    def prog(s):
        s += prefix + sgl.select("x", choices=choices, choices_method=method)

    FakeRuntime.requests_seen.clear()
    state = prog.run(backend=backend)
    commit, scoring = FakeRuntime.requests_seen[:2]
    assert commit == {"text": prefix, "sampling_params": {"max_new_tokens": 0}}
    assert scoring["text"] == [prefix + c for c in choices] and scoring["logprob_start_len"] == len(prefix) - 1
    expected = [sum(char_logprob(ch) for ch in c) / len(c) for c in choices]
    meta = state.get_meta_info("x")
    assert meta["normalized_prompt_logprobs"] == pytest.approx(expected)
    assert [[e[2] for e in entries] for entries in meta["input_token_logprobs"]] == [list(c) for c in choices]
    if method is sgl.token_length_normalized:
        assert state["x"] == choices[expected.index(max(expected))]
    else:
        assert len(FakeRuntime.requests_seen) == 3  # plus one batched unconditional request
        unconditional = [sum(char_logprob(ch) for ch in c[1:]) for c in choices]
        scores = [(sum(char_logprob(ch) for ch in c) - u) / len(c) for c, u in zip(choices, unconditional)]
        assert meta["normalized_unconditional_prompt_logprobs"] == pytest.approx(scores)
        assert state["x"] == choices[scores.index(max(scores))]


def test_fork_commits_the_prefix_with_zero_new_tokens(backend):
    @sgl.function
    def prog(s):
        s += "shared"
        forks = s.fork(3)
        forks += sgl.gen("g", max_tokens=1)
        forks.join()

    FakeRuntime.requests_seen.clear()
    state = prog.run(backend=backend)
    assert FakeRuntime.requests_seen[0] == {"text": "shared", "sampling_params": {"max_new_tokens": 0}}
    assert state["g"] == ["x", "x", "x"]


def test_streaming_parses_cumulative_sse_chunks(backend):
    @sgl.function
    def prog(s):
        s += "go" + sgl.gen("g", max_tokens=3)

    state = prog.run(backend=backend, stream=True)
    assert "".join(state.text_iter("g")) == "xyz"  # chunks that arrive together may be merged
    assert state.text() == "goxyz"

    class Text:
        text_ = "go"

    chunks = [chunk for chunk, _ in backend.generate_stream(Text(), sgl.SglSamplingParams(max_new_tokens=3))]
    assert chunks == ["x", "y", "z"]


def test_http_errors_carry_the_servers_message(backend):
    @sgl.function
    def prog(s):
        s += "go" + sgl.gen("g", regex="BAD")

    with pytest.raises(sgl.ProgramError, match="HTTP 400.*regex BAD is not supported"):
        prog.run(backend=backend)
    no_key = sgl.RuntimeEndpoint(backend.base_url)
    with pytest.raises(sgl.ProgramError, match="HTTP 401.*invalid API key"):
        prog.run(backend=no_key)
    with pytest.raises(sgl.BackendError, match="cannot reach"):
        sgl.RuntimeEndpoint("http://127.0.0.1:9")
