"""Greedy search's record of its steps, and its outputs from that record.

Every step appends one `Token` per row it decoded; the outputs are scattered from these
only at the end, so that the loop never copies a sentence's output as it grows.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from alignmt.decoding.rows import pad_dim1


class Token(NamedTuple):
    """What one greedy step chose, for the W_t sentences it decoded."""

    sentences: Tensor  # (W_t,) int64 each row's sentence (its place in the input order)
    positions: Tensor  # (W_t,) int64 each row's output position
    tokens: Tensor  # (W_t,) int64 the chosen tokens
    log_probs: Tensor  # (W_t,) their log-probabilities
    attention: Tensor | None  # (W_t, T_src) alpha; None for vanilla


def greedy_outputs(
    history: list[Token], count: int, eos_id: int
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """`greedy_search`'s outputs from the choices of every step.

    Args:
        history: every step's `Token`, in order.
        count: B, how many sentences were decoded.
        eos_id: the end symbol, which fills positions past a sentence's end.

    Returns:
        tokens (B, T) int64, lengths (B,), scores (B,), attention (B, T, T_src) or None;
        see `greedy_search`.
    """
    sentences, positions, tokens, log_probs = (
        torch.cat([getattr(h, field) for h in history])
        for field in ("sentences", "positions", "tokens", "log_probs")
    )  # (all rows of all steps,)
    steps = int(positions.max()) + 1
    out = tokens.new_full((count, steps), eos_id).index_put_((sentences, positions), tokens)
    lengths = torch.zeros(count, dtype=torch.long, device=tokens.device)
    lengths.scatter_reduce_(0, sentences, positions + 1, "amax")
    scores = log_probs.new_zeros(count).index_add_(0, sentences, log_probs)
    if history[0].attention is None:
        return out, lengths, scores, None
    src_len = max(h.attention.size(1) for h in history)
    alphas = torch.cat([pad_dim1(h.attention, src_len) for h in history])  # (rows, T_src)
    attention = alphas.new_zeros(count, steps, src_len).index_put_((sentences, positions), alphas)
    return out, lengths, scores, attention
