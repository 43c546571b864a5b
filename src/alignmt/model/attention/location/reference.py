"""Luong et al.'s location score (2015, eq. 8), in float64 NumPy, and its declaration:
e_i = W_a s, one score per source position whatever the words there, for sentences of up to
`positions` positions (W_a has a row for each)."""

from __future__ import annotations

import numpy as np

from alignmt.config import ModelConfig
from alignmt.model.attention.spec import Spec

Array = np.ndarray

KINDS = ("location",)
HIDDEN_LAYER = False  # no term of a modifier can enter it


def from_config(cfg: ModelConfig) -> Spec | None:
    """The location score, if `cfg.attention` names it."""
    if cfg.attention != "location":
        return None
    return Spec(
        entry=__package__,
        kind="location",
        about=f"location score (Luong et al. 2015), {cfg.positions} positions",
        settings={"positions": cfg.positions},
        former=(("attention.score.", "attention."),),
    )


def location_scores(s: Array, H: Array, W_a: Array) -> Array:
    """Luong eq. 8, location: e = W_a s, one score per position j < T whatever h_j is."""
    return np.array([W_a[j] @ s for j in range(len(H))])
