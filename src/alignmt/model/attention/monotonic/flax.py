"""Monotonic attention in Flax (Linen): torch.py's expected alignment in training and the
walk otherwise, with its parameter r and its state slots (Raffel et al. 2017)."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from alignmt.model.attention.flax import Slots
from alignmt.model.attention.spec import Spec

Array = jax.Array


class Monotonic(nn.Module):
    bias: float  # r at first
    noise: float  # the standard deviation of the pre-sigmoid noise in training

    def setup(self) -> None:
        self.r = self.param("r", lambda key: jnp.asarray(self.bias, jnp.float32))

    def start(self, memory: Any) -> Slots:
        previous = jnp.zeros(memory.mask.shape, memory.states.dtype).at[:, 0].set(1.0)
        zero = jnp.zeros(memory.mask.shape[:1], memory.states.dtype)
        return {"previous": previous, "position": zero, "stop": zero}

    def __call__(self, scores: Array, mask: Array, slots: Slots, train: bool):
        energy = scores + self.r
        if train and self.noise > 0:
            draw = jax.random.normal(self.make_rng("dropout"), energy.shape, energy.dtype)
            energy = energy + self.noise * draw
        energy = jnp.where(mask, energy, 0.0)
        p = jnp.where(last_real(mask), 1.0, jax.nn.sigmoid(energy)) * mask  # (B, T_src)
        if train:
            alpha = expected_alignment(p, jax.nn.log_sigmoid(-energy), slots["previous"])
        else:
            alpha = walk(p, jnp.argmax(slots["previous"], -1))
        return alpha, slots | {"stop": jnp.sum(alpha * p, -1)}

    def update(self, alpha: Array, slots: Slots) -> Slots:
        positions = jnp.arange(alpha.shape[-1], dtype=alpha.dtype)
        return slots | {"previous": alpha, "position": alpha @ positions}


def last_real(mask: Array) -> Array:
    """(B, T_src) bool: each row's last real position."""
    return jnp.arange(mask.shape[-1]) == jnp.sum(mask, -1, keepdims=True) - 1


def expected_alignment(p: Array, log_move: Array, previous: Array) -> Array:
    """Raffel eq. 13 as torch.py's `expected_alignment`: alpha_{i-1} M, M_kj = exp(L_j - L_k)
    for k <= j, times p."""
    L = jnp.cumsum(log_move, -1) - log_move  # (B, T_src)
    exponent = L[:, None, :] - L[:, :, None]  # (B, k, j)
    reaches = jnp.triu(jnp.ones((p.shape[-1], p.shape[-1]), bool))
    stay = jnp.exp(jnp.where(reaches, exponent, -jnp.inf))
    return p * jnp.einsum("bk,bkj->bj", previous, stay)


def walk(p: Array, start: Array) -> Array:
    """One-hot alpha (B, T_src) at the first j >= start (B,) with p_ij >= 0.5."""
    positions = jnp.arange(p.shape[-1])
    stops = (positions >= start[:, None]) & (p >= 0.5)
    first = jnp.argmax(stops, -1)  # the first True
    return (positions == first[:, None]).astype(p.dtype)


def build(spec: Spec, *, query_dim: int, key_dim: int) -> nn.Module:
    return Monotonic(spec.settings["bias"], spec.settings["noise"])
