"""Starts the real server (`python -m sgl_runtime.launch_server` on the demo model) as a
subprocess on a free port, waits for /health, and stops it. One shared server per test session."""

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
# Small pool and batch limits keep the CPU demo server light while still exercising the scheduler.
DEFAULT_ARGS = ("--device", "cpu", "--max-total-tokens", "16384", "--log-level", "warning")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, *extra_args: str, api_key: Optional[str] = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        self.log_path = Path(tempfile.mkstemp(prefix="sgl_server_", suffix=".log")[1])
        args = [sys.executable, "-m", "sgl_runtime.launch_server", "--port", str(self.port), *DEFAULT_ARGS, *extra_args]
        if api_key:
            args += ["--api-key", api_key]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ})

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
            fields = stat[stat.rindex(")") + 2:].split()
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


_SHARED: dict[str, ServerProcess] = {}


@pytest.fixture(scope="session")
def server(request) -> ServerProcess:
    """The session's shared demo-model server (started once, even when several modules use it)."""
    if "default" not in _SHARED:
        shared = _SHARED["default"] = start_server()
        request.config.add_cleanup(shared.stop)
    return _SHARED["default"]
