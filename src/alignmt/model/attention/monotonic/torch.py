"""Monotonic attention in PyTorch (Raffel et al. 2017; reference.py has the equations and
the choices where the paper is silent): in training the expected alignment, batched as one
product with a (T_src, T_src) matrix of stay-probabilities; otherwise the walk itself."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from alignmt.model.attention.spec import Spec
from alignmt.model.attention.torch import Mapping, Slots


class Monotonic(Mapping):
    """p_ij = sigma(e_ij + r) with the learned scalar r, and the walk it drives."""

    def __init__(self, *, bias: float, noise: float) -> None:
        super().__init__()
        self.r = nn.Parameter(torch.tensor(float(bias)))
        self.noise = noise

    def start(self, memory: Any) -> Slots:
        """alpha_0 = delta_0 (B, T_src): the walk starts at the first position."""
        previous = torch.zeros_like(memory.mask, dtype=memory.states.dtype)
        previous[:, 0] = 1.0
        zero = previous.new_zeros(previous.size(0))
        return {"previous": previous, "position": zero, "stop": zero}

    def forward(self, scores: Tensor, mask: Tensor, slots: Slots) -> tuple[Tensor, Slots]:
        """alpha_i (B, T_src) from the scores (B, T_src) and the step before's alpha, and
        `stop`, the stop probability at where the walk ended (in expectation)."""
        energy = scores + self.r
        if self.training and self.noise > 0:  # §2.3: noise pushes p towards 0 or 1
            energy = energy + self.noise * torch.randn_like(energy)
        energy = torch.where(mask, energy, 0.0)  # padding's scores may be anything
        p = torch.where(last_real(mask), 1.0, torch.sigmoid(energy)) * mask  # (B, T_src)
        if self.training:
            alpha = expected_alignment(p, F.logsigmoid(-energy), slots["previous"])
        else:
            alpha = walk(p, slots["previous"].argmax(-1))
        return alpha, slots | {"stop": (alpha * p).sum(-1)}

    def update(self, alpha: Tensor, slots: Slots) -> Slots:
        """The next step starts where this one's alpha (B, T_src) stopped."""
        positions = torch.arange(alpha.size(-1), device=alpha.device, dtype=alpha.dtype)
        return slots | {"previous": alpha, "position": alpha @ positions}


def last_real(mask: Tensor) -> Tensor:
    """(B, T_src) bool: each row's last real position (the real positions are a prefix)."""
    length = mask.sum(-1, keepdim=True)  # (B, 1)
    return torch.arange(mask.size(-1), device=mask.device) == length - 1


def expected_alignment(p: Tensor, log_move: Tensor, previous: Tensor) -> Tensor:
    """Raffel eq. 13, alpha_ij = p_ij sum_{k<=j} alpha_{i-1,k} prod_{l=k}^{j-1} (1 - p_il),
    as alpha_i = p_i * (alpha_{i-1} M) with M_kj = exp(L_j - L_k) for k <= j (0 below), L the
    exclusive cumulative sum of log(1 - p).

    The differences of L are products of probabilities, never above 1, so this neither
    overflows nor divides by a vanishing 1 - p as the paper's cumulative-product form does.

    Args:
        p: (B, T_src) stop probabilities, 1 at the last real position.
        log_move: (B, T_src) log(1 - p) before the last position's p was set to 1.
        previous: (B, T_src) alpha_{i-1}.
    """
    L = torch.cumsum(log_move, -1) - log_move  # (B, T_src) L_j = sum_{l<j} log(1 - p_l)
    exponent = L.unsqueeze(1) - L.unsqueeze(2)  # (B, k, j) L_j - L_k
    reaches = torch.ones(p.size(-1), p.size(-1), dtype=torch.bool, device=p.device).triu()
    stay = torch.where(reaches, exponent, float("-inf")).exp()  # (B, k, j), 0 where k > j
    return p * torch.bmm(previous.unsqueeze(1), stay).squeeze(1)


def walk(p: Tensor, start: Tensor) -> Tensor:
    """The walk from `start` (B,): one-hot alpha (B, T_src) at the first j >= start with
    p_ij >= 0.5 (the last real position has p = 1, so there is one)."""
    positions = torch.arange(p.size(-1), device=p.device)
    stops = (positions >= start.unsqueeze(-1)) & (p >= 0.5)  # (B, T_src)
    first = stops.to(p.dtype).argmax(-1, keepdim=True)  # argmax takes the first of equals
    return (positions == first).to(p.dtype)


def build(spec: Spec, *, query_dim: int, key_dim: int) -> Monotonic:
    return Monotonic(**spec.settings)
