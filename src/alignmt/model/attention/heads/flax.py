"""Multi-head attention in Flax (Linen): torch.py's heads as rows, with its parameter names."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from alignmt.model.attention.spec import Spec
from alignmt.model.flax_init import torch_dense

Array = jax.Array


class Heads(nn.Module):
    """W_q (D -> C), W_k, W_v and W_o (C -> C), head n's being units n d .. (n + 1) d."""

    n: int
    query_dim: int
    key_dim: int

    @property
    def size(self) -> int:
        return self.key_dim // self.n  # d

    def setup(self) -> None:
        self.W_q = torch_dense(self.key_dim, self.query_dim, bias=False)
        self.W_k = torch_dense(self.key_dim, self.key_dim, bias=False)
        self.W_v = torch_dense(self.key_dim, self.key_dim, bias=False)
        self.W_o = torch_dense(self.key_dim, self.key_dim, bias=False)

    def start(self, memory: Any) -> dict[str, Array]:
        """`heads` (B, T_src, N) zero before the first step."""
        B, T = memory.mask.shape
        return {"heads": jnp.zeros((B, T, self.n), memory.states.dtype)}

    def to_rows(self, x: Array) -> Array:
        """(B, T_src, N X) -> (B N, T_src, X)."""
        B, T, units = x.shape
        heads = x.reshape(B, T, self.n, units // self.n).transpose(0, 2, 1, 3)
        return heads.reshape(B * self.n, T, -1)

    def from_rows(self, x: Array) -> Array:
        """(B N, T_src, X) -> (B, T_src, N X)."""
        rows, T, units = x.shape
        heads = x.reshape(rows // self.n, self.n, T, units).transpose(0, 2, 1, 3)
        return heads.reshape(rows // self.n, T, -1)

    def prepare(self, states: Array, score: Any) -> dict[str, Array]:
        """The heads' keys and values (B, T_src, C), and the score's slots per head."""
        keys = self.W_k(states)
        made = score.prepare(self.to_rows(keys))
        return {"head_keys": keys, "head_values": self.W_v(states)} | {
            name: self.from_rows(slot) for name, slot in made.items()
        }

    def split(self, query: Array, memory: Any, score_slots: tuple[str, ...]) -> tuple[Array, Any]:
        """B N head queries (B N, d), and the memory as each head sees it."""
        view = memory._replace(
            states=self.to_rows(memory.slots["head_keys"]),
            mask=jnp.repeat(memory.mask, self.n, axis=0),
            slots={name: self.to_rows(memory.slots[name]) for name in score_slots},
        )
        return self.W_q(query).reshape(query.shape[0] * self.n, self.size), view

    def join(self, weights: Array, memory: Any) -> tuple[Array, Array]:
        """c_i (B, C) and alpha_i (B, T_src) from every head's weights (B, N, T_src)."""
        B, T = memory.mask.shape
        values = memory.slots["head_values"].reshape(B, T, self.n, self.size)
        contexts = jnp.einsum("bnt,btnd->bnd", weights, values).reshape(B, -1)
        return self.W_o(contexts), weights.mean(axis=1)


def build(spec: Spec, *, query_dim: int, key_dim: int) -> Heads:
    return Heads(spec.settings["heads"], query_dim, key_dim)
