"""Luong et al.'s location score in PyTorch (2015, eq. 8): e_i = W_a s, W_a of shape (P, D),
the first T_src of its P scores."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from alignmt.model.attention.spec import Spec
from alignmt.model.attention.torch import Score, Slots


class LocationScore(Score):
    """One score per source position, up to the `positions` it was built for."""

    def __init__(self, *, query_dim: int, positions: int) -> None:
        super().__init__()
        self.positions = positions
        self.W_a = nn.Linear(query_dim, positions, bias=False)

    def prepare(self, states: Tensor) -> Slots:
        """Nothing: a location score reads no key; it refuses sources it has no row for."""
        if states.size(1) > self.positions and not torch.jit.is_tracing():
            raise ValueError(
                f"this model's location attention weighs at most {self.positions} source "
                f"positions (model.positions), and a sentence has {states.size(1)}, </s> "
                "included"
            )
        return {}

    def forward(self, query: Tensor, memory: Any, term: Tensor | None = None) -> Tensor:
        return self.W_a(query)[:, : memory.states.size(1)]  # (B, T_src)


def build(spec: Spec, *, query_dim: int, key_dim: int) -> LocationScore:
    return LocationScore(query_dim=query_dim, positions=spec.settings["positions"])
