"""The multiplicative scores in PyTorch: Luong et al.'s general (e_ij = s^T W h_j) and dot
(e_ij = s^T h_j) scores (2015, eq. 8), the dot product scaled by 1 / sqrt(D) (Vaswani et al.
2017, eq. 1), which keeps the scores' variance independent of D, and the general score times
a learned scale g that starts at 1 / sqrt(D) (reference.py says why)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from alignmt.model.attention.spec import Spec
from alignmt.model.attention.torch import Score, Slots


class GeneralScore(Score):
    """e_ij = s^T W h_j, W of shape (D, C); W h_j is made once per sentence. `scaled`: times
    g, a learned scalar, 1 / sqrt(D) at first."""

    def __init__(self, *, query_dim: int, key_dim: int, scaled: bool = False) -> None:
        super().__init__()
        self.W = nn.Linear(key_dim, query_dim, bias=False)
        self.g = nn.Parameter(torch.tensor(1 / math.sqrt(query_dim))) if scaled else None

    def prepare(self, states: Tensor) -> Slots:
        return {"keys": self.W(states)}  # (B, T_src, D)

    def forward(self, query: Tensor, memory: Any, term: Tensor | None = None) -> Tensor:
        scores = torch.bmm(memory.slots["keys"], query.unsqueeze(-1)).squeeze(-1)  # (B, T_src)
        return scores if self.g is None else scores * self.g


class DotScore(Score):
    """e_ij = s^T h_j, or divided by sqrt(D) when `scaled`; no parameters, and the query
    and the encoder states must have the same size."""

    def __init__(self, *, query_dim: int, key_dim: int, scaled: bool = False) -> None:
        super().__init__()
        if query_dim != key_dim:
            raise ValueError(
                f"dot attention needs the decoder state and encoder states to have the same "
                f"size, got query_dim={query_dim} and key_dim={key_dim}; use 'general' or "
                f"'additive', or make dec_hidden equal enc_hidden x directions"
            )
        self.scale = 1 / math.sqrt(query_dim) if scaled else 1.0

    def forward(self, query: Tensor, memory: Any, term: Tensor | None = None) -> Tensor:
        scores = torch.bmm(memory.states, query.unsqueeze(-1)).squeeze(-1)  # (B, T_src)
        return scores * self.scale


def build(spec: Spec, *, query_dim: int, key_dim: int) -> Score:
    sizes = dict(query_dim=query_dim, key_dim=key_dim)
    if spec.kind in ("general", "scaled_general"):
        return GeneralScore(**sizes, scaled=spec.kind == "scaled_general")
    return DotScore(**sizes, scaled=spec.kind == "scaled_dot")
