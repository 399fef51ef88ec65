"""Backends the interpreter can run programs on."""

from sgl_lang.backend.base import BackendError, BaseBackend
from sgl_lang.backend.runtime_endpoint import RuntimeEndpoint

__all__ = ["BackendError", "BaseBackend", "RuntimeEndpoint"]
