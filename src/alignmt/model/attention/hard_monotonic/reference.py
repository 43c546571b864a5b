"""Exact hard monotonic attention (Wu & Cotterell 2019, "Exact Hard Monotonic Attention for
Character-Level Transduction", after Aharoni & Goldberg 2017) in float64 NumPy, and its
declaration.

Each output word y_i is emitted from exactly one source position a_i, and the positions
never go back: a_i >= a_{i-1}. The model sums over every such alignment a,

    p(y | x) = sum_a prod_i p(a_i | a_{i-1}, y_<i, x) p(y_i | a_i, y_<i, x),

where the decoder's recurrence reads no attention, s_i = RNN(s_{i-1}, y_{i-1}) (so that s_i
is the same under every alignment, which makes the sum tractable), and

    p(a_i = j | a_{i-1} = k) = softmax over the real j >= k of e_ij = score(s_i, h_j)
    p(y_i | a_i = j)         = softmax(W_o readout([s_i; h_j; y_{i-1}]))

The forward algorithm sums in O(|x|^2 |y|). Written as a filter over the output steps it is
also the decoder's step, and every search runs on it unchanged:

    prior_i(j)     = sum_k posterior_{i-1}(k) p(a_i = j | a_{i-1} = k)       (alpha_i)
    p(y_i = w)     = sum_j prior_i(j) p(y_i = w | a_i = j)                  (the step's output)
    posterior_i(j) = prior_i(j) p(y_i | a_i = j) / p(y_i)                  (once y_i is chosen)

with posterior_0 = delta_0 (the first step may start anywhere; Wu & Cotterell's a_0 = 0).
The product of the steps' p(y_i) is the sum over alignments, exactly (the tests enumerate).

What alignmt chooses where the paper is silent:
- alpha_i, the weights shown, scored by AER and steered, is the prior: where the step looks
  before it emits. A steer replaces the prior.
- The step keeps what its emissions need to be read once the next word is known: each
  position's readout features and log-normaliser, a slot each; the posterior is taken at
  the start of the next step, from y_{i-1}.
- The explorer marks the expected position sum_j j alpha_ij and shows p_move, the
  probability that the step moved on from where the last one was, 1 - sum_k
  posterior_{i-1}(k) p(a_i = k | a_{i-1} = k).
"""

from __future__ import annotations

import numpy as np

from alignmt.config import ModelConfig
from alignmt.model.attention.spec import Shown, Slot, Spec
from alignmt.reference import ReadoutWeights, Scorer, readout, run_layers

Array = np.ndarray

KINDS = ("hard_monotonic",)


def from_config(cfg: ModelConfig) -> Spec | None:
    """Exact hard monotonic attention where `cfg.attention_fn` names it."""
    if cfg.attention_fn not in KINDS:
        return None
    refuse = f"model.attention_fn={cfg.attention_fn} "
    if cfg.attention_window != "global":
        raise ValueError(
            refuse + f"moves over the whole source itself, and a {cfg.attention_window} "
            "window would cut it short: use model.attention_window=global"
        )
    if cfg.order != "bahdanau":
        raise ValueError(
            refuse + "has its own order (s_i = RNN(s_{i-1}, y_{i-1}) asks, and no context is "
            f"fed back, which keeps the sum over alignments exact), not {cfg.order}'s: "
            "leave model.order at bahdanau"
        )
    if cfg.coverage != "none":
        raise ValueError(
            refuse + "already keeps the decoder's place on the source, and coverage's "
            "term would make the transitions depend on the alignment: use model.coverage=none"
        )
    return Spec(
        entry=__package__,
        kind=cfg.attention_fn,
        about="exact hard monotonic attention (Wu & Cotterell 2019): a sum over monotonic "
        "alignments, each word emitted from one source position",
        mixture=True,
        state=(
            Slot("prior", ("rows", "source")),  # log alpha_i
            Slot("posterior", ("rows", "source")),  # log posterior_{i-1}
            Slot("emitting", ("rows", "source", "units")),  # readout features per position
            Slot("normaliser", ("rows", "source")),  # their log-sum-exp over the vocabulary
            Slot("position", ("rows",)),
            Slot("move", ("rows",)),
        ),
        shown=(
            Shown(
                slot="position",
                label="a_i",
                about="the source position the decoder emits from, expected under alpha: each "
                "step stays or moves right, never back",
            ),
            Shown(
                slot="move",
                label="p_move",
                about="the probability that this step moved on from the last step's position",
                kind="probability",
            ),
        ),
    )


def transitions(e: Array, mask: Array) -> Array:
    """(T, T) P[k, j] = p(a_i = j | a_{i-1} = k): a softmax of e over the real j >= k (rows
    of padding k are 0)."""
    T = len(e)
    P = np.zeros((T, T))
    for k in range(T):
        if not mask[k]:
            continue
        reach = mask & (np.arange(T) >= k)
        z = np.where(reach, np.exp(e - e[reach].max()), 0.0)
        P[k] = z / z.sum()
    return P


def prior(posterior: Array, e: Array, mask: Array) -> Array:
    """alpha_i (T,): where step i emits from, before it emits."""
    return posterior @ transitions(e, mask)


def move(posterior: Array, e: Array, mask: Array) -> float:
    """p_move: 1 - the probability of staying at the last step's position."""
    return 1.0 - float(posterior @ np.diag(transitions(e, mask)))


def observe(alpha: Array, emitted: Array) -> Array:
    """posterior_i (T,) once y_i is known: alpha_i (T,) times each position's p(y_i | a_i = j)
    (T,), renormalised."""
    joint = alpha * emitted
    return joint / joint.sum()


def first_posterior(T: int) -> Array:
    """posterior_0 = delta_0: before the first step the decoder is at the first position."""
    return np.eye(T)[0]


def emissions(s: Array, y_emb: Array, H: Array, out: ReadoutWeights) -> Array:
    """(T, V) p(y | a_i = j) for each source position j: the output layer over
    [s_i; h_j; y_{i-1}]."""
    rows = []
    for h in H:
        logits = readout(np.concatenate([s, h, y_emb]), out)
        z = np.exp(logits - logits.max())
        rows.append(z / z.sum())
    return np.stack(rows)


def step(y_emb, hs, cs, H, mask, score: Scorer, posterior: Array, layers, out: ReadoutWeights):
    """One decoder step: s_i = RNN(s_{i-1}, y_{i-1}); alpha_i from posterior_{i-1} and
    e_ij = score(s_i, h_j); p(y_i) = sum_j alpha_ij p(y_i | a_i = j).

    Returns (log p(y_i) (V,), hs', cs', alpha_i (T,), the emissions (T, V), p_move)."""
    hs, cs = run_layers(y_emb, hs, cs, layers)
    e = score(hs[-1], H)
    alpha = prior(posterior, e, mask)
    emitted = emissions(hs[-1], y_emb, H, out)
    return np.log(alpha @ emitted), hs, cs, alpha, emitted, move(posterior, e, mask)
