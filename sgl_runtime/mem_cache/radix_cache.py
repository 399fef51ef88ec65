"""Radix tree over token ids that maps cached prefixes to their KV-cache slot indices.

Ownership of KV slots: every index stored in the tree belongs to the tree until `evict`
returns it (the caller then frees it in the TokenToKVPool). `insert(key, value)` returns
`n`, the number of leading tokens of `key` that were already cached; the tree keeps its own
slots for those and stores a copy of `value[n:]`. A caller that computed KV for
`key[cached_len_before:n]` itself (its slots differ from the tree's) must free
`value[cached_len_before:n]`. In disabled mode the tree stores nothing: the caller keeps
(and must free) all of `value`.

Access times are a logical clock (one tick per match/insert, shared by every node on the
touched path), so a parent is never older than its children and eviction is exact LRU.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Optional, Sequence

import torch


class TreeNode:
    """One edge of the radix tree: a run of token ids and their KV slot indices."""

    __slots__ = ("children", "parent", "key", "value", "lock_ref", "last_access_time", "node_id")

    _ids = itertools.count()

    def __init__(self, key: list[int], value: torch.Tensor, parent: Optional[TreeNode], time: int) -> None:
        self.children: dict[int, TreeNode] = {}
        self.parent = parent
        self.key = key
        self.value = value
        self.lock_ref = 0
        self.last_access_time = time
        self.node_id = next(TreeNode._ids)

    def __repr__(self) -> str:
        return f"TreeNode(id={self.node_id}, len={len(self.key)}, lock_ref={self.lock_ref})"


class RadixCache:
    """Prefix cache: match, insert, lock (ref counts to the root) and LRU-evict token runs."""

    def __init__(self, disable: bool = False, device: str | torch.device = "cpu") -> None:
        """`device`: where empty results are created; pass the KV pool's device."""
        self.disable = disable
        self.device = torch.device(device)
        self.structure_version = 0  # bumped whenever an existing node's root path changes (a split, a reset)
        self.reset()

    # ---------------------------------------------------------------- public API

    def reset(self) -> None:
        """Drop every cached entry (the caller is responsible for the KV pool)."""
        self._clock = 0
        self.structure_version += 1
        self.root_node = TreeNode([], self._empty(), None, 0)
        self._evictable_size = 0
        self._protected_size = 0

    def match_prefix(self, key: Sequence[int]) -> tuple[torch.Tensor, TreeNode]:
        """KV indices of the longest cached prefix of `key`, and the node where it ends.

        A match ending inside a node splits that node so the returned node ends exactly
        at the match. Every node on the path is marked as used now (LRU).
        """
        key = _as_token_list(key)
        if self.disable or not key:
            return self._empty(), self.root_node
        path, _ = self._walk(key, self._tick())
        if not path:
            return self._empty(), self.root_node
        return torch.cat([n.value for n in path]), path[-1]

    def insert(self, key: Sequence[int], value: torch.Tensor) -> int:
        """Cache `key` -> `value`; return how many leading tokens were already present."""
        key = _as_token_list(key)
        if not isinstance(value, torch.Tensor) or value.dim() != 1:
            raise TypeError(f"insert: value must be a 1-D tensor of KV indices, got {type(value).__name__}")
        if len(key) != len(value):
            raise ValueError(f"insert: key has {len(key)} tokens but value has {len(value)} indices")
        if self.disable or not key:
            return 0
        time = self._tick()
        path, pos = self._walk(key, time)
        node = path[-1] if path else self.root_node
        if pos < len(key):
            self._add_leaf(node, key[pos:], value[pos:], time)
        return pos

    def inc_lock_ref(self, node: TreeNode) -> int:
        """Lock `node` and its ancestors; return the change in evictable size (<= 0)."""
        delta = 0
        for n in self._path_to_root(node):
            if n.lock_ref == 0:
                self._evictable_size -= len(n.key)
                self._protected_size += len(n.key)
                delta -= len(n.key)
            n.lock_ref += 1
        return delta

    def dec_lock_ref(self, node: TreeNode) -> int:
        """Unlock `node` and its ancestors; return the change in evictable size (>= 0)."""
        path = self._path_to_root(node)
        if path and path[0].lock_ref <= 0:
            raise ValueError(f"dec_lock_ref on an unlocked node {node!r}")
        delta = 0
        for n in path:
            if n.lock_ref == 1:
                self._evictable_size += len(n.key)
                self._protected_size -= len(n.key)
                delta += len(n.key)
            n.lock_ref -= 1
        return delta

    def evict(self, num_tokens: int) -> torch.Tensor:
        """Evict least-recently-used unlocked leaves until >= `num_tokens` tokens are freed
        or nothing evictable remains; return the freed KV indices (caller frees them)."""
        if self.disable or num_tokens <= 0:
            return self._empty()
        heap = [_heap_entry(leaf) for leaf in self._collect_leaves() if leaf.lock_ref == 0]
        heapq.heapify(heap)
        freed: list[torch.Tensor] = []
        num_freed = 0
        while num_freed < num_tokens and heap:
            leaf = heapq.heappop(heap)[2]
            freed.append(leaf.value)
            num_freed += len(leaf.key)
            parent = self._remove_leaf(leaf)
            if parent is not self.root_node and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, _heap_entry(parent))
        return torch.cat(freed) if freed else self._empty()

    def evictable_size(self) -> int:
        """Tokens held by unlocked nodes (reclaimable by `evict`)."""
        return self._evictable_size

    def protected_size(self) -> int:
        """Tokens held by locked nodes."""
        return self._protected_size

    def total_size(self) -> int:
        """All tokens held by the tree."""
        return self._evictable_size + self._protected_size

    def check_integrity(self) -> None:
        """Raise AssertionError naming the first broken invariant of the tree."""
        root = self.root_node
        assert root.parent is None and len(root.key) == 0 and len(root.value) == 0, "root must be empty"
        evictable = protected = 0
        all_values = []
        for node in self._iter_nodes():
            for first, child in node.children.items():
                _check_child(node, first, child)
            if node is root:
                continue
            locked_below = sum(c.lock_ref for c in node.children.values())
            assert node.lock_ref >= locked_below, f"{node!r}: lock_ref < children's total {locked_below}"
            assert node.last_access_time >= max((c.last_access_time for c in node.children.values()), default=0), (
                f"{node!r}: a child was accessed after its parent"
            )
            all_values.append(node.value)
            if node.lock_ref == 0:
                evictable += len(node.key)
            else:
                protected += len(node.key)
        assert evictable == self._evictable_size, f"evictable_size {self._evictable_size} != tree's {evictable}"
        assert protected == self._protected_size, f"protected_size {self._protected_size} != tree's {protected}"
        if all_values:
            values = torch.cat(all_values)
            assert len(torch.unique(values)) == len(values), "a KV index is stored twice in the tree"
        if self.disable:
            assert not root.children, "disabled cache must stay empty"

    def pretty_print(self) -> str:
        """A readable dump of the tree (for debugging)."""
        lines = []
        stack = [(self.root_node, 0)]
        while stack:
            node, depth = stack.pop()
            lines.append(
                f"{'  ' * depth}{node.key[:8]}{'...' if len(node.key) > 8 else ''} "
                f"len={len(node.key)} lock={node.lock_ref} t={node.last_access_time}"
            )
            stack.extend((child, depth + 1) for child in node.children.values())
        return "\n".join(lines)

    # ---------------------------------------------------------------- private helpers

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _empty(self) -> torch.Tensor:
        return torch.empty(0, dtype=torch.int64, device=self.device)

    def _path_to_root(self, node: TreeNode) -> list[TreeNode]:
        """`node` and its ancestors below the root; ValueError if `node` left the tree."""
        path = []
        while node is not self.root_node:
            if node is None:
                raise ValueError("lock on a node that is no longer in the tree (evicted or reset)")
            path.append(node)
            node = node.parent
        return path

    def _walk(self, key: list[int], time: int) -> tuple[list[TreeNode], int]:
        """Follow `key` down the tree, splitting the node where the match ends and marking each
        node on the path as used at `time`; returns the path (root excluded) and the matched length."""
        node, path, pos = self.root_node, [], 0
        while pos < len(key) and key[pos] in node.children:
            child = node.children[key[pos]]
            shared = _common_prefix_len(child.key, key, pos)
            if shared < len(child.key):
                child = self._split(child, shared)
            child.last_access_time = time
            path.append(child)
            node, pos = child, pos + shared
        return path, pos

    def _split(self, child: TreeNode, split_len: int) -> TreeNode:
        """Cut `child` after `split_len` tokens; return the new upper node (child keeps the rest)."""
        parent = child.parent
        self.structure_version += 1
        upper = TreeNode(child.key[:split_len], child.value[:split_len], parent, child.last_access_time)
        upper.lock_ref = child.lock_ref
        upper.children = {child.key[split_len]: child}
        parent.children[child.key[0]] = upper
        child.parent = upper
        child.key = child.key[split_len:]
        child.value = child.value[split_len:]
        return upper

    def _add_leaf(self, parent: TreeNode, key: list[int], value: torch.Tensor, time: int) -> None:
        leaf_value = value.to(dtype=torch.int64, copy=True)  # stays on the caller's device
        parent.children[key[0]] = TreeNode(key, leaf_value, parent, time)
        self._evictable_size += len(key)

    def _remove_leaf(self, leaf: TreeNode) -> TreeNode:
        parent = leaf.parent
        del parent.children[leaf.key[0]]
        leaf.parent = None
        self._evictable_size -= len(leaf.key)
        return parent

    def _iter_nodes(self):
        stack = [self.root_node]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def _collect_leaves(self) -> list[TreeNode]:
        return [n for n in self._iter_nodes() if not n.children and n is not self.root_node]


def _as_token_list(key: Sequence[int] | torch.Tensor) -> list[int]:
    return key.tolist() if isinstance(key, torch.Tensor) else list(key)


def _common_prefix_len(node_key: list[int], key: list[int], start: int) -> int:
    """Length of the common prefix of `node_key` and `key[start:]`."""
    limit = min(len(node_key), len(key) - start)
    if node_key[:limit] == key[start : start + limit]:  # the common case, compared in C
        return limit
    i = 0
    while i < limit and node_key[i] == key[start + i]:
        i += 1
    return i


def _heap_entry(node: TreeNode) -> tuple[int, int, TreeNode]:
    return (node.last_access_time, node.node_id, node)


def _check_child(parent: TreeNode, first: int, child: TreeNode) -> None:
    name = repr(child)
    assert child.parent is parent, f"{name}: parent pointer does not match the tree"
    assert len(child.key) > 0, f"{name}: empty non-root node"
    assert child.key[0] == first, f"{name}: key starts with {child.key[0]}, child map says {first}"
    assert isinstance(child.value, torch.Tensor) and child.value.dtype == torch.int64, f"{name}: value not int64"
    assert child.value.dim() == 1 and len(child.value) == len(child.key), f"{name}: value length != key length"
    assert child.lock_ref >= 0, f"{name}: negative lock_ref"
