"""Shared by the examples: use the server URL given on the command line, else start a local Runtime.

with example_backend() as backend:   # sets it as the default backend too
    ...
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Iterator, Optional

import sgl_lang as sgl


def parse_url(description: str, argv: Optional[list] = None) -> Optional[str]:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("url", nargs="?", help="a running server, e.g. http://127.0.0.1:30000")
    parser.add_argument("--url", dest="url_flag", help="same as the positional URL")
    args = parser.parse_args(argv)
    return args.url_flag or args.url


@contextlib.contextmanager
def example_backend(description: str = "", argv: Optional[list] = None) -> Iterator[sgl.BaseBackend]:
    """A RuntimeEndpoint for the given URL, or a Runtime on the demo model stopped on exit."""
    url = parse_url(description, argv)
    runtime = None if url else sgl.Runtime()
    backend = sgl.RuntimeEndpoint(url) if url else runtime.endpoint
    sgl.set_default_backend(backend)
    try:
        yield backend
    finally:
        sgl.set_default_backend(None)
        if runtime is not None:
            runtime.shutdown()
