"""Local attention (Luong, Pham & Manning 2015, §3.2): at decoder step i the scorer weighs
only the source positions j of a window [p_i - D, p_i + D] around an aligned position p_i.

- local-m (monotonic): p_i = i, the source read at the pace of the target.
- local-p (predictive): p_i = S sigmoid(v_p^T tanh(W_p s)) (eq. 9), S the sentence's length
  and s the query; the weights are then multiplied by a Gaussian centred on p_i,
  alpha_ij = align(s, h_j) exp(-(j - p_i)^2 / (2 sigma^2)) with sigma = D / 2 (eq. 10).

What the paper leaves open, and what alignmt chooses:
- Positions count from 0, as the target steps do (step 0 is the first output word), so
  local-m's first output attends around the first source word. S counts </s>; p_i then lies
  in [0, S], and a window never misses the sentence: it holds at least one real position.
- A window that crosses an end of the sentence keeps only the positions inside it (the
  paper's "we simply ignore the outside part"), and `align` normalises over those alone.
- local-m past the end of the source (i >= S) stays at its last position, </s>: a longer
  output keeps a window to attend to, where p_i = i would leave it none.
- The Gaussian is not renormalised, as in eq. 10: the weights of local-p sum to less than 1,
  and c_i = sum_j alpha_ij h_j shrinks with them.
- The window's edges are a mask, through which no gradient flows; p_i of local-p learns
  through the Gaussian alone, as in the paper.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
from torch import Tensor, nn

WindowKind = Literal["global", "local_m", "local_p"]


class Window(NamedTuple):
    """Where one step's attention may look."""

    mask: Tensor  # (B, T_src) bool: real positions inside the window
    prior: Tensor | None  # (B, T_src) local-p's Gaussian weight; None for local-m
    centre: Tensor  # (B,) p_i


class LocalWindow(nn.Module):
    """p_i and the window around it, for `kind` local_m or local_p with half-width D."""

    def __init__(self, kind: WindowKind, *, query_dim: int, attn_dim: int, half_width: int):
        super().__init__()
        if kind not in ("local_m", "local_p"):
            raise ValueError(f"a local window is local_m or local_p, got {kind!r}")
        if half_width < 1:
            raise ValueError(f"model.window must be at least 1, got {half_width}")
        self.kind, self.half_width = kind, half_width
        if kind == "local_p":
            self.W_p = nn.Linear(query_dim, attn_dim, bias=False)
            self.v_p = nn.Linear(attn_dim, 1, bias=False)

    def forward(self, query: Tensor, step: Tensor, mask: Tensor) -> Window:
        """The window of one decoder step.

        Args:
            query: (B, D) the state that scores the source.
            step: (B,) i, the output position being decided (local-m's p_i).
            mask: (B, T_src) bool, True at real tokens.
        """
        length = mask.sum(-1).to(query.dtype)  # (B,) S, </s> included
        if self.kind == "local_m":
            centre = torch.minimum(step, length - 1)
        else:
            centre = length * torch.sigmoid(self.v_p(torch.tanh(self.W_p(query))).squeeze(-1))
        positions = torch.arange(mask.size(-1), device=query.device, dtype=query.dtype)
        distance = positions - centre.unsqueeze(-1)  # (B, T_src) j - p_i
        inside = mask & (distance.abs() <= self.half_width)
        prior = None
        if self.kind == "local_p":
            sigma = self.half_width / 2
            prior = torch.exp(-(distance**2) / (2 * sigma**2))
        return Window(inside, prior, centre)
