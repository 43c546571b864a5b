"""The room's PyTorch side: what a score, a mapping and a modifier are, and `Attention`, which
composes one of each the way `registry.compose` chose them (Bahdanau et al. 2015, eq. 5-7).

One decoder step, for a query (B, D) against the memory of the source:

    mask, prior, term   each modifier's focus in turn: a window's positions and prior,
                        coverage's term inside the score's hidden layer
    e_ij                the score, (B, T_src)
    alpha_ij            the mapping of e over the mask (monotonic attention's from its
                        state), times the prior
    alpha_ij            the explorer's steer, in the rows it steers
    c_i                 sum_j alpha_ij h_j, (B, C)
    slots               the mapping's and each modifier's state after alpha (monotonic
                        attention's position, coverage's C_i)

The memory is the decoder's (`decoder.Memory`): `states` (B, T_src, C), `mask` (B, T_src),
`slots` (what the mechanisms made once per sentence) and `steer`. A mechanism's state rides
in the decoder state's `slots`, under the names its `Spec` declares.

With heads (`Composition.heads`, multi-head attention), the step is the heads': each head's
query scored by the score and weighed by the mapping as rows of one batch, their contexts
joined (heads/torch.py).

A score may declare a fast path, `fused(query, memory, mask)`, which computes the whole step
as a softmax mapping would (model/fused.py); `Attention` takes it where the mapping allows it
(`Mapping.fusable`) and no modifier adds a prior or a term.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor, nn

from alignmt.model import fused
from alignmt.model.attention.spec import Composition

Slots = dict[str, Tensor]

# log 0 for mechanisms that keep probabilities in log space (hard monotonic attention's
# alignment, the pointer-generator's extended vocabulary): finite, so that its exp is exactly
# 0 beside any real term and no gradient meets inf - inf
IMPOSSIBLE = -1e4


def log_of(p: Tensor) -> Tensor:
    """log p, with IMPOSSIBLE where p is 0. Probabilities below the dtype's smallest normal
    number count as that (their share is below it too), so that no gradient divides by a
    subnormal."""
    return torch.where(p > 0, p.clamp_min(torch.finfo(p.dtype).tiny).log(), IMPOSSIBLE)


class Focus(NamedTuple):
    """Where one step's attention may look, as the modifiers leave it."""

    mask: Tensor  # (B, T_src) bool: the positions the mapping may weigh
    prior: Tensor | None  # (B, T_src) a factor on each weight after the mapping
    term: Tensor | None  # (B, T_src, A) added inside the score's hidden layer


class Score(nn.Module, ABC):
    """e_ij for one query against every source position."""

    # fused(query (B, D), memory, mask (B, T_src)) -> (context (B, C), alpha (B, T_src)): the
    # step with a softmax mapping in fewer passes; None where the score has no fast path
    fused: Callable[..., tuple[Tensor, Tensor]] | None = None

    def prepare(self, states: Tensor) -> Slots:
        """The memory slots made once per sentence from the states (B, T_src, C)."""
        return {}

    @abstractmethod
    def forward(self, query: Tensor, memory: Any, term: Tensor | None) -> Tensor:
        """(B, D) query -> (B, T_src) scores e_ij; `term` (B, T_src, A) enters a hidden
        layer (a score that has none is never given one)."""


class Mapping(nn.Module, ABC):
    """Scores to weights over a mask, (B, T_src), (B, T_src) bool -> (B, T_src), and the
    state a mapping may keep from step to step (none but monotonic attention's)."""

    fusable: ClassVar[bool] = False  # whether a score's fused path computes this mapping

    def start(self, memory: Any) -> Slots:
        """The state slots before the first step."""
        return {}

    @abstractmethod
    def forward(self, scores: Tensor, mask: Tensor, slots: Slots) -> tuple[Tensor, Slots]:
        """The weights alpha (B, T_src), and the state slots as the weights leave them."""

    def update(self, alpha: Tensor, slots: Slots) -> Slots:
        """The state slots after the step's final weights alpha (B, T_src), steered or not."""
        return slots


class Modifier(nn.Module):
    """Something around the score: it may make memory, keep state, narrow or reweigh where
    attention looks, or add a term to the score, and update its state after alpha."""

    def prepare(self, states: Tensor, mask: Tensor) -> Slots:
        """Memory slots from the states (B, T_src, C) and the mask (B, T_src)."""
        return {}

    def start(self, memory: Any) -> Slots:
        """The state slots before the first step."""
        return {}

    def focus(self, query: Tensor, slots: Slots, memory: Any, focus: Focus) -> tuple[Focus, Slots]:
        """The focus after this modifier, and its state slots."""
        return focus, slots

    def update(self, alpha: Tensor, slots: Slots, memory: Any) -> Slots:
        """The state slots after the step's weights alpha (B, T_src)."""
        return slots


class Attention(nn.Module):
    """A score, a mapping and modifiers composed into one attention step.

    The score is the child `score`, each modifier the child named after its entry (`local`,
    `coverage`), so that a run folder names a weight by where it acts.
    """

    def __init__(self, composition: Composition, *, query_dim: int, key_dim: int) -> None:
        super().__init__()
        self.composition = composition
        sizes = dict(query_dim=query_dim, key_dim=key_dim)
        self.heads = (
            None if composition.heads is None else composition.heads.build("torch", **sizes)
        )
        if self.heads is not None:  # the score and the mapping serve one head at a time
            sizes = dict(query_dim=self.heads.size, key_dim=self.heads.size)
        self.score: Score = composition.score.build("torch", **sizes)
        self.mapping: Mapping = composition.mapping.build("torch", **sizes)
        self.modifiers: list[Modifier] = []
        for spec in composition.modifiers:
            module = spec.build("torch", **sizes)
            self.add_module(spec.name, module)
            self.modifiers.append(module)

    def prepare(self, states: Tensor, mask: Tensor) -> Slots:
        """Every memory slot, made once per sentence."""
        if self.heads is not None:
            return self.heads.prepare(states, self.score)
        slots = self.score.prepare(states)
        for modifier in self.modifiers:
            slots |= modifier.prepare(states, mask)
        return slots

    def start(self, memory: Any) -> Slots:
        """Every state slot before the first step."""
        if self.heads is not None:
            return self.heads.start(memory)
        slots = self.mapping.start(memory)
        for modifier in self.modifiers:
            slots |= modifier.start(memory)
        return slots

    def forward(self, query: Tensor, slots: Slots, memory: Any) -> tuple[Tensor, Tensor, Slots]:
        """One step's attention.

        Args:
            query: (B, D) the decoder state that asks.
            slots: the mechanisms' state after the step before.
            memory: the decoder's memory of the source.

        Returns:
            c_i (B, C), alpha_i (B, T_src) and the state slots after the step.
        """
        if self.heads is not None:
            return self._by_heads(query, slots, memory)
        focus = Focus(memory.mask, None, None)
        for modifier in self.modifiers:
            focus, slots = modifier.focus(query, slots, memory, focus)
        if self._fast(query, focus):
            context, alpha = self.score.fused(query, memory, focus.mask)
            if memory.steer is not None:
                context, alpha = _steered(context, alpha, memory)
        else:
            alpha, slots = self.mapping(self.score(query, memory, focus.term), focus.mask, slots)
            if focus.prior is not None:
                alpha = alpha * focus.prior
            if memory.steer is not None:
                alpha = torch.where(_steers(memory), memory.steer, alpha)
            context = torch.bmm(alpha.unsqueeze(1), memory.states).squeeze(1)  # (B, C)
        slots = self.mapping.update(alpha, slots)
        for modifier in self.modifiers:
            slots = modifier.update(alpha, slots, memory)
        return context, alpha, slots

    def _by_heads(self, query: Tensor, slots: Slots, memory: Any) -> tuple[Tensor, Tensor, Slots]:
        """`forward` for multi-head attention, whose score and mapping keep no state: each
        head's weights as the slot `heads` (B, T_src, N), alpha their mean."""
        score_slots = tuple(slot.name for slot in self.composition.score.memory)
        queries, view = self.heads.split(query, memory, score_slots)  # (B N, d)
        weights, _ = self.mapping(self.score(queries, view, None), view.mask, {})
        weights = weights.view(memory.mask.size(0), self.heads.n, -1)  # (B, N, T_src)
        if memory.steer is not None:
            steered = _steers(memory).unsqueeze(-1)  # (B, 1, 1)
            weights = torch.where(steered, memory.steer.unsqueeze(1), weights)
        context, alpha = self.heads.join(weights, memory)
        return context, alpha, slots | {"heads": weights.transpose(1, 2)}

    def _fast(self, query: Tensor, focus: Focus) -> bool:
        """Whether the score's fused path computes this step exactly as composed."""
        plain = focus.prior is None and focus.term is None and self.mapping.fusable
        return self.score.fused is not None and plain and fused.applies(query)


def _steers(memory: Any) -> Tensor:
    """(B, 1) the rows the explorer's what-if steers: those where `memory.steer` (B, T_src),
    the weights that replace alpha, is not all zero. An exported graph, which always takes a
    steer (`alignmt export`), so steers only the rows asked."""
    return memory.steer.sum(dim=1, keepdim=True) > 0


def _steered(context: Tensor, alpha: Tensor, memory: Any) -> tuple[Tensor, Tensor]:
    """A fused step's c_i and alpha, steered: alpha replaced in the rows asked, c_i moved."""
    steered = _steers(memory)
    alpha = torch.where(steered, memory.steer, alpha)
    moved = torch.bmm(alpha.unsqueeze(1), memory.states).squeeze(1)  # (B, C)
    return torch.where(steered, moved, context), alpha
