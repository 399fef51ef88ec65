"""SGLang drop-in: the request-schema table against SGLang's own sources (when sglang is installed),
sgl_lang's exported names and signatures against sglang's, and the server answering what SGLang's
clients and its Model Gateway send."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import re
from pathlib import Path

import pytest
import requests

from sgl_runtime import sglang_fields as table

HAS_SGLANG = importlib.util.find_spec("sglang") is not None
needs_sglang = pytest.mark.skipif(not HAS_SGLANG, reason="sglang is not installed (the sglang-compat extra)")

SOURCES = [
    ("srt/managers/io_struct.py", "GenerateReqInput", table.GENERATE_REQ_INPUT),
    ("srt/sampling/sampling_params.py", "SamplingParams", table.SAMPLING_PARAMS),
    ("srt/entrypoints/openai/protocol.py", "CompletionRequest", table.COMPLETION_REQUEST),
    ("srt/entrypoints/openai/protocol.py", "ChatCompletionRequest", table.CHAT_COMPLETION_REQUEST),
]


def _sglang_fields(path: str, cls: str) -> dict[str, str]:
    """Field -> default source text of an SGLang class (and its local bases), read with ast."""
    root = Path(importlib.util.find_spec("sglang").submodule_search_locations[0])
    tree = ast.parse((root / path).read_text())
    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    out: dict[str, str] = {}
    for base in classes[cls].bases:
        if isinstance(base, ast.Name) and base.id in classes:
            out.update(_sglang_fields(path, base.id))
    for st in classes[cls].body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and not st.target.id.startswith("_"):
            out[st.target.id] = "REQUIRED" if st.value is None else _default_text(st.value)
        if isinstance(st, ast.FunctionDef) and st.name == "__init__":
            args = st.args.args[1:]
            defaults = [None] * (len(args) - len(st.args.defaults)) + st.args.defaults
            out.update({a.arg: "REQUIRED" if d is None else ast.unparse(d) for a, d in zip(args, defaults)})
    return out


def _default_text(node: ast.expr) -> str:
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("field", "Field"):
        return next((ast.unparse(k.value) for k in node.keywords if k.arg == "default"), "None")
    return ast.unparse(node)


@needs_sglang
@pytest.mark.parametrize("path,cls,ours", SOURCES, ids=[s[1] for s in SOURCES])
def test_the_table_lists_every_field_of_sglang_with_its_default(path, cls, ours):
    theirs = _sglang_fields(path, cls)
    assert set(ours) == set(theirs), f"{cls}: missing {set(theirs) - set(ours)}, extra {set(ours) - set(theirs)}"
    constants = {"TOP_K_ALL": -1, "DEFAULT_MODEL_NAME": None}
    for name, text in theirs.items():
        if text == "REQUIRED":
            assert ours[name].default is table.REQUIRED, name
            continue
        expected = constants[text] if text in constants else ast.literal_eval(text)
        assert ours[name].default == expected, f"{cls}.{name}: SGLang's default is {text}"


def test_honoured_openai_fields_are_declared_by_our_request_models():
    from sgl_runtime.server.openai_protocol import ChatCompletionRequest, CompletionRequest

    for entries, model in (
        (table.COMPLETION_REQUEST, CompletionRequest),
        (table.CHAT_COMPLETION_REQUEST, ChatCompletionRequest),
    ):
        honoured = {n for n, f in entries.items() if f.treatment == "honoured"}
        assert honoured <= set(model.model_fields), honoured - set(model.model_fields)


@needs_sglang
def test_sgl_lang_exports_sglang_program_names_with_the_same_signatures():
    import sglang

    import sgl_lang

    program_names = [
        n
        for n in dir(sglang)
        if not n.startswith("_")
        and n
        not in {
            "Anthropic",
            "Crusoe",
            "Engine",
            "LazyImport",
            "LiteLLM",
            "OpenAI",
            "ServerArgs",
            "VertexAI",
            "lang",
            "srt",
            "utils",
            "version",
            "test",
        }
    ]  # backends for other vendors, SGLang's own server, and submodules
    for name in program_names:
        assert hasattr(sgl_lang, name), f"sgl_lang lacks {name}"
        theirs, ours = getattr(sglang, name), getattr(sgl_lang, name)
        if not callable(theirs) or inspect.isclass(theirs) and name != "RuntimeEndpoint":
            continue
        expected = [(p.name, p.kind, _default(p.default)) for p in inspect.signature(theirs).parameters.values()]
        got = [(p.name, p.kind, _default(p.default)) for p in inspect.signature(ours).parameters.values()]
        assert got[: len(expected)] == expected, f"{name}: {got} != {expected}"
        assert all(p[1] == inspect.Parameter.KEYWORD_ONLY for p in got[len(expected) :]), name
    assert sgl_lang.global_config.default_backend is sgl_lang.get_default_backend()


def _default(value):
    return type(value).__name__ if callable(value) and not isinstance(value, type) else value


def test_image_and_video_say_not_supported_by_this_runtime():
    import sgl_lang as sgl

    for call in (lambda: sgl.image("cat.png"), lambda: sgl.video("cat.mp4", 4)):
        with pytest.raises(NotImplementedError, match="not supported by this runtime"):
            call()


# ---------------------------------------------------------------- against the server
def _generate(server, body, status=200):
    r = requests.post(f"{server.url}/generate", json=body, timeout=120)
    assert r.status_code == status, r.text
    return r.json()


def test_gateway_and_frontend_fields_are_accepted_and_unsupported_ones_named(server):
    out = _generate(
        server,
        {
            "text": "Hello",
            "model": "m",
            "background": False,
            "log_metrics": True,
            "no_logs": False,
            "return_bytes": False,
            "return_entropy": False,
            "return_hidden_states": False,
            "return_logprob": None,
            "sampling_params": {"max_new_tokens": 2, "stop_regex": [], "custom_params": None},
        },
    )
    assert out["meta_info"]["completion_tokens"] <= 2
    err = _generate(server, {"text": "x", "return_hidden_states": True}, 400)["error"]["message"]
    assert "return_hidden_states" in err and "not supported" in err
    assert "lora_path" in _generate(server, {"text": "x", "lora_path": "a"}, 400)["error"]["message"]
    assert (
        "stop_regexx"
        in _generate(server, {"text": "x", "sampling_params": {"stop_regexx": "a"}}, 400)["error"]["message"]
    )
    chat = requests.post(
        f"{server.url}/v1/chat/completions",
        timeout=120,
        json={
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
            "continue_final_message": False,
            "separate_reasoning": True,
            "stream_reasoning": True,
            "return_hidden_states": False,
        },
    )
    assert chat.status_code == 200, chat.text


def test_stop_regex_stops_and_trims_the_match(server):
    free = _generate(server, {"text": "Count:", "sampling_params": {"max_new_tokens": 24, "temperature": 0}})
    text = free["text"]
    assert len(text) > 4
    pattern = re.escape(text[2:4])  # a regex that the greedy output is known to match
    out = _generate(
        server, {"text": "Count:", "sampling_params": {"max_new_tokens": 24, "temperature": 0, "stop_regex": [pattern]}}
    )
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": pattern}
    assert not re.search(pattern, out["text"]) and text.startswith(out["text"])
    kept = _generate(
        server,
        {
            "text": "Count:",
            "sampling_params": {"max_new_tokens": 24, "temperature": 0, "stop_regex": pattern, "no_stop_trim": True},
        },
    )
    assert re.search(pattern, kept["text"])


def test_logit_bias_forces_a_token_and_sampling_seed_reproduces(server):
    out = _generate(
        server,
        {
            "text": "Hi",
            "sampling_params": {"max_new_tokens": 3, "temperature": 0, "logit_bias": {"9707": 100}, "ignore_eos": True},
        },
    )
    assert out["output_ids"] == [9707, 9707, 9707]
    body = {"text": "Hi", "sampling_params": {"max_new_tokens": 6, "temperature": 1.0, "sampling_seed": 7}}
    assert _generate(server, body)["output_ids"] == _generate(server, body)["output_ids"]


def test_streamed_logprobs_are_incremental_with_their_cumulative_length(server):
    r = requests.post(
        f"{server.url}/generate",
        stream=True,
        timeout=120,
        json={
            "text": "Stream:",
            "stream": True,
            "return_logprob": True,
            "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True},
        },
    )
    chunks = [
        json.loads(line[5:])
        for line in r.iter_lines(decode_unicode=True)
        if line.startswith("data:") and line != "data: [DONE]"
    ]
    total = 0
    for chunk in chunks:
        meta = chunk["meta_info"]
        total += len(meta["output_token_logprobs"])
        assert meta["output_token_logprobs_length"] == meta["completion_tokens"] == total
    assert total == 8


def test_sglang_routes(server):
    url = server.url
    assert requests.get(f"{url}/health_generate", timeout=60).status_code == 200
    info = requests.get(f"{url}/model_info", timeout=30).json()
    assert info == requests.get(f"{url}/get_model_info", timeout=30).json() and "model_path" in info
    assert "version" in requests.get(f"{url}/server_info", timeout=30).json()
    load = requests.get(f"{url}/get_load", timeout=30).json()
    assert load[0]["dp_rank"] == 0 and {"num_reqs", "num_waiting_reqs", "num_tokens"} <= set(load[0])
    assert requests.get(f"{url}/v1/loads", timeout=30).json()["loads"][0]["dp_rank"] == 0
    tok = requests.post(f"{url}/tokenize", json={"prompt": "Hello world"}, timeout=30).json()
    assert tok["count"] == len(tok["tokens"]) and tok["max_model_len"] > 0
    text = requests.post(f"{url}/detokenize", json={"tokens": tok["tokens"]}, timeout=30).json()["text"]
    assert text == "Hello world"
    batch = requests.post(f"{url}/v1/tokenize", json={"prompt": ["a", "b c"]}, timeout=30).json()
    assert batch["count"] == [len(t) for t in batch["tokens"]]
    bad = requests.post(f"{url}/detokenize", json={"tokens": [10**9]}, timeout=30)
    assert bad.status_code == 400 and "vocabulary" in bad.json()["error"]["message"]
    assert requests.get(f"{url}/v1/models", timeout=30).json()["data"][0]["object"] == "model"
