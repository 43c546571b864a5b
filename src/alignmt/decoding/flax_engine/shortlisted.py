"""A Flax model (or ensemble) decoding over a lexical shortlist: a module whose child is the
model (`inner`: its parameters are the model's under that name), with `encode` and
`decode_step` as the compiled searches call them. Each sentence's allowed words (decoding/
shortlisted.py says which) ride in its memory beside the model's, so that the searches'
row moves carry them; each step's logits outside a row's words are -inf, so its log p is
renormalised over them. The model still computes the whole vocabulary: the torch engine's
outputs, not its saving.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from alignmt.config import ModelConfig
from alignmt.model.flax_distribution import LogProbs


class Listed(NamedTuple):
    """The model's memory, and each row's allowed words."""

    inner: Any  # the model's memory (a tuple of the members' for an ensemble)
    allowed: jax.Array  # (B, V) bool


class FlaxShortlisted(nn.Module):
    """`inner` keeping to a shortlist: `table` (V_src, k) each source token's words,
    `frequent` (F,) the words every sentence may use (text/shortlist.py)."""

    inner: nn.Module
    table: np.ndarray
    frequent: np.ndarray

    @property
    def cfg(self) -> ModelConfig:
        return self.inner.cfg

    @property
    def has_attention(self) -> bool:
        return self.inner.has_attention

    @property
    def pad_id(self) -> int:
        return self.inner.pad_id

    @property
    def bos_id(self) -> int:
        return self.inner.bos_id

    @property
    def eos_id(self) -> int:
        return self.inner.eos_id

    def encode(self, src, src_len):
        """The model's memory and first state; with the memory, the words each sentence
        (B, T_src) may output: its tokens' translations and the frequent words."""
        memory, state = self.inner.encode(src, src_len)
        real = jnp.where(src == self.pad_id, src[:, :1], src)  # padding: the first token again
        words = jnp.asarray(self.table)[real].reshape(len(src), -1)  # (B, T_src k)
        allowed = jnp.zeros((len(src), _vocab(self.inner)), bool)
        allowed = allowed.at[:, jnp.asarray(self.frequent)].set(True)
        allowed = allowed.at[jnp.arange(len(src))[:, None], words].set(True)
        return Listed(memory, allowed), state

    def decode_step(self, prev, state, memory: Listed):
        """The model's step, its log p renormalised over each row's allowed words."""
        dist, state, alpha = self.inner.decode_step(prev, state, memory.inner)
        return LogProbs(logits=jnp.where(memory.allowed, dist.full(), -jnp.inf)), state, alpha


def _vocab(model: Any) -> int:
    """V, the target vocabulary's size, of a model or an ensemble's first member."""
    first = model.members[0] if hasattr(model, "members") else model
    return first.tgt_vocab
