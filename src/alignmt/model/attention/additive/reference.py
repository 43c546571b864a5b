"""The scores with a hidden layer, in float64 NumPy, and their declaration: Bahdanau et al.'s
additive score (2015, eq. 6 and App. A.1.2) and Luong et al.'s concat score (2015, eq. 8),
which is the same form with W_s and W_h stored side by side as one W.

Both take an extra term inside the tanh where a modifier adds one (coverage's V C_{i-1,j},
Tu et al. 2016, eq. 9). Their keys' part of the hidden layer (W_h h_j) is made once per
sentence, a memory slot.
"""

from __future__ import annotations

import numpy as np

from alignmt.config import ModelConfig
from alignmt.model.attention.spec import Slot, Spec

Array = np.ndarray

HIDDEN_LAYER = True  # a modifier's term enters the tanh
KINDS = ("additive", "concat")


def from_config(cfg: ModelConfig) -> Spec | None:
    """The score `cfg.attention` names, if it is one of this entry's."""
    if cfg.attention not in KINDS:
        return None
    cite = "Bahdanau et al. 2015" if cfg.attention == "additive" else "Luong et al. 2015"
    return Spec(
        entry=__package__,
        kind=cfg.attention,
        about=f"{cfg.attention} score ({cite}), A = {cfg.attn_dim}",
        settings={"attn_dim": cfg.attn_dim},
        memory=(Slot("keys", ("rows", "source", "units")),),
        hidden_term=HIDDEN_LAYER,
        former=(("attention.score.", "attention."),),
    )


def additive_scores(
    s: Array, H: Array, W_s: Array, W_h: Array, v: Array, term: Array | None = None
) -> Array:
    """Bahdanau eq. 6: e_j = v^T tanh(W_s s + W_h h_j), plus row j of `term` (T, A) inside
    the tanh where a modifier adds one."""
    e = []
    for j, h in enumerate(H):
        pre = W_s @ s + W_h @ h
        if term is not None:
            pre = pre + term[j]
        e.append(v @ np.tanh(pre))
    return np.array(e)


def concat_scores(s: Array, H: Array, W: Array, v: Array, term: Array | None = None) -> Array:
    """Luong eq. 8, concat: e_j = v^T tanh(W [s; h_j]), plus row j of `term` in the tanh."""
    e = []
    for j, h in enumerate(H):
        pre = W @ np.concatenate([s, h])
        if term is not None:
            pre = pre + term[j]
        e.append(v @ np.tanh(pre))
    return np.array(e)


def worked_example() -> tuple[Array, Array]:
    """Additive attention by hand: three encoder states, one query. Returns (alpha, c),
    which are alpha = [0.430, 0.217, 0.353] and c = [0.783, 0.570] to three decimals."""
    H = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    s_prev = np.array([0.5, 0.8])
    W_s = np.eye(2)
    W_h = np.array([[1.0, -1.0], [1.0, 1.0]])
    v = np.array([0.5, 0.5])
    e = additive_scores(s_prev, H, W_s, W_h, v)
    alpha = np.exp(e - e.max()) / np.exp(e - e.max()).sum()  # eq. 7's softmax
    return alpha, alpha @ H  # eq. 5: c = sum_j alpha_j h_j
