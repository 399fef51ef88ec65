"""The exact lexer+parser state of a lark LALR grammar over bytes, and its scalar steps.

A `GrammarState` is (parser stack, count of consecutive ignored tokens, product-lexer state
of the token being read, `tail`: the bytes read after the current winner's last accepting
position, which are lexed again if the token closes there; inside a long string, `shift`, how
many characters more than `lex` holds it has: its states are folded every FOLD_BYTES bytes), and for arrays whose items must
be unique (`unique_rules`) the items each open one has had. `feed` consumes bytes exactly as
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
from dataclasses import dataclass, replace
from typing import Optional

from lark.lexer import UnlessCallback

from sgl_runtime.constrained.counted import CountedDFA
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.grammar import frames as array_frames
from sgl_runtime.constrained.grammar.frames import CLOSE, ITEM, OPEN, OPEN_VALUES, is_keys
from sgl_runtime.constrained.grammar.lexer import ACCEPT, CLOSE_BEFORE, CLOSE_HERE, DEAD, LexerContext
from sgl_runtime.constrained.grammar.parser import LalrStacks
from sgl_runtime.constrained.grammar.repeats import ESCAPE_FEEDS, repeats_only
from sgl_runtime.constrained.grammar.slots import build_slot, terminal_dfa

__all__ = ["CLOSE", "ITEM", "OPEN", "OPEN_VALUES", "Forks", "GrammarEngine", "GrammarState"]

FOLD_BYTES = 256  # bytes read between two folds of a long string's count (LexerContext.fold)


@dataclass(frozen=True)
class GrammarState:
    stack: tuple
    ignored: int
    lex: int
    tail: bytes
    token: bytes = b""  # the current token's bytes, kept while a tracked array is open
    frames: tuple = ()  # per open tracked array, outermost first (grammar/frames.py)
    shift: int = 0  # inside a long string, its count less the one `lex` holds (LexerContext.fold)

    def bare(self) -> "GrammarState":
        """This state without its unique-array bookkeeping (`token`, `frames`), which the lexer
        and parser, and so the masks before repeats are checked, do not read."""
        return replace(self, token=b"", frames=()) if self.frames or self.token else self


class Forks(tuple):
    """The distinct states (at least two) of the parses one text has in a forking grammar
    (grammar/forking.py): a token is allowed where it is allowed in one of them."""


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
        unique_rules: Optional[dict] = None,
    ) -> None:
        """terminal_dfas: {terminal name: ByteDFA} used as those terminals' automata instead of
        their lark patterns (placeholders then), e.g. a JSON Schema's leaves compiled flat.
        default_reductions: see LalrStacks (lexer contexts of the shifting state, not lark's).
        unique_rules: {rule name: OPEN, OPEN_VALUES, a frames.Opener, ITEM or CLOSE} for arrays whose
        items are tracked (grammar/frames.py): OPEN an empty rule right after the array's `[`, ITEM
        the rule of one item, CLOSE the array's rule. An item whose text equals an earlier item's of
        the same array is rejected (exact where each value has one spelling, as in the JSON Schema
        grammar form); after OPEN_VALUES, one whose JSON value equals an earlier one's (see
        unique_values); an Opener may also bound the number of items."""
        if max_ignore_bytes < 1 or max_ignored_run < 1:
            raise ConstraintError("max_ignore_bytes and max_ignored_run must be >= 1")
        self.lark = parser
        self.parser = LalrStacks(parser, start, default_reductions=default_reductions)
        self.forking = self.parser.forking  # a table with conflicts kept: text may parse several ways
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
        self.unique_rules = dict(unique_rules or {})
        opens = {name for name, kind in self.unique_rules.items() if array_frames.opener(kind) is not None}
        # parser states right after a unique array's `[` whose OPEN waits for the next token's type
        self._opening = frozenset(st for st, row in self.parser.states.items() if opens.intersection(row))
        self._key_bits = array_frames.key_types(self.lark.rules, self.unique_rules, self.type_index)
        self.max_ignore_bytes = max_ignore_bytes
        self.max_ignored_run = max_ignored_run
        self._lexers = parser.parser.lexer.lexers  # parser state -> lark BasicLexer
        self._contexts: dict[int, LexerContext] = {}
        self._dfa_cache: dict = dict(terminal_dfas or {})
        self._slots: dict = {}  # (terminal, unless names, ignored) -> its slot, built once
        self._given = frozenset(terminal_dfas or ())  # terminals whose lark pattern is a placeholder
        self.has_counted = any(isinstance(d, CountedDFA) for d in self._dfa_cache.values())  # long strings
        self._allowed: dict = {}
        self.probes: dict = {}  # (context, lexer state) -> the bytes a repeat check tries there (repeats.py)
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

    def close_all(self, stack: tuple, ignored: int, token_type: int) -> list:
        """Every (stack, ignored count) after a token of `token_type` closes ([] if rejected): one
        per way through a forking grammar's conflicts, else `close`'s one."""
        if not self.forking or token_type in self.ignored_types:
            closed = self.close(stack, ignored, token_type)
            return [] if closed is None else [closed]
        if token_type == self.poison or token_type < 0:
            return []
        return [(st, 0) for st in self.parser.feed_all(stack, self.type_names[token_type])]

    def close(self, stack: tuple, ignored: int, token_type: int) -> Optional[tuple]:
        """(stack, ignored count) after a token of `token_type` closes, or None if rejected."""
        if token_type == self.poison or token_type < 0:
            return None
        if token_type in self.ignored_types:
            return (stack, ignored + 1) if ignored < self.max_ignored_run else None
        stack = self.parser.feed(stack, self.type_names[token_type])
        return None if stack is None else (stack, 0)

    # ---- scalar semantics -------------------------------------------------------------------

    def close_token(self, stack: tuple, ignored: int, frames: tuple, token_type: int, text: bytes) -> list:
        """Every (stack, ignored count, frames) after a token of `token_type` spelled `text`
        closes ([] if rejected, by the parser or as a repeated item of a unique array); more than
        one only through a forking grammar's conflicts."""
        if not self.unique_rules or token_type in self.ignored_types:
            return [(*closed, frames) for closed in self.close_all(stack, ignored, token_type)]
        if token_type == self.poison or token_type < 0:
            return []
        out = []
        for after_stack, events in self.parser.feed_all(stack, self.type_names[token_type], self.unique_rules):
            after = array_frames.after(frames, events, text) if events else frames
            if after is not None:
                out.append((after_stack, 0, after))
        return out

    def feed(self, state: GrammarState, data: bytes) -> Optional[GrammarState]:
        """The state after `data`, or None where no token / parse is possible (a forking grammar
        is fed with `feed_all`)."""
        return self._feed(state, data, None)

    def feed_all(self, state: GrammarState, data: bytes) -> list:
        """Every state after `data` ([] where no token / parse is possible): one per parse of a
        forking grammar (grammar/forking.py), else `feed`'s one."""
        forks: list = []
        state = self._feed(state, data, forks)
        return forks if state is None else [state]

    def _feed(self, state: GrammarState, data: bytes, forks: Optional[list]) -> Optional[GrammarState]:
        """`feed`; where a token closes more than one way, the states of each way are added to
        `forks` (None: a ConstraintError) and None is returned."""
        stack, ignored, x, tail = state.stack, state.ignored, state.lex, state.tail
        token, frames, shift = state.token, state.frames, state.shift
        ctx = self.context(stack)
        rows, classes = ctx.rows, ctx.class_list
        track = bool(frames) or stack[-1] in self._opening  # keep the token's text for its item
        buf, i = data, 0
        fold_at = 0 if self.has_counted else -1  # where a long string's count is folded next
        while i < len(buf):
            if i == fold_at:  # the states of a long string stay few, however long it is
                x, shift = ctx.fold(x, shift, min(len(buf) - i, FOLD_BYTES))
                fold_at = i + FOLD_BYTES
            row = rows[x] or ctx.build_row(x)  # (events, next states, closed types) per byte class
            c = classes[buf[i]]
            code = row[0][c]
            if code == DEAD:
                return None
            if code == CLOSE_BEFORE or code == CLOSE_HERE:
                if self.unique_rules or self.forking:
                    text = token + buf[i : i + 1] if code == CLOSE_HERE else token[: len(token) - len(tail)]
                    ways = self.close_token(stack, ignored, frames, row[2][c], text)
                    if len(ways) != 1:
                        if ways:
                            self._fork(ways, tail + buf[i:] if code == CLOSE_BEFORE else buf[i + 1 :], forks)
                        return None
                    stack, ignored, frames = ways[0]
                else:
                    closed = self.close(stack, ignored, row[2][c])
                    if closed is None:
                        return None
                    stack, ignored = closed
                ctx = self.context(stack)
                rows, classes = ctx.rows, ctx.class_list
                track = bool(frames) or stack[-1] in self._opening
                x, shift = ctx.initial, 0
                if code == CLOSE_BEFORE:
                    buf, i = tail + buf[i:], 0
                else:
                    i += 1
                fold_at = i + FOLD_BYTES if self.has_counted else -1
                tail = token = b""
                continue
            y = row[1][c]
            tail = b"" if (code == ACCEPT or ctx.winner_of[y] < 0) else tail + buf[i : i + 1]
            if track:
                token += buf[i : i + 1]
            x = y
            i += 1
        return GrammarState(stack, ignored, x, tail, token, frames, shift)

    def _fork(self, ways: list, rest: bytes, forks: Optional[list]) -> None:
        """Feed `rest` from each way a token closed (stack, ignored count, frames) into `forks`."""
        if forks is None:
            raise ConstraintError("a forking grammar's text is fed with feed_all")
        for stack, ignored, frames in ways:
            forks.extend(
                self.feed_all(GrammarState(stack, ignored, self.context(stack).initial, b"", b"", frames), rest)
            )

    def frames_matter(self, state: GrammarState) -> bool:
        """Whether the masks of `state` depend on its frames, not only on the lexer and parser: an
        array's unique items or last item, or an object's keys where the token read may be a key."""
        return any(not is_keys(f) and array_frames.affects_masks(f) for f in state.frames) or (
            self.key_frame(state) >= 0
        )

    def viable(self, state: GrammarState, budget: Optional[list] = None) -> bool:
        """Whether some continuation of the text read so far is a sentence."""
        if state.frames and repeats_only(self, state, budget or [ESCAPE_FEEDS]):
            return False
        ctx = self.context(state.stack)
        x = state.lex
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
        text = state.token[: len(state.token) - len(state.tail)]
        for stack, ignored, frames in self.close_token(state.stack, state.ignored, state.frames, token_type, text):
            nxt = GrammarState(stack, ignored, self.context(stack).initial, b"", b"", frames)
            if any(then(s) for s in (self.feed_all(nxt, state.tail) if state.tail else [nxt])):
                return True
        return False

    def key_frame(self, state: GrammarState) -> int:
        """The index of the innermost object's frame if it has keys and the token being read may
        close as one of its keys (what the parser accepts here); -1 otherwise (also right after a
        `{` or `[` whose frame opens once the next token is read)."""
        for j in range(len(state.frames) - 1, -1, -1):
            frame = state.frames[j]
            if is_keys(frame):
                if not frame[0] or state.stack[-1] in self._opening:
                    return -1
                if not self.context(state.stack).possible(state.lex) & self._key_bits:
                    return -1
                return j if self.allowed_bits(state.stack, state.ignored) & self._key_bits else -1
        return -1

    def _validate(self) -> None:
        """Fail at compile time, not at a later mask, on terminals the engine cannot run."""
        for terminal in self.lark.terminals:
            terminal_dfa(terminal, self._dfa_cache)
        if all(t.name in self._given for t in self.lark.terminals):
            return  # placeholders only (a JSON Schema's grammar form): their literal patterns compile
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
            ignored = terminal.name in basic.ignore_types
            slot_types.append(self.type_index[terminal.name])
            key = (terminal.name, tuple(t.name for t in unless), ignored)  # one slot shared by every context
            if key not in self._slots:
                self._slots[key] = build_slot(
                    terminal, unless, ignored, self.type_index, self.poison, self.max_ignore_bytes, self._dfa_cache
                )
            slots.append(self._slots[key])
        ctx = LexerContext(slots)
        ctx.slot_types = slot_types
        return ctx
