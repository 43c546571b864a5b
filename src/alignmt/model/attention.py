"""Attention scorers and the masked softmax (Bahdanau et al. 2015, §3.1 and App. A.1.2;
Luong et al. 2015, §3.1; Vaswani et al. 2017, §3.2.1).

Every scorer has the same two-call interface:

    proj_keys = scorer.project_keys(keys)                         # once per source batch
    context, weights = scorer(query, proj_keys, keys, mask)       # once per decoder step

and differs from the others only in `score`, its e_ij for one query.

Additive and concat scorers built with `coverage=True` also read each source position's
coverage C_{i-1,j}, the attention it has had so far (Tu et al. 2016, "Modeling Coverage for
Neural Machine Translation", eq. 9): e_ij = v^T tanh(W_s s + W_h h_j + V C_{i-1,j}). Dot and
general scores have no hidden layer for it to enter, so `make_attention` refuses them.

The part of the score that depends only on the encoder states (W_h h_j for additive
attention, W h_j for Luong's general score) is computed once by `project_keys` and handed
back by the caller at every step. Nothing is cached on the module, so a scorer can serve
two batches, or a beam that reorders its rows, without going stale.

Keys are also the values: c_i = sum_j alpha_ij h_j, as in both papers. Luong's location
score (eq. 8, a_t = softmax(W_a h_t)) reads no keys at all: one weight row per source
position, up to the `positions` it was built for.

The weights are the scores' softmax, or a sparse mapping that gives exactly zero weight to
the scores below a threshold: sparsemax (Martins & Astudillo 2016) or 1.5-entmax (Peters,
Niculae & Martins 2019), from the `entmax` package, its authors' own.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Literal, get_args

import torch
from entmax import entmax15, sparsemax
from torch import Tensor, nn

from alignmt.model import fused

AttentionKind = Literal["additive", "dot", "general", "concat", "scaled_dot", "location"]
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
    scores: Tensor,
    values: Tensor,
    mask: Tensor,
    fn: AttentionFn = "softmax",
    prior: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Normalise scores (softmax, or the sparse mapping `fn`), weigh them by `prior` where
    given, and take the weighted sum of the values.

    Args:
        scores: (B, T_src) e_ij for one decoder step.
        values: (B, T_src, C) encoder states h_j.
        mask: (B, T_src) bool, True at the positions attention may weigh.
        prior: (B, T_src) a factor on each weight after normalising (local-p's Gaussian).

    Returns:
        context (B, C) = sum_j alpha_ij h_j, and weights (B, T_src).
    """
    weights = masked_softmax(scores, mask) if fn == "softmax" else masked_sparse(scores, mask, fn)
    if prior is not None:
        weights = weights * prior
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


class Scorer(nn.Module, ABC):
    """What every score shares: `forward` normalises the e_ij that `score` gives."""

    def __init__(self, fn: AttentionFn) -> None:
        super().__init__()
        self.fn = fn

    @abstractmethod
    def score(self, query: Tensor, proj_keys: Tensor, coverage: Tensor | None) -> Tensor:
        """(B, D) query, (B, T_src, .) projected keys -> (B, T_src) scores e_ij."""

    def forward(
        self,
        query: Tensor,
        proj_keys: Tensor,
        values: Tensor,
        mask: Tensor,
        coverage: Tensor | None = None,
        prior: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Score every source position against one query.

        Args:
            query: (B, D) decoder state.
            proj_keys: (B, T_src, .) from `project_keys`.
            values: (B, T_src, C) encoder states.
            mask: (B, T_src) bool, True at the positions to weigh.
            coverage: (B, T_src) C_{i-1,j}, for a scorer built with coverage; else unused.
            prior: (B, T_src) a factor on each weight (see `attend`), or None.

        Returns:
            context (B, C) and weights (B, T_src).
        """
        return attend(self.score(query, proj_keys, coverage), values, mask, self.fn, prior)


class HiddenLayerScorer(Scorer):
    """What the additive and concat scores share: e_ij = v^T tanh(q_i + k_j) with q_i the
    query's projection, k_j the keys' (`project_keys`), and V C_{i-1,j} inside the tanh
    with coverage. Without coverage, a local window's prior or a sparse mapping, a step runs
    fused.additive_attend: the same numbers in fewer passes, with a hand-written backward."""

    V: nn.Linear | None
    v: nn.Linear

    @abstractmethod
    def project_query(self, query: Tensor) -> Tensor:
        """(B, D) -> (B, A): the query's part of the score's hidden layer."""

    def score(self, query: Tensor, proj_keys: Tensor, coverage: Tensor | None) -> Tensor:
        """query (B, D), proj_keys (B, T_src, A) -> (B, T_src)."""
        pre = with_coverage(self.project_query(query).unsqueeze(1) + proj_keys, self.V, coverage)
        hidden = torch.tanh(pre)  # (B, T_src, A)
        return self.v(hidden).squeeze(-1)

    def forward(
        self,
        query: Tensor,
        proj_keys: Tensor,
        values: Tensor,
        mask: Tensor,
        coverage: Tensor | None = None,
        prior: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        plain = self.V is None and prior is None and self.fn == "softmax"
        if plain and fused.applies(query):
            q = self.project_query(query)
            return fused.additive_attend(q, proj_keys, self.v.weight[0], values, mask)
        return super().forward(query, proj_keys, values, mask, coverage, prior)


class AdditiveAttention(HiddenLayerScorer):
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
        super().__init__(fn)
        self.W_s = nn.Linear(query_dim, attn_dim, bias=False)
        self.W_h = nn.Linear(key_dim, attn_dim, bias=False)
        self.V = nn.Linear(1, attn_dim, bias=False) if coverage else None
        self.v = nn.Linear(attn_dim, 1, bias=False)

    def project_keys(self, keys: Tensor) -> Tensor:
        """(B, T_src, C) -> (B, T_src, A): W_h h_j does not depend on the decoder step."""
        return self.W_h(keys)

    def project_query(self, query: Tensor) -> Tensor:
        """(B, D) -> (B, A): W_s s."""
        return self.W_s(query)


class ConcatAttention(HiddenLayerScorer):
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
        super().__init__(fn)
        self.query_dim = query_dim
        self.W = nn.Linear(query_dim + key_dim, attn_dim, bias=False)
        self.V = nn.Linear(1, attn_dim, bias=False) if coverage else None
        self.v = nn.Linear(attn_dim, 1, bias=False)

    def project_keys(self, keys: Tensor) -> Tensor:
        """(B, T_src, C) -> (B, T_src, A): the key columns of W applied to every h_j."""
        return keys @ self.W.weight[:, self.query_dim :].T

    def project_query(self, query: Tensor) -> Tensor:
        """(B, D) -> (B, A): the query columns of W applied to s."""
        return query @ self.W.weight[:, : self.query_dim].T


class GeneralAttention(Scorer):
    """Luong et al. (2015), eq. 8 "general": e_ij = s^T W h_j, W of shape (D, C)."""

    def __init__(self, *, query_dim: int, key_dim: int, fn: AttentionFn = "softmax") -> None:
        super().__init__(fn)
        self.W = nn.Linear(key_dim, query_dim, bias=False)

    def project_keys(self, keys: Tensor) -> Tensor:
        """(B, T_src, C) -> (B, T_src, D): W h_j, once per source batch."""
        return self.W(keys)

    def score(self, query: Tensor, proj_keys: Tensor, coverage: Tensor | None) -> Tensor:
        """query (B, D), proj_keys (B, T_src, D) -> (B, T_src); no coverage."""
        return torch.bmm(proj_keys, query.unsqueeze(-1)).squeeze(-1)


class DotAttention(Scorer):
    """Luong et al. (2015), eq. 8 "dot": e_ij = s^T h_j; with `scaled`, divided by sqrt(D)
    (Vaswani et al. 2017, eq. 1), which keeps the scores' variance independent of D.

    Has no parameters; query and keys must have the same size.
    """

    def __init__(
        self, *, query_dim: int, key_dim: int, scaled: bool = False, fn: AttentionFn = "softmax"
    ) -> None:
        super().__init__(fn)
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

    def score(self, query: Tensor, proj_keys: Tensor, coverage: Tensor | None) -> Tensor:
        """query (B, D), proj_keys = keys (B, T_src, D) -> (B, T_src); no coverage."""
        return torch.bmm(proj_keys, query.unsqueeze(-1)).squeeze(-1) * self.scale


class LocationAttention(Scorer):
    """Luong et al. (2015), eq. 8 "location": e_i = W_a s, one score per source position
    whatever the words there, W_a of shape (P, D) for sentences of up to P positions."""

    def __init__(self, *, query_dim: int, positions: int, fn: AttentionFn = "softmax") -> None:
        super().__init__(fn)
        self.positions = positions
        self.W_a = nn.Linear(query_dim, positions, bias=False)

    def project_keys(self, keys: Tensor) -> Tensor:
        """The keys themselves, for their length: a location score reads no key."""
        if keys.size(1) > self.positions and not torch.jit.is_tracing():
            raise ValueError(
                f"this model's location attention weighs at most {self.positions} source "
                f"positions (model.positions), and a sentence has {keys.size(1)}, </s> included"
            )
        return keys

    def score(self, query: Tensor, proj_keys: Tensor, coverage: Tensor | None) -> Tensor:
        """query (B, D) -> (B, T_src): the first T_src of W_a s."""
        return self.W_a(query)[:, : proj_keys.size(1)]


COVERAGE_SCORES = ("additive", "concat")  # the scores with a hidden layer C_{i-1,j} enters


def make_attention(
    kind: AttentionKind,
    *,
    query_dim: int,
    key_dim: int,
    attn_dim: int,
    coverage: bool = False,
    fn: AttentionFn = "softmax",
    positions: int = 100,
) -> Scorer:
    """Build the scorer named `kind`, normalising with `fn`; `attn_dim` is used by additive
    and concat only, which alone can read coverage; `positions` by location only."""
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
    if kind == "location":
        return LocationAttention(query_dim=query_dim, positions=positions, fn=fn)
    choices = ", ".join(get_args(AttentionKind))
    raise ValueError(f"unknown attention {kind!r}; choose one of {choices}")
