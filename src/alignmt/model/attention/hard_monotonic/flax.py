"""Exact hard monotonic attention in Flax (Linen): torch.py's prior from the posterior, its
slots of probabilities and its finite log 0 (Wu & Cotterell 2019)."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from alignmt.model.attention.flax import IMPOSSIBLE, Slots, log_of
from alignmt.model.attention.spec import Spec

Array = jax.Array


class HardMonotonic(nn.Module):
    def start(self, memory: Any) -> Slots:
        first = jnp.zeros(memory.mask.shape, memory.states.dtype).at[:, 0].set(1.0)
        zero = jnp.zeros(memory.mask.shape[:1], memory.states.dtype)
        return {"prior": first, "posterior": first, "position": zero, "move": zero}

    def __call__(self, scores: Array, mask: Array, slots: Slots, train: bool):
        log_P = log_transitions(scores, mask)  # (B, k, j)
        posterior = slots["posterior"]
        log_prior = jax.nn.logsumexp(log_of(posterior)[:, :, None] + log_P, axis=1)
        alpha = jnp.exp(jnp.where(mask, log_prior, IMPOSSIBLE))
        stay = jnp.sum(posterior * jnp.exp(jnp.diagonal(log_P, axis1=1, axis2=2)), -1)
        return alpha, slots | {"move": 1.0 - stay}

    def update(self, alpha: Array, slots: Slots) -> Slots:
        positions = jnp.arange(alpha.shape[-1], dtype=alpha.dtype)
        return slots | {"prior": alpha, "position": alpha @ positions}

    def log_weights(self, slots: Slots) -> Array:
        return log_of(slots["prior"])

    def observe(self, slots: Slots, emitted: Array) -> Slots:
        return slots | {"posterior": jax.nn.softmax(log_of(slots["prior"]) + emitted, -1)}


def log_transitions(scores: Array, mask: Array) -> Array:
    """(B, k, j) log p(a_i = j | a_{i-1} = k) over the real j >= k."""
    T = scores.shape[-1]
    reach = jnp.triu(jnp.ones((T, T), bool)) & mask[:, None, :]
    return jax.nn.log_softmax(jnp.where(reach, scores[:, None, :], IMPOSSIBLE), -1)


def build(spec: Spec, *, query_dim: int, key_dim: int) -> nn.Module:
    return HardMonotonic()
