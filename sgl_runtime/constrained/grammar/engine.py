"""The exact lexer+parser state of a lark LALR grammar over bytes, and its scalar steps.

A `GrammarState` is (parser stack, count of consecutive ignored tokens, product-lexer state
of the token being read, `tail`: the bytes read after the current winner's last accepting
position, which are lexed again if the token closes there). `feed` consumes bytes exactly as
lark's contextual lexer + LALR parser would; `viable` says whether some continuation makes
the whole text a sentence; `at_eof` whether the text may end here.

The language is that of `lark.Lark(grammar, parser="lalr")` (contextual lexer), restricted so
that an ignored token (e.g. WS) is at most `max_ignore_bytes` long and at most
`max_ignored_run` ignored tokens follow each other (a model cannot loop on blanks).
Exactness of `viable` assumes that any terminal sequence the parser accepts can be written so
that it lexes back to itself (true when tokens are self-delimiting or can be separated by an
ignored terminal, as in the shipped grammars); the tests check it against lark.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
from lark.lexer import UnlessCallback

from sgl_runtime.constrained.counted import CountedDFA
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.grammar.lexer import ACCEPT, CLOSE_BEFORE, CLOSE_HERE, DEAD, LexerContext
from sgl_runtime.constrained.grammar.parser import LalrStacks
from sgl_runtime.constrained.grammar.slots import build_slot, terminal_dfa

NOTHING_SEEN: frozenset = frozenset()


@dataclass(frozen=True)
class GrammarState:
    stack: tuple
    ignored: int
    lex: int
    tail: bytes
    token: bytes = b""  # the current token's bytes, kept only where a unique-item terminal may be read
    seen: frozenset = NOTHING_SEEN  # the items of the array being read whose items must be unique


class GrammarEngine:
    """Lexer contexts, parser stacks and the scalar byte-level semantics of one grammar."""

    def __init__(
        self,
        parser,
        start: str = "start",
        max_ignore_bytes: int = 32,
        max_ignored_run: int = 4,
        terminal_dfas: Optional[dict] = None,
        default_reductions: bool = False,
        unique_terminals: Optional[dict] = None,
    ) -> None:
        """terminal_dfas: {terminal name: ByteDFA} used as those terminals' automata instead of
        their lark patterns (placeholders then), e.g. a JSON Schema's leaves compiled flat.
        default_reductions: see LalrStacks (lexer contexts of the shifting state, not lark's).
        unique_terminals: {terminal name: 1 or 2}: the items of a JSON array whose items must be
        distinct, 1 for the first item's terminal, 2 for the terminal `,item` of the later ones;
        a later item equal (as text) to an earlier one of the same array is rejected."""
        if max_ignore_bytes < 1 or max_ignored_run < 1:
            raise ConstraintError("max_ignore_bytes and max_ignored_run must be >= 1")
        self.lark = parser
        self.parser = LalrStacks(parser, start, default_reductions=default_reductions)
        self.type_names = [t.name for t in parser.terminals]
        self.type_index = {n: i for i, n in enumerate(self.type_names)}
        self.poison = len(self.type_names)
        self.ignored_types = {self.type_index[n] for n in parser.ignore_tokens}
        missing = sorted(
            {
                t
                for row in self.parser.states.values()
                for t in row
                if t.isupper() and t != "$END" and t not in self.type_index
            }
        )
        if missing:
            raise ConstraintError(
                f"unsupported lark grammar: terminals without a pattern {missing} "
                "(%declare'd terminals need a postlexer, which constraints cannot run)"
            )
        self.unique_types = {self.type_index[n]: role for n, role in (unique_terminals or {}).items()}
        self.max_ignore_bytes = max_ignore_bytes
        self.max_ignored_run = max_ignored_run
        self._lexers = parser.parser.lexer.lexers  # parser state -> lark BasicLexer
        self._contexts: dict[int, LexerContext] = {}
        self._dfa_cache: dict = dict(terminal_dfas or {})
        self.has_counted = any(isinstance(d, CountedDFA) for d in self._dfa_cache.values())  # long strings
        self._allowed: dict = {}
        self._validate()
        self.initial = GrammarState(self.parser.initial, 0, self.context(self.parser.initial).initial, b"")

    # ---- contexts and parser ----------------------------------------------------------------

    def context(self, stack: tuple) -> LexerContext:
        basic = self._lexers[stack[-1]]
        ctx = self._contexts.get(id(basic))
        if ctx is None:
            ctx = self._contexts[id(basic)] = self._build_context(basic)
        return ctx

    def build_contexts(self, deadline: float) -> list[LexerContext]:
        """Build lexer contexts ahead of use until `deadline` (time.perf_counter); those built."""
        for basic in self._lexers.values():
            if time.perf_counter() > deadline:
                break
            if id(basic) not in self._contexts:
                self._contexts[id(basic)] = self._build_context(basic)
        return list(self._contexts.values())

    def allowed_bits(self, stack: tuple, ignored: int) -> int:
        """Bitset of token types that may close the current token without a parse error."""
        key = (stack, ignored < self.max_ignored_run)
        bits = self._allowed.get(key)
        if bits is None:
            bits = 0
            for name in self.parser.accepted(stack):
                if name in self.type_index:
                    bits |= 1 << self.type_index[name]
            if key[1]:
                for t in self.ignored_types:
                    bits |= 1 << t
            if len(self._allowed) > 65536:
                self._allowed.clear()
            self._allowed[key] = bits
        return bits

    def close(self, stack: tuple, ignored: int, token_type: int) -> Optional[tuple]:
        """(stack, ignored count) after a token of `token_type` closes, or None if rejected."""
        if token_type == self.poison or token_type < 0:
            return None
        if token_type in self.ignored_types:
            return (stack, ignored + 1) if ignored < self.max_ignored_run else None
        stack = self.parser.feed(stack, self.type_names[token_type])
        return None if stack is None else (stack, 0)

    # ---- scalar semantics -------------------------------------------------------------------

    def seen_after(self, seen: frozenset, token_type: int, text: bytes) -> Optional[frozenset]:
        """The unique-array items after a token of `token_type` spelled `text` closes (None: a
        repeated item). Any other token than an item or a blank ends the array's items."""
        role = self.unique_types.get(token_type)
        if role is None:
            return seen if token_type in self.ignored_types else NOTHING_SEEN
        if role == 1:
            return frozenset((text,))
        item = text[1:]  # the terminal is "," + item (compact JSON)
        return None if item in seen else seen | {item}

    def feed(self, state: GrammarState, data: bytes) -> Optional[GrammarState]:
        """The state after `data`, or None where no token / parse is possible."""
        stack, ignored, x, tail = state.stack, state.ignored, state.lex, state.tail
        token, seen = state.token, state.seen
        ctx = self.context(stack)
        track, rows, classes = ctx.unique_slots, ctx.rows, ctx.class_list
        buf, i = data, 0
        while i < len(buf):
            row = rows[x] or ctx.build_row(x)  # (events, next states, closed types) per byte class
            c = classes[buf[i]]
            code = row[0][c]
            if code == DEAD:
                return None
            if code == CLOSE_BEFORE or code == CLOSE_HERE:
                closed = self.close(stack, ignored, row[2][c])
                if closed is None:
                    return None
                if self.unique_types:
                    text = token + buf[i : i + 1] if code == CLOSE_HERE else token[: len(token) - len(tail)]
                    seen = self.seen_after(seen, row[2][c], text)
                    if seen is None:
                        return None
                stack, ignored = closed
                ctx = self.context(stack)
                track, rows, classes = ctx.unique_slots, ctx.rows, ctx.class_list
                x = ctx.initial
                if code == CLOSE_BEFORE:
                    buf, i = tail + buf[i:], 0
                else:
                    i += 1
                tail = token = b""
                continue
            y = row[1][c]
            tail = b"" if (code == ACCEPT or ctx.winner_of[y] < 0) else tail + buf[i : i + 1]
            if track:
                token += buf[i : i + 1]
            x = y
            i += 1
        return GrammarState(stack, ignored, x, tail, token, seen)

    def viable(self, state: GrammarState) -> bool:
        """Whether some continuation of the text read so far is a sentence."""
        ctx = self.context(state.stack)
        x = state.lex
        if state.seen and state.token and ctx.unique_slots:
            alive = ctx.alive_slots(x)
            if len(alive) == 1 and alive[0] in ctx.unique_slots:
                return self._unique_viable(state, ctx, alive[0])
        if ctx.possible(x) & self.allowed_bits(state.stack, state.ignored):
            return True
        if ctx.is_fresh(x):
            return self.parser.accepts_end(state.stack)
        if ctx.winner[x] >= 0 and not ctx.at_accept[x]:
            return self._retro_close(state, self.viable)
        return False

    def at_eof(self, state: GrammarState) -> bool:
        """Whether the text read so far is a sentence."""
        ctx = self.context(state.stack)
        if ctx.is_fresh(state.lex):
            return self.parser.accepts_end(state.stack)
        if ctx.winner[state.lex] < 0:
            return False
        return self._retro_close(state, self.at_eof)

    # ---- private ----------------------------------------------------------------------------

    def _retro_close(self, state: GrammarState, then) -> bool:
        """Close the token at the winner's last accept, lex the tail again, and test `then`."""
        ctx = self.context(state.stack)
        token_type = int(ctx.wtype[state.lex])
        closed = self.close(state.stack, state.ignored, token_type)
        if closed is None:
            return False
        seen = state.seen
        if self.unique_types:
            seen = self.seen_after(seen, token_type, state.token[: len(state.token) - len(state.tail)])
            if seen is None:
                return False
        nxt = GrammarState(closed[0], closed[1], self.context(closed[0]).initial, b"", b"", seen)
        if state.tail:
            nxt = self.feed(nxt, state.tail)
        return nxt is not None and then(nxt)

    def _unique_viable(self, state: GrammarState, ctx: LexerContext, slot: int) -> bool:
        """Inside a later item of a unique array: whether the item can still end as a text the
        array has not had (and the parser takes it there)."""
        token_type = ctx.slot_types[slot]
        if not (self.allowed_bits(state.stack, state.ignored) >> token_type) & 1:
            return False
        if self.unique_types[token_type] != 2:
            return True
        dfa = ctx.slots[slot]
        blocked = [b"," + item for item in state.seen]
        return escapes(dfa.trans, dfa.label, ctx.slot_state(state.lex, slot), state.token, blocked)

    def _validate(self) -> None:
        """Fail at compile time, not at a later mask, on terminals the engine cannot run."""
        for terminal in self.lark.terminals:
            terminal_dfa(terminal, self._dfa_cache)
        for basic in {id(b): b for b in self._lexers.values()}.values():
            try:
                _ = basic.scanner  # building lark's scanner compiles every terminal regex
            except re.error as exc:
                raise ConstraintError(f"invalid lark grammar: a terminal regex breaks lark's scanner: {exc}") from None

    def _build_context(self, basic) -> LexerContext:
        scanner = basic.scanner  # builds lark's scanner order and UnlessCallbacks
        slots, slot_types = [], []
        for terminal in scanner.terminals:
            callback = basic.callback.get(terminal.name)
            if callback is not None and not isinstance(callback, UnlessCallback):
                raise ConstraintError(f"unsupported lark lexer callback on {terminal.name}")
            unless = list(callback.scanner.terminals) if callback is not None else []
            slot_types.append(self.type_index[terminal.name])
            slots.append(
                build_slot(
                    terminal,
                    unless,
                    terminal.name in basic.ignore_types,
                    self.type_index,
                    self.poison,
                    self.max_ignore_bytes,
                    self._dfa_cache,
                )
            )
        ctx = LexerContext(slots)
        ctx.slot_types = slot_types
        ctx.unique_slots = tuple(i for i, t in enumerate(slot_types) if t in self.unique_types)
        return ctx


def escapes(trans, label, q: int, prefix: bytes, blocked: list) -> bool:
    """Whether a slot DFA (every state live) at state `q` after reading `prefix` can end a token
    that is not one of `blocked`: walks the DFA along the trie of the blocked words' rests and
    succeeds where it may accept off the trie's words or take a byte that leaves the trie."""
    todo = [(q, [w[len(prefix) :] for w in blocked if w.startswith(prefix)])]
    while todo:
        q, words = todo.pop()
        if label[q] >= 0 and b"" not in words:
            return True
        row = np.asarray(trans[q])
        firsts = {w[0] for w in words if w}
        if any(b not in firsts for b in np.flatnonzero(row >= 0).tolist()):
            return True
        for b in firsts:
            if row[b] >= 0:
                todo.append((int(row[b]), [w[1:] for w in words if w and w[0] == b]))
    return False
