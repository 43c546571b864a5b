"""Multi-head attention in PyTorch (Chen et al. 2018; reference.py has the equations and the
choices). The heads become rows: a step's B queries are scored as B N rows of one head each,
by the model's own score and mapping, so that any score serves as a head unchanged."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from alignmt.model.attention.spec import Spec


class Heads(nn.Module):
    """The heads' projections W_q (D -> C), W_k, W_v and W_o (C -> C), head n's being rows
    n d .. (n + 1) d (d = C / N), and the moves between heads and rows."""

    def __init__(self, *, heads: int, query_dim: int, key_dim: int) -> None:
        super().__init__()
        self.n = heads
        self.size = key_dim // heads  # d
        self.W_q = nn.Linear(query_dim, key_dim, bias=False)
        self.W_k = nn.Linear(key_dim, key_dim, bias=False)
        self.W_v = nn.Linear(key_dim, key_dim, bias=False)
        self.W_o = nn.Linear(key_dim, key_dim, bias=False)

    def start(self, memory: Any) -> dict[str, Tensor]:
        """No head has weighed anything before the first step: `heads` (B, T_src, N) zero,
        the source axis second as in every slot that has one."""
        B, T = memory.mask.shape
        return {"heads": memory.states.new_zeros(B, T, self.n)}

    def to_rows(self, x: Tensor) -> Tensor:
        """(B, T_src, N X) -> (B N, T_src, X): each head's part of every position, a row."""
        B, T, units = x.shape
        return x.view(B, T, self.n, units // self.n).transpose(1, 2).reshape(B * self.n, T, -1)

    def from_rows(self, x: Tensor) -> Tensor:
        """(B N, T_src, X) -> (B, T_src, N X), `to_rows` undone: how a memory slot is kept,
        with the source axis second like every other."""
        rows, T, units = x.shape
        return (
            x.view(rows // self.n, self.n, T, units).transpose(1, 2).reshape(rows // self.n, T, -1)
        )

    def prepare(self, states: Tensor, score: Any) -> dict[str, Tensor]:
        """The heads' keys and values (B, T_src, C), and the score's own memory slots made
        from each head's keys, kept as (B, T_src, N X)."""
        keys = self.W_k(states)
        made = score.prepare(self.to_rows(keys))  # each (B N, T_src, X)
        return {"head_keys": keys, "head_values": self.W_v(states)} | {
            name: self.from_rows(slot) for name, slot in made.items()
        }

    def split(self, query: Tensor, memory: Any, score_slots: tuple[str, ...]) -> tuple[Tensor, Any]:
        """The query (B, D) as B N head queries (B N, d), and the memory as each head sees it:
        its keys as the states, the mask repeated, the score's slots as rows."""
        rows = query.size(0) * self.n
        view = memory._replace(
            states=self.to_rows(memory.slots["head_keys"]),  # (B N, T_src, d)
            mask=memory.mask.repeat_interleave(self.n, dim=0),  # (B N, T_src)
            slots={name: self.to_rows(memory.slots[name]) for name in score_slots},
            steer=None,
        )
        return self.W_q(query).view(rows, self.size), view

    def join(self, weights: Tensor, memory: Any) -> tuple[Tensor, Tensor]:
        """c_i (B, C) and alpha_i (B, T_src), the heads' mean, from every head's weights
        (B, N, T_src)."""
        B, T = memory.mask.shape
        values = memory.slots["head_values"].view(B, T, self.n, self.size)
        contexts = torch.einsum("bnt,btnd->bnd", weights, values).reshape(B, -1)  # (B, N d)
        return self.W_o(contexts), weights.mean(dim=1)


def build(spec: Spec, *, query_dim: int, key_dim: int) -> Heads:
    return Heads(heads=spec.settings["heads"], query_dim=query_dim, key_dim=key_dim)
