"""Ensembles: several models decoding as one, by the mean of their log-probabilities at each
step (Sutskever et al. 2014, §3.4; Bahdanau et al. 2015 ensembled too).

An `Ensemble` looks like a `Seq2Seq` to search: `encode` and `decode_step`, with the state
and memory of all its members joined into one flat tuple of batch-first tensors, so that
rows.py's operations (continuous batching, beam reordering) move every member's rows
together without knowing there are several. The members must read the same source ids and
write the same target vocabulary: the translator checks the vocabularies and tokenizers.

At each step the mean of the members' log-probabilities is what search reads as logits:
normalised, the ensemble's distribution is the normalised geometric mean of the members' (a
product of experts; Hinton 2002). Its attention is the mean of the
members' α_i. That is a summary, not a mechanism: no member attended that way, and members
whose attention disagrees (one aligned to the next source word, another to the current one)
average to a blur that none of them computed. An ensemble of one model decodes as that model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from alignmt.decoding.torch_engine.steps import full_precision
from alignmt.model.distribution import LogProbs
from alignmt.model.seq2seq import Seq2Seq

Layout = list[tuple[Any, int]]  # each member's state (or memory) type and field count


class Ensemble(nn.Module):
    """Models with one source and one target vocabulary, searched as one model."""

    def __init__(self, members: Sequence[Seq2Seq]) -> None:
        super().__init__()
        first = members[0]
        for i, model in enumerate(members[1:], 1):
            ids = (model.pad_id, model.bos_id, model.eos_id, model.decoder.vocab_size)
            if ids != (first.pad_id, first.bos_id, first.eos_id, first.decoder.vocab_size):
                raise ValueError(
                    f"ensemble member {i + 1} writes another target vocabulary than member 1 "
                    f"(pad, <s>, </s> and size {ids} against "
                    f"{(first.pad_id, first.bos_id, first.eos_id, first.decoder.vocab_size)})"
                )
        for i, model in enumerate(members[1:], 1):
            if model.copies != first.copies:
                copier = i + 1 if model.copies else 1
                raise ValueError(
                    f"ensemble member {copier} copies source words (model.copy) and the other "
                    "does not: their outputs' vocabularies differ; ensemble copying models "
                    "with copying models only"
                )
        self.members = nn.ModuleList(members)
        # what packed.py packs for search: every member's decoder
        self.decoder = nn.ModuleList(model.decoder for model in members)
        self.pad_id, self.bos_id, self.eos_id = first.pad_id, first.bos_id, first.eos_id
        self._layouts: tuple[Layout, Layout] | None = None  # (memory, state), set by encode

    @property
    def has_attention(self) -> bool:
        return any(model.has_attention for model in self.members)

    @property
    def copies(self) -> bool:
        """Whether its members copy source words (all do, or none)."""
        return self.members[0].copies

    def encode(self, src: Tensor, src_len: Tensor) -> tuple[tuple, tuple]:
        """Every member's memory and initial state, each joined into one flat tuple."""
        encoded = [model.encode(src, src_len) for model in self.members]
        memories, states = [m for m, _ in encoded], [s for _, s in encoded]
        self._layouts = (_layout(memories), _layout(states))
        return _join(memories), _join(states)

    def decode_step(self, prev: Tensor, state: tuple, memory: tuple):
        """One step of every member: the mean log-probabilities (N, V) as the logits of its
        log p, the joined new state, and the mean attention (N, T_src) of the members that
        attend, or None."""
        memory_layout, state_layout = self._layouts
        steps = [
            model.decode_step(prev, s, m)
            for model, s, m in zip(
                self.members,
                _split(state, state_layout),
                _split(memory, memory_layout),
                strict=True,
            )
        ]
        log_probs = torch.stack([dist.float().full() for dist, _, _ in steps])  # (M, N, V)
        alphas = [full_precision(alpha) for _, _, alpha in steps if alpha is not None]
        alpha = torch.stack(alphas).mean(dim=0) if alphas else None
        mean = LogProbs(logits=log_probs.mean(dim=0))
        return mean, _join([s for _, s, _ in steps]), alpha


def _layout(parts: list[Any]) -> Layout:
    return [(type(part), 0 if part is None else len(part)) for part in parts]


def _join(parts: list[Any]) -> tuple:
    """Members' tuples (or None) as one flat tuple of their fields."""
    return tuple(field for part in parts if part is not None for field in part)


def _split(fields: tuple, layout: Layout) -> list[Any]:
    """`_join`'s inverse: each member's own (named) tuple, or None."""
    parts, start = [], 0
    for kind, count in layout:
        chunk = fields[start : start + count]
        start += count
        if kind is type(None):
            parts.append(None)
        elif hasattr(kind, "_make"):
            parts.append(kind._make(chunk))
        else:
            parts.append(kind(chunk))
    return parts
