"""Local attention in Flax (Linen): window.py's window, p_i and Gaussian (Luong et al. 2015,
§3.2, eq. 9-10), with its parameter names, and the same choices where the paper is silent."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from alignmt.model.flax_init import torch_dense

Array = jax.Array


class LocalWindow(nn.Module):
    """p_i and the window [p_i - D, p_i + D] around it, for local_m or local_p."""

    kind: str  # local_m | local_p
    query_dim: int
    attn_dim: int
    half_width: int  # D

    def setup(self) -> None:
        if self.kind == "local_p":
            self.W_p = torch_dense(self.attn_dim, self.query_dim, bias=False)
            self.v_p = torch_dense(1, self.attn_dim, bias=False)

    def __call__(self, query: Array, step: Array, mask: Array):
        """query (B, D), step (B,) i, mask (B, T_src) -> (the real positions inside the
        window (B, T_src), local-p's Gaussian (B, T_src) or None, p_i (B,))."""
        length = mask.sum(-1).astype(query.dtype)  # (B,) S
        if self.kind == "local_m":
            centre = jnp.minimum(step, length - 1)
        else:
            centre = length * jax.nn.sigmoid(self.v_p(jnp.tanh(self.W_p(query)))[:, 0])
        distance = jnp.arange(mask.shape[-1], dtype=query.dtype) - centre[:, None]  # (B, T_src)
        inside = mask & (jnp.abs(distance) <= self.half_width)
        prior = None
        if self.kind == "local_p":
            sigma = self.half_width / 2
            prior = jnp.exp(-(distance**2) / (2 * sigma**2))
        return inside, prior, centre
