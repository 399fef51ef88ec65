"""Walks of the whole vocabulary from inside one terminal, most of it read off a table.

Inside a string value the lexer has one slot alive (the string's terminal) and no match yet,
and the walk from such a state visits every token that may continue the string: nearly the
whole vocabulary, again in every context that string's terminal appears in and, for a string
of bounded length (a counted slot, counted.py), again for each count a mask reaches. Yet a
token's path through the slot's automaton from an automaton state depends on neither the
context nor the count; only whether the count it ends at still lets the string end within
its bounds does. `LoopTokens` walks every token once from an automaton state and sorts those
that stay alive without reaching an accepting state by (final automaton state, counted
characters read). A walk from a lexer state then gives each such group the lexer state it ends
in (dropping it where a counted string could no longer end within its bounds) and walks token
by token only the tokens that reach an accepting state (the few that close the string, such as
those holding its closing quote).
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections import OrderedDict
from typing import Optional

import numpy as np

from sgl_runtime.constrained.counted import CountedSlot
from sgl_runtime.constrained.grammar.lexer import LexerContext
from sgl_runtime.constrained.grammar.slots import SlotDFA
from sgl_runtime.constrained.grammar.token_trie import TokenTrie, _ranges, listed_children

LOOPS_KEPT = 32  # LoopTokens kept per vocabulary (each about 5 bytes per token)


class LoopTokens:
    """The vocabulary's paths from one state of a slot's automaton (see the module)."""

    _shared: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # table -> OrderedDict
    _digests: dict = {}  # id(automaton's owner) -> (weakref to it, digest of its tables)
    _gone: list = []  # ids of owners collected since `of` last ran (their entries not dropped yet)
    _lock = threading.Lock()

    @classmethod
    def of(cls, owner, tables: tuple, state: int, table) -> "LoopTokens":
        """The paths from `state` of the automaton `tables` (transitions [m, 256], counted [m, 256]
        or None, accepting [m]) that `owner` holds, built once per automaton by content (the count
        bounds play no part: strings of one character set share them); LOOPS_KEPT are kept. The
        owner (a SlotDFA or a CountedDFA) keeps the automaton's packed `steps`."""
        with cls._lock:
            while cls._gone:
                cls._digests.pop(cls._gone.pop(), None)
            digest = cls._digests.get(id(owner))
            if digest is None or digest[0]() is not owner:
                h = hashlib.blake2b(digest_size=16)
                for part in tables:
                    h.update(b"-" if part is None else np.ascontiguousarray(part).tobytes())
                digest = cls._digests[id(owner)] = (weakref.ref(owner, cls._forget(id(owner))), h.digest())
            key = (digest[1], state)
            kept = cls._shared.setdefault(table, OrderedDict())
            found = kept.get(key)
            if found is not None:
                kept.move_to_end(key)
                return found
        built = cls(owner.steps, tables[1] is not None, tables[2], state, table)
        with cls._lock:
            kept[key] = built
            if len(kept) > LOOPS_KEPT:
                kept.popitem(last=False)
        return built

    @classmethod
    def _forget(cls, key: int):
        """The callback noting that an owner is gone. It takes no lock: it may run inside `of`'s
        locked section, on the thread that holds the lock (a collection started by an allocation
        there); `of` drops the noted entries under the lock."""
        return lambda _ref: cls._gone.append(key)

    def __init__(self, steps: np.ndarray, counts: bool, accepting: np.ndarray, state: int, table) -> None:
        """`steps`: the automaton as counted.packed_steps packs it; `counts`: whether it has counted
        transitions. A level is stepped over all its nodes while at least a quarter of them are
        alive (no compaction, its parents read through their links), else over the live ones only."""
        trie = TokenTrie.of(table)
        dead = accepting.size  # the sink row of `steps`
        ends = np.zeros(dead + 1, dtype=bool)
        ends[:dead] = accepting
        node_st = np.full(trie.n_nodes, dead, dtype=np.int32)  # per node reached without an accept: state, count
        node_got = np.zeros(trie.n_nodes if counts else 0, dtype=np.int32)
        rest = []
        nodes = None  # the level's live nodes; None: every node of the level
        st = np.full(trie.byte[0].size if trie.byte else 0, state, dtype=np.int32)
        got = np.zeros(st.size, dtype=np.int32)
        for d in range(len(trie.byte)):
            level = slice(trie.level_start[d], trie.level_start[d + 1])
            byte = trie.byte32[d] if nodes is None else trie.byte32[d][nodes]
            step = np.take(steps, (st << 8) | byte)
            st = step >> 1
            if counts:
                got = got + (step & 1)
            shut = np.flatnonzero(np.take(ends, st))
            if shut.size:  # every token below reaches an accepting state: walked in full each time
                at = shut if nodes is None else nodes[shut]
                rest.append(_ranges(trie.lo[d][at], trie.hi[d][at])[0])
                st[shut] = dead
            alive = st < dead
            if nodes is None:
                node_st[level] = st
                if counts:
                    node_got[level] = got
            else:
                nodes, st = nodes[alive], st[alive]
                node_st[level.start + nodes] = st
                if counts:
                    got = got[alive]
                    node_got[level.start + nodes] = got
            n_alive = int(np.count_nonzero(alive))
            if not n_alive or d + 1 == len(trie.byte):
                break
            if nodes is None and 4 * n_alive < alive.size:
                nodes = np.flatnonzero(alive)
                st = st[nodes]
                got = got[nodes] if counts else got
            listed = listed_children(trie, d, nodes) if nodes is not None else None
            if listed is not None:
                nodes, repeats = listed
                st = np.repeat(st, repeats)
                got = np.repeat(got, repeats) if counts else got
            else:  # every node of the next level, through its parent links
                parent = trie.parent[d + 1]
                st = np.take(node_st[level], parent)
                got = np.take(node_got[level], parent) if counts else got
                nodes = None
        self.rest = trie.sorted_rows[np.concatenate(rest)] if rest else np.zeros(0, dtype=np.int64)
        final = np.take(node_st, trie.end_node)
        positions = np.flatnonzero(final < dead)
        final = final[positions]
        got = np.take(node_got, trie.end_node[positions]) if counts else np.zeros(positions.size, dtype=np.int32)
        order, key = _by_pair(final, got)
        self.tokens = trie.sorted_rows[positions[order]].astype(np.int32)  # by (final state, counted characters)
        key = key[order]
        cuts = np.flatnonzero(key[1:] != key[:-1]) + 1
        firsts = np.concatenate([[0], cuts]).astype(np.int64) if key.size else np.zeros(0, dtype=np.int64)
        ends_at = np.append(cuts, key.size).astype(np.int64)
        heads = order[firsts]
        self.groups = list(zip(final[heads].tolist(), got[heads].tolist(), firsts.tolist(), ends_at.tolist()))

    def inside(self, ctx: LexerContext, lex: int) -> list:
        """[(lexer state, token ids)] of the tokens that end inside the slot from `lex` (a state
        `applies` accepts, in this object's automaton state), one entry per group."""
        i = ctx.alive_slots(lex)[0]
        slot = ctx.slots[i]
        if not isinstance(slot, CountedSlot):
            return [(ctx.reading(i, final), self.tokens[lo:hi]) for final, _, lo, hi in self.groups]
        dfa, count = slot.dfa, slot.position(ctx.slot_state(lex, i))[1]
        out = []
        for final, counted, lo, hi in self.groups:
            total = count + counted
            if dfa.hi is None:
                total = min(total, dfa.lo)  # as CountedSlot's rows: past lo every count is alike
            elif total > dfa.hi:
                continue
            if dfa.live(final, total):  # then so was every (state, count) on the way there
                out.append((ctx.reading(i, slot.state_at(final, total)), self.tokens[lo:hi]))
        return out


def _by_pair(first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the stable order sorting by (first, second), one int key per pair): a single radix sort
    where the key fits 16 bits, two where each part does."""
    width = int(second.max(initial=0)) + 1
    key = first.astype(np.int64) * width + second
    if first.size and int(key.max()) <= np.iinfo(np.uint16).max:
        return np.argsort(key.astype(np.uint16), kind="stable"), key
    if first.size and max(int(first.max()), width - 1) <= np.iinfo(np.uint16).max:
        order = np.argsort(second.astype(np.uint16), kind="stable")
        return order[np.argsort(first[order].astype(np.uint16), kind="stable")], key
    return np.lexsort((second, first)), key


def loop_tokens(ctx: LexerContext, lex: int, table) -> Optional[LoopTokens]:
    """The LoopTokens of a walk from lexer state `lex` of `ctx`, where one slot is alive and
    nothing has matched yet (None elsewhere)."""
    if ctx.winner_of[lex] >= 0 or ctx.is_fresh(lex):
        return None
    alive = ctx.alive_slots(lex)
    if len(alive) != 1:
        return None
    slot, q = ctx.slots[alive[0]], ctx.slot_state(lex, alive[0])
    if isinstance(slot, CountedSlot):
        dfa = slot.dfa
        return LoopTokens.of(dfa, (dfa.table, dfa.counted, dfa.accepting), slot.position(q)[0], table)
    if isinstance(slot, SlotDFA):
        return LoopTokens.of(slot, (slot.trans, None, slot.label >= 0), q, table)
    return None
