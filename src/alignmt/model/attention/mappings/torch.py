"""The mappings from scores to weights in PyTorch: the masked softmax, and sparsemax and
1.5-entmax from the `entmax` package, their authors' own (Martins & Astudillo 2016; Peters,
Niculae & Martins 2019)."""

from __future__ import annotations

import torch
from entmax import entmax15, sparsemax
from torch import Tensor

from alignmt.model.attention.spec import Spec
from alignmt.model.attention.torch import Mapping, Slots

_SPARSE = {"sparsemax": sparsemax, "entmax15": entmax15}


def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """Softmax over the last axis with exactly zero weight where `mask` is False.

    Args:
        scores: (..., T_src) unnormalised scores e_ij.
        mask: (..., T_src) bool, True at real source tokens.

    Returns:
        (..., T_src) weights alpha_ij; each row sums to 1 over its real tokens.
    """
    # -inf, not a large negative constant: exact zeros whatever the scores' scale or dtype,
    # and a row with no real token (a data bug; every real row keeps </s>) shows up as NaN
    # instead of silently spreading weight over padding.
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)


def masked_sparse(scores: Tensor, mask: Tensor, fn: str) -> Tensor:
    """sparsemax or 1.5-entmax (`fn`) over the last axis, with zero weight where `mask` is
    False.

    Args:
        scores: (..., T_src) unnormalised scores e_ij.
        mask: (..., T_src) bool, True at real source tokens.

    Returns:
        (..., T_src) weights alpha_ij, summing to 1; exactly 0 below the threshold.
    """
    # Padding gets a finite score no threshold reaches (sparsemax's lies within 1 of the
    # largest score, 1.5-entmax's within 2): -inf would turn the sorted sums into NaN.
    top = scores.masked_fill(~mask, float("-inf")).amax(dim=-1, keepdim=True).detach()
    return _SPARSE[fn](torch.where(mask, scores, top - 4), dim=-1)


class Softmax(Mapping):
    fusable = True  # the additive scores' fused path computes exactly this

    def forward(self, scores: Tensor, mask: Tensor, slots: Slots) -> tuple[Tensor, Slots]:
        return masked_softmax(scores, mask), slots


class Sparse(Mapping):
    def __init__(self, fn: str) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, scores: Tensor, mask: Tensor, slots: Slots) -> tuple[Tensor, Slots]:
        return masked_sparse(scores, mask, self.fn), slots


def build(spec: Spec, *, query_dim: int, key_dim: int) -> Mapping:
    return Softmax() if spec.kind == "softmax" else Sparse(spec.kind)
