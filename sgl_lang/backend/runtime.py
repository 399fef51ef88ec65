"""Runtime: launch an sgl_runtime server as a subprocess and use it as a backend.

The server runs as `python -m sgl_runtime.launch_server --port P ...` on a free port; the
frontend never imports the runtime itself. It is stopped by `shutdown()`, by leaving a `with`
block, or at interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional

import requests

from sgl_lang.backend.runtime_endpoint import RuntimeEndpoint


class Runtime:
    """A local server; `.url` is its address and `.endpoint` its `RuntimeEndpoint`.

    Keyword arguments are server arguments (`sgl_runtime.server_args.ServerArgs` field names,
    e.g. `max_total_tokens=4096`); `model_path=None` serves the built-in demo model.
    """

    def __init__(
        self,
        model_path: Optional[str] = None,
        launch_timeout: float = 300.0,
        host: str = "127.0.0.1",
        port: Optional[int] = None,
        **server_args: Any,
    ):
        self.port = port or _free_port(host)
        self.url = f"http://{host}:{self.port}"
        self.api_key = server_args.get("api_key")
        self.log_file = tempfile.NamedTemporaryFile(prefix="sgl_runtime_", suffix=".log", delete=False)
        command = [sys.executable, "-m", "sgl_runtime.launch_server", "--host", host, "--port", str(self.port)]
        command += _cli_flags({"model_path": model_path, **server_args})
        self.process: Optional[subprocess.Popen] = subprocess.Popen(
            command, stdout=self.log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
        atexit.register(self.shutdown)
        self._wait_until_healthy(launch_timeout)
        self.endpoint = RuntimeEndpoint(self.url, api_key=self.api_key)

    def _wait_until_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None:
                raise RuntimeError("the sgl_runtime server was shut down while starting")
            code = self.process.poll()
            if code is not None:
                log = self.log_tail()
                self.shutdown()
                raise RuntimeError(f"sgl_runtime server exited with code {code}:\n{log}")
            try:
                if requests.get(self.url + "/health", timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.5)
        log = self.log_tail()
        self.shutdown()
        raise TimeoutError(f"sgl_runtime server not healthy after {timeout:.0f}s:\n{log}")

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's log (stdout and stderr)."""
        self.log_file.flush()
        with open(self.log_file.name, "rb") as f:
            return f.read().decode("utf-8", "replace")[-chars:]

    def shutdown(self) -> None:
        """Stop the server and its child processes (idempotent)."""
        process, self.process = self.process, None
        if process is None:
            return
        self._stop(process)
        self.log_file.close()
        with contextlib.suppress(OSError):
            os.unlink(self.log_file.name)
        atexit.unregister(self.shutdown)

    @staticmethod
    def _stop(process: subprocess.Popen) -> None:
        """SIGTERM the server's process group (its workers too, even if the server already
        exited), then SIGKILL what is left after 15 s."""
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            process.wait(timeout=15)

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    # Backend methods used directly on a Runtime (set_default_backend takes its endpoint)
    def cache_prefix(self, prefix: str) -> None:
        self.endpoint.cache_prefix(prefix)

    def flush_cache(self) -> None:
        self.endpoint.flush_cache()

    def get_server_info(self) -> dict:
        return self.endpoint.get_server_info()

    def get_model_name(self) -> str:
        return self.endpoint.get_model_name()


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _cli_flags(server_args: dict) -> list:
    """{"max_total_tokens": 4096, "disable_radix_cache": True} -> ["--max-total-tokens", "4096", "--disable-radix-cache"]."""
    flags: list = []
    for name, value in server_args.items():
        if value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        flags += [flag] if value is True else [flag, str(value)]
    return flags


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass
