"""Exact hard monotonic attention in PyTorch (Wu & Cotterell 2019; reference.py has the
equations and the choices where the paper is silent): the prior over source positions from
the posterior over the last step's, in log space, as one batched product with the
(T_src, T_src) transition matrix. The decoder that emits from each position is
`attention_decoder.MixtureDecoder`.

The slots hold probabilities, so that a search's zero-padding of a shorter sentence's slots
reads as positions it cannot reach; the step takes their logs. Positions that cannot be
reached have log-probability `IMPOSSIBLE` rather than -inf: its exp is exactly 0 beside any
real term, and no gradient meets inf - inf."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from alignmt.model.attention.spec import Spec
from alignmt.model.attention.torch import IMPOSSIBLE, Mapping, Slots, log_of


class HardMonotonic(Mapping):
    """alpha_i = posterior_{i-1} P_i with P_i[k, j] = softmax over the real j >= k of e_ij."""

    def start(self, memory: Any) -> Slots:
        """posterior_0 = delta_0 (B, T_src); the emissions before the first step are uniform
        over positions (the decoder's `emitting` and `normaliser` start at 0)."""
        first = torch.zeros_like(memory.mask, dtype=memory.states.dtype)
        first[:, 0] = 1.0
        zero = first.new_zeros(first.size(0))
        return {"prior": first, "posterior": first, "position": zero, "move": zero}

    def forward(self, scores: Tensor, mask: Tensor, slots: Slots) -> tuple[Tensor, Slots]:
        """alpha_i (B, T_src) from the scores e_i (B, T_src) and the slot `posterior`, and
        `move`, the probability of leaving the last step's position."""
        log_P = log_transitions(scores, mask)  # (B, k, j)
        posterior = slots["posterior"]
        log_prior = torch.logsumexp(log_of(posterior).unsqueeze(-1) + log_P, dim=1)  # (B, T_src)
        alpha = torch.where(mask, log_prior, IMPOSSIBLE).exp()
        stay = (posterior * log_P.diagonal(dim1=1, dim2=2).exp()).sum(-1)  # (B,)
        return alpha, slots | {"move": 1.0 - stay}

    def update(self, alpha: Tensor, slots: Slots) -> Slots:
        """The prior the step emits from, alpha_i (B, T_src), steered or not."""
        positions = torch.arange(alpha.size(-1), device=alpha.device, dtype=alpha.dtype)
        return slots | {"prior": alpha, "position": alpha @ positions}

    @staticmethod
    def log_weights(slots: Slots) -> Tensor:
        """log alpha_i (B, T_src), which the decoder's mixture weighs its positions by."""
        return log_of(slots["prior"])

    @staticmethod
    def observe(slots: Slots, emitted: Tensor) -> Slots:
        """The slot `posterior` once y_{i-1} is known: the step's prior times each position's
        p(y_{i-1} | a_{i-1} = j), given as logs, `emitted` (B, T_src), renormalised."""
        return slots | {"posterior": torch.softmax(log_of(slots["prior"]) + emitted, dim=-1)}


def log_transitions(scores: Tensor, mask: Tensor) -> Tensor:
    """(B, k, j) log p(a_i = j | a_{i-1} = k): a log-softmax of the scores (B, T_src) over
    the real j >= k; IMPOSSIBLE or below elsewhere."""
    T = scores.size(-1)
    ahead = torch.ones(T, T, dtype=torch.bool, device=scores.device).triu()  # (k, j): j >= k
    reach = ahead & mask.unsqueeze(1)  # (B, k, j)
    energy = torch.where(reach, scores.unsqueeze(1), IMPOSSIBLE)
    return torch.log_softmax(energy, dim=-1)


def build(spec: Spec, *, query_dim: int, key_dim: int) -> HardMonotonic:
    return HardMonotonic()
