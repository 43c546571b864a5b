"""One sentence's lexical constraints as target ids: phrases its output must contain and
phrases it must not, and whether an output meets them. The search that keeps to them is the
torch engine's (torch_engine/constraints.py, after Post & Vilar 2018); raw text becomes ids
in the translator (`Translator.constraint`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Constraint:
    """One sentence's constraints, as target token ids."""

    include: tuple[tuple[int, ...], ...] = ()  # phrases the output must contain
    exclude: tuple[tuple[int, ...], ...] = ()  # phrases it must not

    def __post_init__(self) -> None:
        if any(not phrase for phrase in (*self.include, *self.exclude)):
            raise ValueError("a constraint phrase has no tokens")

    def met(self, tokens: Sequence[int]) -> list[bool]:
        """Whether each include phrase appears in `tokens`, in order and unbroken."""
        return [_contains(tokens, phrase) for phrase in self.include]

    def broken(self, tokens: Sequence[int]) -> list[bool]:
        """Whether each exclude phrase appears in `tokens`."""
        return [_contains(tokens, phrase) for phrase in self.exclude]


def _contains(tokens: Sequence[int], phrase: Sequence[int]) -> bool:
    n = len(phrase)
    return any(tuple(tokens[i : i + n]) == tuple(phrase) for i in range(len(tokens) - n + 1))
