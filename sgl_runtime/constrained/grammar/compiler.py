"""Lark grammars as constraints: exact token masks for a context-free grammar.

`compile_grammar(spec, vocabulary, **options) -> GrammarConstraint`, where `spec` is a
shipped grammar's name (grammars/*.lark: json, arithmetic, sql; `json.gbnf` for the GBNF
form), lark grammar text or GBNF text (option syntax: "lark" | "gbnf", detected if not given;
GBNF is lowered to an exact character-level lark grammar, see gbnf_lower). The
language is what `lark.Lark(text, parser="lalr").parse` accepts (contextual lexer), with each
ignored token (e.g. WS) at most `max_ignore_bytes` bytes long and at most `max_ignored_run`
ignored tokens in a row, so a model cannot loop on blanks. A token is allowed iff the text
with it can still be completed to a sentence (see grammar_engine for the one assumption);
EOS iff the text is a sentence. Options: start (rule name), max_ignore_bytes (32),
max_ignored_run (4), warmup_s (1.0: time spent at compile, i.e. in the compile worker, building
lexer contexts and vocabulary walks that masks would otherwise build on first use).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, Optional

import numpy as np

from sgl_runtime.constrained.constraint import Constraint
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.grammar.budget import CHECK_TOKENS, MARGIN, GrammarCompletion
from sgl_runtime.constrained.grammar.engine import Forks, GrammarEngine, GrammarState
from sgl_runtime.constrained.grammar.forced import ForcedTokens
from sgl_runtime.constrained.grammar.frames import at_bound, closing_quote, firsts, is_keys, rests
from sgl_runtime.constrained.grammar.source import build_parser
from sgl_runtime.constrained.grammar.walk import MaskBuilder, TokenTable
from sgl_runtime.constrained.matcher import Matcher
from sgl_runtime.constrained.vocabulary import Vocabulary

_OPTIONS = {"start", "max_ignore_bytes", "max_ignored_run", "warmup_s", "syntax"}
MAX_FORKS = 64  # parses of one text a forking grammar follows at once


def compile_grammar(spec: str, vocabulary: Vocabulary, **options: Any) -> "GrammarConstraint":
    """A constraint for a shipped grammar's name or inline lark text (ConstraintError if bad)."""
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ConstraintError(f"unknown grammar option(s): {', '.join(sorted(unknown))}")
    return GrammarConstraint(spec, vocabulary, **options)


class GrammarConstraint(Constraint):
    """A compiled lark grammar over one vocabulary; masks cached per grammar state."""

    def __init__(
        self,
        spec: str,
        vocabulary: Vocabulary,
        start: str = "start",
        max_ignore_bytes: int = 32,
        max_ignored_run: int = 4,
        warmup_s: float = 1.0,
        mask_cache_size: int = 512,
        syntax: Optional[str] = None,
        terminal_dfas: Optional[dict] = None,
        default_reductions: bool = False,
        unique_rules: Optional[dict] = None,
        parser=None,
    ) -> None:
        """terminal_dfas, default_reductions, unique_rules: see GrammarEngine (used by JSON
        Schema grammars); parser: `spec`'s lark parser when already built."""
        self.spec = spec
        self.vocabulary = vocabulary
        self.lark = parser or build_parser(spec, syntax, start, placeholders=terminal_dfas is not None)
        self.engine = GrammarEngine(
            self.lark, start, max_ignore_bytes, max_ignored_run, terminal_dfas, default_reductions, unique_rules
        )
        self.table = TokenTable.of(vocabulary)
        self.masks = MaskBuilder(self.engine, self.table)
        self.forced = ForcedTokens(self)
        self.completion = GrammarCompletion(self)
        self._cache: OrderedDict = OrderedDict()
        self._cache_size = mask_cache_size
        self._lock = threading.RLock()
        self._eos = np.array(vocabulary.eos_token_ids, dtype=np.int64)
        self._warm_up(warmup_s)

    def accepts(self, text: str) -> bool:
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            return False
        with self._lock:
            return any(self.engine.at_eof(s) for s in self.engine.feed_all(self.engine.initial, data))

    def matcher(self) -> "GrammarMatcher":
        return GrammarMatcher(self, self.engine.initial)

    def at_eof(self, state) -> bool:
        """Whether the text that reached `state` (a GrammarState or Forks) is a sentence."""
        with self._lock:
            return any(self.engine.at_eof(s) for s in members(state))

    def bitmask(self, state) -> np.ndarray:
        """Read-only packed mask for `state`, EOS bits set iff the text may end here (of Forks:
        the union of its members' masks)."""
        if isinstance(state, Forks):
            union = self.bitmask(state[0]).copy()
            for member in state[1:]:
                union |= self.bitmask(member)
            union.flags.writeable = False
            return union
        with self._lock:
            repeats = self.engine.frames_matter(state)  # the exact state (items or keys seen, item text)
            key = state if repeats else self.masks.canonical(state.bare())
            mask = self._cache.get(key)
            if mask is not None:
                self._cache.move_to_end(key)
                return mask
            mask = self.masks.mask(state if repeats else key)
            if repeats:
                self._drop_repeated_items(state, mask)
            if self._eos.size and self.engine.at_eof(state):
                _set_bits(mask, self._eos)
            mask.flags.writeable = False
            self._cache[key] = mask
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
            return mask

    def step(self, state, token_id: int):
        """The state after a non-EOS token, or None if the token is not allowed there (from or to
        Forks where a forking grammar's text parses several ways)."""
        data = self.vocabulary.token_bytes[token_id] if 0 <= token_id < self.vocabulary.size else None
        if not data:
            return None
        engine = self.engine
        with self._lock:
            if not engine.forking:
                nxt = engine.feed(state, data)
                return nxt if nxt is not None and engine.viable(nxt) else None
            found = [nxt for s in members(state) for nxt in engine.feed_all(s, data) if engine.viable(nxt)]
        return joined(found)

    def eos_only_mask(self) -> np.ndarray:
        mask = np.zeros(self.vocabulary.num_words, dtype=np.int32)
        _set_bits(mask, self._eos)
        return mask

    def _drop_repeated_items(self, state: GrammarState, mask: np.ndarray) -> None:
        """Clear from `mask` (computed without item uniqueness) the tokens that repeat an item of
        a unique array or leave only repeats to finish one: those that follow an earlier item's
        text, and those that close a token and hold a `,` or `]` (they may end an item, and a
        `,` starts the next); each checked with the exact scalar step."""
        arrays = [frame for frame in state.frames if not is_keys(frame)]
        candidates = set(self._closing_ids(state)) if arrays else set()
        if len(arrays) < len(state.frames):  # an object's keys
            candidates.update(self._key_candidates(state))
        for frame in arrays:
            if frame[1] is None or frame[2].unique is None:
                if at_bound(frame):  # its separator may not follow: every token that holds one
                    candidates.update(np.flatnonzero(self.vocabulary.holding(b",")).tolist())
                continue
            text = frame[1] + state.token
            ahead = rests(frame, text, self.vocabulary.max_token_len(), self.vocabulary.begins_a_token)
            if ahead is None:  # too many ways on: every allowed token that starts along one
                candidates.update(self._ids_starting_with(mask, firsts(frame, state.token) or set()))
                continue
            for rest in ahead:
                for k in range(1, len(rest) + 1):
                    candidates.update(self.vocabulary.ids_for_bytes(rest[:k]))
        for i in candidates:
            if (int(mask[i // 32]) >> (i % 32)) & 1 and self.step(state, i) is None:
                mask[i // 32] &= np.uint32(~(1 << (i % 32)) & 0xFFFFFFFF).view(np.int32)

    def _key_candidates(self, state: GrammarState) -> set:
        """The tokens that may finish the key being read as one of the object's earlier keys (a
        superset; the caller checks each): those that close the key token and hold its `:`, and
        those that spell the rest of an earlier key, or begin it, with what a key token holds before
        its opening quote."""
        j = self.engine.key_frame(state)
        if j < 0:  # no key is being read, or the object has none yet
            return set()
        seen, token = state.frames[j][0], state.token
        rows = self.masks.closing_rows(state.bare())
        out = set(rows[self.vocabulary.holding(b":")[rows]].tolist())
        start = token.find(b'"')
        for key in seen:
            if start < 0:
                out.update(self.vocabulary.ids_opening_key(key[1:]))
            elif closing_quote(token, start) is None and key.startswith(token[start:]):
                rest = key[len(token) - start :]
                for k in range(1, len(rest)):
                    out.update(self.vocabulary.ids_for_bytes(rest[:k]))
                out.update(self.vocabulary.ids_beginning_with(rest))
        return out

    def _ids_starting_with(self, mask: np.ndarray, firsts: set) -> list[int]:
        """The tokens allowed by `mask` whose first byte is in `firsts`."""
        allowed = np.unpackbits(mask.view(np.uint8), bitorder="little")[: self.vocabulary.size].astype(bool)
        return np.nonzero(allowed & np.isin(self.vocabulary.first_bytes, list(firsts)))[0].tolist()

    def _closing_ids(self, state: GrammarState) -> list[int]:
        """The tokens that close the current token somewhere inside them and hold a `,` or `]`."""
        flags = self.vocabulary.holding(b",") | self.vocabulary.holding(b"]")
        rows = self.masks.closing_rows(state.bare())
        return rows[flags[rows]].tolist()

    def _warm_up(self, seconds: float) -> None:
        """Build lexer contexts, then their token-start vocabulary walks, within `seconds`."""
        deadline = time.perf_counter() + seconds
        for ctx in self.engine.build_contexts(deadline):
            if time.perf_counter() > deadline:
                break
            self.masks.warm(ctx)

    def __repr__(self) -> str:
        name = self.spec if len(self.spec) < 40 else self.spec[:37] + "..."
        return f"GrammarConstraint({name!r})"


class GrammarMatcher(Matcher):
    """Cursor over a grammar constraint: an immutable grammar state plus an EOS flag."""

    __slots__ = ("constraint", "state", "finished", "budget", "consumed", "plan")

    def __init__(self, constraint: GrammarConstraint, state: GrammarState, finished: bool = False) -> None:
        self.constraint = constraint
        self.state = state
        self.finished = finished
        self.budget: Optional[int] = None
        self.consumed = 0
        self.plan: Optional[list[int]] = None  # forced completion tokens once the budget is tight

    def bitmask(self) -> np.ndarray:
        if self.finished:
            return self.constraint.eos_only_mask()
        plan = self._budget_plan()
        if plan is not None:
            return self._plan_mask(plan)
        return self.constraint.bitmask(self.state)

    def _budget_plan(self) -> Optional[list[int]]:
        """The completion to force now that few tokens are left (None: no restriction)."""
        if self.plan is not None or self.budget is None:
            return self.plan
        remaining = self.budget - self.consumed
        if remaining > CHECK_TOKENS:
            return None
        with self.constraint._lock:
            plan = self.constraint.completion.tokens(self.state)
        if plan is None or len(plan) + MARGIN < remaining or len(plan) > remaining:
            return None  # room left, or no completion fits (best prefix)
        if any(s.frames for s in members(self.state)) and not self._plan_keeps_items_unique(plan):
            return None
        self.plan = plan
        return plan

    def _plan_keeps_items_unique(self, plan: list[int]) -> bool:
        """The completion search ignores item uniqueness: keep a plan only if it is valid."""
        state = self.state
        for token_id in plan:
            state = self.constraint.step(state, token_id)
            if state is None:
                return False
        return True

    def _plan_mask(self, plan: list[int]) -> np.ndarray:
        c = self.constraint
        mask = np.zeros(c.vocabulary.num_words, dtype=np.int32)
        _set_bits(mask, np.array(plan[:1], dtype=np.int64))
        if not plan or self.is_accepting():
            _set_bits(mask, c._eos)
        return mask

    def advance(self, token_id: int) -> None:
        c = self.constraint
        if self.finished:
            raise ConstraintError(f"token {token_id} after the grammar's end (EOS already consumed)")
        if token_id in c.vocabulary.eos_token_ids:
            if not self.is_accepting():
                raise ConstraintError(f"EOS token {token_id} before the text is a sentence of the grammar")
            self.finished = True
            return
        nxt = c.step(self.state, token_id)
        if nxt is None:
            data = c.vocabulary.token_bytes[token_id] if 0 <= token_id < c.vocabulary.size else None
            raise ConstraintError(f"token {token_id} ({data!r}) is not allowed by the grammar here")
        self.state = nxt
        self.consumed += 1
        if self.plan is not None:
            self.plan = self.plan[1:] if self.plan[:1] == [token_id] else None

    def is_accepting(self) -> bool:
        if self.finished:
            return True
        return self.constraint.at_eof(self.state)

    def is_terminated(self) -> bool:
        if self.finished:
            return True
        if not self.is_accepting():
            return False
        mask = self.bitmask() & ~self.constraint.eos_only_mask()
        return not mask.any()

    def forced_token_ids(self) -> list[int]:
        if self.finished:
            return []
        plan = self._budget_plan()
        if plan:
            return list(plan)  # the budget forces the whole completion
        ids = self.constraint.forced.token_ids(self.state)
        if ids and self.budget is not None and self.budget - self.consumed <= CHECK_TOKENS:
            state = self.state
            for i in ids:
                state = self.constraint.step(state, i)
            with self.constraint._lock:
                after = self.constraint.completion.tokens(state)
            if after is not None and len(after) > self.budget - self.consumed - len(ids):
                return []  # too long for the budget: the planned completion is forced instead
        return ids

    def forced_string(self) -> str:
        """The forced continuation text from here ('' if none)."""
        return "" if self.finished else self.constraint.forced.string(self.state)

    def copy(self) -> "GrammarMatcher":
        twin = GrammarMatcher(self.constraint, self.state, self.finished)
        twin.budget, twin.consumed, twin.plan = self.budget, self.consumed, self.plan
        return twin


def members(state) -> tuple:
    """The grammar states of `state` (a GrammarState, or Forks)."""
    return state if isinstance(state, Forks) else (state,)


def joined(states: list):
    """The distinct `states` as one: None if there are none, the state if one, else Forks."""
    distinct = tuple(dict.fromkeys(states))
    if len(distinct) > MAX_FORKS:
        raise ConstraintError(f"the grammar's text parses more than {MAX_FORKS} ways at once")
    return None if not distinct else distinct[0] if len(distinct) == 1 else Forks(distinct)


def _set_bits(mask: np.ndarray, ids: np.ndarray) -> None:
    for i in ids.tolist():
        mask[i // 32] |= np.uint32(1 << (i % 32)).view(np.int32)
