"""Data-parallel serving through SGLang Model Gateway (`sglang-router` from PyPI): two CPU demo
servers behind `python -m sglang_router.launch_router`, native and OpenAI requests through it, and
cache-aware routing keeping requests that share a long prefix on one worker (a higher prefix-cache
hit rate than round robin). Skipped when the optional router is not installed."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time

import pytest
import requests

from server_fixtures import flush_when_idle, free_port, start_server

pytestmark = [pytest.mark.slow, pytest.mark.skip(
    reason="NOT DONE: sglang-router 0.3.2 did not answer /health within 120 s on the 2-core CI box; unverified")]

if importlib.util.find_spec("sglang_router") is None:
    pytest.skip("sglang-router is not installed: pip install -e '.[sglang-compat]'", allow_module_level=True)

PREFIXES = [f"Document {k}: " + " ".join(f"w{k}_{i}" for i in range(120)) for k in range(4)]


@pytest.fixture(scope="module")
def workers():
    servers = [start_server(), start_server()]
    yield servers
    for s in servers:
        s.stop()


def _router(workers, policy: str):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
                             "--port", str(port), "--policy", policy, "--log-level", "warn",
                             "--worker-urls", *[w.url for w in workers]],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except requests.RequestException:
            pass
        time.sleep(0.5)
    proc.kill()
    raise TimeoutError("the router did not become healthy")


def _hit_rate(url: str, workers) -> tuple[float, float]:
    """Prefix-cache hit rate (cached / prompt tokens) and requests per second over 4 prefixes x 4 questions."""
    for w in workers:
        flush_when_idle(w.url)
    cached = prompt = 0
    start = time.perf_counter()
    for q in range(4):
        for prefix in PREFIXES:
            out = requests.post(f"{url}/generate", timeout=120, json={
                "text": f"{prefix}\nQuestion {q}:", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}).json()
            cached += out["meta_info"]["cached_tokens"]
            prompt += out["meta_info"]["prompt_tokens"]
    return cached / prompt, 16 / (time.perf_counter() - start)


def test_native_and_openai_requests_through_the_gateway_and_cache_aware_routing(workers):
    proc, url = _router(workers, "cache_aware")
    try:
        native = requests.post(f"{url}/generate", timeout=120, json={
            "text": "Hello", "sampling_params": {"max_new_tokens": 4, "temperature": 0}})
        assert native.status_code == 200, native.text
        assert native.json()["meta_info"]["completion_tokens"] <= 4
        chat = requests.post(f"{url}/v1/chat/completions", timeout=120, json={
            "model": "default", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        assert chat.status_code == 200, chat.text
        assert chat.json()["choices"][0]["message"]["role"] == "assistant"
        comp = requests.post(f"{url}/v1/completions", timeout=120, json={"model": "default", "prompt": "a", "max_tokens": 2})
        assert comp.status_code == 200, comp.text
        aware, aware_rps = _hit_rate(url, workers)
    finally:
        proc.terminate()
        proc.wait(30)
    proc, url = _router(workers, "round_robin")
    try:
        rr, rr_rps = _hit_rate(url, workers)
    finally:
        proc.terminate()
        proc.wait(30)
    direct, direct_rps = _hit_rate(workers[0].url, workers)
    print(json.dumps({"cache_aware_hit_rate": round(aware, 3), "round_robin_hit_rate": round(rr, 3),
                      "direct_hit_rate": round(direct, 3), "cache_aware_rps": round(aware_rps, 2),
                      "round_robin_rps": round(rr_rps, 2), "direct_rps": round(direct_rps, 2)}))
    # 4 prefixes x 4 questions: cache-aware keeps each prefix on one worker (3 of 4 requests hit);
    # round robin over 2 workers sends each prefix to both (only 2 of 4 hit).
    assert aware > rr + 0.1, (aware, rr)
