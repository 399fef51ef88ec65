"""Every example in examples/ runs as written and exits 0, against a server on the trained demo model
(SmolLM2, test_demo_smollm2.py runs them on its server) and here as a user without a server would: the
README demo starts its own Runtime."""

import ast
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Optional

import pytest
from server_fixtures import pid_alive

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
EXAMPLES = [
    "demo.py",
    "quick_start.py",
    "json_decode.py",
    "fork_join.py",
    "select_classification.py",
    "run_batch.py",
    "streaming.py",
    "openai_backend.py",
    "tool_call.py",  # needs a server started with --tool-call-parser (SmolLM2's template has no tool format)
]


def run_example(args: list, timeout: float = 300, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=EXAMPLES_DIR.parent, capture_output=True, text=True, timeout=timeout, env=env
    )


def _processes_with_env(entry: bytes) -> list[int]:
    """Live processes whose environment holds `entry` (inherited by everything a run started)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if (
                proc.name.isdigit()
                and entry in (proc / "environ").read_bytes().split(b"\0")
                and pid_alive(int(proc.name))
            ):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_has_a_usage_docstring(name):
    path = EXAMPLES_DIR / name
    assert "Usage:" in (ast.get_docstring(ast.parse(path.read_text())) or ""), f"{name} has no Usage docstring"


def test_readme_demo_starts_its_own_runtime_and_leaves_no_process():
    marker = f"SGL_TEST_RUN={uuid.uuid4().hex}"
    # The random demo model keeps this fast; README.md records a run on the real demo model.
    env = {**os.environ, marker.split("=")[0]: marker.split("=")[1], "SGL_DEMO_MODEL": "random-demo"}
    result = run_example([str(EXAMPLES_DIR / "demo.py")], env=env)  # the README's command, verbatim
    assert result.returncode == 0, result.stderr[-4000:]
    assert "due matches" in result.stdout and "component (select) ->" in result.stdout
    deadline = time.monotonic() + 15
    while _processes_with_env(marker.encode()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _processes_with_env(marker.encode()), "the example's Runtime left server processes running"


def test_every_example_is_listed():
    others = {"example_backend.py"}  # a backend to copy, not a program
    assert sorted(EXAMPLES) == sorted(p.name for p in EXAMPLES_DIR.glob("*.py") if p.name not in others)
