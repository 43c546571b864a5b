"""Luong et al.'s location score in Flax (Linen): torch.py's, with its parameter name."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax

from alignmt.model.attention.spec import Spec
from alignmt.model.flax_init import torch_dense

Array = jax.Array


class LocationScore(nn.Module):
    """e_i = W_a s: one score per source position, up to `positions`."""

    query_dim: int
    positions: int

    def setup(self) -> None:
        self.W_a = torch_dense(self.positions, self.query_dim, bias=False)

    def prepare(self, states: Array) -> dict[str, Array]:
        """Nothing, once the source is known to fit (torch.LocationScore's check)."""
        if states.shape[1] > self.positions:
            raise ValueError(
                f"this model's location attention weighs at most {self.positions} source "
                f"positions (model.positions), and a sentence has {states.shape[1]}, </s> "
                "included"
            )
        return {}

    def __call__(self, query: Array, memory: Any, term: Array | None = None) -> Array:
        return self.W_a(query)[:, : memory.states.shape[1]]  # (B, T_src)


def build(spec: Spec, *, query_dim: int, key_dim: int) -> nn.Module:
    return LocationScore(query_dim, spec.settings["positions"])
