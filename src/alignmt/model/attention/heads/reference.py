"""Multi-head attention in a recurrent decoder (Chen et al. 2018, "The Best of Both Worlds",
RNMT+ §3.1, after Vaswani et al. 2017, §3.2.2) in float64 NumPy, and its declaration.

N heads each look at the source through their own projections, d = C / N units wide, of the
query s and of the encoder states h_j, and each weighs its own projection of the states:

    q^n = W_q^n s,   k^n_j = W_k^n h_j,   v^n_j = W_v^n h_j             (d units each)
    alpha^n = mapping(score(q^n, k^n_1..T))
    c = W_o [sum_j alpha^n_j v^n_j]_{n=1..N}                              ((N d) -> C)

where W_q^n is rows n d .. (n + 1) d of one W_q (likewise W_k, W_v), and the score and the
mapping are the model's own (additive, as in RNMT+, or any other; softmax or sparse). The
score's weights are shared by the heads, which differ by their projections: the additive
score of head n is v^T tanh(W_s W_q^n s + W_h W_k^n h_j).

What the papers leave open, and what alignmt chooses:
- alpha, the weights alignmt reads everywhere else (alignments, AER, the heatmaps, the
  explorer's matrix, a what-if's steer), is the heads' mean; each head's own weights are a
  state slot, `heads` (T_src, N) a step, which the explorer shows beside the mean.
- A what-if's steer replaces every head's weights.
- The projections have no biases (the attention's other weights have none either).
- Mechanisms with a state of their own or a window (monotonic, coverage, local) are refused
  with heads: each head would need its own walk, coverage or window.
"""

from __future__ import annotations

import numpy as np

from alignmt.config import ModelConfig
from alignmt.model.attention.spec import Shown, Slot, Spec
from alignmt.reference import Normaliser, Scorer

Array = np.ndarray


def from_config(cfg: ModelConfig) -> Spec | None:
    """Multi-head attention where `cfg.heads` asks for more than one head."""
    if cfg.heads == 1:
        return None
    refuse = f"model.heads={cfg.heads} splits attention into heads, and "
    key_dim = cfg.enc_hidden * (2 if cfg.bidirectional else 1)
    if cfg.attention == "none":
        raise ValueError(refuse + "model.attention=none has none: use model.heads=1")
    if key_dim % cfg.heads:
        raise ValueError(
            refuse + f"the encoder states' {key_dim} units (C) do not split into "
            f"{cfg.heads} equal heads: use a number of heads that divides {key_dim}"
        )
    for key, chosen in (
        ("attention_fn", cfg.attention_fn in ("monotonic", "hard_monotonic")),
        ("attention_window", cfg.attention_window != "global"),
        ("coverage", cfg.coverage != "none"),
    ):
        if chosen:
            raise ValueError(
                refuse + f"model.{key}={getattr(cfg, key)} keeps one state or window for the "
                "whole attention: use model.heads=1"
            )
    size = key_dim // cfg.heads
    return Spec(
        entry=__package__,
        kind="multi_head",
        about=f"{cfg.heads} heads of {size} units (Chen et al. 2018)",
        settings={"heads": cfg.heads},
        state=(Slot("heads", ("rows", "source", "units")),),
        memory=(
            Slot("head_keys", ("rows", "source", "units")),
            Slot("head_values", ("rows", "source", "units")),
        ),
        shown=(
            Shown(
                slot="heads",
                label="head",
                about="each head's weights over the source; alpha is their mean",
                kind="weights",
            ),
        ),
    )


def multi_head(
    s: Array,
    H: Array,
    mask: Array,
    score: Scorer,
    normalise: Normaliser,
    W_q: Array,
    W_k: Array,
    W_v: Array,
    W_o: Array,
    heads: int,
) -> tuple[Array, Array, Array]:
    """One query's attention by N = `heads` heads, each written out.

    Args:
        s: (D,) the query. H: (T, C) the encoder states. mask: (T,) bool, the real ones.
        score, normalise: the model's score over one head, (q (d,), K (T, d)) -> e (T,), and
            its mapping from scores to weights.
        W_q: (C, D). W_k, W_v, W_o: (C, C). Head n's rows are n d .. (n + 1) d.

    Returns:
        c (C,), alpha (T,) the heads' mean, and every head's weights (N, T).
    """
    d = W_q.shape[0] // heads
    contexts, weights = [], []
    for n in range(heads):
        rows = slice(n * d, (n + 1) * d)
        q, K, V = W_q[rows] @ s, H @ W_k[rows].T, H @ W_v[rows].T  # (d,), (T, d), (T, d)
        alpha = normalise(score(q, K), mask)
        contexts.append(sum(a * v for a, v in zip(alpha, V, strict=True)))
        weights.append(alpha)
    return W_o @ np.concatenate(contexts), np.mean(weights, axis=0), np.array(weights)
