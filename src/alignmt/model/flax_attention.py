"""The attention scorers, the masked softmax and the sparse mappings in Flax (Linen):
`attention.py`'s equations and parameter layout, in JAX (Bahdanau et al. 2015, eq. 6; Luong
et al. 2015, eq. 8; Vaswani et al. 2017, eq. 1; Martins & Astudillo 2016; Peters et al.
2019).

The same two-call interface as the PyTorch scorers: `project_keys(keys)` once per source
batch, then `scorer(query, proj_keys, values, mask, prior)` once per decoder step (`prior`:
local-p's Gaussian, or None). Luong's location score reads no keys (Luong et al. 2015, eq.
8). Kernels are (in, out), Flax's layout; `checkpoint.flax_io` transposes them to and from
PyTorch's (out, in).
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
    """sparsemax or 1.5-entmax with zero weight where `mask` is False (attention.py's
    `masked_sparse`: padding gets a finite score below any threshold)."""
    top = jax.lax.stop_gradient(jnp.max(jnp.where(mask, scores, -jnp.inf), -1, keepdims=True))
    return _SPARSE[fn](jnp.where(mask, scores, top - 4))


def attend(
    scores: Array, values: Array, mask: Array, fn: str = "softmax", prior: Array | None = None
) -> tuple[Array, Array]:
    """context (B, C) = sum_j alpha_ij h_j and weights (B, T_src), from scores (B, T_src)
    normalised by softmax or the sparse mapping `fn` over `mask`, times `prior` if given."""
    weights = masked_softmax(scores, mask) if fn == "softmax" else masked_sparse(scores, mask, fn)
    if prior is not None:
        weights = weights * prior
    return jnp.einsum("bt,btc->bc", weights, values), weights


class AdditiveAttention(nn.Module):
    """e_ij = v^T tanh(W_s s + W_h h_j), no biases (Bahdanau et al. 2015, App. A.1.2)."""

    query_dim: int
    key_dim: int
    attn_dim: int
    fn: str = "softmax"

    def setup(self) -> None:
        self.W_s = torch_dense(self.attn_dim, self.query_dim, bias=False)
        self.W_h = torch_dense(self.attn_dim, self.key_dim, bias=False)
        self.v = torch_dense(1, self.attn_dim, bias=False)

    def project_keys(self, keys: Array) -> Array:
        """(B, T_src, C) -> (B, T_src, A)."""
        return self.W_h(keys)

    def __call__(self, query: Array, proj_keys: Array, values: Array, mask: Array, prior=None):
        """query (B, D), proj_keys (B, T_src, A) -> context (B, C), weights (B, T_src)."""
        hidden = jnp.tanh(self.W_s(query)[:, None] + proj_keys)  # (B, T_src, A)
        return attend(self.v(hidden)[..., 0], values, mask, self.fn, prior)


class ConcatAttention(nn.Module):
    """Luong's concat score e_ij = v^T tanh(W [s; h_j]) with W stored whole, (D + C, A) here;
    its query rows and key rows are applied separately, as in attention.py."""

    query_dim: int
    key_dim: int
    attn_dim: int
    fn: str = "softmax"

    def setup(self) -> None:
        self.W = SplitDense(self.attn_dim, self.query_dim + self.key_dim)  # kernel (D + C, A)
        self.v = torch_dense(1, self.attn_dim, bias=False)

    def project_keys(self, keys: Array) -> Array:
        """(B, T_src, C) -> (B, T_src, A): the key rows of W."""
        return self.W(keys, self.query_dim, self.query_dim + self.key_dim)

    def __call__(self, query: Array, proj_keys: Array, values: Array, mask: Array, prior=None):
        proj_query = self.W(query, 0, self.query_dim)  # (B, A)
        hidden = jnp.tanh(proj_query[:, None] + proj_keys)  # (B, T_src, A)
        return attend(self.v(hidden)[..., 0], values, mask, self.fn, prior)


class GeneralAttention(nn.Module):
    """Luong's general score e_ij = s^T W h_j; W maps keys (C) to the query's size (D)."""

    query_dim: int
    key_dim: int
    fn: str = "softmax"

    def setup(self) -> None:
        self.W = torch_dense(self.query_dim, self.key_dim, bias=False)

    def project_keys(self, keys: Array) -> Array:
        """(B, T_src, C) -> (B, T_src, D)."""
        return self.W(keys)

    def __call__(self, query: Array, proj_keys: Array, values: Array, mask: Array, prior=None):
        scores = jnp.einsum("btd,bd->bt", proj_keys, query)
        return attend(scores, values, mask, self.fn, prior)


class DotAttention(nn.Module):
    """Luong's dot score e_ij = s^T h_j, or divided by sqrt(D) when `scaled`; no parameters."""

    query_dim: int
    key_dim: int
    scaled: bool = False
    fn: str = "softmax"

    def setup(self) -> None:
        if self.query_dim != self.key_dim:
            raise ValueError(
                f"dot attention needs the decoder state and encoder states to have the same "
                f"size, got query_dim={self.query_dim} and key_dim={self.key_dim}; use "
                "'general' or 'additive', or make dec_hidden equal enc_hidden x directions"
            )

    def project_keys(self, keys: Array) -> Array:
        return keys

    def __call__(self, query: Array, proj_keys: Array, values: Array, mask: Array, prior=None):
        scale = 1 / math.sqrt(self.query_dim) if self.scaled else 1.0
        scores = jnp.einsum("btd,bd->bt", proj_keys, query) * scale
        return attend(scores, values, mask, self.fn, prior)


class LocationAttention(nn.Module):
    """Luong's location score e_i = W_a s: one score per source position, up to `positions`."""

    query_dim: int
    positions: int
    fn: str = "softmax"

    def setup(self) -> None:
        self.W_a = torch_dense(self.positions, self.query_dim, bias=False)

    def project_keys(self, keys: Array) -> Array:
        """The keys themselves, for their length (attention.LocationAttention's check)."""
        if keys.shape[1] > self.positions:
            raise ValueError(
                f"this model's location attention weighs at most {self.positions} source "
                f"positions (model.positions), and a sentence has {keys.shape[1]}, </s> included"
            )
        return keys

    def __call__(self, query: Array, proj_keys: Array, values: Array, mask: Array, prior=None):
        scores = self.W_a(query)[:, : proj_keys.shape[1]]  # (B, T_src)
        return attend(scores, values, mask, self.fn, prior)


def make_attention(
    kind: str,
    *,
    query_dim: int,
    key_dim: int,
    attn_dim: int,
    fn: str = "softmax",
    positions: int = 100,
) -> nn.Module:
    """The scorer named `kind` (checked by the config: additive, concat, general, dot,
    scaled_dot, location), normalising with `fn` (softmax, sparsemax, entmax15)."""
    if kind == "additive":
        return AdditiveAttention(query_dim, key_dim, attn_dim, fn=fn)
    if kind == "concat":
        return ConcatAttention(query_dim, key_dim, attn_dim, fn=fn)
    if kind == "general":
        return GeneralAttention(query_dim, key_dim, fn=fn)
    if kind == "location":
        return LocationAttention(query_dim, positions, fn=fn)
    return DotAttention(query_dim, key_dim, scaled=kind == "scaled_dot", fn=fn)
