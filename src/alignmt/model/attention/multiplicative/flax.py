"""The multiplicative scores in Flax (Linen): torch.py's general, scaled general, dot and
scaled dot scores, with their parameter names."""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from alignmt.model.attention.spec import Spec
from alignmt.model.flax_init import torch_dense

Array = jax.Array


class GeneralScore(nn.Module):
    """e_ij = s^T W h_j; W maps keys (C) to the query's size (D). `scaled`: times g, a
    learned scalar, 1 / sqrt(D) at first."""

    query_dim: int
    key_dim: int
    scaled: bool = False

    def setup(self) -> None:
        self.W = torch_dense(self.query_dim, self.key_dim, bias=False)
        if self.scaled:
            start = 1 / math.sqrt(self.query_dim)
            self.g = self.param("g", lambda key: jnp.asarray(start, jnp.float32))

    def prepare(self, states: Array) -> dict[str, Array]:
        return {"keys": self.W(states)}  # (B, T_src, D)

    def __call__(self, query: Array, memory: Any, term: Array | None = None) -> Array:
        scores = jnp.einsum("btd,bd->bt", memory.slots["keys"], query)
        return scores * self.g if self.scaled else scores


class DotScore(nn.Module):
    """e_ij = s^T h_j, or divided by sqrt(D) when `scaled`; no parameters."""

    query_dim: int
    key_dim: int
    scaled: bool = False

    def setup(self) -> None:
        if self.query_dim != self.key_dim:
            raise ValueError(
                f"dot attention needs the decoder state and encoder states to have the same "
                f"size, got query_dim={self.query_dim} and key_dim={self.key_dim}; use "
                "'general' or 'additive', or make dec_hidden equal enc_hidden x directions"
            )

    def prepare(self, states: Array) -> dict[str, Array]:
        return {}

    def __call__(self, query: Array, memory: Any, term: Array | None = None) -> Array:
        scale = 1 / math.sqrt(self.query_dim) if self.scaled else 1.0
        return jnp.einsum("btd,bd->bt", memory.states, query) * scale


def build(spec: Spec, *, query_dim: int, key_dim: int) -> nn.Module:
    if spec.kind in ("general", "scaled_general"):
        return GeneralScore(query_dim, key_dim, scaled=spec.kind == "scaled_general")
    return DotScore(query_dim, key_dim, scaled=spec.kind == "scaled_dot")
