"""The exact lexer+parser state of a lark LALR grammar over bytes, and its scalar steps.

A `GrammarState` is (parser stack, count of consecutive ignored tokens, product-lexer state
of the token being read, `tail`: the bytes read after the current winner's last accepting
position, which are lexed again if the token closes there), and for arrays whose items must
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
from sgl_runtime.constrained.grammar.frames import CLOSE, ITEM, OPEN, OPEN_VALUES, firsts, is_keys, key_firsts
from sgl_runtime.constrained.grammar.lexer import ACCEPT, CLOSE_BEFORE, CLOSE_HERE, DEAD, LexerContext
from sgl_runtime.constrained.grammar.parser import LalrStacks
from sgl_runtime.constrained.grammar.slots import build_slot, terminal_dfa

__all__ = ["CLOSE", "ITEM", "OPEN", "OPEN_VALUES", "GrammarEngine", "GrammarState"]
ESCAPE_FEEDS = 20_000  # scalar steps one repeat check may take (beyond: the prefix counts as a dead end)


@dataclass(frozen=True)
class GrammarState:
    stack: tuple
    ignored: int
    lex: int
    tail: bytes
    token: bytes = b""  # the current token's bytes, kept while a tracked array is open
    frames: tuple = ()  # per open tracked array, outermost first (grammar/frames.py)

    def bare(self) -> "GrammarState":
        """This state without its unique-array bookkeeping (`token`, `frames`), which the lexer
        and parser, and so the masks before repeats are checked, do not read."""
        return replace(self, token=b"", frames=()) if self.frames or self.token else self


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
        self._probes: dict = {}  # (context, lexer state) -> the bytes a repeat check tries there
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

    def close_token(self, stack: tuple, ignored: int, frames: tuple, token_type: int, text: bytes):
        """(stack, ignored count, frames) after a token of `token_type` spelled `text` closes, or
        None if rejected (by the parser, or as a repeated item of a unique array)."""
        if not self.unique_rules or token_type in self.ignored_types:
            closed = self.close(stack, ignored, token_type)
            return None if closed is None else (*closed, frames)
        if token_type == self.poison or token_type < 0:
            return None
        fed = self.parser.feed_marked(stack, self.type_names[token_type], self.unique_rules)
        if fed is None:
            return None
        stack, events = fed
        if events:
            frames = array_frames.after(frames, events, text)
            if frames is None:
                return None
        return stack, 0, frames

    def feed(self, state: GrammarState, data: bytes) -> Optional[GrammarState]:
        """The state after `data`, or None where no token / parse is possible."""
        stack, ignored, x, tail = state.stack, state.ignored, state.lex, state.tail
        token, frames = state.token, state.frames
        ctx = self.context(stack)
        rows, classes = ctx.rows, ctx.class_list
        track = bool(frames) or stack[-1] in self._opening  # keep the token's text for its item
        buf, i = data, 0
        while i < len(buf):
            row = rows[x] or ctx.build_row(x)  # (events, next states, closed types) per byte class
            c = classes[buf[i]]
            code = row[0][c]
            if code == DEAD:
                return None
            if code == CLOSE_BEFORE or code == CLOSE_HERE:
                if self.unique_rules:
                    text = token + buf[i : i + 1] if code == CLOSE_HERE else token[: len(token) - len(tail)]
                    closed = self.close_token(stack, ignored, frames, row[2][c], text)
                    if closed is None:
                        return None
                    stack, ignored, frames = closed
                else:
                    closed = self.close(stack, ignored, row[2][c])
                    if closed is None:
                        return None
                    stack, ignored = closed
                ctx = self.context(stack)
                rows, classes = ctx.rows, ctx.class_list
                track = bool(frames) or stack[-1] in self._opening
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
        return GrammarState(stack, ignored, x, tail, token, frames)

    def frames_matter(self, state: GrammarState) -> bool:
        """Whether the masks of `state` depend on its frames, not only on the lexer and parser: an
        array's unique items or last item, or an object's keys where the token read may be a key."""
        return any(not is_keys(f) and array_frames.affects_masks(f) for f in state.frames) or (
            self.key_frame(state) >= 0
        )

    def viable(self, state: GrammarState, budget: Optional[list] = None) -> bool:
        """Whether some continuation of the text read so far is a sentence."""
        if state.frames and self._repeats_only(state, budget or [ESCAPE_FEEDS]):
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
        closed = self.close_token(state.stack, state.ignored, state.frames, token_type, text)
        if closed is None:
            return False
        nxt = GrammarState(closed[0], closed[1], self.context(closed[0]).initial, b"", b"", closed[2])
        if state.tail:
            nxt = self.feed(nxt, state.tail)
        return nxt is not None and then(nxt)

    def _repeats_only(self, state: GrammarState, budget: list) -> bool:
        """Whether an open unique array's current item can now only end as one of its earlier
        items (its text is a prefix of theirs and no byte leads off them to a viable text)."""
        for j, frame in enumerate(state.frames):
            ahead = firsts(frame, state.token)
            if ahead is not None and not self._escapes(state, j, ahead, budget):
                return True
        j = self.key_frame(state)
        if j >= 0:
            ahead = key_firsts(state.frames[j][0], state.token)
            if ahead is not None and not self._escapes(state, j, ahead, budget):
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

    def _item_firsts(self, state: GrammarState, j: int) -> Optional[set]:
        """`firsts` of frame j in `state` (an object's: its keys, where a key is being read)."""
        frame = state.frames[j]
        if not is_keys(frame):
            return firsts(frame, state.token)
        return key_firsts(frame[0], state.token) if self.key_frame(state) == j else None

    def _escapes(self, state: GrammarState, j: int, ahead: set, budget: list) -> bool:
        """Whether frame j's item can leave the earlier items it may still become (`firsts`: the
        bytes that go on along one): a depth-first walk along their bytes, trying at each step the
        bytes that lead off them (one per byte class where the class decides alone) for a viable
        state."""
        seen = state.frames[j][0]
        todo = [(state, ahead)]
        while todo:
            s, ahead = todo.pop()
            for b in self._probe_bytes(s, ahead):
                budget[0] -= 1
                if budget[0] < 0:
                    return False
                nxt = self.feed(s, bytes((b,)))
                if nxt is None:
                    continue
                frames = nxt.frames
                ended = len(frames) <= j or frames[j][0] is not seen
                if ended or (frames[j][1] is None and not is_keys(frames[j])):
                    if self.viable(nxt, budget):  # the item ended, and not as an earlier one
                        return True
                    continue
                more = self._item_firsts(nxt, j)
                if more is None:
                    if self.viable(nxt, budget):
                        return True
                elif b in ahead:
                    todo.append((nxt, more))
        return False

    def _probe_bytes(self, state: GrammarState, firsts: set) -> list:
        """The bytes to try from `state`: those in `firsts`, and of the others one per lexer byte
        class that continues or closes the token here (all of a class that closes before it,
        since the next context lexes that byte again); the bytes off the earlier items first."""
        ctx = self.context(state.stack)
        key = (id(ctx), state.lex)
        probes = self._probes.get(key)
        if probes is None:
            row = ctx.rows[state.lex] or ctx.build_row(state.lex)
            codes, classes = row[0], ctx.class_list
            live = [b for b in range(256) if codes[classes[b]] != DEAD]
            by_class: dict = {}
            for b in live:
                by_class.setdefault(classes[b], []).append(b)
            probes = (frozenset(live), [(bs, codes[c] == CLOSE_BEFORE) for c, bs in by_class.items()])
            if len(self._probes) > 65536:
                self._probes.clear()
            self._probes[key] = probes
        live, groups = probes
        out = []
        for members, each in groups:
            off = [b for b in members if b not in firsts]
            out.extend(off if each else off[:1])
        return out + [b for b in firsts if b in live]

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
