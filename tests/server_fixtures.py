"""Starts the real server (`python -m sgl_runtime.launch_server` on the random demo model) as a
subprocess on a free port, waits for /health, and stops it; plus helpers to wait for an idle
server and to check process trees. `shared_server` keeps one default server per test session."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import pytest
import requests

STARTUP_TIMEOUT_S = 300.0
# Small pool and batch limits keep the CPU demo server light while still exercising the scheduler; the
# random-weight demo model keeps start-up fast (tests of the real demo model are in test_demo_smollm2.py).
RANDOM_DEMO_ARGS = ("--model-path", "random-demo")
DEFAULT_ARGS = ("--device", "cpu", "--max-total-tokens", "16384", "--log-level", "warning")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, *extra_args: str, api_key: Optional[str] = None, model_args: tuple = RANDOM_DEMO_ARGS) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        self.log_path = Path(tempfile.mkstemp(prefix="sgl_server_", suffix=".log")[1])
        args = [
            sys.executable,
            "-m",
            "sgl_runtime.launch_server",
            "--port",
            str(self.port),
            *model_args,
            *DEFAULT_ARGS,
            *extra_args,
        ]
        if api_key:
            args += ["--api-key", api_key]
        self._log = open(self.log_path, "wb")
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=env)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> "ServerProcess":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode} while starting:\n{self.log()}")
            try:
                if requests.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"server not healthy after {timeout}s:\n{self.log()}")

    def server_info(self) -> dict:
        return requests.get(f"{self.url}/get_server_info", headers=self.headers, timeout=30).json()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def start_server(*extra_args: str, api_key: Optional[str] = None) -> ServerProcess:
    return ServerProcess(*extra_args, api_key=api_key).wait_ready()


def descendant_pids(pid: int) -> set[int]:
    """All live descendants of `pid` (read from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        children = {p for p, ppid in parents.items() if ppid in frontier}
        frontier = children - found
        found |= children
    return found


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def wait_idle(url: str, timeout: float = 60.0, headers: Optional[dict] = None) -> dict:
    """Poll /get_server_info until nothing is running or waiting; returns the scheduler stats."""
    deadline = time.monotonic() + timeout
    while True:
        stats = requests.get(f"{url}/get_server_info", headers=headers or {}, timeout=30).json()["scheduler_stats"]
        if stats["num_running_reqs"] == 0 and stats["num_waiting_reqs"] == 0:
            return stats
        if time.monotonic() > deadline:
            raise AssertionError(f"server still busy after {timeout}s: {stats}")
        time.sleep(0.1)


def flush_when_idle(url: str, timeout: float = 60.0, headers: Optional[dict] = None) -> None:
    """Flush the prefix cache, retrying while the server refuses because requests are in flight
    (e.g. an aborted request that the scheduler has not reaped yet)."""
    deadline = time.monotonic() + timeout
    while True:
        wait_idle(url, timeout, headers)
        r = requests.post(f"{url}/flush_cache", headers=headers or {}, timeout=30)
        if r.status_code == 200:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"flush_cache still refused after {timeout}s: {r.status_code} {r.text}")
        time.sleep(0.1)


_SHARED: dict[str, ServerProcess] = {}


def shared_server(config: pytest.Config) -> ServerProcess:
    """The session's shared default server: started on first use, stopped at session end."""
    if "default" not in _SHARED:
        shared = _SHARED["default"] = start_server()
        config.add_cleanup(shared.stop)
    shared = _SHARED["default"]
    if shared.proc.poll() is not None:
        pytest.fail(f"the shared server exited with {shared.proc.returncode}:\n{shared.log()}")
    return shared
