"""Decoding over a lexical shortlist (text/shortlist.py): each sentence may output only its
source tokens' K likeliest translations and the always-allowed words, and the vocabulary
projection computes the logits of only the words some row of the step may output.

`Shortlisted` wraps a step function. Each sentence's allowed words ride in its memory as one
more (B, V) bool field, so that the searches' row operations (beams repeated, rows reused
by the next sentence, rows dropped) move them with the rest. At each step the projection
(each member's, for an ensemble) multiplies only the rows of the union S of the step's
allowed words, and each row's own words are then kept: a sentence's output depends on its
own shortlist, never on which sentences share its batch. The union and the projection's
rows for it are made again only when new rows bring words the union lacks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from alignmt.decoding.torch_engine.int8 import int8_linear
from alignmt.decoding.torch_engine.packed import quantised
from alignmt.decoding.torch_engine.steps import StepFn
from alignmt.model.distribution import LogProbs
from alignmt.text.shortlist import Shortlist


def allowed_words(shortlist: Shortlist, src: Tensor, pad_id: int, vocab: int) -> Tensor:
    """Which target words each sentence may output: every translation the shortlist holds
    for its tokens (`Shortlist.top` keeps fewer), and its always-allowed words.

    Args:
        shortlist: the run's shortlist.
        src: (B, T_src) int64 source ids, padded with pad_id.
        pad_id: the source padding id, which allows nothing more.
        vocab: V, the target vocabulary's size.

    Returns:
        (B, V) bool.
    """
    table = torch.as_tensor(shortlist.table, device=src.device)  # (V_src, K)
    real = torch.where(src == pad_id, src[:, :1], src)  # padding: the first token again
    words = table[real]  # (B, T_src, K)
    allowed = torch.zeros(src.size(0), vocab, dtype=torch.bool, device=src.device)
    allowed[:, torch.as_tensor(shortlist.frequent, device=src.device)] = True
    return allowed.scatter_(1, words.flatten(1), True)  # (B, V)


class Shortlisted:
    """A step function whose logits are computed over the step's shortlist only; outside
    it, -inf. Use inside `active()`, on memories that `join` gave the allowed words."""

    def __init__(
        self,
        step: StepFn,
        projections: Iterable[nn.Linear],
        shortlist: Shortlist,
        *,
        pad_id: int,
        int8: bool,
    ) -> None:
        self.step = step
        self.projections = list(projections)  # each member's vocabulary projection
        self.shortlist = shortlist
        self.pad_id = pad_id
        self.int8 = int8
        self.kind: Any = None  # the wrapped memory's type, to rebuild it for the step
        self._rows: tuple[Tensor, int] | None = None  # the allowed words the union is of
        self._scored: Tensor | None = None  # (V,) bool: the words the union holds
        self._union: Tensor | None = None  # (S,) int64
        self._weights: dict[int, Callable[[Tensor], Tensor]] = {}  # each projection's, on S

    def join(self, src: Tensor, memory: Any) -> tuple:
        """The memory of the source batch `src` (B, T_src), with its sentences' allowed
        words (`allowed_words`, (B, V) bool) as one more field."""
        self.kind = type(memory)
        vocab = self.projections[0].out_features
        return (*memory, allowed_words(self.shortlist, src, self.pad_id, vocab))

    @contextmanager
    def active(self) -> Iterator[None]:
        """Inside the block, the projections compute the logits of the union only (in
        int8 when asked, whether or not an outer block already runs them so)."""
        before = [vars(proj).get("forward") for proj in self.projections]
        for proj in self.projections:
            proj.forward = self._restricted(proj)
        try:
            yield
        finally:
            for proj, forward in zip(self.projections, before, strict=True):
                del proj.forward
                if forward is not None:  # an outer block's (int8_linears')
                    proj.forward = forward

    def __call__(self, prev: Tensor, state: Any, memory: tuple) -> tuple[LogProbs, Any, Any]:
        *fields, allowed = memory  # allowed (N, V) bool
        inner = self.kind._make(fields) if hasattr(self.kind, "_make") else self.kind(fields)
        self._use(allowed)
        restricted, state, alpha = self.step(prev, state, inner)  # logits (N, S)
        own = allowed.index_select(1, self._union)  # (N, S) each row's own words
        logits = restricted.logits.masked_fill_(~own, float("-inf"))
        full = logits.new_full(allowed.shape, float("-inf"))
        return LogProbs(logits=full.index_copy_(1, self._union, logits)), state, alpha  # (N, V)

    def _use(self, allowed: Tensor) -> None:
        """Make the union of `allowed`'s rows the words the projections score, unless the
        words scored already hold them: the same tensor, unchanged (the rows have not moved
        since), or rows that bring no new word. A union larger than needed changes no
        output, as each row keeps only its own words, and rows change at most steps."""
        rows = self._rows
        if rows is not None and rows[0] is allowed and rows[1] == allowed._version:
            return
        self._rows = (allowed, allowed._version)
        if self._scored is not None and not (allowed & ~self._scored).any():
            return
        self._scored = allowed.any(dim=0)  # (V,)
        self._union = self._scored.nonzero().squeeze(1)
        self._weights = {}

    def _restricted(self, proj: nn.Linear) -> Callable[[Tensor], Tensor]:
        def forward(x: Tensor) -> Tensor:  # (..., in) -> (..., S)
            key = id(proj)
            if key not in self._weights:
                self._weights[key] = self._rows_of(proj)
            return self._weights[key](x)

        return forward

    def _rows_of(self, proj: nn.Linear) -> Callable[[Tensor], Tensor]:
        """`proj` restricted to the union's output units, in int8 or as it is."""
        union = self._union
        rows = proj.weight.index_select(0, union)  # (S, in)
        bias = None if proj.bias is None else proj.bias.index_select(0, union)

        def plain(x: Tensor) -> Tensor:
            return F.linear(x, rows.to(x.dtype), None if bias is None else bias.to(x.dtype))

        if not (self.int8 and rows.dtype == torch.float32 and rows.device.type == "cpu"):
            return plain
        weight = quantised(proj).units(union)  # the same rounding as the whole projection's
        return lambda x: int8_linear(x, weight) if x.dtype == torch.float32 else plain(x)
