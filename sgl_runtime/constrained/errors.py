"""The one error every constraint compiler and matcher raises on bad input or a broken bound."""

from __future__ import annotations


class ConstraintError(ValueError):
    """An invalid, unsupported or too large constraint, or a token the constraint forbids."""


class ConstraintTimeout(ConstraintError):
    """One compile attempt ran out of time (or its worker died): a verdict on the attempt, not the spec."""
