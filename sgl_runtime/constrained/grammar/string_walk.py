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
    _lock = threading.Lock()

    @classmethod
    def of(cls, owner, tables: tuple, state: int, table) -> "LoopTokens":
        """The paths from `state` of the automaton `tables` (transitions [m, 256], counted [m, 256]
        or None, accepting [m]) that `owner` holds, built once per automaton by content (the count
        bounds play no part: strings of one character set share them); LOOPS_KEPT are kept."""
        with cls._lock:
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
        built = cls(*tables, state, table)
        with cls._lock:
            kept[key] = built
            if len(kept) > LOOPS_KEPT:
                kept.popitem(last=False)
        return built

    @classmethod
    def _forget(cls, key: int):
        def forget(_ref) -> None:
            with cls._lock:
                cls._digests.pop(key, None)

        return forget

    def __init__(
        self, trans: np.ndarray, counted: Optional[np.ndarray], accepting: np.ndarray, state: int, table
    ) -> None:
        trie = TokenTrie.of(table)
        node_st = np.full(trie.n_nodes, -1, dtype=np.int32)  # per node reached without an accept: state, count
        node_got = np.zeros(trie.n_nodes, dtype=np.int32)
        rest = []
        nodes = np.arange(trie.byte[0].size if trie.byte else 0)
        st = np.full(nodes.size, state, dtype=np.int32)
        got = np.zeros(nodes.size, dtype=np.int32)
        for d in range(len(trie.byte)):
            if not nodes.size:
                break
            byte = trie.byte[d][nodes]
            nxt = trans[st, byte]
            on = nxt >= 0  # the others die here, whatever the count
            nodes, st, got, byte, nxt = nodes[on], st[on], got[on], byte[on], nxt[on]
            if counted is not None:
                got = got + counted[st, byte]
            st = nxt
            ends_here = accepting[st]
            if ends_here.any():  # every token below reaches an accepting state: walked in full each time
                shut = nodes[ends_here]
                rest.append(_ranges(trie.lo[d][shut], trie.hi[d][shut])[0])
                keep = ~ends_here
                nodes, st, got = nodes[keep], st[keep], got[keep]
            at = trie.level_start[d]
            node_st[at + nodes], node_got[at + nodes] = st, got
            if d + 1 == len(trie.byte):
                break
            listed = listed_children(trie, d, nodes)
            if listed is not None:
                nodes, counts = listed
                st, got = np.repeat(st, counts), np.repeat(got, counts)
            else:  # most of the level: through the parent links
                parent = trie.parent[d + 1] + at
                st = node_st[parent]
                nodes = np.flatnonzero(st >= 0)
                st, got = st[nodes], node_got[parent[nodes]]
        self.rest = trie.sorted_rows[np.concatenate(rest)] if rest else np.zeros(0, dtype=np.int64)
        final = node_st[trie.end_node]
        positions = np.flatnonzero(final >= 0)
        final, got = final[positions], node_got[trie.end_node[positions]]
        order = _by_pair(final, got)
        self.tokens = trie.sorted_rows[positions[order]].astype(np.int32)  # by (final state, counted characters)
        key = final[order].astype(np.int64) * (int(got.max(initial=0)) + 1) + got[order]
        cuts = np.flatnonzero(key[1:] != key[:-1]) + 1
        firsts = np.concatenate([[0], cuts]).astype(np.int64) if key.size else np.zeros(0, dtype=np.int64)
        ends = np.append(cuts, key.size).astype(np.int64)
        self.groups = list(
            zip(final[order][firsts].tolist(), got[order][firsts].tolist(), firsts.tolist(), ends.tolist())
        )

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


def _by_pair(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The stable order sorting by (first, second): two radix sorts where both fit 16 bits."""
    if first.size and max(int(first.max()), int(second.max())) <= np.iinfo(np.uint16).max:
        order = np.argsort(second.astype(np.uint16), kind="stable")
        return order[np.argsort(first[order].astype(np.uint16), kind="stable")]
    return np.lexsort((second, first))


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
