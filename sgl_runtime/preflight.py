"""Start-up checks run before any child process is spawned (and, where possible, before torch is
imported): paths of the model, tokenizer and chat template, the device, and the arithmetic of the
memory flags. Each failure is a StartupError whose message names the problem and the fix."""

from __future__ import annotations

import glob
import os
from pathlib import Path

from sgl_runtime.server_args import ServerArgs
from sgl_runtime.tokenizer_utils import TOKENIZER_FILES, chat_template_is_path

MODEL_FILES = ("config.json",)


class StartupError(ValueError):
    """The server cannot start with these arguments (one line, printed before exiting 1)."""


def check_server_args(args: ServerArgs) -> None:
    """Raise StartupError for the first problem found."""
    local_model = args.model_path is not None and _names_a_local_directory(args.model_path)
    if local_model:
        _check_dir(args.model_path, "--model-path", MODEL_FILES, "a local Hugging Face model directory")
    tokenizer = args.tokenizer_path or (args.model_path if local_model else None)
    if tokenizer is not None:
        flag = "--tokenizer-path" if args.tokenizer_path else "--model-path"
        _check_dir(tokenizer, flag, TOKENIZER_FILES, "a directory with the tokenizer's files", any_of=True)
    if args.chat_template is not None and chat_template_is_path(args.chat_template):
        if not os.path.isfile(args.chat_template):
            raise StartupError(
                f"--chat-template {args.chat_template!r}: no such file (give a Jinja template file "
                "or the template text itself)"
            )
    if args.device == "cuda":
        check_cuda_available()
    if (
        args.max_total_tokens is not None
        and args.context_length is not None
        and args.max_total_tokens < min(args.context_length, 2)
    ):
        raise StartupError(f"--max-total-tokens {args.max_total_tokens} is too small for any request")
    if (
        args.max_running_requests is not None
        and args.max_total_tokens is not None
        and args.max_running_requests > args.max_total_tokens
    ):
        raise StartupError(
            f"--max-running-requests {args.max_running_requests} exceeds --max-total-tokens "
            f"{args.max_total_tokens}: every running request needs at least one KV slot"
        )


def _names_a_local_directory(model_path: str) -> bool:
    """Whether --model-path is meant as a local checkpoint directory: not the demo names, a .gguf
    file or a directory holding one, or a Hub id (`Org/Name`, resolved by model_loader/model_source.py)."""
    if model_path == "random-demo" or model_path.endswith(".gguf"):
        return False
    if os.path.isdir(model_path):
        return not any(name.endswith(".gguf") for name in os.listdir(model_path))
    return model_path.startswith(("/", ".", "~")) or model_path.count("/") != 1


def check_cuda_available() -> None:
    """--device cuda on a machine without a usable GPU is an error now, not a child's traceback later."""
    if not glob.glob("/dev/nvidia[0-9]*") and not os.environ.get("CUDA_VISIBLE_DEVICES"):
        raise StartupError("--device cuda: no NVIDIA GPU device found (/dev/nvidia*); use --device cpu")
    import torch

    if not torch.cuda.is_available():
        raise StartupError(
            "--device cuda: torch sees no CUDA GPU (torch.cuda.is_available() is False, torch "
            f"{torch.__version__}); use --device cpu or install a CUDA build of torch"
        )


def _check_dir(path: str, flag: str, files: tuple, what: str, any_of: bool = False) -> None:
    directory = Path(path)
    if not directory.exists():
        raise StartupError(f"{flag} {path!r}: no such directory (give {what})")
    if not directory.is_dir():
        raise StartupError(f"{flag} {path!r}: not a directory (give {what})")
    present = [name for name in files if (directory / name).is_file()]
    if (any_of and not present) or (not any_of and len(present) < len(files)):
        expected = " or ".join(files) if any_of else ", ".join(files)
        raise StartupError(f"{flag} {path!r}: {expected} not found there (give {what})")
