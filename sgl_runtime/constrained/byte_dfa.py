"""A minimal deterministic automaton over bytes, built from a regex or an interegular character FSM.

Offers (stable interface, used by the token index and the lark grammar engine):

- `ByteDFA(transitions, initial, accepting)`: `transitions` int32 [n_states, 256] (-1 = dead),
  `accepting` bool [n_states]. States are numbered 0..n-1; every state can reach an accepting
  state (dead states pruned), except possibly `initial` when the language is empty.
- `ByteDFA.from_regex(pattern, max_states=...)`: Python `re` syntax matching the whole text,
  compiled exactly or refused by `regex_automaton` (lookaround, anchors, `\\b`, flags included).
- `ByteDFA.from_fsm(fsm, max_states=...)`: an `interegular.fsm.FSM` over characters (incl.
  `anything_else`) expanded to UTF-8 bytes (only valid UTF-8 is accepted), then minimised.
- `ByteDFA.from_strings(strings)`: exactly these strings (a minimised trie).
- `ByteDFA.from_dfa(dfa, max_states=...)`: an `automata.Dfa`, read straight into a byte table
  when every edge is a set of ASCII characters (keys, punctuation), else through `from_fsm`;
  results kept in a bounded process-wide cache (read-only arrays), as schemas share leaves.
- `.walk(state, data) -> state or -1`, `.accepts(data: bytes | str)`, `.n_states`,
  `.is_empty()`, `.live_bytes(state)` (bytes with a transition).
Past `max_states` (or a malformed pattern) `ConstraintError` is raised naming the problem.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import interegular
import numpy as np
from interegular.fsm import anything_else

from sgl_runtime.constrained.automata import Dfa, to_interegular
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.regex_automaton import regex_to_dfa
from sgl_runtime.constrained.utf8_expansion import Utf8Expander

DEFAULT_MAX_STATES = 200_000
MAX_MOORE_ROUNDS = 64
CACHED_STATES = 100_000  # byte states kept by from_dfa's cache (~100 MB of tables at most)


class ByteDFA:
    """A byte-level DFA stored as compact numpy arrays."""

    def __init__(self, transitions: np.ndarray, initial: int, accepting: np.ndarray) -> None:
        self.transitions = np.ascontiguousarray(transitions, dtype=np.int32)  # [n_states, 256]
        self.initial = int(initial)
        self.accepting = np.asarray(accepting, dtype=bool)  # [n_states]

    # ---- construction ---------------------------------------------------------------------

    @classmethod
    def from_regex(cls, pattern: str, max_states: int = DEFAULT_MAX_STATES) -> ByteDFA:
        """The minimal byte DFA of strings that fully match `pattern` (Python `re` syntax, ASCII
        shorthand classes), exact or refused; see `regex_automaton`."""
        return cls.from_fsm(to_interegular(regex_to_dfa(pattern)), max_states=max_states)

    @classmethod
    def from_fsm(cls, fsm: interegular.fsm.FSM, max_states: int = DEFAULT_MAX_STATES) -> ByteDFA:
        """UTF-8 expansion of a character FSM (incl. `anything_else`), minimised and pruned."""
        table, accepting, number = utf8_table(fsm, max_states)
        dfa = cls(table, number[fsm.initial], accepting)
        return dfa._pruned()._minimised()

    @classmethod
    def from_dfa(cls, dfa: Dfa, max_states: int = DEFAULT_MAX_STATES) -> ByteDFA:
        """The minimal byte DFA of a character `Dfa` (read-only; equal Dfas give the same object)."""
        key = (dfa, max_states)
        found = _FROM_DFA.get(key)
        if found is None:
            found = _ascii_table(dfa) or cls.from_fsm(to_interegular(dfa), max_states=max_states)
            found.transitions.flags.writeable = found.accepting.flags.writeable = False
            _FROM_DFA.put(key, found, found.n_states)
        return found

    @classmethod
    def from_strings(cls, strings: list[str], max_states: int = DEFAULT_MAX_STATES) -> ByteDFA:
        """The minimal byte DFA accepting exactly `strings` (a trie, then minimised)."""
        rows: list[np.ndarray] = [np.full(256, -1, dtype=np.int32)]
        accepting = [False]
        for text in strings:
            state = 0
            for b in text.encode("utf-8"):
                if rows[state][b] < 0:
                    if len(rows) >= max_states:
                        raise ConstraintError(f"choices too large: more than {max_states} states")
                    rows[state][b] = len(rows)
                    rows.append(np.full(256, -1, dtype=np.int32))
                    accepting.append(False)
                state = int(rows[state][b])
            accepting[state] = True
        return cls(np.stack(rows), 0, np.array(accepting))._minimised()

    # ---- queries --------------------------------------------------------------------------

    @property
    def n_states(self) -> int:
        return int(self.transitions.shape[0])

    def walk(self, state: int, data: bytes) -> int:
        """The state after consuming `data` from `state`, or -1 if it dies."""
        table = self.transitions
        for b in data:
            if state < 0:
                return -1
            state = int(table[state, b])
        return state

    def accepts(self, data: bytes | str) -> bool:
        if isinstance(data, str):
            try:
                data = data.encode("utf-8")
            except UnicodeEncodeError:
                return False
        state = self.walk(self.initial, data)
        return state >= 0 and bool(self.accepting[state])

    def is_empty(self) -> bool:
        """True when no string is accepted."""
        return not self.accepting.any()

    def live_bytes(self, state: int) -> np.ndarray:
        """The byte values with a transition out of `state`."""
        return np.nonzero(self.transitions[state] >= 0)[0]

    def combined(self, other: ByteDFA, both: bool) -> ByteDFA:
        """The minimal DFA of the strings of `self` that are (both=True) or are not (False) strings
        of `other`: the product automaton, `other` completed by a dead state."""
        pairs = {(self.initial, other.initial): 0}
        order, rows = [(self.initial, other.initial)], []
        dead = np.full(256, -1, dtype=np.int32)
        for a, b in order:  # grows as new pairs are met
            ta, tb = self.transitions[a], other.transitions[b] if b >= 0 else dead
            go = (ta >= 0) & (tb >= 0) if both else ta >= 0
            row = np.full(256, -1, dtype=np.int32)
            for byte in np.flatnonzero(go).tolist():
                key = (int(ta[byte]), int(tb[byte]))
                if key not in pairs:
                    pairs[key] = len(order)
                    order.append(key)
                row[byte] = pairs[key]
            rows.append(row)
        other_accepts = np.array([b >= 0 and bool(other.accepting[b]) for _, b in order])
        accepting = self.accepting[[a for a, _ in order]] & (other_accepts if both else ~other_accepts)
        return ByteDFA(np.stack(rows), 0, accepting)._pruned()._minimised()

    # ---- private: pruning and minimisation -----------------------------------------------

    def _pruned(self) -> ByteDFA:
        """Drop states unreachable from `initial` or unable to reach an accepting state."""
        n = self.n_states
        reach = _closure(np.array([self.initial]), self.transitions, n)
        src, byte = np.nonzero(self.transitions >= 0)
        dst = self.transitions[src, byte]
        rev = _reverse_closure(np.nonzero(self.accepting)[0], src, dst, n)
        keep = reach & rev
        keep[self.initial] = True
        return self._renumbered(np.nonzero(keep)[0])

    def _renumbered(self, kept: np.ndarray) -> ByteDFA:
        new_id = np.full(self.n_states + 1, -1, dtype=np.int32)
        new_id[kept] = np.arange(len(kept), dtype=np.int32)
        table = new_id[self.transitions[kept]]  # -1 maps through new_id[-1] == -1
        return ByteDFA(table, int(new_id[self.initial]), self.accepting[kept])

    def _minimised(self) -> ByteDFA:
        """Moore partition refinement over byte classes, signatures hashed to 64 bits and the
        result verified exactly. Past MAX_MOORE_ROUNDS (long chains of forced text) the pruned
        DFA is kept as is: correct, just not minimal (schema FSMs arrive minimal already)."""
        n = self.n_states
        if n <= 1:
            return self
        class_cols, _ = byte_classes(self.transitions)
        table = self.transitions[:, class_cols]  # [n, n_byte_classes]
        weights = np.random.default_rng(0).integers(1, 2**62, size=table.shape[1] + 1, dtype=np.uint64) * 2 + 1
        block = self.accepting.astype(np.int64)
        n_blocks = len(np.unique(block))
        for _ in range(MAX_MOORE_ROUNDS):
            targets = np.where(table >= 0, block[np.maximum(table, 0)], -1)  # [n, classes]
            signature = (targets.astype(np.uint64) * weights[1:]).sum(axis=1) + block.astype(np.uint64) * weights[0]
            block = np.unique(signature, return_inverse=True)[1].reshape(-1)
            if block.max() + 1 == n_blocks:  # refinement only splits: same count, same partition
                break
            n_blocks = int(block.max()) + 1
        else:
            return self
        first = np.unique(block, return_index=True)[1]  # a representative per block
        targets = np.where(table >= 0, block[np.maximum(table, 0)], -1)
        if not (
            np.array_equal(targets, targets[first[block]])
            and np.array_equal(self.accepting, self.accepting[first[block]])
        ):
            return self  # a hash collision merged distinguishable states: keep the exact DFA
        if len(first) == n:
            return self
        merged = np.where(self.transitions[first] >= 0, block[np.maximum(self.transitions[first], 0)], -1)
        return ByteDFA(merged, int(block[self.initial]), self.accepting[first])


def byte_classes(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first byte of each class, class of each byte) for the classes of equal columns of
    `table` [rows, 256], numbered by first byte: columns hashed to 64 bits, then checked exactly."""
    if table.shape[0] == 0:
        return np.zeros(1, dtype=np.int64), np.zeros(256, dtype=np.int64)
    weights = np.random.default_rng(1).integers(1, 2**62, size=table.shape[0], dtype=np.uint64) * 2 + 1
    signature = weights @ table.astype(np.uint64)  # [256], wrapping arithmetic
    _, first, inverse = np.unique(signature, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    reps = first[order].astype(np.int64)
    class_of = np.empty(len(order), dtype=np.int64)
    class_of[order] = np.arange(len(order))
    class_of = class_of[inverse.reshape(-1)]
    if not np.array_equal(table, table[:, reps[class_of]]):  # a collision merged unequal columns
        _, reps, class_of = np.unique(table, axis=1, return_index=True, return_inverse=True)
        reps, class_of = reps.astype(np.int64), class_of.reshape(-1).astype(np.int64)
    return reps, class_of


def _ascii_table(dfa: Dfa) -> ByteDFA | None:
    """`dfa` as bytes when every edge is a positive set of ASCII characters (None otherwise):
    UTF-8 spells them as themselves, so the table is the Dfa's own (minimal, every state live)."""
    table = np.full((dfa.num_states, 256), -1, dtype=np.int32)
    for state, edges in enumerate(dfa.edges):
        for chars, target in edges:
            if chars.negated or any(ord(c) >= 0x80 for c in chars.chars):
                return None
            table[state, [ord(c) for c in chars.chars]] = target
    accepting = np.zeros(dfa.num_states, dtype=bool)
    accepting[list(dfa.finals)] = True
    found = ByteDFA(table, 0, accepting)
    return found if _all_live(dfa) else found._pruned()._minimised()


def _all_live(dfa: Dfa) -> bool:
    """Whether every state is reachable and can reach a final one (as the Dfas of automata_ops
    are): then the byte table needs no pruning."""
    preds: list[list[int]] = [[] for _ in dfa.edges]
    reached = {0}
    for state, edges in enumerate(dfa.edges):
        for _, target in edges:
            preds[target].append(state)
    todo = [0]
    while todo:
        for _, target in dfa.edges[todo.pop()]:
            if target not in reached:
                reached.add(target)
                todo.append(target)
    live, todo = set(dfa.finals), list(dfa.finals)
    while todo:
        for source in preds[todo.pop()]:
            if source not in live:
                live.add(source)
                todo.append(source)
    return len(reached) == len(live) == len(dfa.edges)


class _SizedCache:
    """A thread-safe LRU map bounded by the total size of its values."""

    def __init__(self, budget: int) -> None:
        self.budget, self.size = budget, 0
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found[0]
            return None

    def put(self, key, value, size: int) -> None:
        if size > self.budget:
            return
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = (value, size)
            self.size += size
            while self.size > self.budget:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.size -= dropped


_FROM_DFA = _SizedCache(CACHED_STATES)


def utf8_table(fsm: interegular.fsm.FSM, max_states: int = DEFAULT_MAX_STATES) -> tuple:
    """(byte table [n, 256] int32, accepting [n] bool, {character state: byte state}) of the UTF-8
    expansion of a character FSM, neither pruned nor minimised (intermediate states of
    multi-byte characters follow the character states)."""
    if len(fsm.states) > max_states:
        raise ConstraintError(f"constraint too large: {len(fsm.states)} character states > {max_states}")
    states = sorted(fsm.states, key=repr)
    number = {s: i for i, s in enumerate(states)}
    expander = Utf8Expander(_code_point_partition(fsm), max_states=max_states)
    symbol_targets = _symbol_target_table(fsm, states, number, expander.num_symbols)
    accepting_chars = np.array([s in fsm.finals for s in states], dtype=bool)
    table, accepting = expander.expand(symbol_targets, accepting_chars)
    return table, accepting, number


def _closure(start: np.ndarray, table: np.ndarray, n: int) -> np.ndarray:
    seen = np.zeros(n, dtype=bool)
    seen[start] = True
    frontier = start
    while frontier.size:
        nxt = np.unique(table[frontier].ravel())
        nxt = nxt[nxt >= 0]
        nxt = nxt[~seen[nxt]]
        seen[nxt] = True
        frontier = nxt
    return seen


def _reverse_closure(finals: np.ndarray, src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """States from which some state in `finals` is reachable (edges src -> dst)."""
    order = np.argsort(dst, kind="stable")
    preds = src[order]  # predecessors grouped by target (CSR)
    offsets = np.searchsorted(dst[order], np.arange(n + 1))
    seen = np.zeros(n, dtype=bool)
    seen[finals] = True
    frontier = np.asarray(finals)
    while frontier.size:
        counts = offsets[frontier + 1] - offsets[frontier]
        starts = np.repeat(offsets[frontier] - np.cumsum(counts) + counts, counts)
        idx = starts + np.arange(counts.sum())
        prev = np.unique(preds[idx])
        prev = prev[~seen[prev]]
        seen[prev] = True
        frontier = prev
    return seen


def _code_point_partition(fsm: interegular.fsm.FSM) -> tuple[np.ndarray, np.ndarray, int]:
    """Code-point segments (sorted starts) and each segment's alphabet symbol; symbol
    `dead` for code points with no symbol (no anything_else) and for surrogates."""
    alphabet = fsm.alphabet
    explicit = sorted((ord(c), alphabet[c]) for c in alphabet if c is not anything_else and len(c) == 1)
    symbols = {s for s in alphabet.values()}
    dead = max(symbols, default=-1) + 1
    other = alphabet[anything_else] if anything_else in alphabet else dead
    starts, syms = [0], [other]
    for cp, sym in explicit:
        if starts[-1] == cp:
            syms[-1] = sym
        else:
            starts.append(cp)
            syms.append(sym)
        starts.append(cp + 1)
        syms.append(other)
    starts_arr, syms_arr = np.array(starts, dtype=np.int64), np.array(syms, dtype=np.int64)
    # Surrogates are never valid UTF-8: force them dead.
    surrogate = (starts_arr >= 0xD800) & (starts_arr <= 0xDFFF)
    starts_arr, syms_arr = starts_arr[~surrogate], syms_arr[~surrogate]
    before = np.searchsorted(starts_arr, 0xE000, "right") - 1
    after_sym = syms_arr[before]
    ins = np.searchsorted(starts_arr, 0xD800)
    starts_arr = np.insert(starts_arr, ins, [0xD800, 0xE000])
    syms_arr = np.insert(syms_arr, ins, [dead, after_sym])
    keep = np.ones(len(starts_arr), dtype=bool)
    keep[1:] = syms_arr[1:] != syms_arr[:-1]
    return starts_arr[keep], syms_arr[keep], dead


def _symbol_target_table(fsm, states: list, number: dict, num_symbols: int) -> np.ndarray:
    """[n_char_states, num_symbols] next character state (-1 dead)."""
    table = np.full((len(states), num_symbols), -1, dtype=np.int64)
    for s in states:
        for sym, t in fsm.map.get(s, {}).items():
            table[number[s], sym] = number[t]
    return table
