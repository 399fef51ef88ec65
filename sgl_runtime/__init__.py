"""sgl_runtime: serves Hugging Face models with RadixAttention and constrained decoding."""

from sgl_runtime.version import __version__


def __getattr__(name):
    # Lazy, so that `import sgl_runtime.io_struct` (used by light processes) pulls in no torch.
    if name == "Engine":
        from sgl_runtime.engine import Engine

        return Engine
    if name == "ServerArgs":
        from sgl_runtime.server_args import ServerArgs

        return ServerArgs
    raise AttributeError(name)


__all__ = ["Engine", "ServerArgs", "__version__"]
