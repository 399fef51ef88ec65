"""The constrained decoders the schema corpus benchmark compares, behind one small interface:
`compile(schema)` (raises Refused with the library's reason) and a cursor with `mask()`,
`allowed(mask, token)`, `advance(token) -> bool` and `accepting()`.

ours: compile_constraint("json_schema", ...), the function the server's ConstraintCache calls.
llguidance, xgrammar (strict_mode off: extra keys allowed where the schema allows them, as JSON
Schema says) and outlines-core (its JSON-Schema-to-regex, then its Index) get the same Qwen2.5
tokenizer; each runs on one thread.
"""

from __future__ import annotations

import json

import numpy as np

# Compact JSON like the others; unknown keywords (CloudFormation's typeName, ...) and formats ignored,
# as a server would run it: strict, llguidance refuses two thirds of the corpus on annotations alone.
LLG_OPTIONS = {"whitespace_flexible": False, "lenient": True}


class Refused(Exception):
    """The library declines the schema (its message is the reason)."""


class Ours:
    name = "ours"

    def __init__(self, tokenizer, vocab) -> None:
        from sgl_runtime.constrained.compiler import compile_constraint
        from sgl_runtime.constrained.errors import ConstraintError

        self.tokenizer, self.vocab = tokenizer, vocab
        self._compile, self._error = compile_constraint, ConstraintError

    @staticmethod
    def version() -> str:
        return "this tree"

    def compile(self, schema):
        try:
            return self._compile("json_schema", schema, self.tokenizer)
        except self._error as exc:
            raise Refused(str(exc)) from None

    def cursor(self, compiled):
        return _OursCursor(compiled.matcher(), self._error)


class _OursCursor:
    def __init__(self, matcher, error) -> None:
        self.m, self.error = matcher, error

    def mask(self):
        return self.m.bitmask()

    @staticmethod
    def allowed(mask, token: int) -> bool:
        return bool((int(mask[token // 32]) >> (token % 32)) & 1)

    def advance(self, token: int) -> bool:
        try:
            self.m.advance(token)
        except self.error:
            return False
        return True

    def accepting(self) -> bool:
        return self.m.is_accepting()


class LLGuidance:
    name = "llguidance"

    def __init__(self, tokenizer, vocab) -> None:
        import llguidance
        import llguidance.hf
        import llguidance.numpy

        self.ll, self.np = llguidance, llguidance.numpy
        self.tok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab.size)
        self.size = vocab.size

    @staticmethod
    def version() -> str:
        from importlib.metadata import version

        return version("llguidance")

    def compile(self, schema):
        grammar = self.ll.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=LLG_OPTIONS)
        matcher = self.ll.LLMatcher(self.tok, grammar, log_level=0)
        if matcher.is_error():
            raise Refused(matcher.get_error())
        return matcher

    def cursor(self, compiled):
        return _LLCursor(compiled.deep_copy(), self.np, self.size)  # `compiled` stays at the start


class _LLCursor:
    def __init__(self, matcher, llnp, size: int) -> None:
        self.m, self.llnp = matcher, llnp
        self.bitmask = llnp.allocate_token_bitmask(1, size)

    def mask(self):
        self.llnp.fill_next_token_bitmask(self.m, self.bitmask, 0)
        return self.bitmask[0]

    allowed = staticmethod(_OursCursor.allowed)

    def advance(self, token: int) -> bool:
        return bool(self.m.consume_token(token)) and not self.m.is_error()

    def accepting(self) -> bool:
        return self.m.is_accepting()


class XGrammar:
    name = "xgrammar"

    def __init__(self, tokenizer, vocab) -> None:
        import xgrammar

        self.xgr = xgrammar
        self.info = xgrammar.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab.size, stop_token_ids=list(vocab.eos_token_ids)
        )
        self.compiler = xgrammar.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)
        self.eos = vocab.eos_token_ids[0]

    @staticmethod
    def version() -> str:
        from importlib.metadata import version

        return version("xgrammar")

    def compile(self, schema):
        try:
            return self.compiler.compile_json_schema(
                json.dumps(schema), any_whitespace=False, separators=(",", ":"), strict_mode=False
            )
        except (RuntimeError, ValueError) as exc:
            raise Refused(str(exc).splitlines()[0][:200]) from None

    def cursor(self, compiled):
        return _XGCursor(self.xgr, compiled, self.info.vocab_size, self.eos)


class _XGCursor:
    def __init__(self, xgr, compiled, size: int, eos: int) -> None:
        self.m, self.eos = xgr.GrammarMatcher(compiled), eos
        self.bitmask = xgr.allocate_token_bitmask(1, size)

    def mask(self):
        self.m.fill_next_token_bitmask(self.bitmask)
        return self.bitmask[0].numpy()

    allowed = staticmethod(_OursCursor.allowed)

    def advance(self, token: int) -> bool:
        return bool(self.m.accept_token(token))

    def accepting(self) -> bool:
        return bool(self.m.accept_token(self.eos))  # the last call on a cursor


class OutlinesCore:
    name = "outlines-core"

    def __init__(self, tokenizer, vocab) -> None:
        import outlines_core
        from outlines_core.json_schema import build_regex_from_schema

        self.oc, self.to_regex = outlines_core, build_regex_from_schema
        eos = vocab.eos_token_ids[0]
        tokens: dict = {}
        for i, data in enumerate(vocab.token_bytes):
            if data and i not in vocab.eos_token_ids:
                tokens.setdefault(bytes(data), []).append(i)
        self.vocabulary = outlines_core.Vocabulary(eos, tokens)
        self.size = vocab.size

    @staticmethod
    def version() -> str:
        from importlib.metadata import version

        return version("outlines-core")

    def compile(self, schema):
        try:
            regex = self.to_regex(json.dumps(schema), None)
            return self.oc.Index(regex, self.vocabulary)
        except (ValueError, RuntimeError, TypeError) as exc:
            raise Refused(str(exc).splitlines()[0][:200]) from None

    def cursor(self, compiled):
        return _OCCursor(self.oc.Guide(compiled), self.size)


class _OCCursor:
    def __init__(self, guide, size: int) -> None:
        self.g = guide
        self.bitmask = np.zeros((size + 31) // 32, dtype=np.int32)

    def mask(self):
        self.g.write_mask_into(self.bitmask.ctypes.data, self.bitmask.size, 4)
        return self.bitmask

    allowed = staticmethod(_OursCursor.allowed)

    def advance(self, token: int) -> bool:
        try:
            self.g.advance(token, return_tokens=False)
        except (ValueError, RuntimeError):
            return False
        return True

    def accepting(self) -> bool:
        return self.g.is_finished()


LIBRARIES = {c.name: c for c in (Ours, LLGuidance, XGrammar, OutlinesCore)}
