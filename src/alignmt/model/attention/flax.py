"""The room's Flax (Linen) side: `Attention`, the composer of torch.py in JAX, with the same
step, the same children (`score`, and each modifier under its entry's name, so that
`checkpoint.flax_io` maps their weights to a run folder's by name) and the same slots.

A Flax part has the methods of its PyTorch twin: a score `prepare(states)` and
`__call__(query, memory, term)`; a mapping `start`, `__call__(scores, mask, slots, train)`
and `update`; a modifier `prepare`, `start`, `focus` and `update` (torch.py's `Score`,
`Mapping` and `Modifier`). Where PyTorch reads a module's `training`, Flax is told `train`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from alignmt.model.attention.spec import Composition

Array = jax.Array
Slots = dict[str, Array]

IMPOSSIBLE = -1e4  # log 0, finite (torch.py's)


def log_of(p: Array) -> Array:
    """log p, IMPOSSIBLE where p is 0 (torch.py's `log_of`)."""
    return jnp.where(p > 0, jnp.log(jnp.maximum(p, jnp.finfo(p.dtype).tiny)), IMPOSSIBLE)


class Focus(NamedTuple):
    """Where one step's attention may look (torch.py's `Focus`)."""

    mask: Array  # (B, T_src) bool
    prior: Array | None  # (B, T_src)
    term: Array | None  # (B, T_src, A)


class Stateless(nn.Module):
    """A mapping that keeps no state, from its function (scores, mask) -> alpha."""

    fn: Callable[[Array, Array], Array]

    def start(self, memory: Any) -> Slots:
        return {}

    def __call__(self, scores: Array, mask: Array, slots: Slots, train: bool):
        return self.fn(scores, mask), slots

    def update(self, alpha: Array, slots: Slots) -> Slots:
        return slots


def modifier_names(composition: Composition) -> tuple[str, ...]:
    """The children the modifiers are, in the order they act."""
    return tuple(spec.name for spec in composition.modifiers)


class Attention(nn.Module):
    """A score, a mapping and modifiers composed into one attention step (torch.Attention)."""

    composition: Composition
    query_dim: int
    key_dim: int

    def setup(self) -> None:
        sizes = dict(query_dim=self.query_dim, key_dim=self.key_dim)
        heads = self.composition.heads
        self.heads = None if heads is None else heads.build("flax", **sizes)
        if self.heads is not None:  # the score and the mapping serve one head at a time
            sizes = dict(query_dim=self.heads.size, key_dim=self.heads.size)
        self.score = self.composition.score.build("flax", **sizes)
        self.mapping = self.composition.mapping.build("flax", **sizes)
        for name, spec in zip(
            modifier_names(self.composition), self.composition.modifiers, strict=True
        ):
            setattr(self, name, spec.build("flax", **sizes))

    def _modifiers(self) -> list[Any]:
        return [getattr(self, name) for name in modifier_names(self.composition)]

    def prepare(self, states: Array, mask: Array) -> Slots:
        """Every memory slot, made once per sentence."""
        if self.heads is not None:
            return self.heads.prepare(states, self.score)
        slots = self.score.prepare(states)
        for modifier in self._modifiers():
            slots = slots | modifier.prepare(states, mask)
        return slots

    def start(self, memory: Any) -> Slots:
        """Every state slot before the first step."""
        if self.heads is not None:
            return self.heads.start(memory)
        slots = self.mapping.start(memory)
        for modifier in self._modifiers():
            slots = slots | modifier.start(memory)
        return slots

    def __call__(
        self, query: Array, slots: Slots, memory: Any, train: bool = False
    ) -> tuple[Array, Array, Slots]:
        """query (B, D) -> c_i (B, C), alpha_i (B, T_src) and the state slots after the step."""
        if self.heads is not None:
            return self._by_heads(query, slots, memory, train)
        focus = Focus(memory.mask, None, None)
        for modifier in self._modifiers():
            focus, slots = modifier.focus(query, slots, memory, focus)
        scores = self.score(query, memory, focus.term)
        alpha, slots = self.mapping(scores, focus.mask, slots, train)
        if focus.prior is not None:
            alpha = alpha * focus.prior
        if memory.steer is not None:
            alpha = jnp.where(steers(memory), memory.steer, alpha)
        context = jnp.einsum("bt,btc->bc", alpha, memory.states)
        slots = self.mapping.update(alpha, slots)
        for modifier in self._modifiers():
            slots = modifier.update(alpha, slots, memory)
        return context, alpha, slots

    def _by_heads(self, query: Array, slots: Slots, memory: Any, train: bool):
        """`__call__` for multi-head attention (torch.Attention's `_by_heads`)."""
        score_slots = tuple(slot.name for slot in self.composition.score.memory)
        queries, view = self.heads.split(query, memory, score_slots)  # (B N, d)
        weights, _ = self.mapping(self.score(queries, view, None), view.mask, {}, train)
        weights = weights.reshape(memory.mask.shape[0], self.heads.n, -1)  # (B, N, T_src)
        if memory.steer is not None:  # every head's weights replaced
            weights = jnp.where(steers(memory)[..., None], memory.steer[:, None], weights)
        context, alpha = self.heads.join(weights, memory)
        return context, alpha, slots | {"heads": weights.transpose(0, 2, 1)}


def steers(memory: Any) -> Array:
    """(B, 1) the rows the explorer's what-if steers: those where `memory.steer` (B, T_src)
    is not all zero (torch.py's `_steers`)."""
    return memory.steer.sum(axis=1, keepdims=True) > 0
