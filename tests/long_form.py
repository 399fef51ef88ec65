"""The suite's long form: `SGL_LONG_TESTS=1` runs the sampling-heavy tests with their full example
counts (CI runs the short counts, which check the same properties on fewer samples)."""

import os

LONG = os.environ.get("SGL_LONG_TESTS") == "1"


def examples(short: int, long: int) -> int:
    """How many samples a sampling-heavy test draws: `short` in CI, `long` with SGL_LONG_TESTS=1."""
    return long if LONG else short
