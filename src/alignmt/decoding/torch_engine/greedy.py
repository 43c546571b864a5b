"""Greedy search: one token per step and sentence, the most probable (or a sampled one, with
sample.py's `pick`), and its outputs from the record of its steps.

Every step appends one `Token` per row it decoded; the outputs are scattered from these
only at the end, so that the loop never copies a sentence's output as it grows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import torch
from torch import Tensor

from alignmt.decoding.torch_engine.plan import SearchPlan
from alignmt.decoding.torch_engine.rows import Encoded, Pending, pad_dim1, refill
from alignmt.decoding.torch_engine.steps import StepFn, full_precision
from alignmt.model.distribution import LogProbs


class Token(NamedTuple):
    """What one greedy step chose, for the W_t sentences it decoded."""

    sentences: Tensor  # (W_t,) int64 each row's sentence (its place in the input order)
    positions: Tensor  # (W_t,) int64 each row's output position
    tokens: Tensor  # (W_t,) int64 the chosen tokens
    log_probs: Tensor  # (W_t,) their log-probabilities
    attention: Tensor | None  # (W_t, T_src) alpha; None for vanilla


@torch.no_grad()
def greedy_search(
    step: StepFn, batches: Iterable[Encoded], how: SearchPlan, *, bos_id: int, eos_id: int
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]:
    """Pick the most probable token at every step (or the token `how.pick` chooses:
    sampling draws one), for at most `how.width` sentences at once.

    Sentences are decoded in their input order, batch after batch, in rows that are reused:
    when a sentence ends, the next one takes over its row at the next step (continuous
    batching), so that steps stay full until the input runs out. Then ended sentences leave
    the batch, and later steps compute only the rows still decoding.

    Args:
        step: the step function (see `StepFn`).
        batches: `Encoded` batches, each a state, a memory (named tuples of batch-first
            tensors or None) and the length limits; taken lazily, so a generator may encode
            each batch only when its first sentence is needed. Memory fields whose second
            dimension (the source length) differs between batches are zero-padded to the
            longer one: the memory's mask must read zeros as padding.
        how: reads `width`, `pick` (a step's log p (W_t, V) -> the chosen tokens and their
            log-probabilities, each (W_t,); None: the most probable) and `check`, called
            before every step.
        bos_id, eos_id: start and end symbols.

    Returns:
        For all B sentences, in order: tokens (B, T) int64, lengths (B,) of each output
        (</s> included when produced), scores (B,) summed log-probabilities, token scores
        (B, T) each token's log-probability, attention (B, T, T_src) or None. Positions
        past a sentence's length hold eos_id and zeros; T_src is the longest source.
    """
    pick = how.pick or LogProbs.best  # sampling's draw, else the most probable token
    pending = Pending(batches, bos_id)
    start = pending.take(how.width)
    if start is None:
        empty = torch.zeros(0, dtype=torch.long)
        return empty.view(0, 0), empty, torch.zeros(0), torch.zeros(0, 0), None
    state, memory, rows = start
    history = []
    while len(rows.sentence):
        if how.check is not None:
            how.check()
        dist, state, alpha = step(rows.prev, state, memory)  # (W_t, V), (W_t, T_src) | None
        prev, log_probs = pick(dist.float())  # (W_t,) each
        alpha = full_precision(alpha)
        history.append(Token(rows.sentence, rows.position, prev, log_probs, alpha))
        rows = rows._replace(position=rows.position + 1, prev=prev)
        ended = (prev == eos_id) | (rows.position >= rows.limit)  # (W_t,)
        state, memory, rows = refill(ended, pending, state, memory, rows)
    return greedy_outputs(history, pending.taken, eos_id)


def greedy_outputs(
    history: list[Token], count: int, eos_id: int
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]:
    """`greedy_search`'s outputs from the choices of every step.

    Args:
        history: every step's `Token`, in order.
        count: B, how many sentences were decoded.
        eos_id: the end symbol, which fills positions past a sentence's end.

    Returns:
        tokens (B, T) int64, lengths (B,), scores (B,), token scores (B, T), attention
        (B, T, T_src) or None; see `greedy_search`.
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
    token_scores = log_probs.new_zeros(count, steps).index_put_((sentences, positions), log_probs)
    if history[0].attention is None:
        return out, lengths, scores, token_scores, None
    src_len = max(h.attention.size(1) for h in history)
    alphas = torch.cat([pad_dim1(h.attention, src_len) for h in history])  # (rows, T_src)
    attention = alphas.new_zeros(count, steps, src_len).index_put_((sentences, positions), alphas)
    return out, lengths, scores, token_scores, attention
