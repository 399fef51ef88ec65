"""A pathological constraint costs at most the compile timeout: the validator compiles in a
worker process that is killed past the timeout, the request gets a 400 naming it, and the
server (its event loop and its scheduler) keeps serving other requests meanwhile."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import threading
import time

import pytest
import requests
from server_fixtures import descendant_pids, pid_alive, start_server

from sgl_runtime.constrained import ConstraintError, compile_constraint
from sgl_runtime.model_loader.demo_tokenizer import get_qwen2_tokenizer_dir
from sgl_runtime.server.constraint_validator import ConstraintValidator

# interegular's parse + FSM construction of this nested counted repeat runs for minutes here
# (more than 60 s measured; "(a{1,10}b?){1,10}c" already takes about a second).
PATHOLOGICAL = r"(a{1,60}b?){1,60}c"
TIMEOUT_S = 3.0
VOCAB_SIZE = 151665
EOS = [151645, 151643]


@pytest.fixture(scope="module")
def loop():
    event_loop = asyncio.new_event_loop()
    yield event_loop
    event_loop.close()


@pytest.fixture(scope="module")
def validator(loop):
    v = ConstraintValidator(str(get_qwen2_tokenizer_dir()), VOCAB_SIZE, EOS, timeout=TIMEOUT_S,
                            num_workers=1, cache_size=4)
    loop.run_until_complete(_start(v))
    yield v
    v.close()


async def _start(v: ConstraintValidator) -> None:
    v.start()


def test_valid_constraints_pass(loop, validator):
    assert loop.run_until_complete(validator.validate("regex", r"[0-9]{3}-[a-z]+")).ok
    outcome = loop.run_until_complete(validator.validate("json_schema", {"type": "object", "properties": {
        "id": {"type": "integer"}}, "required": ["id"]}))
    assert outcome.ok and outcome.message == ""
    loop.run_until_complete(validator.check("choices", ["yes", "no"]))  # no exception


def test_invalid_constraint_gets_the_compilers_message(loop, validator):
    with pytest.raises(ConstraintError) as in_process:
        compile_constraint("regex", "(unclosed", str(get_qwen2_tokenizer_dir()), vocab_size=VOCAB_SIZE)
    with pytest.raises(ConstraintError) as validated:
        loop.run_until_complete(validator.check("regex", "(unclosed"))
    assert str(validated.value) == str(in_process.value)
    assert "unterminated subpattern" in str(validated.value)


def test_timeout_kills_the_worker_and_the_next_validation_works(loop, validator):
    (old_pid,) = validator.worker_pids()
    start = time.monotonic()
    outcome = loop.run_until_complete(validator.validate("regex", PATHOLOGICAL))
    elapsed = time.monotonic() - start
    assert not outcome.ok
    assert outcome.message == f"compiling the regex constraint took longer than {TIMEOUT_S:g} s"
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + 2.0
    assert not pid_alive(old_pid)
    assert validator.worker_pids() and validator.worker_pids() != [old_pid]
    # the replacement worker serves the next constraint (its start-up is not charged to the timeout)
    assert loop.run_until_complete(validator.validate("regex", r"ab+c")).ok
    # the timeout is cached: asking again answers at once and kills nothing
    new_pids = validator.worker_pids()
    start = time.monotonic()
    again = loop.run_until_complete(validator.validate("regex", PATHOLOGICAL))
    assert again == outcome and time.monotonic() - start < 0.1
    assert validator.worker_pids() == new_pids


def test_concurrent_callers_share_one_compile(loop, validator):
    async def both():
        return await asyncio.gather(validator.validate("regex", "x{2,5}y"), validator.validate("regex", "x{2,5}y"))

    first, second = loop.run_until_complete(both())
    assert first.ok and second is first


def test_a_dead_idle_worker_is_replaced(loop, validator):
    (pid,) = validator.worker_pids()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert loop.run_until_complete(validator.validate("regex", r"after[0-9]+")).ok
    assert pid not in validator.worker_pids() and len(validator.worker_pids()) == 1


def test_outcome_cache_is_bounded_lru(loop, validator):
    specs = [f"q{i}[0-9]" for i in range(6)]
    for spec in specs:
        loop.run_until_complete(validator.validate("regex", spec))
    assert validator.cached_outcomes() == validator.cache_size == 4
    keys = list(validator._outcomes)  # most recent last
    assert len(keys) == 4 and all(kind == "regex" for kind, _ in keys)
    start = time.monotonic()
    loop.run_until_complete(validator.validate("regex", specs[-1]))  # a hit: no compile
    assert time.monotonic() - start < 0.05


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
    return requests.post(f"{url}/generate", json={"text": "Hello", "sampling_params": sampling_params},
                         timeout=timeout)


def test_server_rejects_a_slow_constraint_without_stalling_others(guarded_server):
    url = guarded_server.url
    plain = {"max_new_tokens": 8, "temperature": 0}
    assert _generate(url, plain).status_code == 200  # warm
    # a constrained request waits for a validator worker that has loaded the tokenizer (not charged to the timeout)
    assert _generate(url, {"max_new_tokens": 4, "regex": "[ab]{4}"}).status_code == 200
    slow: dict = {}

    def send_slow() -> None:
        start = time.monotonic()
        slow["response"] = _generate(url, {"max_new_tokens": 8, "regex": PATHOLOGICAL})
        slow["elapsed"] = time.monotonic() - start

    thread = threading.Thread(target=send_slow)
    thread.start()
    time.sleep(0.5)  # the pathological compile is running in the validator now
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

    # A normal constrained request still works, and a repeat of the slow one is refused at once.
    constrained = _generate(url, {"max_new_tokens": 16, "regex": r"[0-9]{3}", "temperature": 1.0})
    assert constrained.status_code == 200, constrained.text
    assert re.fullmatch(r"[0-9]{3}", constrained.json()["text"])
    start = time.monotonic()
    again = _generate(url, {"max_new_tokens": 8, "regex": PATHOLOGICAL})
    assert again.status_code == 400 and time.monotonic() - start < 1.0


def test_validator_processes_stop_with_the_server(guarded_server):
    children = set(guarded_server.server_info()["process_ids"].values())
    validators = [pid for pid in descendant_pids(guarded_server.proc.pid)
                  if pid not in children and _cmdline(pid).count(b"spawn_main")]
    assert validators, "the server runs its constraint validator in child processes"
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
