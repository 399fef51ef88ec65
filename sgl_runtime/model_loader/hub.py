"""Resolves a Hugging Face Hub id (`Org/Name`) to a local snapshot directory through huggingface_hub.

The local cache (HF_HOME / HF_HUB_CACHE, or --download-dir) is tried first; only when it lacks the
snapshot, and HF_HUB_OFFLINE is not set, are the checkpoint's files downloaded.
"""

from __future__ import annotations

import logging
import re
from typing import Optional

logger = logging.getLogger(__name__)

# What a safetensors checkpoint needs; the GGUF exports and PyTorch .bin files many repositories also carry are skipped.
CHECKPOINT_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def looks_like_hub_id(name: str) -> bool:
    return bool(_HUB_ID.match(name)) and ".." not in name


def hub_snapshot(repo_id: str, revision: Optional[str] = None, download_dir: Optional[str] = None) -> str:
    """The local snapshot directory of `repo_id` at `revision` (cache first, then the Hub)."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    kwargs = dict(revision=revision, cache_dir=download_dir, allow_patterns=CHECKPOINT_PATTERNS)
    try:
        return snapshot_download(repo_id, local_files_only=True, **kwargs)
    except LocalEntryNotFoundError:
        if constants.HF_HUB_OFFLINE:
            raise FileNotFoundError(
                f"model {repo_id!r}{_at(revision)} is not in the Hugging Face cache ({download_dir or constants.HF_HUB_CACHE})"
                " and HF_HUB_OFFLINE is set; download it first or unset HF_HUB_OFFLINE"
            ) from None
    logger.info("downloading %s%s from the Hugging Face Hub", repo_id, _at(revision))
    try:
        return snapshot_download(repo_id, **kwargs)
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FileNotFoundError(
            f"cannot get model {repo_id!r}{_at(revision)} from the Hugging Face Hub: {reason}"
        ) from exc


def _at(revision: Optional[str]) -> str:
    return f" (revision {revision})" if revision else ""
