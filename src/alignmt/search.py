"""Greedy search over token ids.

Knows nothing about words, files or checkpoints. The core, `greedy_search`, runs any step
function `step(prev, state) -> (logits, state, alpha)`; `decode` binds it to a Seq2Seq.
The state is a tuple of batch-first tensors (or None), so a beam search can reorder it
with one `index_select` per field and slot in beside greedy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor

from alignmt.model import Seq2Seq

# step(prev (N,) int64, state) -> (logits (N, V), new state, alpha (N, T_src) or None)
StepFn = Callable[[Tensor, Any], tuple[Tensor, Any, "Tensor | None"]]


@dataclass
class Hypothesis:
    tokens: list[int]  # output ids; ends with eos_id unless the length limit stopped it
    score: float  # sum of the tokens' log-probabilities
    attention: Tensor | None  # (len(tokens), src_len) alpha of each output token; None: vanilla


def max_output_len(src_len: Tensor, ratio: float, offset: int) -> Tensor:
    """(B,) the most tokens (</s> included) each sentence may produce: ratio * |x| + offset,
    and at least one."""
    return ((src_len.float() * ratio).long() + offset).clamp(min=1)


@torch.no_grad()
def greedy_search(
    step: StepFn, state: Any, *, bos_id: int, eos_id: int, max_len: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """Pick the most probable token at every step, for a whole batch at once.

    Args:
        step: the step function (see `StepFn`).
        state: the initial state, B rows.
        bos_id, eos_id: start and end symbols.
        max_len: (B,) int64 length limit of each output, </s> included.

    Returns:
        tokens (B, T) int64, lengths (B,) of each output (</s> included when produced),
        scores (B,) summed log-probabilities, attention (B, T, T_src) or None. Positions past
        a sentence's length hold eos_id and zero attention.
    """
    batch = max_len.size(0)
    prev = torch.full((batch,), bos_id, dtype=torch.long, device=max_len.device)
    lengths = max_len.clone()
    scores = 0.0  # becomes a (B,) tensor of the logits' dtype at the first step
    done = torch.zeros(batch, dtype=torch.bool, device=max_len.device)
    tokens, weights = [], []
    for t in range(int(max_len.max())):
        logits, state, alpha = step(prev, state)
        best, prev = logits.log_softmax(dim=-1).max(dim=-1)  # (B,), (B,)
        prev = prev.masked_fill(done, eos_id)
        scores = scores + best.masked_fill(done, 0.0)
        tokens.append(prev)
        if alpha is not None:
            weights.append(alpha.masked_fill(done.unsqueeze(1), 0.0))
        ended = ~done & (prev == eos_id)
        lengths = torch.where(ended, t + 1, lengths)
        done |= ended | (t + 1 >= max_len)
        # One host sync per step: stop as soon as every sentence has ended.
        if bool(done.all()):
            break
    attention = torch.stack(weights, dim=1) if weights else None
    return torch.stack(tokens, dim=1), lengths, scores, attention


@torch.no_grad()
def decode(
    model: Seq2Seq,
    src: Tensor,
    src_len: Tensor,
    *,
    max_len_ratio: float = 2.0,
    max_len_offset: int = 10,
) -> list[Hypothesis]:
    """Greedy translations of a padded source batch, one `Hypothesis` per sentence.

    Args:
        model: a Seq2Seq (put in eval mode by the caller).
        src: (B, T_src) int64 source ids ending in </s>, padded.
        src_len: (B,) int64 real lengths.
        max_len_ratio, max_len_offset: the length limit, see `max_output_len`.
    """
    memory, state = model.encode(src, src_len)
    tokens, lengths, scores, attention = greedy_search(
        partial(model.decode_step, memory=memory),
        state,
        bos_id=model.bos_id,
        eos_id=model.eos_id,
        max_len=max_output_len(src_len, max_len_ratio, max_len_offset),
    )
    return [
        Hypothesis(
            tokens=tokens[b, :n].tolist(),
            score=float(scores[b]),
            attention=None if attention is None else attention[b, :n, : src_len[b]].cpu(),
        )
        for b, n in enumerate(lengths.tolist())
    ]
