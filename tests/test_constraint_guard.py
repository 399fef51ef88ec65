"""A pathological constraint costs at most the compile timeout: its automaton is built in a
compile worker process that is killed past the timeout, the request gets a 400 naming it, and
the server (its event loop and its scheduler) keeps serving other requests meanwhile. Each
constraint is compiled once, in the scheduler's cache, whatever path its requests take."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import wait
from pathlib import Path

import pytest
import requests
from server_fixtures import descendant_pids, pid_alive, start_server

from sgl_runtime.constrained import ConstraintError, compile_constraint
from sgl_runtime.constrained.cache import ConstraintCache
from sgl_runtime.model_loader.demo_tokenizer import get_qwen2_tokenizer_dir

ROOT = Path(__file__).resolve().parents[1]

# a nested counted repeat whose exact automaton tracks the iterations left against the current run of a's
# (tens of thousands of states, built one count at a time): more than 40 s here ("(a{1,60}b?){1,60}c",
# about 5 s, is no longer slow enough)
PATHOLOGICAL = r"(a{1,200}b?){1,200}c"
TIMEOUT_S = 6.0
VOCAB_SIZE = 151665
EOS = [151645, 151643]


@pytest.fixture(scope="module")
def cache():
    c = ConstraintCache(
        str(get_qwen2_tokenizer_dir()), VOCAB_SIZE, EOS, max_size=4, compile_timeout=TIMEOUT_S, compile_workers=1
    )
    c.start_workers()
    yield c
    c.shutdown()


def _outcome(future):
    try:
        return future.result(timeout=60)
    except ConstraintError as exc:
        return exc


def test_valid_constraints_compile_in_the_worker(cache):
    regex = cache.get("regex", r"[0-9]{3}-[a-z]+")
    assert regex.accepts("123-abc") and not regex.accepts("12-abc")
    schema = cache.get("json_schema", {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]})
    assert schema.accepts('{"id":7}') and not schema.accepts('{"id":"7"}')
    assert cache.get("choices", ["yes", "no"]).accepts("yes")


def test_invalid_constraint_gets_the_compilers_message(cache):
    with pytest.raises(ConstraintError) as in_process:
        compile_constraint("regex", "(unclosed", str(get_qwen2_tokenizer_dir()), vocab_size=VOCAB_SIZE)
    with pytest.raises(ConstraintError) as in_worker:
        cache.get("regex", "(unclosed")
    assert str(in_worker.value) == str(in_process.value)
    assert "unterminated subpattern" in str(in_worker.value)


def test_timeout_kills_the_worker_and_is_not_a_verdict(cache):
    (old_pid,) = cache.worker_pids()
    compiles = cache.stats["compiles"]
    start = time.monotonic()
    outcome = _outcome(cache.submit("regex", PATHOLOGICAL))
    elapsed = time.monotonic() - start
    assert str(outcome) == f"compiling the regex constraint took longer than {TIMEOUT_S:g} s"
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + 2.0
    deadline = time.monotonic() + 5
    while pid_alive(old_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(old_pid)
    # the replacement worker serves the next constraint (its start-up is not charged to the timeout)
    assert cache.get("regex", r"ab+c").accepts("abbc")
    # the timeout was one attempt's: asking again compiles again (and times out again)
    again = _outcome(cache.submit("regex", PATHOLOGICAL))
    assert str(again) == str(outcome)
    assert cache.stats["compiles"] == compiles + 3 and cache.stats["timeouts"] >= 2


def test_concurrent_requests_share_one_compile(cache):
    compiles = cache.stats["compiles"]
    first, second = cache.submit("regex", "x{2,5}y"), cache.submit("regex", "x{2,5}y")
    wait([first, second], timeout=60)
    assert first is second and first.result().accepts("xxy")
    assert cache.stats["compiles"] == compiles + 1


def test_a_dead_idle_worker_is_replaced(cache):
    (pid,) = cache.worker_pids()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cache.get("regex", r"after[0-9]+").accepts("after12")  # the dead worker's answer is retried
    assert pid not in cache.worker_pids() and len(cache.worker_pids()) == 1


def test_cache_is_bounded_lru(cache):
    specs = [f"q{i}[0-9]" for i in range(6)]
    for spec in specs:
        cache.get("regex", spec)
    assert len(cache) == cache.max_size == 4
    hits = cache.stats["hits"]
    cache.get("regex", specs[-1])
    assert cache.stats["hits"] == hits + 1


# ------------------------------------------------------------------------------------ server
def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module")
def guarded_server():
    server = start_server("--constraint-compile-timeout", str(int(TIMEOUT_S)))
    yield server
    server.stop()


def _generate(url: str, sampling_params: dict, timeout: float = 120) -> requests.Response:
    return requests.post(f"{url}/generate", json={"text": "Hello", "sampling_params": sampling_params}, timeout=timeout)


def test_server_rejects_a_slow_constraint_without_stalling_others(guarded_server):
    url = guarded_server.url
    plain = {"max_new_tokens": 8, "temperature": 0}
    assert _generate(url, plain).status_code == 200  # warm
    # the first constrained request also waits for the compile worker to start (not charged to the timeout)
    assert _generate(url, {"max_new_tokens": 4, "regex": "[ab]{4}"}).status_code == 200
    slow: dict = {}

    def send_slow() -> None:
        start = time.monotonic()
        slow["response"] = _generate(url, {"max_new_tokens": 8, "regex": PATHOLOGICAL})
        slow["elapsed"] = time.monotonic() - start

    thread = threading.Thread(target=send_slow)
    thread.start()
    time.sleep(0.5)  # the pathological compile is running in a compile worker now
    start = time.monotonic()
    response = _generate(url, plain)
    concurrent_latency = time.monotonic() - start
    thread.join(TIMEOUT_S + 30)
    assert response.status_code == 200 and response.json()["meta_info"]["completion_tokens"] == 8
    assert concurrent_latency < TIMEOUT_S, f"a plain request waited {concurrent_latency:.1f} s behind the compile"

    assert slow["response"].status_code == 400, slow["response"].text
    message = slow["response"].json()["error"]["message"]
    assert message == f"sampling_params.regex: compiling the regex constraint took longer than {TIMEOUT_S:g} s"
    assert slow["elapsed"] < TIMEOUT_S + 5.0

    # Nothing keeps compiling it: the main and scheduler processes are idle afterwards.
    info = guarded_server.server_info()
    pids = {"main": guarded_server.proc.pid, "scheduler": info["process_ids"]["scheduler"]}
    before = {name: _cpu_seconds(pid) for name, pid in pids.items()}
    time.sleep(2.0)
    busy = {name: _cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    assert all(seconds < 0.8 for seconds in busy.values()), f"CPU seconds used in 2 s while idle: {busy}"

    # A normal constrained request still works.
    constrained = _generate(url, {"max_new_tokens": 16, "regex": r"[0-9]{3}", "temperature": 1.0})
    assert constrained.status_code == 200, constrained.text
    assert re.fullmatch(r"[0-9]{3}", constrained.json()["text"])


def test_each_distinct_constraint_compiles_once_over_http(guarded_server):
    url = guarded_server.url
    before = guarded_server.server_info()["scheduler_stats"]["constraint_cache"]
    regex = {"max_new_tokens": 4, "regex": "(yes|no)[0-9]"}
    schema = {"max_new_tokens": 12, "json_schema": '{"type": "object", "properties": {"k": {"type": "integer"}}}'}
    for params in (regex, regex, {**regex, "n": 3}, schema, schema):
        assert _generate(url, params).status_code == 200
    batch = requests.post(f"{url}/generate", json={"text": ["a", "b", "c"], "sampling_params": regex}, timeout=120)
    assert batch.status_code == 200
    chat = requests.post(
        f"{url}/v1/chat/completions",
        timeout=120,
        json={
            "model": "default",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4,
            "regex": "(yes|no)[0-9]",
        },
    )
    assert chat.status_code == 200, chat.text
    after = guarded_server.server_info()["scheduler_stats"]["constraint_cache"]
    assert after["compiles"] - before["compiles"] == 2
    assert after["hits"] - before["hits"] >= 9


def test_compile_workers_stop_with_the_server(guarded_server):
    children = set(guarded_server.server_info()["process_ids"].values())
    validators = [
        pid
        for pid in descendant_pids(guarded_server.proc.pid)
        if pid not in children and b"sgl_runtime.constrained.compile_workers" in _cmdline(pid)
    ]
    assert validators, "the scheduler runs its constraint compile workers in child processes"
    guarded_server.stop()
    deadline = time.monotonic() + 10
    while any(pid_alive(p) for p in validators) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in validators if pid_alive(p)]


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_an_unguarded_engine_script_compiles_constraints(tmp_path):
    """A script that builds an Engine at module level, with no `if __name__ == "__main__"` guard,
    gets its regex compiled (workers started through multiprocessing's spawn re-ran the script)."""
    from model_fixtures import make_tiny_checkpoint

    model = make_tiny_checkpoint("qwen2", tmp_path / "qwen2")
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from sgl_runtime.engine import Engine\n"
        f"engine = Engine({str(model)!r}, dtype='float32')\n"
        "out = engine.generate(input_ids=[1, 2, 3], sampling_params={'max_new_tokens': 4, 'regex': '(ab)+'})\n"
        "print('OUTPUT', repr(out['text']))\n"
        "engine.shutdown()\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    text = re.search(r"OUTPUT '(.*)'", done.stdout).group(1)
    assert re.fullmatch(r"(ab)*a?", text), text  # a prefix of (ab)+ within 4 tokens


def test_wait_ready_returns_once_every_worker_can_compile(monkeypatch):
    from sgl_runtime.constrained import compile_workers

    workers = compile_workers.CompileWorkers(2, timeout=30)
    try:
        workers.start()
        workers.wait_ready()
        assert len(workers.pids()) == 2 and all(w._ready for w in workers._workers)
        assert workers.build("regex", "[ab]+", {})[1] == "regex:[ab]+"
    finally:
        workers.close()
    monkeypatch.setattr(compile_workers, "WORKER_START_S", 0.001)  # no worker imports that fast
    slow = compile_workers.CompileWorkers(1, timeout=30)
    try:
        slow.start()
        with pytest.raises(ConstraintError, match="failed to start"):
            slow.wait_ready()
    finally:
        slow.close()
