"""Data-parallel serving through SGLang Model Gateway (`sglang-router` from PyPI): two CPU demo
servers behind `python -m sglang_router.launch_router`, native and OpenAI requests (streaming too)
through it, and cache-aware routing keeping requests that share a long prefix on one worker (a
higher prefix-cache hit rate than round robin). Skipped when the optional router is not installed.

The cache_aware gateway is started with the documented command. That command imports
`sglang_router.mini_lb`, which imports `sglang.srt` (and with it torch and transformers) whenever
sglang is installed: ~11 s of CPU, minutes of wall time on a loaded 2-core box, before the gateway
writes a line. The round_robin baseline is started through the same RouterArgs CLI and Rust `Router`
that `launch_router.main` calls, without that import. Servers and gateways start at once; a gateway
keeps retrying its workers until they answer."""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests
from server_fixtures import ServerProcess, flush_when_idle, free_port

if importlib.util.find_spec("sglang_router") is None:
    pytest.skip(
        "sglang-router is not installed: pip install 'sglang-router==0.3.2' (or pip install -e '.[sglang-compat]')",
        allow_module_level=True,
    )

pytestmark = pytest.mark.slow

STARTUP_TIMEOUT_S = 300.0
# An odd number of prefixes, so that round robin over 2 workers sends each prefix to both.
PREFIXES = [f"Document {k}: " + " ".join(f"w{k}_{i}" for i in range(120)) for k in range(3)]
QUESTIONS = 4


LAUNCH_ROUTER = ["-m", "sglang_router.launch_router"]
# launch_router.main without its module's imports (mini_lb, and through it sglang.srt).
RUST_ROUTER = [
    "-c",
    "import argparse, sys\n"
    "from sglang_router.router import Router\n"
    "from sglang_router.router_args import RouterArgs\n"
    "parser = argparse.ArgumentParser()\n"
    "RouterArgs.add_cli_args(parser, use_router_prefix=False)\n"
    "args = RouterArgs.from_cli_args(parser.parse_args(sys.argv[1:]), use_router_prefix=False)\n"
    "args._validate_router_args()\n"
    "Router.from_args(args).start()\n",
]


class Gateway:
    """SGLang Model Gateway on a free loopback port (its metrics port too: the
    default 29000 would make a second gateway on the host panic), logging to a temp file."""

    def __init__(self, worker_urls: list[str], policy: str, launcher: list[str]) -> None:
        self.port, self.policy = free_port(), policy
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(tempfile.mkstemp(prefix=f"sgl_gateway_{policy}_", suffix=".log")[1])
        self._log, self._terminated = open(self.log_path, "wb"), False
        self.proc = subprocess.Popen(
            [
                sys.executable,
                *launcher,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--prometheus-host",
                "127.0.0.1",
                "--prometheus-port",
                str(free_port()),
                "--policy",
                policy,
                "--log-level",
                "info",
                "--worker-urls",
                *worker_urls,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def registered(self) -> int:
        """How many healthy workers the gateway has registered (0 while it is still starting)."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"the {self.policy} gateway exited with {self.proc.returncode}:\n{self.log()}")
        try:
            workers = requests.get(f"{self.url}/workers", timeout=2).json()["workers"]
        except (requests.RequestException, ValueError):
            return 0
        return sum(w["is_healthy"] for w in workers)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def terminate(self) -> None:
        """Start a graceful shutdown (SIGTERM, once)."""
        if self.proc.poll() is None and not self._terminated:
            self.proc.terminate()
            self._terminated = True

    def stop(self) -> None:
        """Graceful shutdown, SIGKILL after 10 s."""
        self.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


@pytest.fixture(scope="module")
def deployment():
    workers = [ServerProcess(), ServerProcess()]
    urls = [w.url for w in workers]
    gateways = {
        "cache_aware": Gateway(urls, "cache_aware", LAUNCH_ROUTER),
        "round_robin": Gateway(urls, "round_robin", RUST_ROUTER),
    }
    try:
        for w in workers:
            w.wait_ready()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        for g in gateways.values():
            while g.registered() < len(workers):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the {g.policy} gateway did not register both workers:\n{g.log()}")
                time.sleep(0.5)
        yield workers, gateways
    finally:
        for g in gateways.values():  # both graceful shutdowns at once
            g.terminate()
        for g in gateways.values():
            g.stop()
        for w in workers:
            w.stop()


def _generate(url: str, text: str, max_new_tokens: int = 1) -> dict:
    r = requests.post(
        f"{url}/generate",
        timeout=120,
        json={"text": text, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}},
    )
    assert r.status_code == 200, r.text
    return r.json()["meta_info"]


def _hit_rate(url: str, workers) -> tuple[float, float]:
    """Prefix-cache hit rate (cached / prompt tokens) and requests per second over 3 prefixes x 4
    questions, sent one at a time, starting from empty caches."""
    for w in workers:
        flush_when_idle(w.url)
    cached = prompt = 0
    start = time.perf_counter()
    for q in range(QUESTIONS):
        for prefix in PREFIXES:
            meta = _generate(url, f"{prefix}\nQuestion {q}:")
            cached, prompt = cached + meta["cached_tokens"], prompt + meta["prompt_tokens"]
    return cached / prompt, len(PREFIXES) * QUESTIONS / (time.perf_counter() - start)


def _throughput(url: str, requests_n: int = 16, concurrency: int = 8) -> float:
    """Output tokens per second for `requests_n` distinct prompts, `concurrency` at a time."""

    def one(i: int) -> int:
        r = requests.post(
            f"{url}/generate",
            timeout=120,
            json={
                "text": f"Request {i}: tell me a story",
                "sampling_params": {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True},
            },
        )
        assert r.status_code == 200, r.text
        return r.json()["meta_info"]["completion_tokens"]

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(one, range(requests_n)))
    assert tokens == 16 * requests_n
    return tokens / (time.perf_counter() - start)


def _workers_holding(prefix: str, workers) -> int:
    """On how many workers `prefix` is already cached (a direct probe reuses most of it)."""
    return sum(_generate(w.url, prefix)["cached_tokens"] > 50 for w in workers)


def _sse_events(response: requests.Response) -> list[dict]:
    assert response.status_code == 200, response.text
    lines = [ln[len("data: ") :] for ln in response.iter_lines(decode_unicode=True) if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]", lines
    return [json.loads(ln) for ln in lines[:-1]]


def test_native_and_openai_requests_through_the_gateway(deployment):
    _, gateways = deployment
    url = gateways["cache_aware"].url
    native = _generate(url, "Hello", max_new_tokens=4)
    assert 1 <= native["completion_tokens"] <= 4
    chunks = _sse_events(
        requests.post(
            f"{url}/generate",
            stream=True,
            timeout=120,
            json={"text": "Hello", "stream": True, "sampling_params": {"max_new_tokens": 3, "temperature": 0}},
        )
    )
    assert chunks[-1]["meta_info"]["finish_reason"] is not None and chunks[-1]["meta_info"]["completion_tokens"] <= 3

    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none")
    model = client.models.list().data[0].id
    chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert chat.choices[0].message.role == "assistant" and chat.usage.completion_tokens <= 4
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True
    )
    deltas = list(stream)
    assert deltas[0].choices[0].delta.role == "assistant" and deltas[-1].choices[0].finish_reason == "length"
    comp = client.completions.create(model=model, prompt="a", max_tokens=2, temperature=0)
    assert comp.choices[0].finish_reason == "length" and comp.usage.completion_tokens == 2
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(model=model, prompt="a", max_tokens=2, temperature=0, stream=True)
    )
    assert streamed == comp.choices[0].text


def test_cache_aware_routing_keeps_a_prefix_on_one_worker(deployment):
    workers, gateways = deployment
    aware, aware_rps = _hit_rate(gateways["cache_aware"].url, workers)
    aware_holders = [_workers_holding(p, workers) for p in PREFIXES]
    rr, rr_rps = _hit_rate(gateways["round_robin"].url, workers)
    rr_holders = [_workers_holding(p, workers) for p in PREFIXES]
    direct, direct_rps = _hit_rate(workers[0].url, workers)
    gateway_tps, direct_tps = _throughput(gateways["cache_aware"].url), _throughput(workers[0].url)
    print(
        json.dumps(
            {
                "gateway_tok_s_8_concurrent": round(gateway_tps, 1),
                "direct_tok_s_8_concurrent": round(direct_tps, 1),
                "cache_aware_hit_rate": round(aware, 3),
                "round_robin_hit_rate": round(rr, 3),
                "direct_hit_rate": round(direct, 3),
                "cache_aware_rps": round(aware_rps, 2),
                "round_robin_rps": round(rr_rps, 2),
                "direct_rps": round(direct_rps, 2),
            }
        )
    )
    # Cache-aware sends every request of a prefix to the worker that holds it (3 of 4 reuse it);
    # round robin over 2 workers alternates, so each prefix is cached on both (2 of 4 reuse it).
    assert aware_holders == [1] * len(PREFIXES), aware_holders
    assert rr_holders == [2] * len(PREFIXES), rr_holders
    assert aware > rr + 0.1, (aware, rr)
