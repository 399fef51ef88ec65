"""Device tables of DFA-constraint states: packed mask rows gathered by slot, and token -> next-state rows.

A decode step's masks for regex / JSON-Schema / choices requests are rows of one device tensor
(`masks` [capacity, W] int32, shared by every constraint): the host maps each request's
(constraint, DFA state) to a slot, copies a row in only on the state's first visit, and the
step gathers the batch's rows with one index_select, so no [B, W] host buffer is built or
copied per step. Slots are reused least recently used first under a byte budget; a batch that
needs more distinct states than fit gets None for the rest (those rows use host masks). A
constraint's slots are freed when the constraint object goes (the constraint cache dropped it
and no request holds it). On demand (`next_states`) the table also keeps, per visited state, a
dense int32 row token -> next state (NO_TRANSITION where the token is not allowed, FINISHED for
EOS), under its own budget, so states can be advanced on the device after sampling.

Written in torch only: on CPU the same code runs on CPU tensors.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Optional, Sequence

import numpy as np
import torch

from sgl_runtime.constrained.constraint import FINISHED  # a finished cursor's state key; the next state after EOS

NO_TRANSITION = -1  # next state of a token the state does not allow
INITIAL_SLOTS = 64


class _SlotStore:
    """LRU slots of fixed-width rows in one device tensor that grows (doubling) up to `capacity`."""

    def __init__(self, width: int, dtype: torch.dtype, fill: int, capacity: int, device: torch.device) -> None:
        self.width, self.dtype, self.fill, self.capacity, self.device = width, dtype, fill, capacity, device
        self.rows = torch.empty((0, width), dtype=dtype, device=device)
        self.slot_of: OrderedDict[tuple[int, int], int] = OrderedDict()  # (constraint id, state) -> slot
        self.free: list[int] = []

    def lookup(self, key: tuple[int, int], pinned: set[int]) -> tuple[Optional[int], bool]:
        """(slot, fresh): the key's slot (fresh = its row must be written), None when every slot is
        pinned by the current batch."""
        slot = self.slot_of.get(key)
        if slot is not None:
            self.slot_of.move_to_end(key)
            return slot, False
        slot = self._take(pinned)
        if slot is not None:
            self.slot_of[key] = slot
        return slot, slot is not None

    def write(self, slot: int, row: torch.Tensor) -> None:
        if self.device.type == "cuda":
            row = row.pin_memory()  # an async copy in stream order, after every gather already queued
        self.rows[slot].copy_(row, non_blocking=True)

    def drop(self, owner: int) -> None:
        for key in [k for k in self.slot_of if k[0] == owner]:
            self.free.append(self.slot_of.pop(key))

    def nbytes(self) -> int:
        return self.rows.numel() * self.rows.element_size()

    def _take(self, pinned: set[int]) -> Optional[int]:
        if self.free:
            return self.free.pop()
        used = len(self.slot_of)
        if used < self.rows.shape[0]:
            return used
        if self.rows.shape[0] < self.capacity:
            grown = min(self.capacity, max(INITIAL_SLOTS, 2 * self.rows.shape[0]))
            extra = torch.full(
                (grown - self.rows.shape[0], self.width), self.fill, dtype=self.dtype, device=self.device
            )
            self.rows = torch.cat([self.rows, extra])
            return used
        for key, slot in self.slot_of.items():  # least recently used first
            if slot not in pinned:
                del self.slot_of[key]
                return slot
        return None


class DeviceMaskTable:
    """Mask rows (and on demand next-state rows) of visited DFA states, on one device, for one logits width."""

    def __init__(
        self, device: "torch.device | str", width: int, budget_bytes: int, transition_budget_bytes: int = 0
    ) -> None:
        self.device = torch.device(device)
        self.width = width  # int32 words per mask row: ceil(logits vocab / 32)
        self._masks = _SlotStore(width, torch.int32, 0, max(1, budget_bytes // (4 * width)), self.device)
        self._transition_budget = transition_budget_bytes
        self._next: Optional[_SlotStore] = None
        self._watched: dict[int, weakref.finalize] = {}
        self._dead: list[int] = []  # constraint ids gone since the last call (finalizers may run on any thread)
        self._lock = threading.Lock()
        self.first_visits = 0

    # ---- public -----------------------------------------------------------------------------

    def slots(self, constraints: Sequence, states: Sequence[Optional[int]]) -> list[Optional[int]]:
        """The slot of each (constraint, state) (None where the state is None or no slot is free),
        writing the rows of states seen for the first time."""
        with self._lock:
            self._reap()
            pinned: set[int] = set()
            out: list[Optional[int]] = []
            for constraint, state in zip(constraints, states):
                if state is None:
                    out.append(None)
                    continue
                slot, fresh = self._masks.lookup(self._key(constraint, state), pinned)
                if slot is not None:
                    pinned.add(slot)
                    if fresh:
                        self._masks.write(slot, self._mask_row(constraint, state))
                        self.first_visits += 1
                out.append(slot)
            return out

    def gather(self, slots: Sequence[int]) -> torch.Tensor:
        """int32 [len(slots), W] on the device: the mask rows of `slots` (from `slots()`)."""
        index = _index(slots, self.device)
        return self._masks.rows.index_select(0, index)

    def next_states(self, constraint, states: Sequence[int], token_ids: torch.Tensor) -> torch.Tensor:
        """int64 [B] on the device: the state after token_ids[i] (a device tensor) from states[i] of
        `constraint` (FINISHED after EOS, NO_TRANSITION where the token is not allowed). Raises if the
        batch's distinct states do not fit the transition budget."""
        with self._lock:
            self._reap()
            store = self._next_store(constraint)
            pinned: set[int] = set()
            slots = []
            for state in states:
                slot, fresh = store.lookup(self._key(constraint, state), pinned)
                if slot is None:
                    raise RuntimeError(f"{len(set(states))} states do not fit the transition table")
                if fresh:
                    store.write(slot, self._next_row(constraint, state, store.width))
                pinned.add(slot)
                slots.append(slot)
        vocab = store.width
        tokens = token_ids.to(self.device, torch.int64)
        inside = (tokens >= 0) & (tokens < vocab)
        picked = store.rows[_index(slots, self.device), tokens.clamp(0, vocab - 1)].to(torch.int64)
        return torch.where(inside, picked, torch.full_like(picked, NO_TRANSITION))

    def num_cached_states(self) -> int:
        return len(self._masks.slot_of)

    def nbytes(self) -> int:
        return self._masks.nbytes() + (self._next.nbytes() if self._next is not None else 0)

    # ---- private ----------------------------------------------------------------------------

    def _key(self, constraint, state: int) -> tuple[int, int]:
        owner = id(constraint)
        if owner not in self._watched:
            self._watched[owner] = weakref.finalize(constraint, self._dead.append, owner)
        return owner, state

    def _reap(self) -> None:
        while self._dead:
            owner = self._dead.pop()
            self._watched.pop(owner, None)
            self._masks.drop(owner)
            if self._next is not None:
                self._next.drop(owner)

    def _mask_row(self, constraint, state: int) -> torch.Tensor:
        bits = constraint.eos_only_mask if state == FINISHED else constraint.index.bitmask(state)
        row = np.zeros(self.width, dtype=np.int32)  # ids past the constraint's vocabulary: never allowed
        n = min(self.width, bits.shape[0])
        row[:n] = bits[:n]
        return torch.from_numpy(row)

    def _next_store(self, constraint) -> _SlotStore:
        vocab = constraint.vocabulary.size
        if self._next is None or self._next.width != vocab:
            capacity = max(1, self._transition_budget // (4 * vocab))
            self._next = _SlotStore(vocab, torch.int32, NO_TRANSITION, capacity, self.device)
        return self._next

    @staticmethod
    def _next_row(constraint, state: int, vocab: int) -> torch.Tensor:
        row = np.full(vocab, NO_TRANSITION, dtype=np.int32)
        eos = list(constraint.vocabulary.eos_token_ids)
        if state == FINISHED:
            row[eos] = FINISHED
            return torch.from_numpy(row)
        ids, finals = constraint.index.allowed(state)
        row[ids] = finals
        entry = constraint.index.entry(state)
        if eos and (bool(constraint.dfa.accepting[state]) or entry.num_allowed == 0):
            row[eos] = FINISHED
        return torch.from_numpy(row)


def _index(slots: Sequence[int], device: torch.device) -> torch.Tensor:
    host = torch.tensor(slots, dtype=torch.int64, pin_memory=device.type == "cuda")
    return host.to(device, non_blocking=True)
