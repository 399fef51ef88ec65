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

import numpy as np

from sgl_runtime.constrained.automata import (
    ANY_CHAR,
    EMPTY,
    Charset,
    Dfa,
    charge,
    charset,
    literal,
    minimize,
    to_interegular,
)
from sgl_runtime.constrained.automata_memo import memoized
from sgl_runtime.constrained.automata_ops import intersect, union
from sgl_runtime.constrained.byte_dfa import utf8_table
from sgl_runtime.constrained.counted import CountedDFA
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.regex_automaton import regex_to_dfa
from sgl_runtime.constrained.regex_properties import class_body, complement_ranges

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
SPECIAL = frozenset(_SHORT_ESCAPES) | frozenset(chr(i) for i in range(0x20))
_SPECIAL_CS = Charset(SPECIAL)
_ECMA_SPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_ECMA_DOT = "[^\n\r\u2028\u2029]"
_NOT_ECMA_SPACE = class_body(complement_ranges(tuple((ord(c), ord(c)) for c in sorted(_ECMA_SPACE))))


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
# a constrained string whose decoded-content automaton is this small spells every control character
# (\\u0000-\\u001f, \\b, \\f) exactly; a larger one (maxLength 2048) only \\n, \\r and \\t, since each
# \\u00xx escape costs five states per position (a valid value with another control character is
# then rejected, never the reverse; under `not` and in other exact contexts every escape is kept)
FULL_ESCAPES_UP_TO = 64


def encode_content(content: Dfa, full_escapes: bool = True, minimal: bool = True) -> Dfa:
    """The JSON string literals (quotes included) whose decoded value `content` accepts.

    full_escapes=False drops the rarely needed control characters (all but \\n, \\r, \\t), which
    keeps length-bounded strings at two states per position instead of seven. minimal=False keeps
    the construction's states: 0 before the opening quote, 1 + s for content state s, then the
    state after the closing quote, then those inside escapes."""
    specials = SPECIAL if full_escapes else _COMMON_SPECIAL
    if content.is_empty():
        return EMPTY
    # the states built, charged first: a long string spelling every escape is tens of thousands (seconds)
    charge(content.num_states * (1 + _ESCAPE_NODES[specials]))
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
    dfa = Dfa(tuple(tuple(e) for e in edges), frozenset({close}))
    return minimize(dfa) if minimal else dfa


def _escape_nodes(specials: frozenset) -> int:
    """States the escapes of `specials` add after one content state (their trie's inner nodes)."""
    return len({escape_char(c)[:i] for c in specials for i in range(1, len(escape_char(c)))})


_ESCAPE_NODES = {specials: _escape_nodes(specials) for specials in (SPECIAL, _COMMON_SPECIAL)}


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
    """Decoded strings in which the ECMA-262 regex `pattern` finds a match (unanchored search),
    exact or refused (lookaround, `^`, `$`, `\\b` included; see `regex_automaton`)."""
    if not isinstance(pattern, str):
        raise ConstraintError(f"pattern must be a string, got {type(pattern).__name__}")
    try:
        return regex_to_dfa(_ecma_to_python(pattern), search=True)
    except ConstraintError as exc:
        raise ConstraintError(f"pattern: {exc}") from None


def _ecma_to_python(pattern: str) -> str:
    """Rewrites ECMA-262 syntax into the Python regex with the same meaning: `\\uXXXX`, `.`, `\\s`
    and `\\S` (Unicode blanks, in and out of classes), `$` (end of input only: `\\Z`), `\\B` (which, unlike Python's, also
    holds in the empty string), named groups `(?<name>...)`."""
    out, in_class, i = [], False, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", pattern[i + 2 : i + 6]):
                out.append(re.escape(chr(int(pattern[i + 2 : i + 6], 16))))
                i += 6
                continue
            if nxt == "B" and not in_class:
                out.append(r"(?:\B|\A\Z)")
            elif nxt == "s":
                out.append(re.escape(_ECMA_SPACE) if in_class else "[" + re.escape(_ECMA_SPACE) + "]")
            elif nxt == "S":
                # inside a class: the explicit ranges of every code point that is not an ECMA blank
                out.append(_NOT_ECMA_SPACE if in_class else "[^" + re.escape(_ECMA_SPACE) + "]")
            elif nxt.isdigit() and nxt != "0":
                raise ConstraintError("pattern: backreferences are not supported")
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
            out.append(c)
        elif c == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "^":
                out.append("[^")
                i += 2
                continue
            out.append(c)
        elif c == ".":
            out.append(_ECMA_DOT)
        elif c == "$":
            out.append(r"\Z")
        elif c == "(" and pattern[i + 1 : i + 3] == "?<" and pattern[i + 3 : i + 4] not in ("=", "!"):
            out.append("(?P<")
            i += 3
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


@memoized
def string_dfa(
    min_length: int = 0,
    max_length: int | None = None,
    patterns: tuple = (),
    extra: tuple = (),
    full_escapes: bool = True,
) -> Dfa:
    """JSON string literals with length bounds, matching every pattern and content DFA in `extra`
    (kept by automata_memo, which charges a kept one what its build did)."""
    parts = [length_content(min_length, max_length)] if (min_length or max_length is not None) else []
    parts += [pattern_content(p) for p in patterns]
    parts += list(extra)
    content = intersect(*parts) if parts else any_content()
    return encode_content(content, full_escapes or not parts or content.num_states <= FULL_ESCAPES_UP_TO)


def counted_string(min_length: int, max_length: int | None, patterns: tuple = (), extra: tuple = ()) -> CountedDFA:
    """The JSON string literals of `string_dfa` as a CountedDFA: the uncounted literal automaton
    (every escape spelled), whose transitions completing a decoded character are counted, with
    the length bounds as count bounds (no state per position: see counted.py)."""
    return CountedDFA(*_uncounted_literals(patterns, extra), min_length, max_length)


@functools.lru_cache(maxsize=64)
def _uncounted_literals(patterns: tuple, extra: tuple) -> tuple:
    """(byte table, counted transitions, initial, accepting) of `counted_string` without bounds
    (shared by the bounds of one pattern: the UTF-8 expansion of a Unicode class is costly)."""
    parts = [pattern_content(p) for p in patterns] + list(extra)
    content = intersect(*parts) if parts else any_content()
    encoded = encode_content(content, minimal=False)
    table, accepting, number = utf8_table(to_interegular(encoded))
    is_content = np.zeros(len(table) + 1, dtype=bool)  # [-1] stays False: dead transitions
    is_content[[number[1 + s] for s in range(content.num_states)]] = True
    counted = is_content[table]
    counted[number[0]] = False  # the opening quote
    for array in (table, counted, accepting):
        array.flags.writeable = False
    return table, counted, number[0], accepting


def literals_dfa(texts) -> Dfa:
    """Exactly the canonical literals of the given strings."""
    return union(*(literal(string_literal(t)) for t in texts)) if texts else EMPTY
