"""The native SGLang-compatible API of the real server (CLI subprocess, demo model)."""

from __future__ import annotations

import json
import re

import requests
from transformers import AutoTokenizer


def post(server, path, body, **kw):
    return requests.post(f"{server.url}{path}", json=body, headers=server.headers, timeout=120, **kw)


def sse_chunks(response) -> list:
    lines = [line for line in response.iter_lines(decode_unicode=True) if line]
    assert lines[-1] == "data: [DONE]"
    assert all(line.startswith("data: ") for line in lines)
    return [json.loads(line[len("data: ") :]) for line in lines[:-1]]


def tokenizer_of(server):
    return AutoTokenizer.from_pretrained(requests.get(f"{server.url}/get_model_info").json()["tokenizer_path"])


def test_generate_plain(server):
    r = post(
        server,
        "/generate",
        {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 6, "temperature": 0}},
    )
    assert r.status_code == 200, r.text
    out = r.json()
    meta = out["meta_info"]
    assert meta["completion_tokens"] == 6 == len(out["output_ids"])
    assert meta["finish_reason"]["type"] == "length"
    assert meta["prompt_tokens"] == len(tokenizer_of(server).encode("The capital of France is"))
    assert out["text"] == tokenizer_of(server).decode(out["output_ids"])
    assert meta["e2e_latency"] > 0 and isinstance(meta["id"], str)
    again = post(
        server,
        "/generate",
        {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 6, "temperature": 0}},
    )
    assert again.json()["output_ids"] == out["output_ids"]  # greedy is deterministic


def test_generate_input_ids_and_rid(server):
    r = post(
        server, "/generate", {"input_ids": [9707, 11, 1879], "rid": "my-rid", "sampling_params": {"max_new_tokens": 3}}
    )
    assert r.status_code == 200, r.text
    assert r.json()["meta_info"]["id"] == "my-rid"
    assert r.json()["meta_info"]["prompt_tokens"] == 3


def test_generate_batch_gives_list(server):
    body = {"text": ["one two", "three four five"], "sampling_params": [{"max_new_tokens": 2}, {"max_new_tokens": 5}]}
    r = post(server, "/generate", body)
    assert r.status_code == 200, r.text
    outs = r.json()
    assert isinstance(outs, list) and len(outs) == 2
    assert [o["meta_info"]["completion_tokens"] for o in outs] == [2, 5]


def test_generate_n_samples(server):
    r = post(server, "/generate", {"text": "Count:", "sampling_params": {"max_new_tokens": 3, "n": 3, "seed": 7}})
    assert r.status_code == 200, r.text
    outs = r.json()
    assert len(outs) == 3 and all(o["meta_info"]["completion_tokens"] == 3 for o in outs)


def test_stream_batch_and_n_carry_index(server):
    body = {"text": ["first", "second"], "stream": True, "sampling_params": {"max_new_tokens": 3, "n": 2}}
    with requests.post(f"{server.url}/generate", json=body, stream=True, timeout=120) as r:
        chunks = sse_chunks(r)
    finals = {c["index"]: c for c in chunks if c["meta_info"]["finish_reason"] is not None}
    assert sorted(finals) == [0, 1, 2, 3]
    assert all(len(c["output_ids"]) == 3 for c in finals.values())


def test_generate_stream(server):
    body = {"text": "Stream me", "sampling_params": {"max_new_tokens": 5, "temperature": 0}, "stream": True}
    with requests.post(f"{server.url}/generate", json=body, stream=True, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        chunks = sse_chunks(r)
    assert len(chunks) >= 2
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == sorted(
        c["meta_info"]["completion_tokens"] for c in chunks
    )
    last = chunks[-1]
    assert last["meta_info"]["finish_reason"]["type"] == "length" and len(last["output_ids"]) == 5
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    plain = post(
        server, "/generate", {"text": "Stream me", "sampling_params": {"max_new_tokens": 5, "temperature": 0}}
    ).json()
    assert last["text"] == plain["text"] and last["output_ids"] == plain["output_ids"]


def test_generate_logprobs(server):
    tok = tokenizer_of(server)
    text = "Logprobs of this prompt"
    body = {
        "text": text,
        "sampling_params": {"max_new_tokens": 3, "temperature": 0},
        "return_logprob": True,
        "logprob_start_len": 0,
        "top_logprobs_num": 2,
        "return_text_in_logprobs": True,
    }
    out = post(server, "/generate", body).json()
    meta = out["meta_info"]
    prompt_ids = tok.encode(text)
    assert [e[1] for e in meta["input_token_logprobs"]] == prompt_ids
    assert meta["input_token_logprobs"][0][0] is None  # the first prompt token has no logprob
    assert [e[1] for e in meta["output_token_logprobs"]] == out["output_ids"]
    for (lp, tid, txt), top in zip(meta["output_token_logprobs"], meta["output_top_logprobs"]):
        assert txt == tok.decode([tid]) and lp <= 0
        assert len(top) == 2 and top[0][0] >= top[1][0]
        assert top[0][1] == tid and abs(top[0][0] - lp) < 1e-4  # greedy picks the top token
    no_text = post(server, "/generate", {**body, "return_text_in_logprobs": False}).json()["meta_info"]
    assert all(e[2] is None for e in no_text["output_token_logprobs"])


def test_max_new_tokens_zero_caches_prefix(server):
    prefix = "A long shared system prompt that many requests reuse. " * 8
    r = post(server, "/generate", {"text": prefix, "sampling_params": {"max_new_tokens": 0}})
    assert r.status_code == 200, r.text
    first = r.json()["meta_info"]
    assert first["completion_tokens"] == 0 and r.json()["text"] == ""
    second = post(
        server, "/generate", {"text": prefix + "And a question?", "sampling_params": {"max_new_tokens": 2}}
    ).json()
    assert second["meta_info"]["cached_tokens"] >= first["prompt_tokens"] - 1


def test_stop_string_trimmed(server):
    base = post(
        server, "/generate", {"text": "Stop test", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}
    ).json()
    stop = base["text"][len(base["text"]) // 2 :][:3]
    body = {"text": "Stop test", "sampling_params": {"max_new_tokens": 8, "temperature": 0, "stop": stop}}
    out = post(server, "/generate", body).json()
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert out["text"] == base["text"][: base["text"].find(stop)]
    with requests.post(f"{server.url}/generate", json={**body, "stream": True}, stream=True, timeout=120) as r:
        chunks = sse_chunks(r)
    assert all(stop not in c["text"] for c in chunks)
    assert chunks[-1]["text"] == out["text"]


def test_regex_constraint(server):
    body = {"text": "Phone:", "sampling_params": {"max_new_tokens": 20, "regex": r"\d{3}-\d{4}"}}
    out = post(server, "/generate", body).json()
    assert re.fullmatch(r"\d{3}-\d{4}", out["text"]), out


def test_choices_and_grammar_constraints(server):
    choices = ["red", "green", "blue"]
    out = post(server, "/generate", {"text": "Colour:", "sampling_params": {"max_new_tokens": 8, "choices": choices}})
    assert out.json()["text"] in choices, out.text
    from lark import Lark

    grammar_text = 'start: "[" pair ("," pair)? "]"\npair: DIGIT "=" DIGIT\nDIGIT: /[0-9]/\n'
    for seed in range(3):
        params = {"max_new_tokens": 32, "ebnf": grammar_text, "temperature": 1.0, "seed": seed}
        out = post(server, "/generate", {"text": "Pairs:", "sampling_params": params}).json()
        assert out["meta_info"]["finish_reason"]["type"] == "stop", out
        Lark(grammar_text).parse(out["text"])  # raises if the text is not a sentence of the grammar


def test_model_and_server_info(server):
    info = requests.get(f"{server.url}/get_model_info").json()
    assert info["is_generation"] is True and info["model_path"]
    assert "<|im_start|>" in info["chat_template"]
    assert info["eos_token"] == "<|im_end|>" or 151645 in info["eos_token_ids"]
    for path in ("/get_server_info", "/server_info"):
        sinfo = requests.get(f"{server.url}{path}").json()
        assert sinfo["port"] == server.port and sinfo["host"] == "127.0.0.1"
        assert sinfo["scheduler_stats"]["max_total_num_tokens"] == 16384
        assert set(sinfo["process_ids"]) == {"scheduler", "detokenizer"}


def test_health_generate_flush_metrics(server):
    assert requests.get(f"{server.url}/health").status_code == 200
    assert requests.get(f"{server.url}/health_generate", timeout=120).status_code == 200
    assert requests.post(f"{server.url}/flush_cache").status_code == 200
    assert requests.get(f"{server.url}/flush_cache").status_code == 200
    text = requests.get(f"{server.url}/metrics").text
    for name in (
        "sgl_runtime_num_running_reqs",
        "sgl_runtime_num_waiting_reqs",
        "sgl_runtime_token_usage",
        "sgl_runtime_cache_hit_rate",
        "sgl_runtime_gen_throughput",
        "sgl_runtime_e2e_request_latency_seconds_bucket",
        "sgl_runtime_generation_tokens_total",
    ):
        assert name in text, name


def test_abort_request(server):
    import threading

    result = {}

    def run():
        body = {"text": "long", "rid": "to-abort", "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True}}
        result["r"] = post(server, "/generate", body)

    t = threading.Thread(target=run)
    t.start()
    for _ in range(100):
        if post(server, "/abort_request", {"rid": "to-abort"}).status_code == 200:
            break
        import time

        time.sleep(0.1)
    t.join(60)
    out = result["r"].json()
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert out["meta_info"]["completion_tokens"] < 2000
    assert post(server, "/abort_request", {"rid": "no-such-rid"}).status_code == 404
