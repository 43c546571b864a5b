"""Coverage (Tu et al. 2016, "Modeling Coverage for Neural Machine Translation", eq. 9 and
§3.1.1) in float64 NumPy, and its declaration: each source position's coverage C_{i-1,j},
the attention it has had so far, enters its next score inside the score's hidden layer,
e_ij = v^T tanh(W_s s + W_h h_j + V C_{i-1,j}), so a score without one (dot, general,
location) cannot take it.

C_{i,j} = C_{i-1,j} + alpha_ij / Phi_j with C_{0,j} = 0. "sum" has Phi_j = 1; under
"fertility" each source word learns how many target words it tends to produce,
Phi_j = N sigma(U_f h_j), so that C_{i,j} near 1 says "translated as often as it should be".
C is a state slot; 1 / Phi_j, made once per sentence, a memory slot.
"""

from __future__ import annotations

import numpy as np

from alignmt.config import ModelConfig
from alignmt.model.attention.spec import Slot, Spec
from alignmt.reference import sigmoid

Array = np.ndarray

KINDS = ("sum", "fertility")


def from_config(cfg: ModelConfig) -> Spec | None:
    """The coverage model `cfg.coverage` names, unless it is none."""
    if cfg.coverage not in KINDS:
        return None
    rate = (Slot("coverage_rate", ("rows", "source")),) if cfg.coverage == "fertility" else ()
    return Spec(
        entry=__package__,
        off="coverage=none",
        kind=cfg.coverage,
        about=f"{cfg.coverage} coverage (Tu et al. 2016)",
        settings={"attn_dim": cfg.attn_dim, "max_fertility": cfg.max_fertility},
        state=(Slot("coverage", ("rows", "source")),),
        memory=rate,
        hidden_term=True,
        former=(("attention.coverage.V.", "attention.V."), ("attention.coverage.U_f.", "U_f.")),
        reordered=True,  # V stood between the score's W_h and v, U_f on the decoder
    )


def fertility(H: Array, U_f: Array, N: float) -> Array:
    """Phi_j = N sigma(U_f h_j): how many target words source word j is expected to make."""
    return np.array([N * sigmoid(U_f @ h) for h in H])


def hidden_term(C: Array, V: Array) -> Array:
    """(T, A) V C_j for each position j: what coverage adds inside the score's tanh."""
    return np.outer(C, V)


def next_coverage(C: Array, alpha: Array, phi: Array | None) -> Array:
    """C_{i,j} = C_{i-1,j} + alpha_ij / Phi_j; Phi_j = 1 ("sum") when phi is None."""
    return C + (alpha if phi is None else alpha / phi)
