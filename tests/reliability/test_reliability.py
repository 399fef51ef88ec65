"""Reliability suite on the CPU demo model (issue 15): hostile requests while a canary keeps
completing, mid-stream disconnects, the queue cap and recovery, drain on SIGTERM, and a dead child.

CI runs the short form. The long form (128 streaming clients for 10 minutes, 10,000 hostile
requests) runs with `SGL_RELIABILITY_LONG=1 python -m pytest -q tests/reliability` (see
docs/reliability.md for its figures).
"""

from __future__ import annotations

import json
import os
import random
import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest
import requests
from hostile_requests import hostile_requests
from server_fixtures import ServerProcess, descendant_pids, flush_when_idle, pid_alive, wait_idle

LONG = os.environ.get("SGL_RELIABILITY_LONG") == "1"
NUM_HOSTILE = 10_000 if LONG else 1_000
# --constraint-compile-timeout of the server below (generous: on a loaded 2-core CI machine a legitimate
# schema's first compile in the scheduler can take seconds), plus slack
COMPILE_TIMEOUT_S = 30.0
COMPILE_BOUND_S = COMPILE_TIMEOUT_S + 5.0
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def busy_server():
    server = ServerProcess(
        "--max-running-requests",
        "4",
        "--max-queued-requests",
        "4",
        "--constraint-compile-timeout",
        str(COMPILE_TIMEOUT_S),
        "--graceful-shutdown-timeout",
        "60",
    ).wait_ready()
    yield server
    server.stop()


class Canary(threading.Thread):
    """Sends small greedy requests in a loop and records each outcome."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop, self.ok, self.failures = url, threading.Event(), 0, []

    def run(self) -> None:
        body = {"text": "canary", "sampling_params": {"max_new_tokens": 4, "temperature": 0, "ignore_eos": True}}
        while not self.stop.is_set():
            r = requests.post(f"{self.url}/generate", json=body, timeout=120)
            if r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] == 4:
                self.ok += 1
            else:
                self.failures.append((r.status_code, r.text[:200]))


def test_hostile_requests_get_4xx_while_a_canary_completes(busy_server):
    canary = Canary(busy_server.url)
    canary.start()
    wrong, slow, latencies = [], [], []
    for path, body, headers in hostile_requests(NUM_HOSTILE, seed=15):
        start = time.monotonic()
        r = requests.post(f"{busy_server.url}{path}", data=body, headers=headers, timeout=120)
        elapsed = time.monotonic() - start
        latencies.append(elapsed)
        if not 400 <= r.status_code < 500 or set(r.json().get("error", {})) != {"message", "type", "param", "code"}:
            wrong.append((path, body[:120], r.status_code, r.text[:200]))
        if elapsed > COMPILE_BOUND_S:
            slow.append((path, body[:120], round(elapsed, 2)))
    canary.stop.set()
    canary.join(120)
    latencies.sort()
    print(  # the figures docs/reliability.md records (pytest -s shows them)
        f"\nhostile: {len(latencies)} requests, {len(wrong)} not a 4xx error, p50 {latencies[len(latencies) // 2]:.3f} s, "
        f"p99 {latencies[int(len(latencies) * 0.99)]:.3f} s, max {latencies[-1]:.3f} s; canary {canary.ok} ok, "
        f"{len(canary.failures)} failed"
    )
    assert not wrong, sorted({(p, b[:100], c) for p, b, c, _ in wrong})[:20]
    assert not slow, slow[:10]
    assert canary.ok >= 3 and not canary.failures, (canary.ok, canary.failures[:5])
    assert busy_server.proc.poll() is None


CLIENTS, DURATION_S = (128, 600.0) if LONG else (6, 15.0)
MIXED = [
    {},
    {"regex": "(yes|no), [0-9]{1,3}"},
    {"choices": ["alpha", "beta", "gamma"]},
    {"json_schema": json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})},
]


def _stream_text(url: str, body: dict) -> str:
    with requests.post(f"{url}/generate", json={**body, "stream": True}, stream=True, timeout=600) as r:
        assert r.status_code == 200, (body, r.text)
        lines = [line for line in r.iter_lines(decode_unicode=True) if line]
    assert lines[-1] == "data: [DONE]", lines[-2:]
    last = json.loads(lines[-2][6:])
    assert "error" not in last, last
    return last["text"]


@pytest.fixture(scope="module")
def streaming_server():
    """A server whose queue holds every streaming client: the test measures failures, not the queue cap."""
    server = ServerProcess(
        "--max-queued-requests", str(4 * CLIENTS), "--constraint-compile-timeout", str(COMPILE_TIMEOUT_S)
    ).wait_ready()
    yield server
    server.stop()


@pytest.mark.timeout(DURATION_S + 900)  # the long form streams for 10 minutes, past the suite's default
def test_concurrent_streaming_clients_mixed_constraints(streaming_server):
    """CLIENTS clients stream mixed constrained/free greedy requests for DURATION_S; every one
    completes, satisfies its constraint, and equals the same request answered without streaming."""
    import re

    rng = random.Random(7)
    failures, done = [], []
    deadline = time.monotonic() + DURATION_S

    def client(k: int) -> None:
        local = random.Random(rng.random())
        while time.monotonic() < deadline:
            constraint = local.choice(MIXED)
            body = {
                "text": f"client {k} says {local.randrange(1000)}:",
                "sampling_params": {"max_new_tokens": 16, "temperature": 0, **constraint},
            }
            try:
                text = _stream_text(streaming_server.url, body)
                whole = requests.post(f"{streaming_server.url}/generate", json=body, timeout=600).json()["text"]
                if text != whole:
                    failures.append(("stream != whole", body, text, whole))
                if "regex" in constraint and not re.fullmatch(constraint["regex"], text):
                    failures.append(("regex violated", text))
                if "choices" in constraint and text not in constraint["choices"]:
                    failures.append(("choice violated", text))
                done.append(constraint)
            except Exception as exc:  # noqa: BLE001 - recorded and asserted on below
                failures.append((type(exc).__name__, str(exc)[:200]))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DURATION_S + 600)
    print(
        f"\nstreaming: {CLIENTS} clients for {DURATION_S:g} s, {len(done)} requests completed, {len(failures)} failures"
    )
    assert not failures, failures[:5]
    assert len(done) >= CLIENTS and any(done) and any(not c for c in done)


def test_mid_stream_disconnects_abort_and_free_the_pool(busy_server):
    flush_when_idle(busy_server.url)
    baseline = wait_idle(busy_server.url)["available_kv_tokens"]
    for i in range(100):
        body = {
            "text": f"disconnect {i}",
            "stream": True,
            "sampling_params": {"max_new_tokens": 400, "ignore_eos": True},
        }
        with requests.post(f"{busy_server.url}/generate", json=body, stream=True, timeout=60) as r:
            assert r.status_code == 200
            next(r.iter_lines())  # first chunk arrived: the request is running; now hang up
    stats = wait_idle(busy_server.url, timeout=120)
    flush_when_idle(busy_server.url)
    assert wait_idle(busy_server.url)["available_kv_tokens"] == baseline, stats
    metrics = requests.get(f"{busy_server.url}/metrics", timeout=30).text
    aborted = [line for line in metrics.splitlines() if line.startswith("sgl_runtime_aborted_requests_total ")]
    assert aborted and float(aborted[0].split()[-1]) >= 100, aborted


def test_queue_cap_gives_503_with_retry_after_then_recovers(busy_server):
    results: list = []
    body = {"text": "flood", "sampling_params": {"max_new_tokens": 64, "ignore_eos": True}}

    def send():
        r = requests.post(f"{busy_server.url}/generate", json=body, timeout=300)
        results.append((r.status_code, r.headers.get("retry-after"), r.json()))

    threads = [threading.Thread(target=send) for _ in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    codes = [code for code, _, _ in results]
    assert codes.count(200) >= 8 and codes.count(503) >= 1 and set(codes) <= {200, 503}, codes
    assert all(retry and int(retry) >= 1 for code, retry, _ in results if code == 503)
    assert all("overloaded" in js["error"]["message"] for code, _, js in results if code == 503)
    wait_idle(busy_server.url)
    again = requests.post(f"{busy_server.url}/generate", json=body, timeout=300)
    assert again.status_code == 200


def test_request_timeout_aborts_cleanly(busy_server):
    long = {"max_new_tokens": 3000, "ignore_eos": True}
    start = time.monotonic()
    r = requests.post(
        f"{busy_server.url}/generate", json={"text": "slow", "timeout": 0.5, "sampling_params": long}, timeout=120
    )
    assert r.status_code == 408 and "timed out" in r.json()["error"]["message"], r.text
    assert time.monotonic() - start < 10
    with requests.post(
        f"{busy_server.url}/generate",
        stream=True,
        timeout=120,
        json={"text": "slow", "timeout": 0.5, "stream": True, "sampling_params": long},
    ) as r:
        lines = [line for line in r.iter_lines(decode_unicode=True) if line]
    error = json.loads(lines[-2][6:])["error"]
    assert error["code"] == 408 and lines[-1] == "data: [DONE]"
    chat = requests.post(
        f"{busy_server.url}/v1/chat/completions",
        timeout=120,
        json={
            "messages": [{"role": "user", "content": "slow"}],
            "max_tokens": 3000,
            "ignore_eos": True,
            "timeout": 0.5,
        },
    )
    assert chat.status_code == 408 and set(chat.json()["error"]) == {"message", "type", "param", "code"}
    stats = wait_idle(busy_server.url, timeout=60)
    assert stats["num_running_reqs"] == 0


def test_sigterm_under_load_drains_and_exits_0(busy_server):
    finished: list = []

    def stream(i: int):
        body = {"text": f"drain {i}", "stream": True, "sampling_params": {"max_new_tokens": 24, "ignore_eos": True}}
        with requests.post(f"{busy_server.url}/generate", json=body, stream=True, timeout=300) as r:
            lines = [line for line in r.iter_lines(decode_unicode=True) if line]
        finished.append((json.loads(lines[-2][6:]), lines[-1]))

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    children = descendant_pids(busy_server.proc.pid)
    busy_server.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(120)
    assert busy_server.proc.wait(90) == 0
    assert len(finished) == 4
    assert all(last["meta_info"]["completion_tokens"] == 24 and done == "data: [DONE]" for last, done in finished)
    deadline = time.monotonic() + 10
    while any(pid_alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in children if pid_alive(p)]


def test_dead_scheduler_ends_streams_with_an_error_and_the_server_exits():
    server = ServerProcess("--skip-server-warmup").wait_ready()
    try:
        events: list = []
        body = {"text": "doomed", "stream": True, "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True}}

        def stream():
            with requests.post(f"{server.url}/generate", json=body, stream=True, timeout=120) as r:
                events.extend(line for line in r.iter_lines(decode_unicode=True) if line)

        thread = threading.Thread(target=stream)
        thread.start()
        time.sleep(1.5)
        pids = server.server_info()["process_ids"]
        children = descendant_pids(server.proc.pid)
        ipc = [
            p.parent
            for p in Path(tempfile.gettempdir()).glob("sgl_runtime_ipc_*/owner.pid")
            if p.read_text() == str(server.proc.pid)
        ]
        assert len(ipc) == 1
        start = time.monotonic()
        os.kill(pids["scheduler"], signal.SIGKILL)
        code = server.proc.wait(30)
        thread.join(30)
        assert code != 0 and time.monotonic() - start < 30
        errors = [json.loads(e[6:]) for e in events if e.startswith("data: {") and '"error"' in e]
        assert errors and "stopped" in errors[-1]["error"]["message"], events[-3:]
        time.sleep(1.0)
        assert not [p for p in children if pid_alive(p)]
        assert not ipc[0].exists()  # the IPC folder goes on this exit path too
    finally:
        server.stop()


def test_long_form_is_documented():
    doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "reliability.md")).read()
    assert "SGL_RELIABILITY_LONG=1" in doc
