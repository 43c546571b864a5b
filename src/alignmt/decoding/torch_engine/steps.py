"""What greedy and beam search share below their loops: the step function they run, the
choice of a token, and their outputs as NumPy.

A step hands out the model's log-probabilities (`model.distribution.LogProbs`); under
autocast they are first brought to float32 (`LogProbs.float`, and `full_precision` for the
attention), so that summed scores rank as they do without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from alignmt.model.distribution import LogProbs

# step(prev (N,) int64, state, memory) -> (log p (N, V), new state, alpha (N, T_src) or None)
StepFn = Callable[[Tensor, Any, Any], tuple[LogProbs, Any, "Tensor | None"]]

# a step's log p (W_t, V) -> the chosen tokens (W_t,) int64 and their log-probabilities (W_t,)
Pick = Callable[[LogProbs], tuple[Tensor, Tensor]]


def as_array(attention: Tensor | None, src_len: int | None = None) -> np.ndarray | None:
    """One hypothesis' attention (steps, T_src), cut to its source length (None: as it is),
    as a NumPy array on the CPU; None for vanilla."""
    if attention is None:
        return None
    return (attention if src_len is None else attention[:, :src_len]).cpu().numpy()


def full_precision(tensor: Tensor | None) -> Tensor | None:
    """`tensor` in float32 at least: a step's bfloat16 attention (autocast's) in float32.

    Args:
        tensor: a step's attention, or None.

    Returns:
        float32 and float64 tensors as they are, lower precisions in float32; None for None.
    """
    if tensor is None:
        return None
    return tensor.to(torch.promote_types(tensor.dtype, torch.float32))
