"""Local attention in Flax (Linen): torch.py's window, p_i and Gaussian (Luong et al. 2015,
§3.2, eq. 9-10), with its parameter names and its state slots."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from alignmt.model.attention.flax import Focus, Slots
from alignmt.model.attention.spec import Spec
from alignmt.model.flax_init import torch_dense

Array = jax.Array


class LocalWindow(nn.Module):
    """p_i and the window [p_i - D, p_i + D] around it, for local_m or local_p."""

    kind: str
    query_dim: int
    attn_dim: int
    half_width: int  # D

    def setup(self) -> None:
        if self.kind == "local_p":
            self.W_p = torch_dense(self.attn_dim, self.query_dim, bias=False)
            self.v_p = torch_dense(1, self.attn_dim, bias=False)

    def prepare(self, states: Array, mask: Array) -> Slots:
        return {}

    def start(self, memory: Any) -> Slots:
        zero = jnp.zeros((memory.states.shape[0],), memory.states.dtype)
        return {"step": zero, "centre": zero}

    def focus(self, query: Array, slots: Slots, memory: Any, focus: Focus) -> tuple[Focus, Slots]:
        mask = focus.mask
        length = mask.sum(-1).astype(query.dtype)  # (B,) S (the window acts first)
        if self.kind == "local_m":
            centre = jnp.minimum(slots["step"], length - 1)
        else:
            centre = length * jax.nn.sigmoid(self.v_p(jnp.tanh(self.W_p(query)))[:, 0])
        distance = jnp.arange(mask.shape[-1], dtype=query.dtype) - centre[:, None]  # (B, T_src)
        inside = mask & (jnp.abs(distance) <= self.half_width)
        prior = focus.prior
        if self.kind == "local_p":
            sigma = self.half_width / 2
            gaussian = jnp.exp(-(distance**2) / (2 * sigma**2))
            prior = gaussian if prior is None else prior * gaussian
        after = slots | {"step": slots["step"] + 1, "centre": centre}
        return focus._replace(mask=inside, prior=prior), after

    def update(self, alpha: Array, slots: Slots, memory: Any) -> Slots:
        return slots


def build(spec: Spec, *, query_dim: int, key_dim: int) -> nn.Module:
    return LocalWindow(spec.kind, query_dim, spec.settings["attn_dim"], spec.settings["half_width"])
