"""Ensembles on the flax engine: several `FlaxSeq2Seq`s decoding as one, by the mean of their
log-probabilities at each step, as the torch engine's ensembles do (torch_engine/ensemble.py
says why, and what the mean attention is and is not).

A `FlaxEnsemble` is a Flax module whose children are the members (`members_0`,
`members_1`, ...: its parameters are theirs under those names), with `encode` and
`decode_step` as search.py calls them: the state and memory are tuples of the members' own,
which the compiled searches carry and reorder as any other tree of arrays.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from alignmt.config import ModelConfig
from alignmt.model.flax_distribution import LogProbs
from alignmt.model.flax_seq2seq import FlaxSeq2Seq


class FlaxEnsemble(nn.Module):
    """Flax models with one source and one target vocabulary, searched as one model."""

    members: tuple[FlaxSeq2Seq, ...]

    @property
    def cfg(self) -> ModelConfig:
        return self.members[0].cfg

    @property
    def has_attention(self) -> bool:
        return any(model.has_attention for model in self.members)

    @property
    def pad_id(self) -> int:
        return self.members[0].pad_id

    @property
    def bos_id(self) -> int:
        return self.members[0].bos_id

    @property
    def eos_id(self) -> int:
        return self.members[0].eos_id

    def encode(self, src, src_len):
        """Every member's memory and first state, each a tuple over the members."""
        encoded = [model.encode(src, src_len) for model in self.members]
        return tuple(memory for memory, _ in encoded), tuple(state for _, state in encoded)

    def decode_step(self, prev, state: tuple, memory: tuple):
        """One step of every member: the mean log-probabilities (N, V) as the logits of its
        log p, the members' new states, and the mean alpha (N, T_src) of those that attend."""
        steps = [
            model.decode_step(prev, s, m)
            for model, s, m in zip(self.members, state, memory, strict=True)
        ]
        mean = jnp.stack([dist.full() for dist, _, _ in steps]).mean(axis=0)
        alphas = [alpha for _, _, alpha in steps if alpha is not None]
        alpha = jnp.stack(alphas).mean(axis=0) if alphas else None
        return LogProbs(logits=mean), tuple(s for _, s, _ in steps), alpha
