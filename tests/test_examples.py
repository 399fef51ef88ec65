"""Every example in examples/ runs as written and exits 0 (one shared server; one run starts its own)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import sgl_lang as sgl

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
EXAMPLES = ["quick_start.py", "json_decode.py", "fork_join.py", "select_classification.py", "run_batch.py",
            "streaming.py", "openai_backend.py"]


@pytest.fixture(scope="module")
def server_url():
    runtime = sgl.Runtime()
    yield runtime.url
    runtime.shutdown()


def _run(args: list, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=EXAMPLES_DIR.parent, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_against_a_server(name, server_url):
    path = EXAMPLES_DIR / name
    assert "Usage:" in (ast.get_docstring(ast.parse(path.read_text())) or ""), f"{name} has no Usage docstring"
    result = _run([str(path), "--url", server_url])
    assert result.returncode == 0, f"{name} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"


def test_example_starts_its_own_runtime_without_a_url():
    result = _run([str(EXAMPLES_DIR / "quick_start.py")])
    assert result.returncode == 0, result.stderr[-4000:]
    assert "assistant:" in result.stdout
