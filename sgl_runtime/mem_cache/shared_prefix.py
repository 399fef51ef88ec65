"""Which requests of a decode batch share a cached prefix: the groups cascade attention reads once.

A running request's row in req_to_token starts with the KV slots of its radix-cache path (root to
its locked `last_node`); two requests whose paths share the nodes down to depth P hold the same
slots in [0, P). So the groups come from the tree on the host, with no look at the device table.
Nested sharing (a short common preamble, then longer per-topic prompts) is resolved by keeping, at
each branching node, whichever saves more key reads: one group at this depth, or the best groups of
its branches.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Optional, Sequence

from sgl_runtime.mem_cache.radix_cache import RadixCache, TreeNode

MIN_SHARED_PREFIX = 32  # tokens; shorter shared prefixes save too little to pay for a group

Groups = list[tuple[int, list[int]]]


class SharedPrefixPlanner:
    """`shared_prefix_groups` for one radix tree, remembered between decode steps: a locked node's path
    changes only when the tree splits a node, so while the tree's structure_version stands, the same
    batch gets the same groups back and new requests reuse the paths already walked."""

    def __init__(self, tree_cache: RadixCache, min_prefix: int = MIN_SHARED_PREFIX) -> None:
        self.tree_cache = tree_cache
        self.min_prefix = min_prefix
        self._version = -1
        self._paths: dict[int, list[tuple[int, int]]] = {}
        self._last: tuple[tuple[int, ...], Groups] = ((), [])

    def groups(self, last_nodes: Sequence[Optional[TreeNode]]) -> Groups:
        """As `shared_prefix_groups(last_nodes)`."""
        if self.tree_cache.structure_version != self._version:
            self._version = self.tree_cache.structure_version
            self._paths.clear()
            self._last = ((), [])
        key = tuple(-1 if n is None else n.node_id for n in last_nodes)
        if key != self._last[0]:
            paths = [self._path(n) for n in last_nodes]
            self._last = (key, _best([i for i, p in enumerate(paths) if p], 0, paths, self.min_prefix)[1])
        return [(p, list(m)) for p, m in self._last[1]]

    def _path(self, node: Optional[TreeNode]) -> list[tuple[int, int]]:
        if node is None:
            return []
        path = self._paths.get(node.node_id)
        if path is None:
            path = self._paths[node.node_id] = _path(node)
        return path


def shared_prefix_groups(
    last_nodes: Sequence[Optional[TreeNode]], min_prefix: int = MIN_SHARED_PREFIX
) -> list[tuple[int, list[int]]]:
    """[(prefix_len, batch indices)] for groups of two or more requests sharing at least min_prefix
    cached tokens; `last_nodes[i]` is request i's locked radix node (None: nothing locked). A request
    is in one group at most, and every member's cached path is at least prefix_len long."""
    paths = [_path(node) for node in last_nodes]
    _, groups = _best([i for i, p in enumerate(paths) if p], 0, paths, min_prefix)
    return groups


def _path(node: Optional[TreeNode]) -> list[tuple[int, int]]:
    """(node id, cumulative length) from the root's child down to `node`."""
    nodes = []
    while node is not None and node.parent is not None:
        nodes.append(node)
        node = node.parent
    out, depth = [], 0
    for n in reversed(nodes):
        depth += len(n.key)
        out.append((n.node_id, depth))
    return out


def _best(
    members: list[int], level: int, paths: list[list[tuple[int, int]]], min_prefix: int
) -> tuple[int, list[tuple[int, list[int]]]]:
    """(keys saved, groups) for `members`, who share their paths' first `level` nodes."""
    if len(members) < 2:
        return 0, []
    while all(len(paths[i]) > level for i in members) and len({paths[i][level][0] for i in members}) == 1:
        level += 1  # every member goes on through the same node
    depth = paths[members[0]][level - 1][1] if level else 0
    branches: dict[int, list[int]] = defaultdict(list)
    for i in members:
        if len(paths[i]) > level:
            branches[paths[i][level][0]].append(i)
    saved, groups = 0, []
    for branch in branches.values():
        if len(branch) < 2:
            continue
        branch_saved, branch_groups = _best(branch, level + 1, paths, min_prefix)
        saved += branch_saved
        groups += branch_groups
    own = (len(members) - 1) * depth if depth >= min_prefix else 0
    if own > saved:
        return own, [(depth, members)]
    return saved, groups
