"""The paper's equations in float64 NumPy, one sentence at a time: for study, and as the
tests' oracle.

Written from the equations, not from the torch modules: no batching, no masks folded into
matrix products, an explicit loop over source positions. The torch code must agree with it
to 1e-10 in float64 (tests/test_attention.py, test_encoder.py and test_decoder.py).

This module holds the recurrences, the encoder, the output layer, one decoder step in each
order and beam search. Each attention mechanism's equations are its own, in the attention
room's entries (model/attention/*/reference.py); a step takes one callable, an attender,
composed here from a score, a mapping and a window as micrograd composes its pieces (or given
whole by a mechanism that is more than these, multi-head attention).

Conventions. Vectors are 1-D arrays; H is (T, C), one encoder state h_j per row; a weight
W maps x to W @ x, so a matrix is (out, in). RNN cells follow PyTorch's gate order
(GRU: r, z, n; LSTM: i, f, g, o) so that their weights can be compared one to one.

Sources: Bahdanau et al. 2015 (eq. 5 and App. A), Luong et al. 2015 (eq. 5-6 and §3.2),
Sennrich et al. 2017 (the conditional GRU, §2.3), Cho et al. 2014 (the vanilla
encoder-decoder), Wu et al. 2016 (beam search's length penalty, eq. 14).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

Array = np.ndarray


# --- attention: c = sum_j alpha_j h_j ------------------------------------------------------
# The mechanisms themselves (scores, mappings, windows, coverage) are the attention room's, one
# float64 reference per entry (model/attention/*/reference.py); here they are callables.

Scorer = Callable[[Array, Array], Array]  # (query (D,), H (T, C)) -> e (T,)
Normaliser = Callable[[Array, Array], Array]  # (e (T,), mask (T,)) -> alpha (T,)
Window = Callable[[Array, Array], tuple[Array, Array | None]]  # (query, mask) -> (mask, prior)
# (query (D,), H (T, C), mask (T,)) -> (c (C,), alpha (T,)): one step's whole attention
Attender = Callable[[Array, Array, Array], tuple[Array, Array]]


def attend(
    e: Array, H: Array, mask: Array, normalise: Normaliser, prior: Array | None = None
) -> tuple[Array, Array]:
    """Bahdanau eq. 5: c = sum_j alpha_j h_j, alpha = normalise(e) (softmax, or a sparse
    mapping), times `prior` where given (Luong eq. 10). Returns (c, alpha)."""
    alpha = normalise(e, mask)
    if prior is not None:
        alpha = alpha * prior
    c = sum(a * h for a, h in zip(alpha, H, strict=True))
    return c, alpha


def attend_query(
    s: Array, H: Array, mask: Array, score: Scorer, normalise: Normaliser, window: Window | None
) -> tuple[Array, Array]:
    """`attend` for the query s: over the window's positions (all of them when window is
    None) and weighted by its prior."""
    prior = None
    if window is not None:
        mask, prior = window(s, mask)
    return attend(score(s, H), H, mask, normalise, prior)


def attender(score: Scorer, normalise: Normaliser, window: Window | None = None) -> Attender:
    """The attention of a score, a mapping and a window, as a decoder step takes it (a
    mechanism that is more than these, multi-head attention, gives its own)."""
    return lambda s, H, mask: attend_query(s, H, mask, score, normalise, window)


# --- recurrent cells -----------------------------------------------------------------------


def sigmoid(x: Array) -> Array:
    return 1.0 / (1.0 + np.exp(-x))


@dataclass
class CellWeights:
    """One RNN layer: W_ih (G, in), W_hh (G, D), b_ih (G,), b_hh (G,); G = 3D (GRU) or 4D."""

    W_ih: Array
    W_hh: Array
    b_ih: Array
    b_hh: Array


def gru_cell(x: Array, h: Array, w: CellWeights) -> Array:
    """r = σ(W_ir x + b_ir + W_hr h + b_hr), z likewise,
    n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn)), h' = (1 - z) ⊙ n + z ⊙ h."""
    D = len(h)
    gx = w.W_ih @ x + w.b_ih
    gh = w.W_hh @ h + w.b_hh
    r = sigmoid(gx[:D] + gh[:D])
    z = sigmoid(gx[D : 2 * D] + gh[D : 2 * D])
    n = np.tanh(gx[2 * D :] + r * gh[2 * D :])
    return (1 - z) * n + z * h


def lstm_cell(x: Array, h: Array, c: Array, w: CellWeights) -> tuple[Array, Array]:
    """c' = σ(f) ⊙ c + σ(i) ⊙ tanh(g), h' = σ(o) ⊙ tanh(c'), gates from W_ih x + W_hh h + b."""
    D = len(h)
    g = w.W_ih @ x + w.b_ih + w.W_hh @ h + w.b_hh
    c = sigmoid(g[D : 2 * D]) * c + sigmoid(g[:D]) * np.tanh(g[2 * D : 3 * D])
    return sigmoid(g[3 * D :]) * np.tanh(c), c


def run_layers(x: Array, hs: list[Array], cs: list[Array] | None, layers: Sequence[CellWeights]):
    """One step of a stack: layer l reads layer l-1's new state. Returns (hs', cs')."""
    new_h, new_c = [], []
    for layer, w in enumerate(layers):
        if cs is None:
            x = gru_cell(x, hs[layer], w)
        else:
            x, c = lstm_cell(x, hs[layer], cs[layer], w)
            new_c.append(c)
        new_h.append(x)
    return new_h, (new_c if cs is not None else None)


# --- encoder -------------------------------------------------------------------------------


def encode(
    X: Array, forward: Sequence[CellWeights], backward: Sequence[CellWeights] | None, lstm: bool
) -> tuple[Array, Array]:
    """A (bi)directional stacked RNN over the T real embeddings X (T, E).

    Each layer reads the previous layer's states (both directions side by side). Returns
    H (T, C) of the top layer and its final state [h_fwd(T); h_bwd(1)] (C,).
    """
    inputs = X
    for layer in range(len(forward)):
        fwd = _run_direction(inputs, forward[layer], lstm)
        if backward is None:
            inputs = fwd
        else:
            inputs = np.concatenate(
                [fwd, _run_direction(inputs[::-1], backward[layer], lstm)[::-1]], 1
            )
    final = inputs[-1] if backward is None else np.concatenate([fwd[-1], inputs[0, fwd.shape[1] :]])
    return inputs, final


def _run_direction(X: Array, w: CellWeights, lstm: bool) -> Array:
    D = w.W_hh.shape[1]
    h, c, states = np.zeros(D), np.zeros(D), []
    for x in X:
        h, c = lstm_cell(x, h, c, w) if lstm else (gru_cell(x, h, w), c)
        states.append(h)
    return np.array(states)


# --- output layers -------------------------------------------------------------------------


@dataclass
class ReadoutWeights:
    """logits = W_o t + b_o, with t = features ("none"), tanh(U f + b_u), or maxout(U f + b_u)."""

    kind: str
    W_o: Array
    b_o: Array
    U: Array | None = None
    b_u: Array | None = None


def readout(features: Array, w: ReadoutWeights) -> Array:
    """Bahdanau App. A.2.2: maxout takes t_k = max(t~_{2k-1}, t~_{2k}) over adjacent pairs."""
    if w.kind == "none":
        t = features
    elif w.kind == "tanh":
        t = np.tanh(w.U @ features + w.b_u)
    else:
        pre = w.U @ features + w.b_u
        t = np.maximum(pre[0::2], pre[1::2])
    return w.W_o @ t + w.b_o


# --- one decoder step ----------------------------------------------------------------------


def bahdanau_step(y_emb, hs, cs, H, mask, attend: Attender, layers, out: ReadoutWeights):
    """Query s_{i-1}; c_i = attend; s_i = RNN(s_{i-1}, [y_{i-1}; c_i]); logits from
    [s_i; c_i; y_{i-1}]. Returns (logits, hs', cs', alpha)."""
    c, alpha = attend(hs[-1], H, mask)
    hs, cs = run_layers(np.concatenate([y_emb, c]), hs, cs, layers)
    logits = readout(np.concatenate([hs[-1], c, y_emb]), out)
    return logits, hs, cs, alpha


def luong_step(y_emb, hs, cs, feed, H, mask, attend: Attender, layers, W_c, W_o, b_o):
    """s_i = RNN(s_{i-1}, [y_{i-1}; h~_{i-1}]); query s_i; h~_i = tanh(W_c [c_i; s_i]);
    logits = W_o h~_i + b_o. Returns (logits, hs', cs', h~_i, alpha)."""
    hs, cs = run_layers(np.concatenate([y_emb, feed]), hs, cs, layers)
    c, alpha = attend(hs[-1], H, mask)
    attentional = np.tanh(W_c @ np.concatenate([c, hs[-1]]))
    return W_o @ attentional + b_o, hs, cs, attentional, alpha


def conditional_step(y_emb, hs, cs, H, mask, attend: Attender, first, second, out: ReadoutWeights):
    """Sennrich et al. 2017, §2.3: s'_i = RNN_1(s_{i-1}, y_{i-1}) in the first layer; query
    s'_i; c_i = attend; s_i = RNN_2(s'_i, c_i), the layers above reading
    the layer below; logits from [s_i; c_i; y_{i-1}]. `first` is RNN_1's one layer,
    `second` RNN_2's and those above. Returns (logits, hs', cs', alpha)."""
    lstm = cs is not None
    (h1,), c1 = run_layers(y_emb, hs[:1], cs[:1] if lstm else None, [first])
    c, alpha = attend(h1, H, mask)
    hs, cs = run_layers(c, [h1, *hs[1:]], [*c1, *cs[1:]] if lstm else None, second)
    logits = readout(np.concatenate([hs[-1], c, y_emb]), out)
    return logits, hs, cs, alpha


def vanilla_step(y_emb, hs, cs, context, layers, out: ReadoutWeights):
    """No attention: s_i = RNN(s_{i-1}, [y_{i-1}; c]); logits from [s_i; c; y_{i-1}].
    With context None (Sutskever et al. 2014, c only in s_0): s_i = RNN(s_{i-1}, y_{i-1});
    logits from [s_i; y_{i-1}]."""
    fixed = [] if context is None else [context]
    hs, cs = run_layers(np.concatenate([y_emb, *fixed]), hs, cs, layers)
    return readout(np.concatenate([hs[-1], *fixed, y_emb]), out), hs, cs


# --- beam search over one sentence -----------------------------------------------------------


class Searched(NamedTuple):
    outputs: list[tuple[list[int], float]]  # the nbest best, best first: (tokens, score)
    steps: int  # the steps the search ran before it stopped


def beam_search(
    log_probs: Callable[[tuple[int, ...]], Array],
    *,
    eos: int,
    beam_size: int,
    max_len: int,
    nbest: int = 1,
    alpha: float = 0.0,
) -> list[tuple[list[int], float]]:
    """`search`'s n-best outputs, best first: (tokens, summed log-probability)."""
    return search(
        log_probs, eos=eos, beam_size=beam_size, max_len=max_len, nbest=nbest, alpha=alpha
    ).outputs


def search(
    log_probs: Callable[[tuple[int, ...]], Array],
    *,
    eos: int,
    beam_size: int,
    max_len: int,
    nbest: int = 1,
    alpha: float = 0.0,
) -> Searched:
    """Beam search as every engine's search defines it, for reading: `log_probs(prefix)` is
    the model's next-token distribution (V,) after the output `prefix`. A beam of one with
    nbest 1 is greedy search.

    Each step extends each of the K live outputs by every token and keeps the 2K best
    extensions by summed log-probability. Of these, one among the K best ends an output if
    it is </s> (or, at the length limit, whatever it is), ranked by score / lp with
    lp = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, eq. 14); the K best that are not </s>
    live on. The search stops once K outputs have ended, at the limit, or once the nbest-th
    best ended output ranks at least as high as the best live one could ever reach (its
    score only falls as it grows, divided by lp now or at the limit).

    Returns:
        The nbest best ended outputs, and the step the search stopped at.
    """
    lp = lambda length: ((5 + length) / 6) ** alpha  # noqa: E731
    live: list[tuple[tuple[int, ...], float]] = [((), 0.0)]
    ended: list[tuple[float, list[int], float]] = []
    for length in range(1, max_len + 1):
        extensions = [
            (score + float(p), (*prefix, token))
            for prefix, score in live
            for token, p in enumerate(np.asarray(log_probs(prefix), dtype=np.float64))
        ]
        extensions.sort(key=lambda e: -e[0])  # stable: earlier beams, then lower ids, first
        live = []
        for rank, (score, tokens) in enumerate(extensions[: 2 * beam_size]):
            if rank < beam_size and (tokens[-1] == eos or length == max_len):
                ended.append((score / lp(length), list(tokens), score))
            elif tokens[-1] != eos and len(live) < beam_size:
                live.append((tokens, score))
        ended.sort(key=lambda e: -e[0])
        if len(ended) >= beam_size or length == max_len:
            break
        best_live = max(score for _, score in live)
        if len(ended) >= nbest and all(
            ended[nbest - 1][0] >= best_live / lp(at) for at in (length, max_len)
        ):
            break
    return Searched([(tokens, score) for _, tokens, score in ended[:nbest]], length)
