"""Two "nodes" on loopback (gloo): node 0 serves HTTP and runs rank 0, node 1 only runs rank 1. Greedy
outputs equal a tp=1 Engine's (constraints under tensor parallelism: tests/test_tensor_parallel.py); then killing rank 1's process mid-generation ends
both launchers with an error naming what died, within 30 s, and leaves no process behind."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import requests
from engine_fixtures import random_prompts
from model_fixtures import make_tiny_checkpoint
from server_fixtures import ServerProcess, descendant_pids, free_port, pid_alive

from sgl_runtime.engine import Engine

FAULT_DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    path = make_tiny_checkpoint("llama3", tmp_path_factory.mktemp("tp-nodes"))
    common = (
        "--model-path",
        path,
        "--tp-size",
        "2",
        "--nnodes",
        "2",
        "--dist-init-addr",
        f"127.0.0.1:{free_port()}",
        "--max-total-tokens",
        "4096",
    )
    node1_log = Path(tempfile.mkstemp(prefix="sgl_node1_", suffix=".log")[1])
    with open(node1_log, "wb") as log:
        node1 = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sgl_runtime.launch_server",
                *common,
                "--node-rank",
                "1",
                "--device",
                "cpu",
                "--log-level",
                "info",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    node0 = ServerProcess(*common, "--node-rank", "0")
    try:
        node0.wait_ready()
        yield path, node0, node1, node1_log
    finally:
        node0.stop()
        if node1.poll() is None:
            node1.kill()
        node1.wait()


GREEDY = {"max_new_tokens": 8, "temperature": 0}


def test_two_nodes_generate_what_one_rank_does(two_nodes):
    path, node0, _, _ = two_nodes
    prompts = random_prompts([12, 5, 30, 9], seed=3)
    with Engine(path, device="cpu", max_total_tokens=4096) as engine:
        want = [r["output_ids"] for r in engine.generate(input_ids=prompts, sampling_params=GREEDY)]
    got = []
    for prompt in prompts:
        r = requests.post(f"{node0.url}/generate", json={"input_ids": prompt, "sampling_params": GREEDY}, timeout=120)
        assert r.status_code == 200, r.text
        got.append(r.json()["output_ids"])
    assert got == want


def test_killing_a_rank_ends_both_nodes(two_nodes):
    _, node0, node1, node1_log = two_nodes
    ready = re.search(r"tensor-parallel ranks ready \(process ids (\{.*\})\)", node1_log.read_text())
    rank1 = ast.literal_eval(ready.group(1))["tp-rank-1"]
    watched = descendant_pids(node0.proc.pid) | descendant_pids(node1.pid) | {node0.proc.pid, node1.pid}
    body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}
    reply: list = []
    threading.Thread(target=lambda: reply.append(_post(f"{node0.url}/generate", body)), daemon=True).start()
    time.sleep(1.0)  # generating
    killed_at = time.monotonic()
    os.kill(rank1, signal.SIGKILL)
    assert node1.wait(timeout=FAULT_DEADLINE_S) != 0
    assert node0.proc.wait(timeout=FAULT_DEADLINE_S) != 0
    assert time.monotonic() - killed_at < FAULT_DEADLINE_S
    assert "the tp-rank-1 process exited with code -9" in node1_log.read_text()
    assert "TensorParallelError" in node0.log()
    assert reply and reply[0] != 200  # the in-flight request failed rather than hanging
    deadline = time.monotonic() + 10
    while any(pid_alive(p) for p in watched) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in watched if pid_alive(p)]


def _post(url: str, body: dict):
    try:
        return requests.post(url, json=body, timeout=60).status_code
    except requests.RequestException as exc:
        return repr(exc)
