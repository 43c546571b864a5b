"""The mappings from scores to weights, in float64 NumPy, and their declaration: the softmax
of Bahdanau et al. (2015, eq. 7), and the sparse mappings that give exactly zero weight to
the scores below a threshold, sparsemax (Martins & Astudillo 2016) and 1.5-entmax (Peters,
Niculae & Martins 2019). Each maps a score row over the real positions (mask True) and gives
every other position 0.
"""

from __future__ import annotations

import numpy as np

from alignmt.config import ModelConfig
from alignmt.model.attention.spec import Spec
from alignmt.reference import Normaliser

Array = np.ndarray

_ABOUT = {
    "softmax": "softmax (Bahdanau et al. 2015)",
    "sparsemax": "sparsemax (Martins & Astudillo 2016)",
    "entmax15": "1.5-entmax (Peters et al. 2019)",
}


def from_config(cfg: ModelConfig) -> Spec | None:
    """The mapping `cfg.attention_fn` names, where it is one of these."""
    if cfg.attention_fn not in _ABOUT:
        return None
    return Spec(entry=__package__, kind=cfg.attention_fn, about=_ABOUT[cfg.attention_fn])


def masked_softmax(e: Array, mask: Array) -> Array:
    """alpha_j = exp(e_j) / sum_k exp(e_k) over the real positions (mask True); 0 elsewhere."""
    alpha = np.zeros_like(e, dtype=np.float64)
    real = e[mask]
    z = np.exp(real - real.max())  # shifting by the max changes nothing but overflow
    alpha[mask] = z / z.sum()
    return alpha


def masked_sparsemax(e: Array, mask: Array) -> Array:
    """Martins & Astudillo 2016, Alg. 1: alpha_j = max(e_j - tau, 0) over the real positions,
    tau making them sum to 1 (the Euclidean projection of e onto the simplex); 0 elsewhere."""
    alpha = np.zeros_like(e, dtype=np.float64)
    z = np.sort(e[mask])[::-1]  # largest first
    k = np.arange(1, len(z) + 1)
    cumulative = np.cumsum(z)
    size = k[1 + k * z > cumulative][-1]  # the support: z_(k) stays above the threshold
    tau = (cumulative[size - 1] - 1) / size
    alpha[mask] = np.maximum(e[mask] - tau, 0.0)
    return alpha


def masked_entmax15(e: Array, mask: Array) -> Array:
    """Peters, Niculae & Martins 2019, Alg. 2 (alpha = 1.5, exact by sorting): alpha_j =
    max(e_j / 2 - tau, 0)^2 over the real positions, tau making them sum to 1; 0 elsewhere.

    For the k largest values of z = e / 2, the tau that makes sum_{j<=k} (z_j - tau)^2 = 1 is
    mean_k - sqrt((1 - k var_k) / k); the support is the largest k whose tau stays at or
    below z_(k)."""
    alpha = np.zeros_like(e, dtype=np.float64)
    z = np.sort(e[mask] / 2)[::-1]
    k = np.arange(1, len(z) + 1)
    mean = np.cumsum(z) / k
    variance = np.cumsum(z**2) / k - mean**2
    tau = mean - np.sqrt(np.maximum((1 - k * variance) / k, 0.0))
    size = k[tau <= z][-1]
    alpha[mask] = np.maximum(e[mask] / 2 - tau[size - 1], 0.0) ** 2
    return alpha


MAPPINGS: dict[str, Normaliser] = {
    "softmax": masked_softmax,
    "sparsemax": masked_sparsemax,
    "entmax15": masked_entmax15,
}
