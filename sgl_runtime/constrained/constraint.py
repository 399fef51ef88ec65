"""A compiled constraint: the language it accepts plus the token index over one vocabulary."""

from __future__ import annotations

from abc import ABC, abstractmethod
from functools import cached_property

import numpy as np

from sgl_runtime.constrained.budget import DFABudget
from sgl_runtime.constrained.byte_dfa import ByteDFA
from sgl_runtime.constrained.jump_forward import JumpForward
from sgl_runtime.constrained.matcher import DFAMatcher, Matcher
from sgl_runtime.constrained.token_index import TokenIndex
from sgl_runtime.constrained.vocabulary import Vocabulary


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
