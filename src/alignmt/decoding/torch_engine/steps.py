"""What greedy and beam search share below their loops: the step function they run, what
they make of one step's output, and their outputs as NumPy.

A step's logits become log-probabilities only where search needs them, from the largest
logit that search finds anyway (`log_sum_exp_from`); under autocast they are first brought
to float32 (`full_precision`), so that summed scores rank as they do without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

# step(prev (N,) int64, state, memory) -> (logits (N, V), new state, alpha (N, T_src) or None)
StepFn = Callable[[Tensor, Any, Any], tuple[Tensor, Any, "Tensor | None"]]

# a step's logits (W_t, V) -> the chosen tokens (W_t,) int64 and their log-probabilities (W_t,)
Pick = Callable[[Tensor], tuple[Tensor, Tensor]]


def as_array(attention: Tensor | None, src_len: int | None = None) -> np.ndarray | None:
    """One hypothesis' attention (steps, T_src), cut to its source length (None: as it is),
    as a NumPy array on the CPU; None for vanilla."""
    if attention is None:
        return None
    return (attention if src_len is None else attention[:, :src_len]).cpu().numpy()


def full_precision(tensor: Tensor | None) -> Tensor | None:
    """`tensor` in float32 at least.

    A step's bfloat16 logits and attention (autocast's) become float32, so that
    log-probabilities sum and rank as they do without autocast.

    Args:
        tensor: a step's logits or attention, or None.

    Returns:
        float32 and float64 tensors as they are, lower precisions in float32; None for None.
    """
    if tensor is None:
        return None
    return tensor.to(torch.promote_types(tensor.dtype, torch.float32))


def log_sum_exp_from(logits: Tensor, largest: Tensor) -> Tensor:
    """log sum_v exp(logits_v - largest), with `largest` the logits' max that search has
    already found: torch.logsumexp finds it again, and on a 64 x 7,865 step this is over
    twice as fast.

    Args:
        logits: (..., V) a step's logits.
        largest: (..., 1) their max over V.

    Returns:
        (..., 1); a token's log-probability is its logit - largest - this.
    """
    return (logits - largest).exp_().sum(dim=-1, keepdim=True).log_()
