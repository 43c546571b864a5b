"""Local attention (Luong, Pham & Manning 2015, §3.2) in float64 NumPy, and its declaration:
at output step i attention weighs only the source positions j of a window [p_i - D, p_i + D]
around an aligned position p_i.

- local-m (monotonic): p_i = i, the source read at the pace of the target.
- local-p (predictive): p_i = S sigmoid(v_p^T tanh(W_p s)) (eq. 9), S the sentence's length
  and s the query; the weights are then multiplied by a Gaussian centred on p_i,
  alpha_ij = align(s, h_j) exp(-(j - p_i)^2 / (2 sigma^2)) with sigma = D / 2 (eq. 10).

What the paper leaves open, and what alignmt chooses:
- Positions count from 0, as the target steps do (step 0 is the first output word), so
  local-m's first output attends around the first source word. S counts </s>; p_i then lies
  in [0, S], and a window never misses the sentence: it holds at least one real position.
- A window that crosses an end of the sentence keeps only the positions inside it (the
  paper's "we simply ignore the outside part"), and the mapping normalises over those alone.
- local-m past the end of the source (i >= S) stays at its last position, </s>: a longer
  output keeps a window to attend to, where p_i = i would leave it none.
- The Gaussian is not renormalised, as in eq. 10: the weights of local-p sum to less than 1,
  and c_i = sum_j alpha_ij h_j shrinks with them.
- The window's edges are a mask, through which no gradient flows; p_i of local-p learns
  through the Gaussian alone, as in the paper.

The window carries two state slots, the next output position i and the last step's p_i,
which the explorer marks on the source with the window around it.
"""

from __future__ import annotations

import numpy as np

from alignmt.config import ModelConfig
from alignmt.model.attention.spec import Shown, Slot, Spec
from alignmt.reference import Window, sigmoid

Array = np.ndarray

KINDS = ("local_m", "local_p")


def from_config(cfg: ModelConfig) -> Spec | None:
    """The window `cfg.attention_window` names, unless it is global (no window)."""
    if cfg.attention_window not in KINDS:
        return None
    name = cfg.attention_window.replace("_", "-")
    return Spec(
        entry=__package__,
        off="attention_window=global",
        kind=cfg.attention_window,
        about=f"{name} window (Luong et al. 2015), D = {cfg.window}",
        settings={"half_width": cfg.window, "attn_dim": cfg.attn_dim},
        state=(Slot("step", ("rows",)), Slot("centre", ("rows",))),
        shown=(
            Shown(
                slot="centre",
                label="p_i",
                about=f"the centre of the step's {name} window: it holds the words within "
                f"D = {cfg.window} of it",
                reach=float(cfg.window),
            ),
        ),
        former=(("attention.local.", "window."),),
    )


def local_window(p: float, mask: Array, D: int, gaussian: bool) -> tuple[Array, Array | None]:
    """The real positions j with |j - p| <= D, and with `gaussian` the factor
    exp(-(j - p)^2 / (2 sigma^2)), sigma = D / 2, of eq. 10."""
    inside = np.array([bool(real) and abs(j - p) <= D for j, real in enumerate(mask)])
    if not gaussian:
        return inside, None
    sigma = D / 2
    return inside, np.array([np.exp(-((j - p) ** 2) / (2 * sigma**2)) for j in range(len(mask))])


def local_m(i: int, D: int) -> Window:
    """local-m at output position i: p = i, kept at the last position S - 1 past the source."""
    return lambda s, mask: local_window(float(min(i, mask.sum() - 1)), mask, D, gaussian=False)


def local_p(W_p: Array, v_p: Array, D: int) -> Window:
    """local-p: p = S sigmoid(v_p^T tanh(W_p s)) (eq. 9), S the real positions, with the
    Gaussian."""
    return lambda s, mask: local_window(
        mask.sum() * sigmoid(v_p @ np.tanh(W_p @ s)), mask, D, gaussian=True
    )
