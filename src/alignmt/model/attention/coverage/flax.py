"""Coverage in Flax (Linen): torch.py's C_{i,j}, V and fertility, with their parameter names
and state slots (Tu et al. 2016)."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from alignmt.model.attention.flax import Focus, Slots
from alignmt.model.attention.spec import Spec
from alignmt.model.flax_init import torch_dense

Array = jax.Array


class Coverage(nn.Module):
    kind: str  # sum | fertility
    key_dim: int
    attn_dim: int
    max_fertility: float  # N

    def setup(self) -> None:
        self.V = torch_dense(self.attn_dim, 1, bias=False)
        if self.kind == "fertility":
            self.U_f = torch_dense(1, self.key_dim, bias=False)

    def prepare(self, states: Array, mask: Array) -> Slots:
        if self.kind != "fertility":
            return {}
        phi = self.max_fertility * jax.nn.sigmoid(self.U_f(states)[..., 0])  # (B, T_src)
        return {"coverage_rate": jnp.where(mask, 1 / phi, 0.0)}

    def start(self, memory: Any) -> Slots:
        return {"coverage": jnp.zeros(memory.mask.shape, memory.states.dtype)}

    def focus(self, query: Array, slots: Slots, memory: Any, focus: Focus) -> tuple[Focus, Slots]:
        term = self.V(slots["coverage"][..., None])  # (B, T_src, A)
        return focus._replace(term=term if focus.term is None else focus.term + term), slots

    def update(self, alpha: Array, slots: Slots, memory: Any) -> Slots:
        rate = memory.slots.get("coverage_rate")
        gained = alpha if rate is None else alpha * rate
        return slots | {"coverage": slots["coverage"] + gained}


def build(spec: Spec, *, query_dim: int, key_dim: int) -> nn.Module:
    return Coverage(spec.kind, key_dim, spec.settings["attn_dim"], spec.settings["max_fertility"])
