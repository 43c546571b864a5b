"""Coverage in PyTorch (Tu et al. 2016, eq. 9 and §3.1.1; reference.py has the equations):
C_{i-1,j} enters the score's hidden layer as V C_{i-1,j}, and grows by alpha_ij / Phi_j
after each step."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from alignmt.model.attention.spec import Spec
from alignmt.model.attention.torch import Focus, Modifier, Slots


class Coverage(Modifier):
    """C_{i,j}, its weight V (A, 1) in the score, and under "fertility" U_f and N."""

    def __init__(self, kind: str, *, key_dim: int, attn_dim: int, max_fertility: float) -> None:
        super().__init__()
        self.V = nn.Linear(1, attn_dim, bias=False)
        self.U_f = nn.Linear(key_dim, 1, bias=False) if kind == "fertility" else None
        self.max_fertility = max_fertility  # N

    def prepare(self, states: Tensor, mask: Tensor) -> Slots:
        """Under fertility, 1 / Phi_j (B, T_src): what one unit of attention adds to C_j (0 at
        padding, whose attention is 0 anyway)."""
        if self.U_f is None:
            return {}
        phi = self.max_fertility * torch.sigmoid(self.U_f(states).squeeze(-1))  # (B, T_src)
        return {"coverage_rate": torch.where(mask, phi.reciprocal(), 0.0)}

    def start(self, memory: Any) -> Slots:
        return {"coverage": memory.states.new_zeros(memory.mask.shape)}  # C_0 (B, T_src)

    def focus(self, query: Tensor, slots: Slots, memory: Any, focus: Focus) -> tuple[Focus, Slots]:
        term = self.V(slots["coverage"].unsqueeze(-1))  # (B, T_src, A)
        return focus._replace(term=term if focus.term is None else focus.term + term), slots

    def update(self, alpha: Tensor, slots: Slots, memory: Any) -> Slots:
        rate = memory.slots.get("coverage_rate")
        gained = alpha if rate is None else alpha * rate
        return slots | {"coverage": slots["coverage"] + gained}


def build(spec: Spec, *, query_dim: int, key_dim: int) -> Coverage:
    return Coverage(spec.kind, key_dim=key_dim, **spec.settings)
