"""The attention scorers and the masked softmax in Flax (Linen): `attention.py`'s equations and
parameter layout, in JAX (Bahdanau et al. 2015, eq. 6; Luong et al. 2015, eq. 8; Vaswani et
al. 2017, eq. 1).

The same two-call interface as the PyTorch scorers: `project_keys(keys)` once per source
batch, then `scorer(query, proj_keys, values, mask)` once per decoder step. Kernels are
(in, out), Flax's layout; `checkpoint.flax_io` transposes them to and from PyTorch's (out, in).
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from alignmt.model.flax_init import SplitDense, torch_dense

Array = jax.Array


def masked_softmax(scores: Array, mask: Array) -> Array:
    """Softmax over the last axis with exactly zero weight where `mask` is False.

    Args:
        scores: (..., T_src) unnormalised scores e_ij.
        mask: (..., T_src) bool, True at real source tokens.

    Returns:
        (..., T_src) weights alpha_ij; each row sums to 1 over its real tokens.
    """
    # -inf, as in attention.py: exact zeros at padding whatever the scores' scale
    return jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)


def attend(scores: Array, values: Array, mask: Array) -> tuple[Array, Array]:
    """context (B, C) = sum_j alpha_ij h_j and weights (B, T_src), from scores (B, T_src)."""
    weights = masked_softmax(scores, mask)
    return jnp.einsum("bt,btc->bc", weights, values), weights


class AdditiveAttention(nn.Module):
    """e_ij = v^T tanh(W_s s + W_h h_j), no biases (Bahdanau et al. 2015, App. A.1.2)."""

    query_dim: int
    key_dim: int
    attn_dim: int

    def setup(self) -> None:
        self.W_s = torch_dense(self.attn_dim, self.query_dim, bias=False)
        self.W_h = torch_dense(self.attn_dim, self.key_dim, bias=False)
        self.v = torch_dense(1, self.attn_dim, bias=False)

    def project_keys(self, keys: Array) -> Array:
        """(B, T_src, C) -> (B, T_src, A)."""
        return self.W_h(keys)

    def __call__(self, query: Array, proj_keys: Array, values: Array, mask: Array):
        """query (B, D), proj_keys (B, T_src, A) -> context (B, C), weights (B, T_src)."""
        hidden = jnp.tanh(self.W_s(query)[:, None] + proj_keys)  # (B, T_src, A)
        return attend(self.v(hidden)[..., 0], values, mask)


class ConcatAttention(nn.Module):
    """Luong's concat score e_ij = v^T tanh(W [s; h_j]) with W stored whole, (D + C, A) here;
    its query rows and key rows are applied separately, as in attention.py."""

    query_dim: int
    key_dim: int
    attn_dim: int

    def setup(self) -> None:
        self.W = SplitDense(self.attn_dim, self.query_dim + self.key_dim)  # kernel (D + C, A)
        self.v = torch_dense(1, self.attn_dim, bias=False)

    def project_keys(self, keys: Array) -> Array:
        """(B, T_src, C) -> (B, T_src, A): the key rows of W."""
        return self.W(keys, self.query_dim, self.query_dim + self.key_dim)

    def __call__(self, query: Array, proj_keys: Array, values: Array, mask: Array):
        proj_query = self.W(query, 0, self.query_dim)  # (B, A)
        hidden = jnp.tanh(proj_query[:, None] + proj_keys)  # (B, T_src, A)
        return attend(self.v(hidden)[..., 0], values, mask)


class GeneralAttention(nn.Module):
    """Luong's general score e_ij = s^T W h_j; W maps keys (C) to the query's size (D)."""

    query_dim: int
    key_dim: int

    def setup(self) -> None:
        self.W = torch_dense(self.query_dim, self.key_dim, bias=False)

    def project_keys(self, keys: Array) -> Array:
        """(B, T_src, C) -> (B, T_src, D)."""
        return self.W(keys)

    def __call__(self, query: Array, proj_keys: Array, values: Array, mask: Array):
        return attend(jnp.einsum("btd,bd->bt", proj_keys, query), values, mask)


class DotAttention(nn.Module):
    """Luong's dot score e_ij = s^T h_j, or divided by sqrt(D) when `scaled`; no parameters."""

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

    def project_keys(self, keys: Array) -> Array:
        return keys

    def __call__(self, query: Array, proj_keys: Array, values: Array, mask: Array):
        scale = 1 / math.sqrt(self.query_dim) if self.scaled else 1.0
        return attend(jnp.einsum("btd,bd->bt", proj_keys, query) * scale, values, mask)


def make_attention(kind: str, *, query_dim: int, key_dim: int, attn_dim: int) -> nn.Module:
    """The scorer named `kind` (checked by the config: additive, concat, general, dot,
    scaled_dot)."""
    if kind == "additive":
        return AdditiveAttention(query_dim, key_dim, attn_dim)
    if kind == "concat":
        return ConcatAttention(query_dim, key_dim, attn_dim)
    if kind == "general":
        return GeneralAttention(query_dim, key_dim)
    return DotAttention(query_dim, key_dim, scaled=kind == "scaled_dot")
