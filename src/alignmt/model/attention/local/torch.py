"""Local attention in PyTorch (Luong et al. 2015, §3.2; reference.py has the equations and
the choices where the paper is silent): the window around p_i narrows the mask the mapping
weighs, and local-p's Gaussian is a prior on the weights."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from alignmt.model.attention.spec import Spec
from alignmt.model.attention.torch import Focus, Modifier, Slots


class LocalWindow(Modifier):
    """p_i and the window [p_i - D, p_i + D] around it, for `kind` local_m or local_p."""

    def __init__(self, kind: str, *, query_dim: int, attn_dim: int, half_width: int) -> None:
        super().__init__()
        if half_width < 1:
            raise ValueError(f"model.window must be at least 1, got {half_width}")
        self.kind, self.half_width = kind, half_width
        if kind == "local_p":
            self.W_p = nn.Linear(query_dim, attn_dim, bias=False)
            self.v_p = nn.Linear(attn_dim, 1, bias=False)

    def start(self, memory: Any) -> Slots:
        """Step 0, and no window yet: (B,) each."""
        zero = memory.states.new_zeros(memory.states.size(0))
        return {"step": zero, "centre": zero}

    def focus(self, query: Tensor, slots: Slots, memory: Any, focus: Focus) -> tuple[Focus, Slots]:
        """The window of one decoder step over `focus.mask`, and the next step's slots.

        Args:
            query: (B, D) the state that scores the source.
            slots: `step` (B,), i, the output position being decided (local-m's p_i).
        """
        mask = focus.mask
        length = mask.sum(-1).to(query.dtype)  # (B,) S, </s> included (the window acts first)
        if self.kind == "local_m":
            centre = torch.minimum(slots["step"], length - 1)
        else:
            centre = length * torch.sigmoid(self.v_p(torch.tanh(self.W_p(query))).squeeze(-1))
        positions = torch.arange(mask.size(-1), device=query.device, dtype=query.dtype)
        distance = positions - centre.unsqueeze(-1)  # (B, T_src) j - p_i
        inside = mask & (distance.abs() <= self.half_width)
        prior = focus.prior
        if self.kind == "local_p":
            sigma = self.half_width / 2
            gaussian = torch.exp(-(distance**2) / (2 * sigma**2))
            prior = gaussian if prior is None else prior * gaussian
        after = slots | {"step": slots["step"] + 1, "centre": centre}
        return focus._replace(mask=inside, prior=prior), after


def build(spec: Spec, *, query_dim: int, key_dim: int) -> LocalWindow:
    return LocalWindow(spec.kind, query_dim=query_dim, **spec.settings)
