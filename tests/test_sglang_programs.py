"""SGLang's own test programs (sglang/test/test_programs.py from the sglang==0.5.23 wheel) against
this server, through SGLang's real frontend and through sgl_lang with only the import changed.

Needs the `sglang-compat` extra (`pip install --no-deps sglang==0.5.23` and the light dependencies
listed there); skipped with a message otherwise. The served model is the random demo model, so these
are the structural programs: what they assert holds whatever the model says.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types

import pytest

pytestmark = pytest.mark.slow

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


def _sglang_programs():
    sgl = pytest.importorskip("sglang")
    import sglang.test.test_programs as programs

    return sgl, programs


def _sgl_lang_programs():
    """The same source file, with `import sglang as sgl` (and sglang.lang.ir) changed to sgl_lang."""
    import sglang.test.test_programs as programs

    import sgl_lang

    source = open(programs.__file__).read()
    source = source.replace("import sglang as sgl", "import sgl_lang as sgl").replace(
        "from sglang.lang.ir import", "from sgl_lang.ir import"
    )
    module = types.ModuleType("sgl_lang_test_programs")
    module.__file__ = programs.__file__
    exec(compile(source, programs.__file__, "exec"), module.__dict__)
    return sgl_lang, module


@pytest.fixture(scope="module")
def tokenizer_module(monkeypatch_module):
    """test_gen_min_new_tokens imports sglang.srt.utils.hf_transformers_utils.get_tokenizer, which
    pulls in torchvision; give that one function from transformers instead."""
    from transformers import AutoTokenizer

    shim = types.ModuleType("sglang.srt.utils.hf_transformers_utils")
    shim.get_tokenizer = lambda path, **kw: AutoTokenizer.from_pretrained(path)
    monkeypatch_module.setitem(sys.modules, "sglang.srt.utils.hf_transformers_utils", shim)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def _run(program: str, sgl, programs, url: str) -> None:
    endpoint = sgl.RuntimeEndpoint(url)
    endpoint.endpoint = endpoint  # test_gen_min_new_tokens reads default_backend.endpoint (a Runtime's)
    sgl.set_default_backend(endpoint)
    test = getattr(programs, f"test_{program}")
    try:
        test(False) if program == "select" else test()
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
# on a fast server. sgl_lang's frontend yields every chunk and runs the same program strictly below.
UPSTREAM_RACE = pytest.mark.xfail(reason="race in SGLang's frontend text_async_iter (see above)", strict=False)


@pytest.mark.parametrize(
    "program", [pytest.param(p, marks=UPSTREAM_RACE) if p == "stream_logprobs" else p for p in STRUCTURAL]
)
def test_sglang_frontend_runs_sglang_test_program(program, server, tokenizer_module):
    sgl, programs = _sglang_programs()
    _run(program, sgl, programs, server.url)


@pytest.mark.parametrize("program", STRUCTURAL)
def test_sgl_lang_runs_sglang_test_program_with_only_the_import_changed(program, server, tokenizer_module):
    sgl, programs = _sgl_lang_programs()
    _run(program, sgl, programs, server.url)
