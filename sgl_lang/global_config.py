"""The process-wide default backend that `set_default_backend` sets and programs fall back to."""

from __future__ import annotations

from typing import Any, Optional


class GlobalConfig:
    """SGLang's `sgl.global_config`: `default_backend` is what `set_default_backend` set."""

    def __init__(self) -> None:
        self.default_backend: Optional[Any] = None
        # Read by SGLang's RuntimeEndpoint for every gen; sgl_lang sends the server's defaults.
        self.skip_special_tokens_in_output = True
        self.spaces_between_special_tokens_in_out = True


global_config = GlobalConfig()


def set_default_backend(backend: Any) -> None:
    """Programs run without `backend=` use this one (a backend or a `Runtime`)."""
    global_config.default_backend = backend


def get_default_backend() -> Optional[Any]:
    return global_config.default_backend


def resolve_backend(backend: Optional[Any] = None, required: bool = True) -> Any:
    """The backend to use: the one given, else the default; a `Runtime` stands for its endpoint."""
    backend = backend if backend is not None else global_config.default_backend
    if backend is None and required:
        raise RuntimeError("no backend: pass backend=... or call sgl_lang.set_default_backend(...) first")
    return getattr(backend, "endpoint", backend)
