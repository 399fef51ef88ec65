"""Byte DFAs for one lexer slot of lark's scanner, labelled with the token type they produce.

A slot is one alternative of lark's `Scanner` regex, in lark's order. Its DFA labels each
accepting state with the type of the token lark would emit when the match ends there:
- a regex terminal with an "unless" list (string terminals it also matches, e.g. keywords
  inside NAME) is run in product with those strings, so a whole-token match of a keyword
  yields the keyword's type, exactly as lark's `UnlessCallback` retypes it;
- an ignored terminal (e.g. WS) is run in product with a length counter: a match longer than
  `max_ignore_bytes` is labelled POISON, which no parser state accepts (this bounds blanks).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Optional

try:  # Python >= 3.11
    import re._constants as sre_constants
    import re._parser as sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants
    import sre_parse

import numpy as np

from sgl_runtime.constrained.byte_dfa import ByteDFA, byte_classes
from sgl_runtime.constrained.counted import CountedDFA, CountedSlot, closure_back, packed_steps, state_pairs
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.grammar.unicode import folded_literal, unicode_classes


@dataclass
class SlotDFA:
    trans: np.ndarray  # int32 [m, 256], -1 dead
    label: np.ndarray  # int32 [m], type index of an accepting state, -1 otherwise
    live: np.ndarray  # bool [m], whether any byte leads on
    initial: int
    _reach: Optional[list] = field(default=None, repr=False, compare=False)
    _lists: Optional[tuple] = field(default=None, repr=False, compare=False)
    _classes: Optional[np.ndarray] = field(default=None, repr=False, compare=False)
    _steps: Optional[np.ndarray] = field(default=None, repr=False, compare=False)

    @property
    def steps(self) -> np.ndarray:
        """The automaton as one flat int32 table (counted.packed_steps), built on first use."""
        if self._steps is None:
            self._steps = packed_steps(self.trans, None)
        return self._steps

    def byte_class_of(self) -> np.ndarray:
        """Per byte, its class among the bytes this slot tells apart (equal columns of `trans`)."""
        if self._classes is None:
            self._classes = byte_classes(self.trans)[1]
        return self._classes

    def as_lists(self) -> tuple[list, list, list]:
        """(trans, label, live) as Python lists, for the lexer's row building."""
        if self._lists is None:
            self._lists = (self.trans.tolist(), self.label.tolist(), self.live.tolist())
        return self._lists

    def reach_bits(self, q: int) -> int:
        """Bitset of the labels reachable from state `q` (every state reaches one)."""
        if self._reach is None:
            src, byte = np.nonzero(self.trans >= 0)
            src, dst = state_pairs(src, self.trans[src, byte], len(self.label))
            reach = [0] * len(self.label)
            for t in np.unique(self.label[self.label >= 0]).tolist():
                for s in np.flatnonzero(closure_back(self.label == t, src, dst)).tolist():
                    reach[s] |= 1 << t
            self._reach = reach
        return self._reach[q]


# lark's common.ESCAPED_STRING uses a lookbehind; this lookaround-free regex matches the same
# strings (a quote, then characters other than newline where a backslash escapes the next one,
# then the first unescaped quote).
_EQUIVALENTS = {r'".*?(?<!\\)(\\\\)*?"': r'"(?:[^"\\\n]|\\[^\n])*"'}


def terminal_dfa(terminal, cache: dict) -> ByteDFA:
    r"""The byte DFA of a lark TerminalDef's regex (cached by name).

    Python's `re` (what lark's lexer runs) takes a greedy terminal's longest match, which the
    lexer automaton models; a terminal with a lazy quantifier (`*?`, `+?`, ...) is taken as
    ending at its first accepting position (shortest match), true of the usual lazy terminals
    such as `/\/\*(.|\n)*?\*\//`."""
    dfa = cache.get(terminal.name)
    if dfa is None:
        pattern = terminal.pattern.to_regexp()
        pattern = _EQUIVALENTS.get(pattern, pattern)
        if terminal.pattern.type == "str":
            pattern = folded_literal(terminal.pattern.value, terminal.pattern.flags) or pattern
        if _has_op(pattern, _UNSUPPORTED_OPS):
            raise ConstraintError(
                f"grammar terminal {terminal.name}: lookaround assertions, anchors "
                f"and backreferences are not supported in terminals ({pattern!r})"
            )
        try:
            dfa = ByteDFA.from_regex(unicode_classes(pattern))
        except ConstraintError as exc:
            raise ConstraintError(f"grammar terminal {terminal.name}: {exc}") from None
        if _has_op(pattern, {sre_constants.MIN_REPEAT}):
            trans = dfa.transitions.copy()
            trans[dfa.accepting] = -1  # stop at the first accepting position
            dfa = ByteDFA(trans, dfa.initial, dfa.accepting)
        if terminal.pattern.type == "re":
            _check_matches_like_re(terminal.name, terminal.pattern.to_regexp(), dfa)
        cache[terminal.name] = dfa
    return dfa


def _check_matches_like_re(name: str, pattern: str, dfa: ByteDFA, samples: int = 120) -> None:
    """Sample strings along the DFA and check that `re.match` (lark's lexer) ends where the DFA
    says the token ends; a terminal like /a|ab/ (re takes "a" from "ab") is refused, not masked
    wrongly."""
    rx, rng = re.compile(pattern), random.Random(0)
    for _ in range(samples):
        text = _decodable(_random_path(dfa, rng) + bytes([rng.randrange(32, 127)]) * rng.randrange(2))
        if not text:
            continue
        match = rx.match(text)
        got = len(match.group(0).encode()) if match and match.end() else -1
        expected = _longest_accept(dfa, text.encode())
        if got != expected:
            raise ConstraintError(
                f"grammar terminal {name}: Python's re matches {text!r} up to byte {got}, not up to "
                f"byte {expected} (its longest match); put longer alternatives first"
            )


def _random_path(dfa: ByteDFA, rng: random.Random, max_len: int = 16) -> bytes:
    out, state = bytearray(), dfa.initial
    for _ in range(rng.randrange(1, max_len + 1)):
        live = np.flatnonzero(dfa.transitions[state] >= 0)
        if not live.size:
            break
        byte = int(live[rng.randrange(live.size)])
        out.append(byte)
        state = int(dfa.transitions[state, byte])
    return bytes(out)


def _decodable(data: bytes) -> str:
    for cut in range(len(data), max(len(data) - 4, 0) - 1, -1):
        try:
            return data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return ""


def _longest_accept(dfa: ByteDFA, data: bytes) -> int:
    best, state = -1, dfa.initial
    for i, byte in enumerate(data):
        state = int(dfa.transitions[state, byte])
        if state < 0:
            break
        if dfa.accepting[state]:
            best = i + 1
    return best


_UNSUPPORTED_OPS = {
    sre_constants.ASSERT,
    sre_constants.ASSERT_NOT,
    sre_constants.AT,
    sre_constants.GROUPREF,
    sre_constants.GROUPREF_EXISTS,
}


def _has_op(pattern: str, ops: set) -> bool:
    """Whether the regex's parse tree uses one of `ops` (e.g. MIN_REPEAT: a lazy quantifier)."""
    try:
        return _tree_has(sre_parse.parse(pattern), ops)
    except re.error:
        return False


def _tree_has(node, ops: set) -> bool:
    if isinstance(node, sre_parse.SubPattern):
        return any(op in ops or _tree_has(av, ops) for op, av in node.data)
    if isinstance(node, (list, tuple)):
        return any(_tree_has(x, ops) for x in node)
    return False


def build_slot(
    terminal, unless: list, ignored: bool, type_index: dict, poison: int, max_ignore_bytes: int, dfa_cache: dict
) -> SlotDFA | CountedSlot:
    """The labelled DFA of one scanner slot (see the module docstring); a terminal whose
    automaton is a CountedDFA gets a lazily built CountedSlot."""
    base = terminal_dfa(terminal, dfa_cache)
    own = type_index[terminal.name]
    if isinstance(base, CountedDFA):
        if unless or ignored:
            raise ConstraintError(f"grammar terminal {terminal.name}: a counted terminal cannot be ignored or retyped")
        return CountedSlot(base, own)
    if not unless and not ignored:
        label = np.where(base.accepting, own, -1).astype(np.int32)
        return SlotDFA(base.transitions, label, (base.transitions >= 0).any(1), base.initial)
    extra = [terminal_dfa(t, dfa_cache) for t in unless]
    extra_types = [type_index[t.name] for t in unless]
    bound = max_ignore_bytes if ignored else None
    return _product_slot(base, own, extra, extra_types, bound, poison)


def _product_slot(base: ByteDFA, own: int, extra: list, extra_types: list, bound, poison: int) -> SlotDFA:
    """BFS over (base state, unless-string states..., capped length) tuples."""
    cap = (bound + 1) if bound is not None else 0
    start = (base.initial, *[d.initial for d in extra], 0)
    index, order, rows = {start: 0}, [start], []
    i = 0
    while i < len(order):
        key = order[i]
        i += 1
        nxt_base = base.transitions[key[0]]
        cols = [nxt_base] + [
            d.transitions[s] if s >= 0 else np.full(256, -1, np.int32) for d, s in zip(extra, key[1:-1])
        ]
        count = min(key[-1] + 1, cap) if bound is not None else 0
        mat = np.stack(cols, axis=1)  # [256, 1 + len(extra)]
        row = np.full(256, -1, dtype=np.int32)
        for b in np.nonzero(nxt_base >= 0)[0]:
            k = (*mat[b].tolist(), count)
            if k not in index:
                index[k] = len(order)
                order.append(k)
                if len(order) > 100_000:
                    raise ConstraintError("grammar lexer slot too large (> 100000 states)")
            row[b] = index[k]
        rows.append(row)
    trans = np.stack(rows).astype(np.int32)
    label = np.array([_label(k, base, own, extra, extra_types, bound, poison) for k in order], np.int32)
    return SlotDFA(trans, label, (trans >= 0).any(1), 0)


def _label(key, base, own, extra, extra_types, bound, poison) -> int:
    if not base.accepting[key[0]]:
        return -1
    if bound is not None and key[-1] > bound:
        return poison
    for d, s, t in zip(extra, key[1:-1], extra_types):
        if s >= 0 and d.accepting[s]:
            return t
    return own
