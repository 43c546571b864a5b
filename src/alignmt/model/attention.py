"""Attention scorers and the masked softmax (Bahdanau et al. 2015, §3.1 and App. A.1.2;
Luong et al. 2015, §3.1; Vaswani et al. 2017, §3.2.1).

Every scorer has the same two-call interface:

    proj_keys = scorer.project_keys(keys)                         # once per source batch
    context, weights = scorer(query, proj_keys, keys, mask)       # once per decoder step

Additive and concat scorers built with `coverage=True` also read each source position's
coverage C_{i-1,j}, the attention it has had so far (Tu et al. 2016, "Modeling Coverage for
Neural Machine Translation", eq. 9): e_ij = v^T tanh(W_s s + W_h h_j + V C_{i-1,j}). Dot and
general scores have no hidden layer for it to enter, so `make_attention` refuses them.

The part of the score that depends only on the encoder states (W_h h_j for additive
attention, W h_j for Luong's general score) is computed once by `project_keys` and handed
back by the caller at every step. Nothing is cached on the module, so a scorer can serve
two batches, or a beam that reorders its rows, without going stale.

Keys are also the values: c_i = sum_j alpha_ij h_j, as in both papers.

The weights are the scores' softmax, or a sparse mapping that gives exactly zero weight to
the scores below a threshold: sparsemax (Martins & Astudillo 2016) or 1.5-entmax (Peters,
Niculae & Martins 2019), from the `entmax` package, its authors' own.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from entmax import entmax15, sparsemax
from torch import Tensor, nn

AttentionKind = Literal["additive", "dot", "general", "concat", "scaled_dot"]
AttentionFn = Literal["softmax", "sparsemax", "entmax15"]
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


def masked_sparse(scores: Tensor, mask: Tensor, fn: AttentionFn) -> Tensor:
    """sparsemax or 1.5-entmax over the last axis, with zero weight where `mask` is False.

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


def attend(
    scores: Tensor, values: Tensor, mask: Tensor, fn: AttentionFn = "softmax"
) -> tuple[Tensor, Tensor]:
    """Normalise scores (softmax, or the sparse mapping `fn`) and take the weighted sum of
    the values.

    Args:
        scores: (B, T_src) e_ij for one decoder step.
        values: (B, T_src, C) encoder states h_j.
        mask: (B, T_src) bool, True at real tokens.

    Returns:
        context (B, C) = sum_j alpha_ij h_j, and weights (B, T_src).
    """
    weights = masked_softmax(scores, mask) if fn == "softmax" else masked_sparse(scores, mask, fn)
    context = torch.bmm(weights.unsqueeze(1), values).squeeze(1)  # (B, C)
    return context, weights


def with_coverage(pre: Tensor, layer: nn.Linear | None, coverage: Tensor | None) -> Tensor:
    """`pre` (B, T_src, A) plus V C_{i-1,j} for a scorer with a coverage weight V (A, 1);
    `pre` itself without one. (Adding a 0.0 would write a fresh (B, T_src, A) tensor every
    decoder step for nothing, and in training those short-lived blocks fragment the heap:
    190 MiB more peak memory on Multi30k.)"""
    if layer is None:
        return pre
    if coverage is None:
        raise ValueError("this scorer reads coverage: pass the decoder state's coverage")
    return pre + layer(coverage.unsqueeze(-1))


class AdditiveAttention(nn.Module):
    """Bahdanau et al. (2015), eq. 6 and App. A.1.2: e_ij = v^T tanh(W_s s + W_h h_j), plus
    V C_{i-1,j} inside the tanh with `coverage`.

    W_s, W_h, V and v have no biases, as in the papers.
    """

    def __init__(
        self,
        *,
        query_dim: int,
        key_dim: int,
        attn_dim: int,
        coverage: bool = False,
        fn: AttentionFn = "softmax",
    ) -> None:
        super().__init__()
        self.fn = fn
        self.W_s = nn.Linear(query_dim, attn_dim, bias=False)
        self.W_h = nn.Linear(key_dim, attn_dim, bias=False)
        self.V = nn.Linear(1, attn_dim, bias=False) if coverage else None
        self.v = nn.Linear(attn_dim, 1, bias=False)

    def project_keys(self, keys: Tensor) -> Tensor:
        """(B, T_src, C) -> (B, T_src, A): W_h h_j does not depend on the decoder step."""
        return self.W_h(keys)

    def forward(
        self,
        query: Tensor,
        proj_keys: Tensor,
        values: Tensor,
        mask: Tensor,
        coverage: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Score every source position against one query.

        Args:
            query: (B, D) decoder state.
            proj_keys: (B, T_src, A) from `project_keys`.
            values: (B, T_src, C) encoder states.
            mask: (B, T_src) bool, True at real tokens.
            coverage: (B, T_src) C_{i-1,j}, for a scorer built with coverage; else unused.

        Returns:
            context (B, C) and weights (B, T_src).
        """
        pre = with_coverage(self.W_s(query).unsqueeze(1) + proj_keys, self.V, coverage)
        hidden = torch.tanh(pre)  # (B, T_src, A)
        return attend(self.v(hidden).squeeze(-1), values, mask, self.fn)


class ConcatAttention(nn.Module):
    """Luong et al. (2015), eq. 8 "concat": e_ij = v^T tanh(W [s; h_j]), W of shape (A, D + C).

    Splitting W = [W_s | W_h] column-wise gives W [s; h] = W_s s + W_h h: the additive
    score of Bahdanau et al. (2015) with its two matrices stored as one. The split lets
    the key half be computed once per sentence, as for additive attention. With `coverage`,
    e_ij = v^T tanh(W [s; h_j] + V C_{i-1,j}), as for the additive score.
    """

    def __init__(
        self,
        *,
        query_dim: int,
        key_dim: int,
        attn_dim: int,
        coverage: bool = False,
        fn: AttentionFn = "softmax",
    ) -> None:
        super().__init__()
        self.fn = fn
        self.query_dim = query_dim
        self.W = nn.Linear(query_dim + key_dim, attn_dim, bias=False)
        self.V = nn.Linear(1, attn_dim, bias=False) if coverage else None
        self.v = nn.Linear(attn_dim, 1, bias=False)

    def project_keys(self, keys: Tensor) -> Tensor:
        """(B, T_src, C) -> (B, T_src, A): the key columns of W applied to every h_j."""
        return keys @ self.W.weight[:, self.query_dim :].T

    def forward(
        self,
        query: Tensor,
        proj_keys: Tensor,
        values: Tensor,
        mask: Tensor,
        coverage: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Same arguments and results as `AdditiveAttention.forward`."""
        proj_query = query @ self.W.weight[:, : self.query_dim].T  # (B, A)
        pre = with_coverage(proj_query.unsqueeze(1) + proj_keys, self.V, coverage)
        hidden = torch.tanh(pre)  # (B, T_src, A)
        return attend(self.v(hidden).squeeze(-1), values, mask, self.fn)


class GeneralAttention(nn.Module):
    """Luong et al. (2015), eq. 8 "general": e_ij = s^T W h_j, W of shape (D, C)."""

    def __init__(self, *, query_dim: int, key_dim: int, fn: AttentionFn = "softmax") -> None:
        super().__init__()
        self.fn = fn
        self.W = nn.Linear(key_dim, query_dim, bias=False)

    def project_keys(self, keys: Tensor) -> Tensor:
        """(B, T_src, C) -> (B, T_src, D): W h_j, once per source batch."""
        return self.W(keys)

    def forward(
        self, query: Tensor, proj_keys: Tensor, values: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """As `AdditiveAttention.forward`, with proj_keys (B, T_src, D)."""
        scores = torch.bmm(proj_keys, query.unsqueeze(-1)).squeeze(-1)  # (B, T_src)
        return attend(scores, values, mask, self.fn)


class DotAttention(nn.Module):
    """Luong et al. (2015), eq. 8 "dot": e_ij = s^T h_j; with `scaled`, divided by sqrt(D)
    (Vaswani et al. 2017, eq. 1), which keeps the scores' variance independent of D.

    Has no parameters; query and keys must have the same size.
    """

    def __init__(
        self, *, query_dim: int, key_dim: int, scaled: bool = False, fn: AttentionFn = "softmax"
    ) -> None:
        super().__init__()
        self.fn = fn
        if query_dim != key_dim:
            raise ValueError(
                f"dot attention needs the decoder state and encoder states to have the same "
                f"size, got query_dim={query_dim} and key_dim={key_dim}; use 'general' or "
                f"'additive', or make dec_hidden equal enc_hidden x directions"
            )
        self.scale = 1 / math.sqrt(query_dim) if scaled else 1.0

    def project_keys(self, keys: Tensor) -> Tensor:
        """The keys themselves: a dot score has no key projection."""
        return keys

    def forward(
        self, query: Tensor, proj_keys: Tensor, values: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Same arguments and results as `AdditiveAttention.forward`, with proj_keys = keys."""
        scores = torch.bmm(proj_keys, query.unsqueeze(-1)).squeeze(-1)  # (B, T_src)
        return attend(scores * self.scale, values, mask, self.fn)


COVERAGE_SCORES = ("additive", "concat")  # the scores with a hidden layer C_{i-1,j} enters


def make_attention(
    kind: AttentionKind,
    *,
    query_dim: int,
    key_dim: int,
    attn_dim: int,
    coverage: bool = False,
    fn: AttentionFn = "softmax",
) -> nn.Module:
    """Build the scorer named `kind`, normalising with `fn`; `attn_dim` is used by additive
    and concat only, which alone can read coverage."""
    if coverage and kind not in COVERAGE_SCORES:
        raise ValueError(
            f"model.coverage needs an additive or concat score: C_{{i-1,j}} enters the "
            f"hidden layer inside their tanh (Tu et al. 2016), which {kind!r} has none of"
        )
    sizes = dict(query_dim=query_dim, key_dim=key_dim, fn=fn)
    if kind == "additive":
        return AdditiveAttention(**sizes, attn_dim=attn_dim, coverage=coverage)
    if kind == "concat":
        return ConcatAttention(**sizes, attn_dim=attn_dim, coverage=coverage)
    if kind == "general":
        return GeneralAttention(**sizes)
    if kind in ("dot", "scaled_dot"):
        return DotAttention(**sizes, scaled=kind == "scaled_dot")
    choices = ", ".join(get_args(AttentionKind))
    raise ValueError(f"unknown attention {kind!r}; choose one of {choices}")
