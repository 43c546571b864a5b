"""The mappings from scores to weights in Flax (JAX): the masked softmax, and sparsemax and
1.5-entmax written in JAX by sorting (reference.py's algorithms, batched), each with
torch.py's treatment of padding."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from alignmt.model.attention.flax import Stateless
from alignmt.model.attention.spec import Spec

Array = jax.Array


def masked_softmax(scores: Array, mask: Array) -> Array:
    """Softmax over the last axis with exactly zero weight where `mask` is False.

    Args:
        scores: (..., T_src) unnormalised scores e_ij.
        mask: (..., T_src) bool, True at real source tokens.

    Returns:
        (..., T_src) weights alpha_ij; each row sums to 1 over its real tokens.
    """
    # -inf, as in torch.py: exact zeros at padding whatever the scores' scale
    return jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)


def sparsemax(z: Array) -> Array:
    """Martins & Astudillo 2016, Alg. 1, over the last axis: max(z - tau, 0), with tau the
    threshold that makes the weights sum to 1 (`reference.masked_sparsemax`, batched)."""
    ordered = -jnp.sort(-z, axis=-1)  # largest first
    k = jnp.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    cumulative = jnp.cumsum(ordered, axis=-1)
    # the support is a prefix of the sorted values: its size is how many pass the test
    size = jnp.sum(1 + k * ordered > cumulative, axis=-1, keepdims=True)
    tau = (jnp.take_along_axis(cumulative, size - 1, axis=-1) - 1) / size
    return jnp.maximum(z - tau, 0)


def entmax15(z: Array) -> Array:
    """Peters, Niculae & Martins 2019, Alg. 2 (alpha = 1.5, exact by sorting), over the last
    axis: max(z / 2 - tau, 0)^2 (`reference.masked_entmax15`, batched)."""
    half = z / 2
    ordered = -jnp.sort(-half, axis=-1)
    k = jnp.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    mean = jnp.cumsum(ordered, axis=-1) / k
    spread = (1 - k * (jnp.cumsum(ordered**2, axis=-1) / k - mean**2)) / k
    # sqrt only where spread > 0: its gradient at 0 is infinite, and the prefixes past the
    # support (spread < 0) still get a zero cotangent that inf would turn into NaN
    positive = spread > 0
    tau = mean - jnp.where(positive, jnp.sqrt(jnp.where(positive, spread, 1.0)), 0.0)
    size = jnp.sum(tau <= ordered, axis=-1, keepdims=True)
    return jnp.maximum(half - jnp.take_along_axis(tau, size - 1, axis=-1), 0) ** 2


_SPARSE = {"sparsemax": sparsemax, "entmax15": entmax15}


def masked_sparse(scores: Array, mask: Array, fn: str) -> Array:
    """sparsemax or 1.5-entmax with zero weight where `mask` is False (torch.py's
    `masked_sparse`: padding gets a finite score below any threshold)."""
    top = jax.lax.stop_gradient(jnp.max(jnp.where(mask, scores, -jnp.inf), -1, keepdims=True))
    return _SPARSE[fn](jnp.where(mask, scores, top - 4))


def build(spec: Spec, *, query_dim: int, key_dim: int) -> Stateless:
    if spec.kind == "softmax":
        return Stateless(masked_softmax)
    return Stateless(functools.partial(masked_sparse, fn=spec.kind))
