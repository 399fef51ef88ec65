"""The vocabulary as a trie, walked one level at a time through a lexer context.

A walk of every token from one lexer state (walk.walk) steps each token through each of its
bytes, about 976k steps for Qwen2.5's 151k tokens. Tokens that share a prefix share those
steps: the trie has 333k nodes. `TokenTrie.of(table)` numbers the distinct prefixes level by
level (level d holds the prefixes of d + 1 bytes) over the tokens in byte order, so every node
names a contiguous range of the sorted tokens (those that begin with its prefix, the ones that
end at the node first). `walk_trie` pushes the live nodes of one level through the context at
once, like walk.walk's columns: a node that closes the token being read closes it for every
token of its range; a node that dies drops its range; the tokens ending at a node that goes on
end inside the token at the node's state. The outcome is walk.walk's, for the rows
`trie.sorted_rows` at offset 0.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from sgl_runtime.constrained.grammar.lexer import ACCEPT, CLOSE_HERE, DEAD, LexerContext


class TokenTrie:
    """Per level d: `byte[d]`, `lo[d]`/`hi[d]` (the node's range of `sorted_rows`), `ends[d]` (how
    many tokens of the range end at the node) and `child_lo[d]`/`child_n[d]` (its children's
    slice of level d + 1)."""

    _shared: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    _lock = threading.Lock()

    @classmethod
    def of(cls, table) -> "TokenTrie":
        """The trie of `table`'s tokens, built once per table (read-only, shared)."""
        with cls._lock:
            trie = cls._shared.get(table)
            if trie is None:
                trie = cls._shared[table] = cls(table)
            return trie

    def __init__(self, table) -> None:
        self.vocab_size = table.size
        rows = table.all_rows
        keys = [table.token_bytes[r] for r in rows.tolist()]
        order = np.array(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)
        self.sorted_rows = rows[order]
        self.offsets = np.zeros(len(order), dtype=np.int64)  # every walk starts at a token's first byte
        lens = table.lens[self.sorted_rows]
        starts = table.starts[self.sorted_rows]
        self.byte, self.lo, self.hi, self.ends, self.child_lo, self.child_n = [], [], [], [], [], []
        members = np.arange(len(order))  # sorted positions of the tokens with more than d bytes
        parent = np.zeros(len(order), dtype=np.int64)  # each member's node one level up
        self.parent = [np.zeros(0, dtype=np.int64)]  # per level: each node's parent in the level above
        self.level_start = [0]  # per level: its first node's number in one numbering of all nodes
        self.end_node = np.zeros(len(order), dtype=np.int64)  # per sorted position: the node it ends at
        d = 0
        while members.size:
            byte = table.flat[starts[members] + d]
            new = np.ones(members.size, dtype=bool)
            new[1:] = (parent[1:] != parent[:-1]) | (byte[1:] != byte[:-1])
            first = np.flatnonzero(new)
            node = np.cumsum(new) - 1
            last = np.append(first[1:], members.size) - 1
            self.byte.append(byte[first])
            self.lo.append(members[first])
            self.hi.append(members[last] + 1)
            ending = lens[members] == d + 1
            self.ends.append(np.bincount(node[ending], minlength=first.size))
            self.end_node[members[ending]] = self.level_start[d] + node[ending]
            self.level_start.append(self.level_start[d] + first.size)
            if d:  # the parents' children: contiguous, in node order
                self.parent.append(parent[first])
                n_parents = self.lo[d - 1].size
                self.child_n.append(np.bincount(parent[first], minlength=n_parents))
                self.child_lo.append(np.searchsorted(parent[first], np.arange(n_parents)))
            more = ~ending
            members, parent = members[more], node[more]
            d += 1
        self.byte_str = [b.tobytes() for b in self.byte]  # the same as bytes, to find a child's byte in C
        self.byte32 = [b.astype(np.int32) for b in self.byte]  # the same, ready to index a flat [state, byte] table
        n_last = self.lo[-1].size if self.lo else 0
        self.child_n.append(np.zeros(n_last, dtype=np.int64))
        self.child_lo.append(np.zeros(n_last, dtype=np.int64))

    @property
    def n_nodes(self) -> int:
        return self.level_start[-1]


# a level with at most this many live nodes is stepped node by node (numpy's per-call cost dominates there)
SPARSE_NODES = 64
# a level with at least this many live nodes notes their states per node rather than listing the
# tokens that end there (one gather over every token at the end replaces a range expansion per level)
WIDE_LEVEL = 4096
FEW_KEYS = 64  # split_by_key groups up to this many outcomes by a dict


def walk_trie(trie: TokenTrie, ctx: LexerContext, x0: int, tail_len: int, live: np.ndarray) -> tuple:
    """(inside, closes) as walk.walk collects them, indices into `trie.sorted_rows` (offsets 0):
    inside [(positions, final states, last accepts)], closes [(positions, closed types, ends)];
    only tokens whose first byte has `live` are walked (the others die on it). The live nodes
    of the next level are the children of those that go on: listed from their ranges where they
    are few, else read off the whole level through its parent links. A level of few live nodes
    (inside a key, a literal, a pattern's fixed part) is stepped in Python over the context's
    row lists instead."""
    inside, closes = [], []
    if not trie.byte:
        return inside, closes
    nodes = np.flatnonzero(live[trie.byte[0]])
    st = np.full(nodes.size, x0, dtype=np.int64)
    la = np.full(nodes.size, -tail_len, dtype=np.int64)
    sparse = _SparseOutcomes()
    node_st = node_la = None  # per node of the wide levels: state and last accept (-1: not alive there)
    last = len(trie.byte) - 1
    for d in range(last + 1):
        if not len(nodes):
            break
        if len(nodes) <= SPARSE_NODES:
            nodes, st, la = sparse.level(
                trie, ctx, d, *(x if isinstance(x, list) else x.tolist() for x in (nodes, st, la))
            )
            continue
        nodes, st, la = (np.asarray(x, dtype=np.int64) for x in (nodes, st, la))
        ctx.ensure(st)  # the tables may move as rows are built: read them after
        code_flat, nxt_flat, ctype_flat = ctx.code.ravel(), ctx.nxt.ravel(), ctx.ctype.ravel()
        flat_i = st * ctx.n_classes + ctx.class_of[trie.byte[d][nodes]]
        code = code_flat[flat_i]
        go = code <= ACCEPT
        if not go.all():
            closing = ~go & (code != DEAD)
            if closing.any():
                shut = nodes[closing]
                positions, counts = _ranges(trie.lo[d][shut], trie.hi[d][shut])
                ends = np.where(code[closing] == CLOSE_HERE, d + 1, la[closing])
                closes.append((positions, np.repeat(ctype_flat[flat_i[closing]], counts), np.repeat(ends, counts)))
            nodes, la, flat_i, code = nodes[go], la[go], flat_i[go], code[go]
        st = nxt_flat[flat_i].astype(np.int64)
        la[code == ACCEPT] = d + 1
        if len(nodes) >= WIDE_LEVEL:  # note every node's state; each token reads its end node's at the end
            if node_st is None:
                node_st, node_la = np.full(trie.n_nodes, -1, dtype=np.int64), np.empty(trie.n_nodes, dtype=np.int64)
            node_st[trie.level_start[d] + nodes], node_la[trie.level_start[d] + nodes] = st, la
        else:
            ending = trie.ends[d][nodes]
            if ending.any():
                lo = trie.lo[d][nodes]
                positions, counts = _ranges(lo, lo + ending)
                inside.append((positions, np.repeat(st, counts), np.repeat(la, counts)))
        if d == last:
            break
        listed = listed_children(trie, d, nodes)
        if listed is not None:
            nodes, counts = listed
            st, la = np.repeat(st, counts), np.repeat(la, counts)
        else:  # most of the level: through the parent links
            level_st = np.full(trie.byte[d].size, -1, dtype=np.int64)
            level_la = np.empty(trie.byte[d].size, dtype=np.int64)
            level_st[nodes], level_la[nodes] = st, la
            parent = trie.parent[d + 1]
            st = level_st[parent]
            nodes = np.flatnonzero(st >= 0)
            st, la = st[nodes], level_la[parent[nodes]]
    sparse.append_to(inside, closes)
    if node_st is not None:
        final = node_st[trie.end_node]
        positions = np.flatnonzero(final >= 0)
        inside.append((positions, final[positions], node_la[trie.end_node[positions]]))
    return inside, closes


def listed_children(trie: TokenTrie, d: int, nodes: np.ndarray):
    """(the children of level `d`'s `nodes`, how many each has) where they are few, at most a
    quarter of level d + 1; None where they are most of it (read that level through its parent
    links instead)."""
    n_child = trie.child_n[d][nodes]
    if 4 * int(n_child.sum()) >= trie.byte[d + 1].size:
        return None
    first = trie.child_lo[d][nodes]
    return _ranges(first, first + n_child)


class _SparseOutcomes:
    """The outcomes of the levels stepped node by node, as ranges of sorted positions."""

    def __init__(self) -> None:
        self.inside: list = []  # (first position, count, final state, last accept)
        self.closes: list = []  # (first position, count, closed type, end)

    def level(self, trie: TokenTrie, ctx: LexerContext, d: int, nodes: list, st: list, la: list) -> tuple:
        """Step level `d`'s live nodes; the next level's (nodes, states, last accepts)."""
        rows, class_list = ctx.rows, ctx.class_list
        byte, lo, ends = trie.byte[d], trie.lo[d], trie.ends[d]
        deeper = d + 1 < len(trie.byte)
        child_bytes = trie.byte_str[d + 1] if deeper else b""
        out_nodes, out_st, out_la = [], [], []
        for node, x, a in zip(nodes, st, la):
            row = rows[x] or ctx.build_row(x)  # (events, next states, closed types) per class
            c = class_list[byte.item(node)]
            code = row[0][c]
            if code > ACCEPT:
                if code != DEAD:
                    first = lo.item(node)
                    end = d + 1 if code == CLOSE_HERE else a
                    self.closes.append((first, trie.hi[d].item(node) - first, row[2][c], end))
                continue
            y = row[1][c]
            if code == ACCEPT:
                a = d + 1
            n_end = ends.item(node)
            if n_end:
                self.inside.append((lo.item(node), n_end, y, a))
            if deeper:
                k = trie.child_n[d].item(node)
                if k:
                    child = trie.child_lo[d].item(node)
                    few = ctx.few_live_bytes(y) if k > 1 else None
                    if few is None:
                        out_nodes.extend(range(child, child + k))
                        out_st.extend([y] * k)
                        out_la.extend([a] * k)
                        continue
                    for b in few:  # the children on the few bytes that go on (the others die there)
                        j = child_bytes.find(b, child, child + k)
                        if j >= 0:
                            out_nodes.append(j)
                            out_st.append(y)
                            out_la.append(a)
        return out_nodes, out_st, out_la

    def append_to(self, inside: list, closes: list) -> None:
        for found, out in ((self.inside, inside), (self.closes, closes)):
            if found:
                first, count, what, where = (np.array(x, dtype=np.int64) for x in zip(*found))
                positions, counts = _ranges(first, first + count)
                out.append((positions, np.repeat(what, counts), np.repeat(where, counts)))


def _ranges(lo: np.ndarray, hi: np.ndarray) -> tuple:
    """(the concatenation of the ranges [lo_i, hi_i), each range's length)."""
    counts = hi - lo
    total = int(counts.sum())
    if not total:
        return np.zeros(0, dtype=np.int64), counts
    starts = np.repeat(lo - np.cumsum(counts) + counts, counts)
    return starts + np.arange(total), counts


def split_by_key(keys: np.ndarray):
    """(key, positions) for each distinct key in key order, positions ascending: by a dict for a
    few outcomes (numpy's per-call cost dominates there), else by one stable sort (a radix sort
    where the keys fit 16 bits: lexer states and token types nearly always do)."""
    if keys.size <= FEW_KEYS:
        found: dict = {}
        for i, k in enumerate(keys.tolist()):
            found.setdefault(k, []).append(i)
        for k in sorted(found):
            yield k, np.array(found[k], dtype=np.int64)
        return
    if keys.size > 256 and 0 <= keys.min() and keys.max() <= np.iinfo(np.uint16).max:
        order = np.argsort(keys.astype(np.uint16), kind="stable")
    else:
        order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    cuts = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
    for part in np.split(order, cuts):
        yield int(keys[part[0]]), part
