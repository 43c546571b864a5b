"""Monotonic attention (Raffel, Luong, Liu, Weiss & Eck 2017, "Online and Linear-Time
Attention by Enforcing Monotonic Alignments") in float64 NumPy, and its declaration.

At output step i the decoder stands at the source position t_{i-1} where the step before
stopped, and walks right from there: at each position j it stops with probability

    p_ij = sigma(e_ij + r)                                              (Raffel eq. 9)

(e_ij any of the room's scores, r a learned scalar), and attends to the one position where it
stops. The walk never goes back, so decoding is linear in the source length.

- Training takes the walk's expectation, which is differentiable (eq. 13):
  alpha_ij = p_ij sum_{k <= j} alpha_{i-1,k} prod_{l=k}^{j-1} (1 - p_il), alpha_0 = delta_0,
  with Gaussian noise of standard deviation `noise` added to e_ij + r before the sigmoid, which
  pushes p toward 0 or 1 so that the expectation comes to match the walk (§2.3).
- Decoding, validation and the explorer take the walk itself, deterministically (§2.2): the
  first j >= t_{i-1} with p_ij >= 0.5.

What the paper leaves open, and what alignmt chooses:
- The walk stops at the sentence's last real position (</s>) whatever p says there (p = 1),
  so that alpha_i sums to 1 and decoding past the end stays at </s>. The paper lets the walk
  run off the end and attend to nothing (c_i = 0); keeping the remaining weight on the last
  position is fairseq's "mass preservation" for monotonic multihead attention (Ma et al. 2020).
- Step 0 starts at position 0 (alpha_0 = delta_0), as in the paper.

The state is the step before's alpha (the walk's start, as a distribution), the position t_i
where the walk stopped and p_{i,t_i}, the probability it gave to stopping there; the explorer
marks t_i on the source and shows p_{i,t_i}.
"""

from __future__ import annotations

import numpy as np

from alignmt.config import ModelConfig
from alignmt.model.attention.spec import Shown, Slot, Spec
from alignmt.reference import Normaliser, sigmoid

Array = np.ndarray

KINDS = ("monotonic",)


def from_config(cfg: ModelConfig) -> Spec | None:
    """Monotonic attention where `cfg.attention_fn` names it."""
    if cfg.attention_fn not in KINDS:
        return None
    if cfg.attention_window != "global":
        raise ValueError(
            f"model.attention_fn={cfg.attention_fn} walks the source itself, and a "
            f"{cfg.attention_window} window would cut its walk short: use "
            f"model.attention_window=global"
        )
    return Spec(
        entry=__package__,
        kind=cfg.attention_fn,
        about=f"monotonic attention (Raffel et al. 2017), r = {cfg.monotonic_bias:g} at first, "
        f"noise {cfg.monotonic_noise:g} in training",
        settings={"bias": cfg.monotonic_bias, "noise": cfg.monotonic_noise},
        state=(
            Slot("previous", ("rows", "source")),
            Slot("position", ("rows",)),
            Slot("stop", ("rows",)),
        ),
        shown=(
            Shown(
                slot="position",
                label="t_i",
                about="where the decoder stands on the source: each step walks right from the "
                "last, never back",
            ),
            Shown(
                slot="stop",
                label="p_stop",
                about="the probability the decoder gave to stopping at t_i",
                kind="probability",
            ),
        ),
    )


def stop_probabilities(e: Array, mask: Array, r: float) -> Array:
    """p_j = sigma(e_j + r) at the real positions (mask True, a prefix), 1 at the last of
    them, 0 at padding."""
    p = np.where(mask, sigmoid(e + r), 0.0)
    p[np.flatnonzero(mask)[-1]] = 1.0
    return p


def expected_alignment(p: Array, previous: Array) -> Array:
    """Raffel eq. 13: alpha_j = p_j sum_{k <= j} previous_k prod_{l=k}^{j-1} (1 - p_l), the
    probability that a walk starting where `previous` says stops at j."""
    T = len(p)
    alpha = np.zeros(T)
    for j in range(T):
        for k in range(j + 1):
            alpha[j] += previous[k] * np.prod([1 - p[m] for m in range(k, j)])
        alpha[j] *= p[j]
    return alpha


def walk(p: Array, start: int) -> int:
    """The walk itself (§2.2): the first j >= start with p_j >= 0.5 (the last real position
    always has p = 1)."""
    return next(j for j in range(start, len(p)) if p[j] >= 0.5)


def monotonic(previous: Array, r: float, *, hard: bool) -> Normaliser:
    """The step's mapping (e, mask) -> alpha, from the step before's alpha: the expected
    alignment, or with `hard` the walk from the position where `previous` stopped."""

    def normalise(e: Array, mask: Array) -> Array:
        p = stop_probabilities(e, mask, r)
        if not hard:
            return expected_alignment(p, previous)
        alpha = np.zeros(len(e))
        alpha[walk(p, int(np.argmax(previous)))] = 1.0
        return alpha

    return normalise


def first_alignment(T: int) -> Array:
    """alpha_0 = delta_0: the walk starts at the first source position."""
    return np.eye(T)[0]
