"""SGLang's own test programs (sglang/test/test_programs.py from the sglang==0.5.23 wheel) against
this server, through SGLang's real frontend and through sgl_lang with only the import changed.

Needs the `sglang-compat` extra (`pip install --no-deps sglang==0.5.23` and the light dependencies
listed there); skipped with a message otherwise. The served model is the random demo model, so these
are the structural programs: what they assert holds whatever the model says.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from sglang_programs import monkeypatch_module, run_program, sgl_lang_programs, sglang_programs, tokenizer_module  # noqa: F401 - fixtures

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tokenizer_module")]

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "sglang is not installed: pip install -e '.[sglang-compat]' && pip install --no-deps sglang==0.5.23",
        allow_module_level=True,
    )

STRUCTURAL = [
    "mt_bench",
    "select",
    "parallel_decoding",
    "stream",
    "stream_logprobs",
    "regex",
    "dtype_gen",
    "decode_json_regex",
    "decode_json",
    "gen_min_new_tokens",
]
# These two parse a string the model wrote as JSON; the random model may end a string on the token
# limit or put a tab in it (SGLang's REGEX_STR allows \s), so on it they show the constraint, not JSON.
NEEDS_A_MODEL = {"decode_json_regex", "decode_json"}


def _run(program: str, sgl, programs, url: str) -> None:
    try:
        run_program(program, sgl, programs, url)
    except json.JSONDecodeError as exc:
        if program not in NEEDS_A_MODEL:
            raise
        _check_json_shape(exc.doc)


def _check_json_shape(doc: str) -> None:
    """The program's JSON skeleton came out as written and every field was generated."""
    lines = doc.strip().splitlines()
    assert lines[0] == "{" and lines[-1] == "}", doc
    assert doc.count('": ') >= 4, doc


# SGLang's own frontend has a race in text_async_iter(return_meta_data=True): when two chunks arrive
# between two wake-ups of the consumer, it yields their joined text with only the later chunk's
# meta_info (sglang/lang/interpreter.py), so the program's per-chunk logprob count fails at random
# on a fast server. sgl_lang's frontend yields every chunk and runs the same program strictly below;
# on the trained model (tokens tens of milliseconds apart) SGLang's frontend runs it strictly too
# (tests/test_demo_smollm2.py::test_sglang_programs_pass_as_written_on_the_trained_model).
UPSTREAM_RACE = pytest.mark.xfail(reason="race in SGLang's frontend text_async_iter (see above)", strict=False)


@pytest.mark.parametrize(
    "program", [pytest.param(p, marks=UPSTREAM_RACE) if p == "stream_logprobs" else p for p in STRUCTURAL]
)
def test_sglang_frontend_runs_sglang_test_program(program, server):
    sgl, programs = sglang_programs()
    _run(program, sgl, programs, server.url)


@pytest.mark.parametrize("program", STRUCTURAL)
def test_sgl_lang_runs_sglang_test_program_with_only_the_import_changed(program, server):
    sgl, programs = sgl_lang_programs()
    _run(program, sgl, programs, server.url)
