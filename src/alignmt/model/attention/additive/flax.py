"""The scores with a hidden layer in Flax (Linen): torch.py's additive and concat scores,
with their parameter names; kernels are (in, out), Flax's layout."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from alignmt.model.attention.spec import Spec
from alignmt.model.flax_init import SplitDense, torch_dense

Array = jax.Array


class AdditiveScore(nn.Module):
    """e_ij = v^T tanh(W_s s + W_h h_j [+ term_ij]), no biases (Bahdanau et al. 2015)."""

    query_dim: int
    key_dim: int
    attn_dim: int

    def setup(self) -> None:
        self.W_s = torch_dense(self.attn_dim, self.query_dim, bias=False)
        self.W_h = torch_dense(self.attn_dim, self.key_dim, bias=False)
        self.v = torch_dense(1, self.attn_dim, bias=False)

    def prepare(self, states: Array) -> dict[str, Array]:
        return {"keys": self.W_h(states)}  # (B, T_src, A)

    def __call__(self, query: Array, memory: Any, term: Array | None = None) -> Array:
        pre = self.W_s(query)[:, None] + memory.slots["keys"]  # (B, T_src, A)
        if term is not None:
            pre = pre + term
        return self.v(jnp.tanh(pre))[..., 0]  # (B, T_src)


class ConcatScore(nn.Module):
    """e_ij = v^T tanh(W [s; h_j] [+ term_ij]) with W stored whole, (D + C, A) here; its query
    rows and key rows are applied separately (Luong et al. 2015)."""

    query_dim: int
    key_dim: int
    attn_dim: int

    def setup(self) -> None:
        self.W = SplitDense(self.attn_dim, self.query_dim + self.key_dim)  # kernel (D + C, A)
        self.v = torch_dense(1, self.attn_dim, bias=False)

    def prepare(self, states: Array) -> dict[str, Array]:
        return {"keys": self.W(states, self.query_dim, self.query_dim + self.key_dim)}

    def __call__(self, query: Array, memory: Any, term: Array | None = None) -> Array:
        pre = self.W(query, 0, self.query_dim)[:, None] + memory.slots["keys"]
        if term is not None:
            pre = pre + term
        return self.v(jnp.tanh(pre))[..., 0]


def build(spec: Spec, *, query_dim: int, key_dim: int) -> nn.Module:
    kind = AdditiveScore if spec.kind == "additive" else ConcatScore
    return kind(query_dim, key_dim, spec.settings["attn_dim"])
