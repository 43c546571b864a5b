"""The pointer-generator in Flax (Linen): torch.py's p_gen, copy ids and extended
distribution in log space, with its parameter names (`gate`), so that a run folder's weights
map to it (See et al. 2017; reference.py has the equations)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from alignmt.model.attention.flax import IMPOSSIBLE, log_of
from alignmt.model.attention.spec import Spec
from alignmt.model.flax_init import torch_dense

Array = jax.Array


class Copy(nn.Module):
    """p_gen = sigma(w . features + b) and P(w) over the extended vocabulary."""

    features: int
    vocab_size: int

    def setup(self) -> None:
        self.gate = torch_dense(1, self.features)

    def prepare(self, src: Array, table: Array) -> Array:
        """(B, T_src) where each source position copies into (torch.py's `prepare`)."""
        src_vocab_size = table.shape[0]
        target = table[jnp.minimum(src, src_vocab_size - 1)]  # (B, T_src)
        first = jnp.argmax(src[:, :, None] == src[:, None, :], -1)  # the first of equals
        known = (src < src_vocab_size) & (target >= 0)
        return jnp.where(known, target, self.vocab_size + first)

    def __call__(self, logits: Array, alpha: Array, features: Array, ids: Array):
        """log P (B, T, V + T_src) and p_gen (B, T), from the vocabulary's logits (B, T, V),
        alpha (B, T, T_src), what p_gen reads (B, T, F) and the copy ids (B, T_src)."""
        gate = self.gate(features)  # (B, T, 1)
        generated = jax.nn.log_softmax(logits, -1) + jax.nn.log_sigmoid(gate)
        extension = jnp.full(alpha.shape, IMPOSSIBLE, generated.dtype)
        generated = jnp.concatenate([generated, extension], -1)  # (B, T, V + T_src)
        B, T, _ = alpha.shape
        rows = jnp.arange(B)[:, None, None], jnp.arange(T)[None, :, None], ids[:, None, :]
        mass = jnp.zeros(generated.shape, alpha.dtype).at[rows].add(alpha)  # sum_j alpha_ij
        copied = log_of(mass) + jax.nn.log_sigmoid(-gate)
        return jnp.logaddexp(generated, copied), jax.nn.sigmoid(gate)[..., 0]


def build(spec: Spec, *, features: int, vocab_size: int) -> Copy:
    return Copy(features, vocab_size)
