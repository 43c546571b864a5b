"""Sampling inside the flax engine's compiled greedy loop (search.py): decoding/sample.py's
draws in JAX. Each step's distribution is reshaped by the temperature, top-k and top-p as
every engine reshapes it, and a token is drawn by inverting the cumulative distribution with
the step's uniform numbers, from the same blocks that decoding/sample.py gives the other
engines (`uniform_block`), so that one seed draws the same samples here as on ONNX Runtime,
but for float32 rounding at the boundary between two tokens."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from alignmt.decoding.rules import Sampling
from alignmt.decoding.sample import uniform_block
from alignmt.model.flax_distribution import LogProbs

Array = jax.Array


def drawn(dist: LogProbs, sampling: Sampling, uniform: Array) -> tuple[Array, Array]:
    """(B,) each row's drawn token and (B,) its log-probability under the model (before the
    reshaping), from a step's distribution over (B, V) and `uniform` (B,) in [0, 1)."""
    scores = reshaped(dist.scores.astype(jnp.float32), sampling)
    weights = jnp.exp(scores - scores.max(axis=-1, keepdims=True))  # unnormalised
    cumulative = jnp.cumsum(weights, axis=-1)  # (B, V)
    passed = cumulative <= (uniform * cumulative[:, -1])[:, None]
    token = jnp.minimum(passed.sum(axis=-1), scores.shape[-1] - 1)
    log_p = jnp.take_along_axis(dist.full(), token[:, None], axis=-1)[:, 0]
    return token, log_p


def uniform_rows(
    rng: np.random.Generator, limit: np.ndarray, sentences: int, max_len: int
) -> np.ndarray:
    """(max_len, B) the uniform numbers of a padded batch: its first `sentences` rows' block
    (decoding/sample.py's `uniform_block` of their limits), zeros elsewhere."""
    block = uniform_block(rng, limit[:sentences])  # (L, sentences)
    uniform = np.zeros((max_len, len(limit)), np.float32)
    uniform[: len(block), :sentences] = block
    return uniform


def reshaped(scores: Array, sampling: Sampling) -> Array:
    """decoding/sample.py's `reshaped`: (B, V) scores over the temperature, -inf outside
    the top k (ties at the k-th kept) and outside the nucleus."""
    if sampling.temperature == 1 and sampling.top_k == 0 and sampling.top_p == 1:
        return scores
    scores = scores / sampling.temperature
    if 0 < sampling.top_k < scores.shape[-1]:
        kth = jax.lax.top_k(scores, sampling.top_k)[0][:, -1:]
        scores = jnp.where(scores < kth, -jnp.inf, scores)
    if sampling.top_p < 1:
        order = jnp.argsort(-scores, axis=-1, stable=True)
        ordered = jnp.take_along_axis(scores, order, axis=-1)
        probs = jax.nn.softmax(ordered, axis=-1)
        # a token leaves the nucleus once the tokens before it already hold p
        out = jnp.cumsum(probs, axis=-1) - probs >= sampling.top_p
        rows = jnp.arange(scores.shape[0])[:, None]
        scores = scores.at[rows, order].set(jnp.where(out, -jnp.inf, ordered))
    return scores
