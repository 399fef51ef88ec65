"""SGLang's token_ids_logprob through /generate, streamed and not, against log_softmax of transformers'
logits on the demo model (the Engine-level checks are in test_engine_logprobs.py)."""

from __future__ import annotations

import json

import pytest
import requests
from engine_fixtures import hf_logprobs
from test_engine_logprobs import GREEDY, _check_positions


def _demo_path(server) -> str:
    return requests.get(f"{server.url}/get_model_info", timeout=30).json()["model_path"]


def test_generate_streamed_and_not_match_transformers(server):
    ids = [11, 151643, 0]
    body = {
        "input_ids": [101, 2025, 330, 77, 9],
        "sampling_params": GREEDY,
        "return_logprob": True,
        "logprob_start_len": 1,
        "token_ids_logprob": ids,
    }
    out = requests.post(f"{server.url}/generate", json=body, timeout=120).json()
    meta = out["meta_info"]
    reference = hf_logprobs(_demo_path(server), body["input_ids"] + out["output_ids"])
    _check_positions(meta["input_token_ids_logprobs"], reference, ids, first_row=0)
    _check_positions(meta["output_token_ids_logprobs"], reference, ids, first_row=4)
    with requests.post(f"{server.url}/generate", json={**body, "stream": True}, stream=True, timeout=120) as r:
        lines = [line for line in r.iter_lines(decode_unicode=True) if line]
    chunks = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    assert len(chunks) >= 2
    streamed = [pos for c in chunks for pos in c["meta_info"]["output_token_ids_logprobs"]]  # each chunk: the new ones
    assert [[e[1] for e in pos] for pos in streamed] == [
        [e[1] for e in pos] for pos in meta["output_token_ids_logprobs"]
    ]
    assert [e[0] for pos in streamed for e in pos] == pytest.approx(
        [e[0] for pos in meta["output_token_ids_logprobs"] for e in pos], abs=1e-5
    )
    assert chunks[-1]["meta_info"]["input_token_ids_logprobs"] == meta["input_token_ids_logprobs"]


def test_generate_rejects_out_of_vocabulary_id(server):
    body = {"text": "hi", "return_logprob": True, "token_ids_logprob": [-1]}
    r = requests.post(f"{server.url}/generate", json=body, timeout=60)
    assert r.status_code == 400 and "token_ids_logprob" in r.text
