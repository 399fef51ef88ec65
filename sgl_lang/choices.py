"""How `select` turns per-choice prompt logprobs into a decision (SGLang's three choices methods).

Each method receives, per choice, the logprob entries `[logprob, token_id, text]` of the choice's
tokens given the program text, and returns a `ChoicesDecision` whose meta info holds the scores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class ChoicesDecision:
    decision: str
    meta_info: Optional[dict] = None


def _mean(values: list) -> float:
    return sum(values) / len(values) if values else float("-inf")


def _first_argmax(values: list) -> int:
    best = 0
    for i, value in enumerate(values):
        if value > values[best]:
            best = i
    return best


def _logprob_values(entries: list) -> list:
    return [entry[0] for entry in entries if entry[0] is not None]


def normalized_prompt_logprob(entries: list) -> float:
    """Mean logprob of a choice's tokens (entries without a logprob are skipped)."""
    return _mean(_logprob_values(entries))


class ChoicesSamplingMethod:
    """Base class: `__call__` picks one choice from the scores. A method implements `_pick` (SGLang-style
    subclasses that override `__call__` itself work too)."""

    requires_unconditional_logprobs = False

    def __call__(
        self,
        *,
        choices: list,
        normalized_prompt_logprobs: list,
        input_token_logprobs: list,
        output_token_logprobs: list,
        unconditional_token_logprobs: Optional[list] = None,
    ) -> ChoicesDecision:
        best, extra = self._pick(
            choices, normalized_prompt_logprobs, input_token_logprobs, unconditional_token_logprobs
        )
        meta = {
            "normalized_prompt_logprobs": normalized_prompt_logprobs,
            "input_token_logprobs": input_token_logprobs,
            "output_token_logprobs": output_token_logprobs,
            **extra,
        }
        return ChoicesDecision(choices[best], meta)

    def _pick(self, choices: list, normalized: list, inputs: list, unconditional: Optional[list]) -> tuple[int, dict]:
        """(index of the chosen choice, extra meta info) from the per-choice scores and logprob entries."""
        raise NotImplementedError


class TokenLengthNormalized(ChoicesSamplingMethod):
    """The choice whose tokens have the highest mean logprob (the default)."""

    def _pick(self, choices: list, normalized: list, inputs: list, unconditional: Optional[list]) -> tuple[int, dict]:
        return _first_argmax(normalized), {}


class GreedyTokenSelection(ChoicesSamplingMethod):
    """Compare choices token by token, keeping those with the best logprob at each position.

    A choice shorter than the longest is padded with its own mean logprob.
    """

    def _pick(self, choices: list, normalized: list, inputs: list, unconditional: Optional[list]) -> tuple[int, dict]:
        width = max(len(entries) for entries in inputs)
        matrix = [self._padded_row(entries, width) for entries in inputs]
        remaining = list(range(len(choices)))
        for column in range(width):
            best = max(matrix[i][column] for i in remaining)
            remaining = [i for i in remaining if matrix[i][column] == best]
            if len(remaining) == 1:
                break
        return remaining[0], {"greedy_logprob_matrix": matrix}

    @staticmethod
    def _padded_row(entries: list, width: int) -> list:
        values = [entry[0] if entry[0] is not None else 0.0 for entry in entries]
        return values + [_mean(values)] * (width - len(values))


class UnconditionalLikelihoodNormalized(ChoicesSamplingMethod):
    """The choice with the highest mean of (conditional - unconditional) token logprob.

    The unconditional logprobs score the choice's tokens alone; the first has no context and
    counts as 0.
    """

    requires_unconditional_logprobs = True

    def _pick(self, choices: list, normalized: list, inputs: list, unconditional: Optional[list]) -> tuple[int, dict]:
        if unconditional is None:
            raise ValueError("unconditional_likelihood_normalized needs unconditional token logprobs")
        scores = [self._score(entries, uncond) for entries, uncond in zip(inputs, unconditional)]
        extra = {"unconditional_token_logprobs": unconditional, "normalized_unconditional_prompt_logprobs": scores}
        return _first_argmax(scores), extra

    @staticmethod
    def _score(inputs: list, unconditional: list) -> float:
        if len(inputs) != len(unconditional):
            raise ValueError("conditional and unconditional logprobs differ in length")
        cond = [entry[0] or 0.0 for entry in inputs]
        uncond = [entry[0] or 0.0 for entry in unconditional]
        return _mean([c - u for c, u in zip(cond, uncond)])


token_length_normalized = TokenLengthNormalized()
greedy_token_selection = GreedyTokenSelection()
unconditional_likelihood_normalized = UnconditionalLikelihoodNormalized()
