"""SGLang's own test programs (sglang/test/test_programs.py from the sglang==0.5.23 wheel), run
through SGLang's real frontend or through sgl_lang with only the import changed."""

from __future__ import annotations

import sys
import types

import pytest


def sglang_programs():
    sgl = pytest.importorskip("sglang")
    import sglang.test.test_programs as programs

    return sgl, programs


def sgl_lang_programs():
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


def run_program(program: str, sgl, programs, url: str) -> None:
    """Run SGLang's `test_<program>` against the server at `url`."""
    endpoint = sgl.RuntimeEndpoint(url)
    endpoint.endpoint = endpoint  # test_gen_min_new_tokens reads default_backend.endpoint (a Runtime's)
    sgl.set_default_backend(endpoint)
    test = getattr(programs, f"test_{program}")
    test(False) if program == "select" else test()
