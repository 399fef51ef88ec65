"""JSON string automata: canonical escaping of a decoded-content DFA, lengths, ECMA-262 patterns.

A JSON string is accepted in its canonical form only (what `json.dumps(s, ensure_ascii=False)`
writes: `\\"`, `\\\\`, `\\n`, `\\r`, `\\t`, `\\b`, `\\f`, `\\u00xx` for other control characters,
everything else raw), so every decoded string has exactly one spelling and lengths, patterns,
enums and complements are exact.
"""

from __future__ import annotations

import functools
import json
import re

import interegular

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.automata import ANY_CHAR, EMPTY, Charset, Dfa, charset, from_interegular, literal, minimize
from sgl_runtime.constrained.json_schema.ops import concat, intersect, union

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
SPECIAL = frozenset(_SHORT_ESCAPES) | frozenset(chr(i) for i in range(0x20))
_SPECIAL_CS = Charset(SPECIAL)
_ECMA_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
              "\u2028\u2029\u202f\u205f\u3000\ufeff"
_ECMA_DOT = "[^\n\r\u2028\u2029]"


def escape_char(c: str) -> str:
    short = _SHORT_ESCAPES.get(c)
    if short is not None:
        return short
    return "\\u%04x" % ord(c) if ord(c) < 0x20 else c


def string_literal(text: str) -> str:
    """The canonical JSON spelling of `text` (with quotes)."""
    return json.dumps(text, ensure_ascii=False)


def any_content() -> Dfa:
    return Dfa((((ANY_CHAR, 0),),), frozenset({0}))


@functools.lru_cache(maxsize=256)
def length_content(lo: int, hi: int | None) -> Dfa:
    """Decoded strings of lo..hi characters (code points)."""
    if hi is not None and hi < lo:
        return EMPTY
    top = lo if hi is None else hi
    edges = [((ANY_CHAR, i + 1),) for i in range(top)]
    edges.append(((ANY_CHAR, top),) if hi is None else ())
    return Dfa(tuple(edges), frozenset(range(lo, top + 1)))


_COMMON_SPECIAL = frozenset('"\\\n\r\t')


def encode_content(content: Dfa, full_escapes: bool = True) -> Dfa:
    """The JSON string literals (quotes included) whose decoded value `content` accepts.

    full_escapes=False drops the rarely needed control characters (all but \\n, \\r, \\t), which
    keeps length-bounded strings at two states per position instead of seven."""
    specials = SPECIAL if full_escapes else _COMMON_SPECIAL
    if content.is_empty():
        return EMPTY
    offset = 1
    n = content.num_states
    close = offset + n
    edges: list[list] = [[(charset('"'), offset)]] + [[] for _ in range(n)] + [[]]
    for s, out in enumerate(content.edges):
        trie: dict = {}
        for cs, t in out:
            raw = cs - _SPECIAL_CS
            if not raw.is_empty():
                edges[offset + s].append((raw, offset + t))
            for c in specials:
                if c in cs:
                    trie[escape_char(c)] = offset + t
        if s in content.finals:
            edges[offset + s].append((charset('"'), close))
        if trie:
            _add_trie(edges, offset + s, trie)
    return minimize(Dfa(tuple(tuple(e) for e in edges), frozenset({close})))


def _add_trie(edges: list[list], root: int, words: dict) -> None:
    """Adds deterministic paths spelling each word from `root` to its target state."""
    nodes = {"": root}
    for word, target in sorted(words.items()):
        for i in range(1, len(word)):
            prefix = word[:i]
            if prefix not in nodes:
                nodes[prefix] = len(edges)
                edges.append([])
                edges[nodes[word[: i - 1]]].append((charset(word[i - 1]), nodes[prefix]))
        edges[nodes[word[:-1]]].append((charset(word[-1]), target))


@functools.lru_cache(maxsize=256)
def pattern_content(pattern: str) -> Dfa:
    """Decoded strings in which the ECMA-262 regex `pattern` finds a match (unanchored search)."""
    alternatives = _split_top_level(pattern)
    parts = []
    for alt in alternatives:
        anchored_start = alt.startswith("^")
        anchored_end = alt.endswith("$") and not _escaped_at(alt, len(alt) - 1)
        body = alt[1 if anchored_start else 0: len(alt) - 1 if anchored_end else len(alt)]
        inner = _regex_content(_ecma_to_python(body))
        prefix = "" if anchored_start else ".*"
        suffix = "" if anchored_end else ".*"
        if prefix or suffix:
            pieces = ([any_content()] if prefix else []) + [inner] + ([any_content()] if suffix else [])
            inner = concat(*pieces)
        parts.append(inner)
    return union(*parts)


def _regex_content(python_regex: str) -> Dfa:
    try:
        re.compile(python_regex)
        fsm = interegular.parse_pattern(python_regex).to_fsm()
    except (re.error, interegular.patterns.InvalidSyntax) as exc:
        raise ConstraintError(f"pattern: invalid regex {python_regex!r}: {exc}") from None
    except (interegular.patterns.Unsupported, NotImplementedError, ValueError) as exc:
        raise ConstraintError(f"pattern: unsupported regex feature in {python_regex!r}: {exc}") from None
    return from_interegular(fsm)


def _escaped_at(text: str, i: int) -> bool:
    backslashes = 0
    while i - 1 - backslashes >= 0 and text[i - 1 - backslashes] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def _split_top_level(pattern: str) -> list[str]:
    """Splits at '|' outside groups and classes."""
    parts, depth, in_class, start, i = [], 0, False, 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    parts.append(pattern[start:])
    return parts


def _ecma_to_python(pattern: str) -> str:
    """Rewrites ECMA-only syntax (\\uXXXX, '.', \\s) into the interegular-supported subset."""
    out, in_class, i = [], False, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", pattern[i + 2: i + 6]):
                out.append(re.escape(chr(int(pattern[i + 2: i + 6], 16))))
                i += 6
                continue
            if nxt in "bB" and not in_class:
                raise ConstraintError("pattern: word boundaries (\\b, \\B) are not supported")
            if nxt == "s":
                out.append(re.escape(_ECMA_SPACE) if in_class else "[" + re.escape(_ECMA_SPACE) + "]")
            elif nxt == "S":
                if in_class:
                    raise ConstraintError("pattern: \\S inside a character class is not supported")
                out.append("[^" + re.escape(_ECMA_SPACE) + "]")
            elif nxt.isdigit() and nxt != "0":
                raise ConstraintError("pattern: backreferences are not supported")
            else:
                out.append(pattern[i: i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
            out.append(c)
        elif c == "[":
            in_class = True
            if pattern[i + 1: i + 2] == "^":
                out.append("[^")
                i += 2
                continue
            out.append(c)
        elif c == ".":
            out.append(_ECMA_DOT)
        elif c in "^$":
            raise ConstraintError(f"pattern: anchor {c!r} inside the pattern is not supported")
        else:
            out.append(c)
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=512)
def string_dfa(min_length: int = 0, max_length: int | None = None, patterns: tuple = (),
               extra: tuple = (), full_escapes: bool = True) -> Dfa:
    """JSON string literals with length bounds, matching every pattern and content DFA in `extra`."""
    parts = [length_content(min_length, max_length)] if (min_length or max_length is not None) else []
    parts += [pattern_content(p) for p in patterns]
    parts += list(extra)
    content = intersect(*parts) if parts else any_content()
    return encode_content(content, full_escapes or not parts)


def literals_dfa(texts) -> Dfa:
    """Exactly the canonical literals of the given strings."""
    return union(*(literal(string_literal(t)) for t in texts)) if texts else EMPTY
