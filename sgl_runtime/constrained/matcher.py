"""A cursor over a compiled constraint: the state of one request's constrained generation."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


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
