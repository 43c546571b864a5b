"""Sampling over any engine's `encode` and `step`, in NumPy: what the onnxruntime engine
draws with, and the blocks of uniform numbers that the flax engine draws from too, inside its
compiled loop (the torch engine draws on its own device and generator, inside its greedy
loop: torch_engine/sample.py, the same rules).

Each output token is drawn from the model's distribution instead of taken as its most
probable, for back-translation (Edunov et al. 2018) and for seeing what else a model finds
likely. Before the draw, the distribution is sharpened or flattened by a temperature, cut to
the k most probable tokens (top-k; Fan et al. 2018) and to the smallest set whose
probability reaches p (nucleus, top-p; Holtzman et al. 2020). The probability reported for
each drawn token is the model's own, before any of these.

One NumPy generator, seeded once per translate call, gives each batch of up to
`Call.width` sentences a block of uniform numbers, one per sentence and output position
(`uniform_block`), and every token is drawn by inverting the cumulative distribution with
its number: the same seed, input and batch size give the same samples on every engine that
draws this way. Here a batch steps together until its last row ends, and an engine that can
take rows out of its state and memory between steps (`select`: ONNX Runtime's arrays)
steps only the rows still going. The flax engine draws inside its compiled greedy loop with
the same blocks and rules (flax_engine/search.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from alignmt.decoding.constraint import Constraint
from alignmt.decoding.engine import Call, Engine, Searcher
from alignmt.decoding.results import Hypothesis, stack_rows, summed
from alignmt.decoding.rules import Sampling, max_output_len

# (fields, rows) -> the fields of those rows, in that order: a state's or a memory's
Select = Callable[[Any, np.ndarray], Any]


def sampler(
    engine: Engine, call: Call, bos_id: int, eos_id: int, select: Select | None = None
) -> Searcher:
    """The searcher of a sampling call on `engine`: one draw per sentence, from one
    generator seeded by `call.sampling.seed`; with `select`, ended rows leave the batch."""
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
            limit = limits[start : start + len(batch)]
            drawn += _draw_batch(engine, batch, limit, call, rng, ids, select)
        return [[h] for h in drawn]

    return searched


def _draw_batch(
    engine: Engine,
    sentences: list[list[int]],
    limits: np.ndarray,
    call: Call,
    rng: np.random.Generator,
    ids: tuple[int, int],
    select: Select | None,
) -> list[Hypothesis]:
    """One draw for each of the sentences, stepped together until the last one ends."""
    bos_id, eos_id = ids
    state, memory = engine.encode(sentences)
    rows = np.arange(len(sentences))  # the sentence of each row the engine steps
    prev = np.full(len(sentences), bos_id, np.int64)
    going = np.ones(len(sentences), bool)  # per row
    tokens: list[list[int]] = [[] for _ in sentences]
    scores: list[list[float]] = [[] for _ in sentences]
    alphas: list[list[np.ndarray]] = [[] for _ in sentences]
    uniform = uniform_block(rng, limits)  # (L, B)
    for step in range(int(limits.max())):
        if call.check is not None:
            call.check()
        log_probs, state, alpha = engine.step(prev, state, memory)  # (N, V), (N, T_src)
        prev = draw(reshaped(log_probs, call.sampling), uniform[step, rows])
        own = log_probs[np.arange(len(prev)), prev]
        for r in np.flatnonzero(going):
            b = rows[r]
            tokens[b].append(int(prev[r]))
            scores[b].append(float(own[r]))
            if alpha is not None:
                alphas[b].append(alpha[r, : len(sentences[b])])
        going &= (prev != eos_id) & (step + 1 < limits[rows])
        if not going.any():
            break
        if select is not None and not going.all():  # step only the rows still going
            kept = np.flatnonzero(going)
            state, memory = select(state, kept), select(memory, kept)
            rows, prev, going = rows[kept], prev[kept], going[kept]
    return [
        Hypothesis(t, summed(s), stack_rows(a), s)
        for t, s, a in zip(tokens, scores, alphas, strict=True)
    ]


def uniform_block(rng: np.random.Generator, limits: np.ndarray) -> np.ndarray:
    """(L, B) uniform numbers in [0, 1) for a batch of B sentences whose longest output may
    have L = max(limits) tokens: position i of sentence b draws with [i, b], whichever rows
    an engine steps."""
    return rng.random((int(limits.max()), len(limits)))


def reshaped(scores: np.ndarray, sampling: Sampling) -> np.ndarray:
    """A step's scores (N, V), whose softmax is the distribution, over the temperature,
    -inf outside the top k and outside the nucleus (ties at the k-th score are kept), as
    torch_engine/sample.py's `reshaped`; the scores themselves where none of these is set."""
    if sampling.temperature == 1 and sampling.top_k == 0 and sampling.top_p == 1:
        return scores
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


def draw(scores: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """(N,) one token per row of `scores` (N, V), drawn from their softmax with the
    uniform numbers `uniform` (N,) in [0, 1): the first token whose cumulative probability
    passes its row's number."""
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))  # unnormalised
    cumulative = np.cumsum(weights, axis=-1)  # (N, V)
    u = uniform * cumulative[:, -1]  # (N,) a share of each row's total
    # one binary search a row: a pass over the (N, V) array's comparisons costs more
    found = [np.searchsorted(row, x, side="right") for row, x in zip(cumulative, u, strict=True)]
    return np.minimum(np.array(found, np.int64), scores.shape[-1] - 1)
