"""The multiplicative scores, in float64 NumPy, and their declaration: Luong et al.'s dot and
general scores (2015, eq. 8) and Vaswani et al.'s scaled dot product (2017, eq. 1).

None has a hidden layer for a modifier's term to enter. The general score's W h_j is made
once per sentence, a memory slot; the dot scores read the encoder states themselves.
"""

from __future__ import annotations

import numpy as np

from alignmt.config import ModelConfig
from alignmt.model.attention.spec import Slot, Spec

Array = np.ndarray

HIDDEN_LAYER = False  # no term of a modifier can enter it
KINDS = ("dot", "scaled_dot", "general")
_CITED = {
    "dot": "Luong et al. 2015",
    "scaled_dot": "Vaswani et al. 2017",
    "general": "Luong et al. 2015",
}


def from_config(cfg: ModelConfig) -> Spec | None:
    """The score `cfg.attention` names, if it is one of this entry's."""
    if cfg.attention not in KINDS:
        return None
    keys = (Slot("keys", ("rows", "source", "units")),) if cfg.attention == "general" else ()
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


def dot_scores(s: Array, H: Array) -> Array:
    """Luong eq. 8, dot: e_j = s^T h_j."""
    return np.array([s @ h for h in H])


def scaled_dot_scores(s: Array, H: Array) -> Array:
    """Vaswani eq. 1: e_j = s^T h_j / sqrt(d)."""
    return dot_scores(s, H) / np.sqrt(len(s))
