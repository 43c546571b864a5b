"""The scores with a hidden layer in PyTorch: e_ij = v^T tanh(q_i + k_j), additive
(Bahdanau et al. 2015, eq. 6 and App. A.1.2: q_i = W_s s, k_j = W_h h_j) or concat (Luong et
al. 2015, eq. 8: W [s; h_j], whose query and key columns are the two halves of one W).

k_j does not depend on the decoder step, so `prepare` makes it once per sentence (memory slot
`keys`), and nothing is cached on the module: a score serves any batch, and a beam that
reorders its rows. A modifier's term (coverage's V C_{i-1,j}) joins q_i + k_j inside the tanh.
Both declare the fast path of model/fused.py: the step's score, softmax and weighted sum in
a few passes, with a hand-written backward.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import torch
from torch import Tensor, nn

from alignmt.model import fused
from alignmt.model.attention.spec import Spec
from alignmt.model.attention.torch import Score, Slots


class HiddenLayerScore(Score):
    """What the additive and concat scores share: v^T tanh(q_i + k_j [+ term_ij])."""

    v: nn.Linear

    @abstractmethod
    def project_query(self, query: Tensor) -> Tensor:
        """(B, D) -> (B, A) q_i."""

    def forward(self, query: Tensor, memory: Any, term: Tensor | None = None) -> Tensor:
        pre = self.project_query(query).unsqueeze(1) + memory.slots["keys"]  # (B, T_src, A)
        if term is not None:
            pre = pre + term
        return self.v(torch.tanh(pre)).squeeze(-1)  # (B, T_src)

    def fused(self, query: Tensor, memory: Any, mask: Tensor) -> tuple[Tensor, Tensor]:
        """context (B, C) and alpha (B, T_src) of a softmax step, fused.additive_attend's."""
        q = self.project_query(query)
        return fused.additive_attend(q, memory.slots["keys"], self.v.weight[0], memory.states, mask)


class AdditiveScore(HiddenLayerScore):
    """e_ij = v^T tanh(W_s s + W_h h_j); W_s, W_h and v have no biases, as in the paper."""

    def __init__(self, *, query_dim: int, key_dim: int, attn_dim: int) -> None:
        super().__init__()
        self.W_s = nn.Linear(query_dim, attn_dim, bias=False)
        self.W_h = nn.Linear(key_dim, attn_dim, bias=False)
        self.v = nn.Linear(attn_dim, 1, bias=False)

    def prepare(self, states: Tensor) -> Slots:
        return {"keys": self.W_h(states)}  # (B, T_src, A)

    def project_query(self, query: Tensor) -> Tensor:
        return self.W_s(query)


class ConcatScore(HiddenLayerScore):
    """e_ij = v^T tanh(W [s; h_j]), W of shape (A, D + C): W [s; h] = W_s s + W_h h with
    W = [W_s | W_h] stored as one, the additive score under Luong's name."""

    def __init__(self, *, query_dim: int, key_dim: int, attn_dim: int) -> None:
        super().__init__()
        self.query_dim = query_dim
        self.W = nn.Linear(query_dim + key_dim, attn_dim, bias=False)
        self.v = nn.Linear(attn_dim, 1, bias=False)

    def prepare(self, states: Tensor) -> Slots:
        return {"keys": states @ self.W.weight[:, self.query_dim :].T}  # (B, T_src, A)

    def project_query(self, query: Tensor) -> Tensor:
        return query @ self.W.weight[:, : self.query_dim].T


def build(spec: Spec, *, query_dim: int, key_dim: int) -> HiddenLayerScore:
    kind = AdditiveScore if spec.kind == "additive" else ConcatScore
    return kind(query_dim=query_dim, key_dim=key_dim, attn_dim=spec.settings["attn_dim"])
