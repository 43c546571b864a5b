"""Sampling over any engine's `encode` and `step`, in NumPy: what the flax and onnxruntime
engines draw with (the torch engine draws on its own device, inside its greedy loop:
torch_engine/sample.py, the same rules).

Each output token is drawn from the model's distribution instead of taken as its most
probable, for back-translation (Edunov et al. 2018) and for seeing what else a model finds
likely. Before the draw, the distribution is sharpened or flattened by a temperature, cut to
the k most probable tokens (top-k; Fan et al. 2018) and to the smallest set whose
probability reaches p (nucleus, top-p; Holtzman et al. 2020). The probability reported for
each drawn token is the model's own, before any of these.

One NumPy generator, seeded once per translate call, draws every token by inverting the
cumulative distribution with a uniform number, so the same seed, input and batch size give
the same samples on either engine. A batch of up to `Call.width` sentences steps together
until its last row ends; a row that has ended is stepped on but no longer read.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from alignmt.decoding.constraint import Constraint
from alignmt.decoding.engine import Call, Engine, Searcher
from alignmt.decoding.results import Hypothesis, stack_rows, summed
from alignmt.decoding.rules import Sampling, max_output_len


def sampler(engine: Engine, call: Call, bos_id: int, eos_id: int) -> Searcher:
    """The searcher of a sampling call on `engine`: one draw per sentence, from one
    generator seeded by `call.sampling.seed`."""
    rng = np.random.default_rng(call.sampling.seed)

    def searched(
        sentences: list[list[int]], constraints: Sequence[Constraint | None] | None
    ) -> list[list[Hypothesis]]:
        search = call.search
        limits = max_output_len(
            [len(s) for s in sentences], search.max_len_ratio, search.max_len_offset
        )
        drawn = []
        for start in range(0, len(sentences), call.width):
            batch = sentences[start : start + call.width]
            ids = (bos_id, eos_id)
            drawn += _draw_batch(engine, batch, limits[start : start + len(batch)], call, rng, ids)
        return [[h] for h in drawn]

    return searched


def _draw_batch(
    engine: Engine,
    sentences: list[list[int]],
    limits: np.ndarray,
    call: Call,
    rng: np.random.Generator,
    ids: tuple[int, int],
) -> list[Hypothesis]:
    """One draw for each of the sentences, stepped together until the last one ends."""
    bos_id, eos_id = ids
    state, memory = engine.encode(sentences)
    rows = np.arange(len(sentences))
    prev = np.full(len(sentences), bos_id, np.int64)
    going = np.ones(len(sentences), bool)
    tokens: list[list[int]] = [[] for _ in sentences]
    scores: list[list[float]] = [[] for _ in sentences]
    alphas: list[list[np.ndarray]] = [[] for _ in sentences]
    for step in range(int(limits.max())):
        if call.check is not None:
            call.check()
        log_probs, state, alpha = engine.step(prev, state, memory)  # (N, V), (N, T_src)
        prev = draw(reshaped(log_probs, call.sampling), rng)
        own = log_probs[rows, prev]
        for r in np.flatnonzero(going):
            tokens[r].append(int(prev[r]))
            scores[r].append(float(own[r]))
            if alpha is not None:
                alphas[r].append(alpha[r, : len(sentences[r])])
        going &= (prev != eos_id) & (step + 1 < limits)
        if not going.any():
            break
    return [
        Hypothesis(t, summed(s), stack_rows(a), s)
        for t, s, a in zip(tokens, scores, alphas, strict=True)
    ]


def reshaped(scores: np.ndarray, sampling: Sampling) -> np.ndarray:
    """A step's scores (N, V), whose softmax is the distribution, over the temperature,
    -inf outside the top k and outside the nucleus (ties at the k-th score are kept), as
    torch_engine/sample.py's `reshaped`."""
    scores = scores.astype(np.float32) / np.float32(sampling.temperature)
    V = scores.shape[-1]
    if 0 < sampling.top_k < V:
        kth = np.partition(scores, V - sampling.top_k, axis=-1)[:, V - sampling.top_k, None]
        scores = np.where(scores < kth, -np.inf, scores)
    if sampling.top_p < 1:
        order = np.argsort(-scores, axis=-1, kind="stable")
        ordered = np.take_along_axis(scores, order, axis=-1)
        probs = softmax(ordered)
        # a token leaves the nucleus once the tokens before it already hold p: the most
        # probable one always stays
        out = np.cumsum(probs, axis=-1) - probs >= sampling.top_p
        np.put_along_axis(scores, order, np.where(out, -np.inf, ordered), axis=-1)
    return scores


def softmax(scores: np.ndarray) -> np.ndarray:
    """(N, V) -> (N, V) probabilities; -inf scores get 0."""
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True)


def draw(scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(N,) one token per row of `scores` (N, V), drawn from their softmax: the first
    whose cumulative probability passes a uniform number."""
    cumulative = np.cumsum(softmax(scores), axis=-1)  # (N, V)
    u = rng.random((len(scores), 1)) * cumulative[:, -1:]
    return np.minimum((cumulative <= u).sum(axis=-1), scores.shape[-1] - 1)
