"""Fail fast in one line: bad paths, a missing chat-template file and --device cuda without a GPU
end the launcher with status 1 and one line naming the problem, before any child is spawned."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from server_fixtures import free_port


def launch(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "sgl_runtime.launch_server", "--port", str(free_port()), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, time.monotonic() - start


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize(
    "args,words",
    [
        (("--model-path", "/no/such/model"), "--model-path '/no/such/model': no such directory"),
        (("--tokenizer-path", "/tmp"), "--tokenizer-path '/tmp'"),
        (("--chat-template", "/no/such.jinja"), "--chat-template '/no/such.jinja': no such file"),
        (("--watchdog-timeout", "0"), "watchdog_timeout"),
        (("--device", "cuda"), "--device cuda"),
    ],
)
def test_startup_error_is_one_line(args, words):
    if args[0] == "--device" and _has_cuda():
        pytest.skip("this machine has a GPU")
    proc, elapsed = launch(*args)
    assert proc.returncode == 1, proc.stderr
    assert words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) == 1, proc.stderr
    assert elapsed < 30, elapsed
