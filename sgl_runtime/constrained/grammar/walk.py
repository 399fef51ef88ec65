"""Token masks for a grammar state: all vocabulary tokens walked at once through the lexer.

A *run* pushes a set of (token, byte offset) rows through one lexer context's product
automaton, one byte column at a time with numpy, from a product state. Each row ends INSIDE
the current token (grouped by final state), closes a token (grouped by type and where it
ended), or dies. Runs depend only on (rows, context, product state, tail length), never on
the parser stack, so they are cached and shared (row sets are keyed by content); the parser only decides, per group, which
closed types it accepts (and the stack to continue the closed groups' remainders from).
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from sgl_runtime.constrained.grammar import string_walk
from sgl_runtime.constrained.grammar.engine import GrammarEngine, GrammarState
from sgl_runtime.constrained.grammar.lexer import ACCEPT, CLOSE_HERE, DEAD, LexerContext
from sgl_runtime.constrained.grammar.token_classes import TokenClasses, build_later
from sgl_runtime.constrained.grammar.token_trie import TokenTrie, split_by_key, walk_trie

PACK_THRESHOLD = 2048  # groups at least this large keep a packed bitmask
MAX_GROUPED_CLASSES = 32  # contexts with more byte classes walk every token
GROUP_AFTER_RUNS = 8  # full runs of a context before its tokens are grouped (a build costs about 3 runs)
WIDE_WALK = 4096  # tokens alive on their first byte from which a walk inside one slot reads a table (string_walk.py)
FEW_IDS = 256  # TokenTable.pack sets at most this many bits word by word
STATE_MASKS = 512  # whole-state masks kept for whole-token groups (each ceil(vocab/32) words)
NEEDS_KEPT = 32  # per-token needs kept of counted slots' automaton states (each 2 bytes per token)


class TokenTable:
    """Token byte strings as one flat uint8 buffer (the rows a run walks)."""

    _shared: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    _shared_lock = threading.Lock()

    @classmethod
    def of(cls, vocabulary) -> "TokenTable":
        """The table of `vocabulary`'s tokens, built once per vocabulary (read-only, shared by
        every grammar constraint over it)."""
        with cls._shared_lock:
            table = cls._shared.get(vocabulary)
            if table is None:
                table = cls._shared[vocabulary] = cls(vocabulary.token_bytes)
            return table

    def __init__(self, token_bytes: list) -> None:
        self.size = len(token_bytes)
        self.num_words = (self.size + 31) // 32
        lens = np.array([len(b) if b else 0 for b in token_bytes], dtype=np.int64)
        self.lens = lens
        self.starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
        self.flat = np.frombuffer(b"".join(b or b"" for b in token_bytes) + b"\0", dtype=np.uint8)
        self.all_rows = np.nonzero(lens > 0)[0].astype(np.int64)
        self.token_bytes = token_bytes
        for array in (self.lens, self.starts, self.all_rows):
            array.flags.writeable = False  # shared between constraints and threads

    def pack(self, ids: np.ndarray) -> np.ndarray:
        """Packed int32 bitmask [num_words] with the bits of `ids` set."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size <= FEW_IDS:  # a few bits: set word by word, not through a flag per token
            words = np.zeros(self.num_words, dtype=np.uint32)
            if ids.size <= 8:
                for i in ids.tolist():
                    words[i >> 5] |= 1 << (i & 31)
            else:
                np.bitwise_or.at(words, ids >> 5, np.left_shift(1, ids & 31).astype(np.uint32))
            return words.view(np.int32)
        flags = np.zeros(self.num_words * 32, dtype=bool)
        flags[ids] = True
        return np.packbits(flags, bitorder="little").view("<u4").astype(np.int32)


@dataclass
class Group:
    key: tuple
    rows: np.ndarray
    offs: Optional[np.ndarray]
    la: Optional[np.ndarray] = None
    packed: Optional[np.ndarray] = None


@dataclass
class Run:
    inside: list = field(default_factory=list)  # [(final product state, Group)]
    closes: list = field(default_factory=list)  # [(closed type, ended in tail?, Group)]


def walk(table: TokenTable, ctx: LexerContext, x0: int, tail_len: int, rows: np.ndarray, offs: np.ndarray) -> Run:
    """Push every row through `ctx` from product state `x0` (see the module docstring)."""
    rem = table.lens[rows] - offs
    order = np.argsort(-rem.astype(np.int32), kind="stable")  # longest first: finished rows trail
    rows, offs, rem = rows[order], offs[order], rem[order]
    neg_rem = -rem
    idx = np.arange(len(rows))  # [A] the active rows' positions, kept sorted by rem
    base = table.starts[rows] + offs
    st = np.full(len(rows), x0, dtype=np.int64)
    la = np.full(len(rows), -tail_len, dtype=np.int64)
    class_of, n_classes = ctx.class_of, ctx.n_classes
    code_flat, nxt_flat, ctype_flat = ctx.code.ravel(), ctx.nxt.ravel(), ctx.ctype.ravel()
    inside, closes = [], []
    j = 0
    while idx.size:
        alive = int(np.searchsorted(neg_rem[idx], -j, side="left"))  # rows with bytes left
        if alive < idx.size:
            inside.append((idx[alive:], st[alive:], la[alive:]))
            idx, base, st, la = idx[:alive], base[:alive], st[:alive], la[:alive]
            if not alive:
                break
        if ctx.ensure(st):  # rows built now: the tables may have moved
            code_flat, nxt_flat, ctype_flat = ctx.code.ravel(), ctx.nxt.ravel(), ctx.ctype.ravel()
        flat_i = st * n_classes + class_of[table.flat[base + j]]
        code = code_flat[flat_i]
        go = code <= ACCEPT
        if not go.all():
            closing = ~go & (code != DEAD)
            if closing.any():
                closes.append(
                    (
                        idx[closing],
                        ctype_flat[flat_i[closing]],
                        np.where(code[closing] == CLOSE_HERE, j + 1, la[closing]),
                    )
                )
            idx, base, la, flat_i, code = idx[go], base[go], la[go], flat_i[go], code[go]
        st = nxt_flat[flat_i].astype(np.int64)
        la[code == ACCEPT] = j + 1
        j += 1
    return _grouped(inside, closes, ctx, rows, offs, table)


def _grouped(inside: list, closes: list, ctx: LexerContext, rows, offs, table: TokenTable) -> Run:
    """The Run of a walk's outcomes (indices into `rows`, whose offsets are `offs`)."""
    run = Run()
    if inside:
        _group_inside(run, ctx, *(np.concatenate(x) for x in zip(*inside)), rows, offs, table)
    if closes:
        _group_closes(run, *(np.concatenate(x) for x in zip(*closes)), rows, offs, table)
    return run


def _group_inside(run: Run, ctx: LexerContext, idx, final, la, rows, offs, table: TokenTable) -> None:
    for s, part in split_by_key(final):
        sel = idx[part]
        g = Group(("in", s), rows[sel].astype(np.int32), None)
        if ctx.winner[s] >= 0 and not ctx.at_accept[s]:
            g.offs, g.la = offs[sel], la[part]  # kept only where the tail may be lexed again
        if len(sel) >= PACK_THRESHOLD:
            g.packed = table.pack(g.rows)
        run.inside.append((s, g))


def _group_closes(run: Run, idx, types, ends, rows, offs, table: TokenTable) -> None:
    in_tail = ends < 0
    for k, part in split_by_key(types.astype(np.int64) * 2 + in_tail):
        t, tail_flag = k // 2, bool(k % 2)
        sel = idx[part]
        new_rows = rows[sel].astype(np.int64)
        new_offs = (offs[sel] if tail_flag else offs[sel] + ends[part]).astype(np.int64)
        run.closes.append((t, tail_flag, _close_group(new_rows, new_offs, table)))


def _close_group(rows: np.ndarray, offs: np.ndarray, table: TokenTable) -> Group:
    """A group of closed rows; a large one of whole tokens keeps its packed bitmask."""
    g = Group(_content_key(rows, offs), rows, offs)
    if len(rows) >= PACK_THRESHOLD and not offs.any():
        g.packed = table.pack(rows)
    return g


def _content_key(rows: np.ndarray, offs: np.ndarray) -> tuple:
    """A key naming a row set by content, so equal remainders share runs across parents (e.g.
    every token that starts with a blank, after whichever token that blank closed)."""
    digest = hashlib.blake2b(rows.tobytes(), digest_size=16)
    digest.update(offs.tobytes())
    return ("rows", digest.digest())


def _expanded(run: Run, classes: TokenClasses, table: TokenTable) -> Run:
    """`run` over representative tokens, given to every token of their groups."""
    out = Run()
    for s, g in run.inside:
        rows, counts = classes.members(g.rows)
        grown = Group(g.key, rows.astype(np.int32), None)
        if g.offs is not None:
            grown.offs, grown.la = np.repeat(g.offs, counts), np.repeat(g.la, counts)
        if len(rows) >= PACK_THRESHOLD:
            grown.packed = table.pack(rows)
        out.inside.append((s, grown))
    for t, in_tail, g in run.closes:
        rows, counts = classes.members(g.rows)
        out.closes.append((t, in_tail, _close_group(rows, np.repeat(g.offs, counts), table)))
    return out


class MaskBuilder:
    """Exact allowed-token bitmasks of grammar states, with shared cached runs."""

    def __init__(self, engine: GrammarEngine, table: TokenTable, max_runs: int = 4096) -> None:
        self.engine = engine
        self.table = table
        self._runs: OrderedDict = OrderedDict()
        self._max_runs = max_runs
        self._masks: OrderedDict = OrderedDict()
        self._horizon = int(table.lens.max(initial=0))  # the most bytes one row pushes
        self._classes: dict = {}  # id(context) -> TokenClasses, None, its build's Future, or its full runs so far
        self._needs: OrderedDict = OrderedDict()  # (id(slot), automaton state) -> uint16 [vocab] (CountedSlot.needs)

    def canonical(self, state: GrammarState) -> GrammarState:
        """A state with the same mask, its `shift` folded in: inside a long string, one count
        stands for all the counts that no token can tell apart (LexerContext.fold)."""
        if not self.engine.has_counted:
            return state
        ctx = self.engine.context(state.stack)
        lex, _ = ctx.fold(state.lex, state.shift, None if state.tail else self._horizon)
        if lex == state.lex and not state.shift:
            return state
        return GrammarState(state.stack, state.ignored, lex, state.tail, state.token, state.frames)

    def mask(self, state: GrammarState) -> np.ndarray:
        """Packed int32 [num_words]: bit i set iff token i keeps the text viable."""
        state = self.canonical(state)
        cut = self._cut_mask(state)
        if cut is not None:
            return cut
        ids: list = []
        packed: list = []
        self._collect(state, ("all",), None, None, ids, packed)
        out = self.table.pack(np.concatenate(ids)) if ids else np.zeros(self.table.num_words, np.int32)
        for p in packed:
            out |= p
        return out

    def closing_rows(self, state: GrammarState) -> np.ndarray:
        """Ids of the tokens that close the token being read somewhere inside them."""
        state = self.canonical(state)
        run = self._run(self.engine.context(state.stack), state, ("all",), None, None)
        parts = [g.rows for _, _, g in run.closes]
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)

    def warm(self, ctx: LexerContext) -> None:
        """Walk the vocabulary from `ctx`'s token start ahead of use (the commonest first visit)."""
        start = GrammarState((), 0, ctx.initial, b"")
        self._run(ctx, start, ("all",), None, None)

    # ---- private ----------------------------------------------------------------------------

    def _collect(self, state: GrammarState, rows_key, rows, offs, ids: list, packed: list) -> None:
        engine = self.engine
        ctx = engine.context(state.stack)
        run = self._run(ctx, state, rows_key, rows, offs)
        allowed = engine.allowed_bits(state.stack, state.ignored)
        for s, g in run.inside:
            if ctx.possible(s) & allowed or (ctx.is_fresh(s) and engine.parser.accepts_end(state.stack)):
                if g.packed is not None:
                    packed.append(g.packed)
                else:
                    ids.append(g.rows)
            elif ctx.winner[s] >= 0 and not ctx.at_accept[s] and not ctx.is_fresh(s):
                ids.append(self._pending_rows(state, s, g))
        for t, in_tail, g in run.closes:
            for stack, ignored in engine.close_all(state.stack, state.ignored, t):  # one unless forking
                start = GrammarState(stack, ignored, engine.context(stack).initial, b"")
                for nxt in engine.feed_all(start, state.tail) if in_tail else [start]:
                    if g.packed is not None:  # whole tokens: the next state's own mask, restricted
                        packed.append(self._state_mask(nxt) & g.packed)
                    else:
                        self._collect(nxt, g.key, g.rows, g.offs, ids, packed)

    def _cut_mask(self, state: GrammarState) -> Optional[np.ndarray]:
        """Near the upper bound of a long string (LexerContext.cut): the mask of the same position
        at the lower bound, less the tokens that need more characters than are left. Each count
        there would otherwise be a new state, walked through the whole vocabulary."""
        if state.tail or not self.engine.has_counted:
            return None
        ctx = self.engine.context(state.stack)
        found = ctx.cut(state.lex)
        if found is None:
            return None
        base, slot, q, slack = found
        if slack >= np.iinfo(np.uint16).max:
            return None  # beyond the needs kept (a completion of 65,535 characters)
        key = (id(ctx.slots[slot]), q)
        needs = self._needs.get(key)
        if needs is None:
            raw = ctx.slots[slot].needs(q, TokenTrie.of(self.table))
            needs = self._needs[key] = np.minimum(raw, np.iinfo(np.uint16).max).astype(np.uint16)
            if len(self._needs) > NEEDS_KEPT:
                self._needs.popitem(last=False)
        else:
            self._needs.move_to_end(key)
        mask = self._state_mask(GrammarState(state.stack, state.ignored, base, b"", state.token, state.frames))
        return mask & ~self.table.pack(np.flatnonzero(needs > slack))

    def _state_mask(self, state: GrammarState) -> np.ndarray:
        """`mask(state)`, cached per state (whole-token groups of many parents share it)."""
        mask = self._masks.get(state)
        if mask is None:
            mask = self._masks[state] = self.mask(state)
            if len(self._masks) > STATE_MASKS:
                self._masks.popitem(last=False)
        else:
            self._masks.move_to_end(state)
        return mask

    def _run(self, ctx: LexerContext, state: GrammarState, rows_key, rows, offs) -> Run:
        key = (rows_key, id(ctx), state.lex, len(state.tail))
        run = self._runs.get(key)
        if run is None:
            if rows is None:
                run = self._run_all(ctx, state)
            else:
                run = walk(self.table, ctx, state.lex, len(state.tail), rows, offs)
            self._runs[key] = run
            if len(self._runs) > self._max_runs:
                self._runs.popitem(last=False)
        else:
            self._runs.move_to_end(key)
        return run

    def _run_all(self, ctx: LexerContext, state: GrammarState) -> Run:
        """All tokens, less those whose first byte is dead from here. Inside one slot with at least
        WIDE_WALK tokens alive, the tokens that stay inside come from a table (string_walk.py);
        elsewhere, from a context's GROUP_AFTER_RUNS + 1st such run on, one token per class sequence
        (token_classes.py), its outcome then shared."""
        live = ctx.live_bytes(state.lex)
        trie = TokenTrie.of(self.table)
        if int((trie.hi[0] - trie.lo[0])[live[trie.byte[0]]].sum()) >= WIDE_WALK:
            loop = string_walk.loop_tokens(ctx, state.lex, self.table)
            if loop is not None:
                return self._run_inside(ctx, state, loop)
        classes = self._token_classes(ctx)
        if classes is None:  # every token, through the trie (shared prefixes walked once)
            inside, closes = walk_trie(trie, ctx, state.lex, len(state.tail), live)
            return _grouped(inside, closes, ctx, trie.sorted_rows, trie.offsets, self.table)
        reps = classes.reps[live[self.table.flat[self.table.starts[classes.reps]]]]
        run = walk(self.table, ctx, state.lex, len(state.tail), reps, np.zeros(len(reps), np.int64))
        return _expanded(run, classes, self.table)

    def _run_inside(self, ctx: LexerContext, state: GrammarState, loop: "string_walk.LoopTokens") -> Run:
        """`_run_all` inside one slot (string_walk.py): the tokens that read on inside it from a
        table, the others walked."""
        run = walk(self.table, ctx, state.lex, len(state.tail), loop.rest, np.zeros(len(loop.rest), np.int64))
        for x, rows in loop.inside(ctx, state.lex):
            g = Group(("in", x), rows, None)
            if len(rows) >= PACK_THRESHOLD:
                g.packed = self.table.pack(rows)
            run.inside.append((x, g))
        return run

    def _token_classes(self, ctx: LexerContext) -> Optional[TokenClasses]:
        """The context's token grouping, started on its GROUP_AFTER_RUNS + 1st full run from a new
        state (a string's positions) and used once built (None: not yet, or not worth it)."""
        found = self._classes.get(id(ctx), 0)
        if isinstance(found, int):
            if ctx.n_classes > MAX_GROUPED_CLASSES:
                self._classes[id(ctx)] = None
                return None
            if found < GROUP_AFTER_RUNS:
                self._classes[id(ctx)] = found + 1
                return None
            found = self._classes[id(ctx)] = build_later(self.table, ctx.class_of)
        if isinstance(found, Future):
            if not found.done():
                return None
            found = self._classes[id(ctx)] = found.result()
        return found

    def _pending_rows(self, state: GrammarState, s: int, g: Group) -> np.ndarray:
        """Rows ending after the winner's last accept: decide each by closing there (rare)."""
        keep = []
        for row, off, la in zip(g.rows.tolist(), g.offs.tolist(), g.la.tolist()):
            text = state.tail + self.table.token_bytes[row][off:]
            tail = text[len(state.tail) + la :]
            probe = GrammarState(state.stack, state.ignored, s, tail)
            if self.engine.viable(probe):
                keep.append(row)
        return np.array(keep, dtype=np.int64)
