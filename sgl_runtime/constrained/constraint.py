"""A compiled constraint: the language it accepts plus the token index over one vocabulary."""

from __future__ import annotations

from abc import ABC, abstractmethod
from functools import cached_property

import numpy as np

from sgl_runtime.constrained.budget import DFABudget
from sgl_runtime.constrained.byte_dfa import ByteDFA
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.jump_forward import JumpForward
from sgl_runtime.constrained.matcher import Matcher
from sgl_runtime.constrained.token_index import TokenIndex
from sgl_runtime.constrained.vocabulary import Vocabulary

FINISHED = -2  # DFAMatcher.table_state() once EOS is consumed (only EOS may follow)


class Constraint(ABC):
    """Interface every compiled constraint implements (regex/schema/choices and grammars)."""

    vocabulary: Vocabulary

    @abstractmethod
    def accepts(self, text: str) -> bool:
        """Does the whole of `text` satisfy the constraint."""

    @abstractmethod
    def matcher(self) -> Matcher:
        """A cursor at the start."""


class DFAConstraint(Constraint):
    """A regular constraint (regex, JSON Schema, choices) as a byte DFA + lazy token index."""

    def __init__(self, dfa: ByteDFA, vocabulary: Vocabulary, description: str = "") -> None:
        self.dfa = dfa
        self.vocabulary = vocabulary
        self.description = description
        self.index = TokenIndex(dfa, vocabulary)
        self.jump_forward = JumpForward(dfa, vocabulary, self.index)
        self.budget = DFABudget(dfa, vocabulary, self.index)

    def accepts(self, text: str) -> bool:
        return self.dfa.accepts(text)

    def matcher(self) -> DFAMatcher:
        return DFAMatcher(self, self.dfa.initial)

    @cached_property
    def eos_only_mask(self) -> np.ndarray:
        mask = np.zeros(self.vocabulary.num_words, dtype=np.int32)
        for i in self.vocabulary.eos_token_ids:
            mask[i // 32] |= np.int32(np.uint32(1 << (i % 32)).view(np.int32))
        mask.flags.writeable = False
        return mask

    def __repr__(self) -> str:
        return f"DFAConstraint({self.description!r}, states={self.dfa.n_states})"


class DFAMatcher(Matcher):
    """Cursor over a DFA-backed constraint: one int of state."""

    __slots__ = ("constraint", "state", "finished", "budget", "consumed")

    def __init__(self, constraint: DFAConstraint, state: int, finished: bool = False) -> None:
        self.constraint = constraint
        self.state = state
        self.finished = finished
        self.budget: "int | None" = None
        self.consumed = 0

    def bitmask(self) -> np.ndarray:
        if self.finished:
            return self.constraint.eos_only_mask
        if self.budget is not None:
            restricted = self.constraint.budget.mask(self.state, self.budget - self.consumed)
            if restricted is not None:
                return restricted
        return self.constraint.index.bitmask(self.state)

    def table_state(self) -> "int | None":
        """The key of this cursor's mask in a DeviceMaskTable: its DFA state, FINISHED once EOS is
        consumed, None while the token budget restricts the mask (a host mask then)."""
        if self.finished:
            return FINISHED
        if self.budget is not None and self.constraint.budget.mask(self.state, self.budget - self.consumed) is not None:
            return None
        return self.state

    def advance(self, token_id: int) -> None:
        c = self.constraint
        if self.finished:
            raise ConstraintError(f"token {token_id} after the constraint's end (EOS already consumed)")
        if token_id in c.vocabulary.eos_token_ids:
            if not self.is_accepting() and c.index.entry(self.state).num_allowed > 0:
                raise ConstraintError(f"EOS token {token_id} before the constraint is satisfied")
            self.finished = True
            return
        data = c.vocabulary.token_bytes[token_id] if 0 <= token_id < c.vocabulary.size else None
        nxt = c.dfa.walk(self.state, data) if data else -1
        if nxt < 0:
            raise ConstraintError(f"token {token_id} ({data!r}) is not allowed by the constraint here")
        self.state = nxt
        self.consumed += 1

    def is_accepting(self) -> bool:
        return self.finished or bool(self.constraint.dfa.accepting[self.state])

    def is_terminated(self) -> bool:
        if self.finished:
            return True
        return self.is_accepting() and self.constraint.index.entry(self.state).num_allowed == 0

    def forced_token_ids(self) -> list[int]:
        if self.finished:
            return []
        ids = self.constraint.jump_forward.forced_token_ids(self.state)
        if ids and self.budget is not None and not self._forced_fit(ids):
            return []  # the budget masks spell the forced text in fewer tokens
        return ids

    def _forced_fit(self, ids: list[int]) -> bool:
        """Whether a sentence still fits the budget after appending `ids`."""
        c = self.constraint
        state = self.state
        for i in ids:
            state = c.dfa.walk(state, c.vocabulary.token_bytes[i])
        remaining = self.budget - self.consumed
        return c.budget.tokens_to_accept(self.state) > remaining or c.budget.tokens_to_accept(state) <= remaining - len(
            ids
        )

    def forced_string(self) -> str:
        """The forced continuation text from here ('' if none)."""
        return "" if self.finished else self.constraint.jump_forward.forced_string(self.state)

    def copy(self) -> "DFAMatcher":
        twin = DFAMatcher(self.constraint, self.state, self.finished)
        twin.budget, twin.consumed = self.budget, self.consumed
        return twin
