"""The multiplicative scores, in float64 NumPy, and their declaration: Luong et al.'s dot and
general scores (2015, eq. 8), Vaswani et al.'s scaled dot product (2017, eq. 1), and the
general score times a learned scale.

Why the scaled general score: an RNN's states saturate towards ±1 as it trains, so |s| and
|h_j| grow towards sqrt(D) and sqrt(C), and s^T W h_j grows with both. In the 15-minute
Multi30k recipe (Luong's order), the general score's range over a sentence went from 3 at
the start to about 380 after 250 updates: its softmax is then one-hot, 72% of the weights
underflow to exactly 0 in float32, the softmax passes almost no gradient back, and attention
stays where it first fell. g = 1 / sqrt(D) at the start (the scaled dot product's factor) and
learned (as in TensorFlow's "scaled_luong", which starts g at 1 and did not train here) lets
the model choose how sharp its attention is. docs/benchmarks.md has the measurements.

None has a hidden layer for a modifier's term to enter. The general scores' W h_j is made
once per sentence, a memory slot; the dot scores read the encoder states themselves.
"""

from __future__ import annotations

import numpy as np

from alignmt.config import ModelConfig
from alignmt.model.attention.spec import Slot, Spec

Array = np.ndarray

HIDDEN_LAYER = False  # no term of a modifier can enter it
KINDS = ("dot", "scaled_dot", "general", "scaled_general")
_CITED = {
    "dot": "Luong et al. 2015",
    "scaled_dot": "Vaswani et al. 2017",
    "general": "Luong et al. 2015",
    "scaled_general": "Luong et al. 2015, with a learned scale",
}


def from_config(cfg: ModelConfig) -> Spec | None:
    """The score `cfg.attention` names, if it is one of this entry's."""
    if cfg.attention not in KINDS:
        return None
    projected = cfg.attention in ("general", "scaled_general")
    keys = (Slot("keys", ("rows", "source", "units")),) if projected else ()
    return Spec(
        entry=__package__,
        kind=cfg.attention,
        about=f"{cfg.attention.replace('_', ' ')} score ({_CITED[cfg.attention]})",
        memory=keys,
        former=(("attention.score.", "attention."),),
    )


def general_scores(s: Array, H: Array, W: Array) -> Array:
    """Luong eq. 8, general: e_j = s^T W h_j."""
    return np.array([s @ W @ h for h in H])


def scaled_general_scores(s: Array, H: Array, W: Array, g: float) -> Array:
    """e_j = g s^T W h_j, g learned (1 / sqrt(d) before training)."""
    return g * general_scores(s, H, W)


def dot_scores(s: Array, H: Array) -> Array:
    """Luong eq. 8, dot: e_j = s^T h_j."""
    return np.array([s @ h for h in H])


def scaled_dot_scores(s: Array, H: Array) -> Array:
    """Vaswani eq. 1: e_j = s^T h_j / sqrt(d)."""
    return dot_scores(s, H) / np.sqrt(len(s))
