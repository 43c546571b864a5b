"""Attribution beside attention, through any engine: for each output token of a translation,
how much each source token moved it, by attention itself or by an attribution method
(`decoding.engine.METHODS`; the torch engine's torch_engine/relevance.py says what each is
and computes them, and the engine table says which engine can: attention read teacher-forced
and the attributions, whose gradients ONNX graphs do not have, are the torch engine's).

`rank_agreement` puts attention beside the rest: Kendall's tau between a step's attention and
an attribution over the source words (Jain & Wallace 2019, §4.1).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import kendalltau

from alignmt.decoding.engine import METHODS, Method
from alignmt.decoding.translator import Translator

__all__ = ["METHODS", "Method", "rank_agreement", "translation_relevance"]


def translation_relevance(
    translator: Translator, src: list[int], output: list[int], method: Method
) -> np.ndarray:
    """The relevance of one translation, teacher-forced: (len(output), len(src) + 1) for the
    source ids `src` (without </s>, which gets the last column) and the output ids, </s>
    included where the output has it."""
    eos = translator.tgt_vocab.eos_id
    body = output[:-1] if output and output[-1] == eos else output
    (scores,) = translator.engine.relevance([(src, body)], method)  # (len(body) + 1, len(src) + 1)
    return scores[: len(output)]


def rank_agreement(first: Sequence[np.ndarray], second: Sequence[np.ndarray]) -> list[float]:
    """Kendall's tau between two relevance matrices of each sentence pair (as
    `Engine.relevance` gives them), row by row over the source tokens (</s> included); rows
    where either is constant (tau is undefined) are left out.

    Returns:
        One tau per target token kept, in pair order.
    """
    taus = []
    for a, b in zip(first, second, strict=True):
        for row_a, row_b in zip(a, b, strict=True):
            tau = kendalltau(row_a, row_b).statistic
            if not np.isnan(tau):
                taus.append(float(tau))
    return taus
