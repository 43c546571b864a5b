"""How much of the source a translation covers, read off its own output and attention: the
two failures coverage models address (Tu et al. 2016, "Modeling Coverage for Neural Machine
Translation"), counted automatically.

- Over-translation: an output that repeats a token n-gram (bigrams by default) more often
  than its source repeats one, the trace of a phrase translated twice. Counting against the
  source spares sentences that repeat because their source does ("a man ... a man").
- Under-translation: a source token (</s> aside) whose attention, summed over every output
  step, stays below 0.5: the decoder hardly looked at it, so it was likely left out.

Both count tokens as the model reads them (words, or SentencePiece pieces); no framework.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from alignmt.text.vocab import EOS

COVERED = 0.5  # summed attention below which a source token counts as left out


@dataclass
class CoverageRates:
    over: float  # share of outputs that repeat an n-gram more often than their source
    under: float | None  # share of source tokens under COVERED attention; None: no attention
    sentences: int
    source_tokens: int


def repeats(tokens: Sequence[str], n: int = 2) -> int:
    """How many n-gram occurrences repeat an earlier one: 0 when none repeats."""
    grams = Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
    return sum(count - 1 for count in grams.values())


def over_translated(src_tokens: Sequence[str], out_tokens: Sequence[str], n: int = 2) -> bool:
    """Whether the output repeats n-grams more often than its source does (</s> aside)."""
    strip = lambda tokens: [t for t in tokens if t != EOS]  # noqa: E731
    return repeats(strip(out_tokens), n) > repeats(strip(src_tokens), n)


def under_translated(attention: np.typing.ArrayLike) -> tuple[int, int]:
    """(source tokens whose summed attention stays below COVERED, source tokens), </s>
    (the last column) aside.

    Args:
        attention: (output tokens, source tokens + </s>) the weights of each output step.
    """
    total = np.asarray(attention, dtype=np.float64).sum(axis=0)[:-1]  # (source tokens,)
    return int((total < COVERED).sum()), len(total)


def coverage_rates(translations: Sequence, n: int = 2) -> CoverageRates:
    """Both rates over a corpus of `Translation`s (their src_tokens, tokens, attention)."""
    over = sum(over_translated(t.src_tokens, t.tokens, n) for t in translations)
    counts = [under_translated(t.attention) for t in translations if t.attention is not None]
    left, words = (sum(c[i] for c in counts) for i in (0, 1))
    under = left / words if counts and words else None
    return CoverageRates(over / max(1, len(translations)), under, len(translations), words)
