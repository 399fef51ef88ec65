"""The compile-time self-check every compiled regex passes: its Dfa agrees with `re` on samples.

Strings are drawn from the automaton (random walks that end in an accepting state), from its
complement (walks that end in a rejecting state or step off the automaton) and as one-character
mutations of both; each is judged by `re.fullmatch` (or `re.search` for JSON-Schema patterns)
with `re.ASCII`, and a single disagreement refuses the regex. Seeded by the pattern, so a
verdict is reproducible; bounded by SAMPLES strings, MAX_LENGTH characters and BUDGET_S seconds.
Strings are judged shortest first and the check stops at the first `re` call slower than
SLOW_CALL_S, so a regex on which `re` backtracks exponentially cannot stall the compile.
"""

from __future__ import annotations

import random
import re
import time
import warnings
import zlib
from collections.abc import Iterator

from sgl_runtime.constrained.automata import Charset, Dfa
from sgl_runtime.constrained.errors import ConstraintError

SAMPLES = 32  # strings of each kind (accepted walk, rejected walk, mutation)
MAX_LENGTH = 24
BUDGET_S = 0.25
SLOW_CALL_S = 0.005  # strings go shortest first; the check stops at the first call this slow
_PROBES = "aAzZ_09 \t\n\r-.,:;'\"\\/()[]{}é日😀\x00~"


class SelfCheckError(ConstraintError):
    """The compiled automaton disagreed with `re`: the regex is refused (a compiler bug to report)."""


def check_against_re(dfa: Dfa, pattern: str, *, search: bool = False) -> None:
    """Raises ConstraintError when `dfa` and `re` disagree on a sampled string."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        oracle = re.compile(pattern, re.ASCII)
    judge = oracle.search if search else oracle.fullmatch
    sampler = _Sampler(dfa, random.Random(zlib.crc32(pattern.encode("utf-8", "surrogatepass")) + search))
    deadline = time.monotonic() + BUDGET_S
    for text in sorted(set(sampler.strings()), key=lambda t: (len(t), t)):
        started = time.monotonic()
        expected = judge(text) is not None
        if time.monotonic() - started > SLOW_CALL_S:
            return  # re backtracks exponentially here: longer strings would take far longer
        if sampler.accepts(text) != expected:
            verdict = "matches" if expected else "does not match"
            raise SelfCheckError(
                f"regex {pattern!r} cannot be compiled exactly: Python's re {verdict} {text!r} but the "
                "compiled automaton says the opposite (refused rather than approximated)"
            )
        if time.monotonic() > deadline:
            return


class _Sampler:
    def __init__(self, dfa: Dfa, rng: random.Random) -> None:
        self.dfa, self.rng, self.random = dfa, rng, rng.random
        self._members: dict[tuple, tuple] = {}
        self._sorted: dict[Charset, list] = {}
        self._closer_edges: dict[int, list] = {}
        self._off_chars: dict[int, list] = {}
        self._steps: dict[tuple, int | None] = {}  # (state, char) -> next state (None: off the automaton)
        mentioned = {c for out in dfa.edges for cs, _ in out for c in self._some(cs, 4)}
        self.pool = sorted(set(_PROBES) | mentioned)
        self.distance = _distance_to_final(dfa)
        # per state: (a few members of each edge's charset, the edge's target)
        self._choices = [[(self._some(cs, 8), t) for cs, t in out] for out in dfa.edges]

    def strings(self) -> Iterator[str]:
        yield ""
        yield from self.pool
        for _ in range(SAMPLES):
            accepted = self._walk(accepting=True)
            rejected = self._walk(accepting=False)
            yield accepted
            yield rejected
            yield self._mutated(accepted)
            yield self._mutated(rejected)

    def accepts(self, text: str) -> bool:
        """`dfa.accepts(text)`, each (state, character) step looked up once."""
        state = 0
        for c in text:
            nxt = self._step(state, c)
            if nxt is None:
                return False
            state = nxt
        return state in self.dfa.finals

    def _step(self, state: int, c: str) -> int | None:
        key = (state, c)
        if key not in self._steps:
            self._steps[key] = self.dfa.step(state, c)
        return self._steps[key]

    def _pick(self, items):
        return items[int(self.random() * len(items))]

    def _walk(self, accepting: bool) -> str:
        """A walk to an accepting state (or, accepting=False, one that ends anywhere, off the
        automaton with some probability)."""
        dfa, rng, r, out, all_choices = self.dfa, self.rng, self.random, [], self._choices
        if accepting and dfa.is_empty():
            return ""
        state = 0
        length = rng.randint(0, MAX_LENGTH)
        while len(out) < length or (accepting and state not in dfa.finals):
            edges = all_choices[state]
            if accepting and len(out) >= length:  # head for the nearest accepting state
                edges = self._closer(state)
            if not accepting and (not edges or r() < 0.1):
                off = self._off(state)
                if off:
                    out.append(self._pick(off))
                    out.extend(self._pick(self.pool) for _ in range(rng.randint(0, 2)))
                    break
            if not edges:
                break
            choices, state = edges[int(r() * len(edges))]
            if not choices:
                break
            out.append(choices[int(r() * len(choices))])
        return "".join(out)

    def _closer(self, state: int) -> list:
        """The edges of `state` that lead nearer an accepting state (memoized per state)."""
        got = self._closer_edges.get(state)
        if got is None:
            d = self.distance
            got = self._closer_edges[state] = [e for e in self._choices[state] if d.get(e[1], 1 << 30) < d[state]]
        return got

    def _off(self, state: int) -> list:
        """The pool characters that step off the automaton from `state` (memoized per state)."""
        got = self._off_chars.get(state)
        if got is None:
            got = self._off_chars[state] = [c for c in self.pool if self._step(state, c) is None]
        return got

    def _mutated(self, text: str) -> str:
        rng = self.rng
        i = rng.randint(0, len(text))
        kind = rng.randrange(3)
        if kind == 0 or not text:
            return text[:i] + self._pick(self.pool) + text[i:]
        i = min(i, len(text) - 1)
        if kind == 1:
            return text[:i] + text[i + 1 :]
        return text[:i] + self._pick(self.pool) + text[i + 1 :]

    def _some(self, cs: Charset, limit: int) -> tuple:
        """A few members of `cs` (probes first for negated sets), deterministic per charset."""
        got = self._members.get((cs, limit))
        if got is None:
            if cs.negated:
                got = (
                    tuple(c for c in _PROBES if c in cs)[:limit]
                    or tuple(chr(cp) for cp in range(0x21, 0x3000) if chr(cp) in cs)[:limit]
                )
            else:
                chars = self._sorted.get(cs)
                if chars is None:
                    chars = self._sorted[cs] = sorted(c for c in cs.chars if not 0xD800 <= ord(c) <= 0xDFFF)
                step = max(1, len(chars) // limit)
                got = tuple(chars[::step][:limit]) + tuple(chars[-1:])
            self._members[(cs, limit)] = got
        return got


def _distance_to_final(dfa: Dfa) -> dict[int, int]:
    reverse: dict[int, list[int]] = {}
    for s, out in enumerate(dfa.edges):
        for _, t in out:
            reverse.setdefault(t, []).append(s)
    distance = {f: 0 for f in dfa.finals}
    frontier = list(dfa.finals)
    while frontier:
        nxt = []
        for t in frontier:
            for s in reverse.get(t, ()):
                if s not in distance:
                    distance[s] = distance[t] + 1
                    nxt.append(s)
        frontier = nxt
    return distance
