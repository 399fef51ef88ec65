"""The process-wide default backend that `set_default_backend` sets and programs fall back to."""

from __future__ import annotations

from typing import Any, Optional

_default_backend: Optional[Any] = None


def set_default_backend(backend: Any) -> None:
    """Programs run without `backend=` use this one (a backend or a `Runtime`)."""
    global _default_backend
    _default_backend = backend


def get_default_backend() -> Optional[Any]:
    return _default_backend


def resolve_backend(backend: Optional[Any] = None, required: bool = True) -> Any:
    """The backend to use: the one given, else the default; a `Runtime` stands for its endpoint."""
    backend = backend if backend is not None else _default_backend
    if backend is None and required:
        raise RuntimeError("no backend: pass backend=... or call sgl_lang.set_default_backend(...) first")
    return getattr(backend, "endpoint", backend)
