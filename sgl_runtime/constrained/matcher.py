"""A cursor over a compiled constraint: the state of one request's constrained generation."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

import numpy as np

from sgl_runtime.constrained.errors import ConstraintError

if TYPE_CHECKING:
    from sgl_runtime.constrained.constraint import DFAConstraint


class Matcher(ABC):
    """Interface every constraint's cursor implements (regex/schema/choices and grammars)."""

    @abstractmethod
    def bitmask(self) -> np.ndarray:
        """int32 [ceil(vocab_size / 32)]: bit i set iff token i may come next (read-only)."""

    @abstractmethod
    def advance(self, token_id: int) -> None:
        """Consume `token_id`; ConstraintError if it is not allowed here."""

    @abstractmethod
    def is_accepting(self) -> bool:
        """The text so far satisfies the constraint."""

    @abstractmethod
    def is_terminated(self) -> bool:
        """EOS was consumed, or the text is accepting and nothing but EOS may follow."""

    @abstractmethod
    def forced_token_ids(self) -> list[int]:
        """Jump-forward tokens from here (empty if none); advancing through them is legal."""

    @abstractmethod
    def copy(self) -> "Matcher":
        """An independent cursor at the same position."""

    def set_token_budget(self, max_tokens: "int | None") -> None:
        """Tokens this cursor may still advance through (None: unlimited). Masks then keep the
        text completable to a sentence within the budget (EOS does not count)."""
        self.budget = max_tokens
        self.consumed = 0

    def remaining_tokens(self) -> "int | None":
        budget = getattr(self, "budget", None)
        return None if budget is None else budget - self.consumed


class DFAMatcher(Matcher):
    """Cursor over a DFA-backed constraint: one int of state."""

    __slots__ = ("constraint", "state", "finished", "budget", "consumed")

    def __init__(self, constraint: "DFAConstraint", state: int, finished: bool = False) -> None:
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
        return c.budget.tokens_to_accept(self.state) > remaining or \
            c.budget.tokens_to_accept(state) <= remaining - len(ids)

    def forced_string(self) -> str:
        """The forced continuation text from here ('' if none)."""
        return "" if self.finished else self.constraint.jump_forward.forced_string(self.state)

    def copy(self) -> "DFAMatcher":
        twin = DFAMatcher(self.constraint, self.state, self.finished)
        twin.budget, twin.consumed = self.budget, self.consumed
        return twin
