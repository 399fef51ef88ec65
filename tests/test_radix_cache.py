"""RadixCache: unit tests for each operation and a hypothesis state machine against a naive model."""

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sgl_runtime.mem_cache.radix_cache import RadixCache


def idx(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def test_match_splits_node_on_partial_match():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4], idx(10, 11, 12, 13))
    values, node = tree.match_prefix([1, 2, 9])
    assert values.tolist() == [10, 11]
    assert node.key == [1, 2] and node.value.tolist() == [10, 11]
    assert list(node.children) == [3]
    assert node.children[3].key == [3, 4] and node.children[3].value.tolist() == [12, 13]
    assert tree.total_size() == tree.evictable_size() == 4
    tree.check_integrity()
    assert tree.match_prefix([1, 2, 3, 4, 5])[0].tolist() == [10, 11, 12, 13]
    assert tree.match_prefix([7])[0].numel() == 0 and tree.match_prefix([7])[1] is tree.root_node


def test_insert_returns_length_already_present():
    tree = RadixCache()
    assert tree.insert([1, 2, 3], idx(0, 1, 2)) == 0
    assert tree.insert([1, 2, 3, 4, 5], idx(5, 6, 7, 3, 4)) == 3
    assert tree.insert([1, 2, 7], idx(8, 9, 10)) == 2
    assert tree.insert([1, 2, 3], idx(11, 12, 13)) == 3
    assert tree.insert([1], idx(14)) == 1
    # The tree keeps its own slots for the part that was already present.
    assert tree.match_prefix([1, 2, 3, 4, 5])[0].tolist() == [0, 1, 2, 3, 4]
    assert tree.match_prefix([1, 2, 7])[0].tolist() == [0, 1, 10]
    assert tree.total_size() == 6
    tree.check_integrity()


def test_insert_stores_a_copy_and_accepts_tensor_keys():
    tree = RadixCache()
    value = idx(4, 5, 6)
    tree.insert(torch.tensor([1, 2, 3]), value)
    value[:] = 0
    assert tree.match_prefix(torch.tensor([1, 2, 3]))[0].tolist() == [4, 5, 6]


def test_insert_rejects_mismatched_value():
    tree = RadixCache()
    with pytest.raises(ValueError, match="value has 2"):
        tree.insert([1, 2, 3], idx(0, 1))
    with pytest.raises(TypeError, match="1-D tensor"):
        tree.insert([1, 2], [0, 1])


def test_lock_prevents_eviction_and_unlock_releases():
    tree = RadixCache()
    tree.insert([1, 2, 3], idx(0, 1, 2))
    tree.insert([1, 2, 4, 5], idx(0, 1, 3, 4))
    _, node = tree.match_prefix([1, 2, 3])
    assert tree.inc_lock_ref(node) == -3
    assert tree.inc_lock_ref(node) == 0
    assert (tree.evictable_size(), tree.protected_size()) == (2, 3)
    assert sorted(tree.evict(100).tolist()) == [3, 4]
    assert tree.match_prefix([1, 2, 3])[0].tolist() == [0, 1, 2]
    assert tree.evict(100).numel() == 0
    assert tree.dec_lock_ref(node) == 0
    assert tree.dec_lock_ref(node) == 3
    assert (tree.evictable_size(), tree.protected_size()) == (3, 0)
    with pytest.raises(ValueError, match="unlocked"):
        tree.dec_lock_ref(node)
    tree.check_integrity()


def test_locking_a_node_that_left_the_tree_is_an_error():
    tree = RadixCache()
    tree.insert([1, 2], idx(0, 1))
    _, node = tree.match_prefix([1, 2])
    tree.evict(2)
    with pytest.raises(ValueError, match="no longer in the tree"):
        tree.inc_lock_ref(node)
    tree.insert([1, 2], idx(0, 1))
    _, node = tree.match_prefix([1, 2])
    tree.reset()
    with pytest.raises(ValueError, match="no longer in the tree"):
        tree.inc_lock_ref(node)
    tree.check_integrity()


def test_evict_is_least_recently_used_first():
    tree = RadixCache()
    for token in (1, 2, 3):
        tree.insert([token], idx(token * 10))
    tree.match_prefix([1])
    assert tree.evict(1).tolist() == [20]
    tree.insert([3], idx(99))  # touching through insert counts as a use too
    assert tree.evict(1).tolist() == [10]
    assert tree.evict(1).tolist() == [30]
    assert tree.total_size() == 0


def test_evict_continues_upward_when_parents_become_leaves():
    tree = RadixCache()
    tree.insert([1, 2, 3], idx(0, 1, 2))
    tree.insert([1, 2, 4], idx(0, 1, 3))
    tree.insert([9], idx(9))
    tree.match_prefix([9])  # [9] is now the most recent
    freed = tree.evict(3)
    assert sorted(freed.tolist()) == [0, 1, 2, 3]  # both leaves, then their parent
    assert tree.match_prefix([9])[0].tolist() == [9]
    assert tree.total_size() == 1
    tree.check_integrity()


def test_evict_stops_once_enough_is_freed():
    tree = RadixCache()
    for token in range(5):
        tree.insert([token, token], idx(2 * token, 2 * token + 1))
    assert len(tree.evict(3)) == 4
    assert tree.evictable_size() == 6


def test_disabled_mode_stores_nothing():
    tree = RadixCache(disable=True)
    assert tree.insert([1, 2, 3], idx(0, 1, 2)) == 0
    values, node = tree.match_prefix([1, 2, 3])
    assert values.numel() == 0 and node is tree.root_node
    assert tree.inc_lock_ref(node) == 0 and tree.dec_lock_ref(node) == 0
    assert tree.evict(10).numel() == 0
    assert tree.total_size() == tree.evictable_size() == tree.protected_size() == 0
    tree.check_integrity()


def test_reset_empties_the_tree():
    tree = RadixCache()
    tree.insert([1, 2], idx(0, 1))
    tree.reset()
    assert tree.total_size() == 0 and tree.match_prefix([1, 2])[0].numel() == 0
    tree.check_integrity()


def test_check_integrity_detects_corruption():
    tree = RadixCache()
    tree.insert([1, 2, 3], idx(0, 1, 2))
    tree.match_prefix([1, 2])
    tree._evictable_size += 1
    with pytest.raises(AssertionError, match="evictable_size"):
        tree.check_integrity()
    tree._evictable_size -= 1
    upper = tree.root_node.children[1]
    upper.children[3].value = idx(5, 6)
    with pytest.raises(AssertionError, match="value length"):
        tree.check_integrity()
    upper.children[3].value = idx(2)
    upper.children[3].lock_ref = 1
    with pytest.raises(AssertionError, match="lock_ref"):
        tree.check_integrity()


# ---------------------------------------------------------------- property-based model test

POOL_SIZE = 48
TOKENS = st.lists(st.integers(0, 2), min_size=1, max_size=7)


class RadixCacheMachine(RuleBasedStateMachine):
    """The naive model maps every cached prefix (a tuple) to the KV slot of its last token,
    plus a logical access time; locks are lists of locked prefixes."""

    def __init__(self):
        super().__init__()
        self.tree = RadixCache()
        self.slots: dict[tuple, int] = {}
        self.times: dict[tuple, int] = {}
        self.clock = 0
        self.free = set(range(POOL_SIZE))
        self.locks: list[tuple] = []  # (node, locked prefix tuple)

    # -- model helpers
    def _touch(self, seq):
        self.clock += 1
        for i in range(1, len(seq) + 1):
            self.times[tuple(seq[:i])] = self.clock

    def _model_match_len(self, seq) -> int:
        m = 0
        while m < len(seq) and tuple(seq[: m + 1]) in self.slots:
            m += 1
        return m

    def _locked_prefixes(self) -> set:
        return {prefix[:i] for _, prefix in self.locks for i in range(1, len(prefix) + 1)}

    def _release(self, indices: list[int]):
        for slot in indices:
            assert slot not in self.free, f"slot {slot} freed twice"
            self.free.add(slot)

    def _alloc(self, n: int) -> list[int] | None:
        if len(self.free) < n:
            self._evict(n - len(self.free))
        if len(self.free) < n:
            return None
        return [self.free.pop() for _ in range(n)]

    # -- rules
    @rule(seq=TOKENS)
    def match(self, seq):
        values, node = self.tree.match_prefix(seq)
        m = self._model_match_len(seq)
        assert values.tolist() == [self.slots[tuple(seq[:i])] for i in range(1, m + 1)]
        self._touch(seq[:m])

    @rule(seq=TOKENS, reuse_match=st.booleans())
    def insert(self, seq, reuse_match):
        prefix = self.tree.match_prefix(seq)[0].tolist() if reuse_match else []
        self._touch(seq[: len(prefix)])
        fresh = self._alloc(len(seq) - len(prefix))
        if fresh is None:
            return
        value = torch.tensor(prefix + fresh, dtype=torch.int64)
        expected = self._model_match_len(seq)
        assert self.tree.insert(seq, value) == expected
        self._release(value[len(prefix) : expected].tolist())  # our duplicates of cached slots
        for i in range(expected, len(seq)):
            self.slots[tuple(seq[: i + 1])] = int(value[i])
        self._touch(seq)

    @rule(seq=TOKENS)
    def lock(self, seq):
        values, node = self.tree.match_prefix(seq)
        prefix = tuple(seq[: len(values)])
        self._touch(prefix)
        before = self._locked_prefixes()
        newly = {prefix[:i] for i in range(1, len(prefix) + 1)} - before
        assert self.tree.inc_lock_ref(node) == -len(newly)
        self.locks.append((node, prefix))

    @precondition(lambda self: self.locks)
    @rule(data=st.data())
    def unlock(self, data):
        i = data.draw(st.integers(0, len(self.locks) - 1))
        before = self._locked_prefixes()
        node, _ = self.locks.pop(i)
        released = before - self._locked_prefixes()
        assert self.tree.dec_lock_ref(node) == len(released)

    @rule(n=st.integers(0, 12))
    def evict(self, n):
        self._evict(n)

    def _evict(self, n):
        evictable_before = self.tree.evictable_size()
        freed = self.tree.evict(n).tolist()
        assert len(set(freed)) == len(freed), "evict returned a slot twice"
        owner = {slot: prefix for prefix, slot in self.slots.items()}
        evicted = {owner[slot] for slot in freed}  # KeyError: freed a slot the tree never owned
        assert not evicted & self._locked_prefixes(), "evicted a locked prefix"
        if evictable_before < n:
            assert len(freed) == evictable_before, "evict left evictable tokens behind"
        else:
            assert len(freed) >= n, "evict freed fewer tokens than asked"
        if evicted:
            newest_evicted = max(self.times[p] for p in evicted)
            for prefix in evicted:
                del self.slots[prefix]
            locked = self._locked_prefixes()
            parents = {p[:-1] for p in self.slots}
            leaves = [p for p in self.slots if p not in parents and p not in locked]
            assert all(self.times[p] >= newest_evicted for p in leaves), "eviction was not LRU"
        self._release(freed)

    # -- invariants
    @invariant()
    def tree_matches_model(self):
        self.tree.check_integrity()
        locked = self._locked_prefixes()
        assert all(p[:-1] in self.slots for p in self.slots if len(p) > 1), "model not prefix-closed"
        assert locked <= self.slots.keys(), "a locked prefix was lost"
        assert self.tree.protected_size() == len(locked)
        assert self.tree.evictable_size() == len(self.slots) - len(locked)
        owned = set(self.slots.values())
        assert not owned & self.free and len(owned) + len(self.free) == POOL_SIZE, "a KV slot was lost"

    def teardown(self):
        for node, _ in self.locks:
            self.tree.dec_lock_ref(node)
        self._release(self.tree.evict(POOL_SIZE + 1).tolist())
        assert len(self.free) == POOL_SIZE and self.tree.total_size() == 0


TestRadixCacheMachine = RadixCacheMachine.TestCase
TestRadixCacheMachine.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)
