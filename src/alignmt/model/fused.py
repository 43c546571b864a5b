"""The per-element work of one decoder step, forward and backward written by hand: the
additive score with its masked softmax and weighted sum, the GRU's and the LSTM's gates.

Eager PyTorch runs each of these as a chain of small operators, and autograd records a
node for every one of them and replays their backward one by one; at the matched Multi30k
model's sizes (64 rows, 512 units, some 20 source positions) most of that time is spent
passing over the same (B, T_src, A) block again and again, or in per-operator overhead.
Each `torch.autograd.Function` here runs its forward in a few in-place operators, keeps only
what its backward needs, and computes the whole backward in one call, from the closed-form
derivatives. Without gradients (decoding) the same forward runs with no Function around it.

The additive score also avoids `torch.tanh`, which costs about eight times `torch.sigmoid`
on a CPU (1.6 against 0.2 ns an element on the 2-core machine of docs/benchmarks.md):
tanh(x) = 2 sigmoid(2x) - 1, so

    e_ij = v^T tanh(x_ij) = 2 v^T sigmoid(2 x_ij) - sum(v),
    d e_ij / d x_ij = v (1 - tanh(x_ij)^2) = 4 v sigmoid(2 x_ij) (1 - sigmoid(2 x_ij)).

`applies` says when a step may take these paths: not while tracing a graph for export
(whose graphs keep the paper's operators), not under autocast (the backward here is written
for one dtype), and not inside `eager()`, which benchmarks and tests use to compare the two.
`ALIGNMT_FUSED=0` in the environment turns the paths off for a whole process.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import torch
from torch import Tensor
from torch.autograd import Function
from torch.autograd.function import once_differentiable

log = logging.getLogger(__name__)

_enabled = os.environ.get("ALIGNMT_FUSED", "1") != "0"


@contextmanager
def eager() -> Iterator[None]:
    """Run every step inside the block with eager PyTorch's operators."""
    global _enabled
    before, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = before


def applies(like: Tensor) -> bool:
    """Whether a step on tensors like `like` runs the hand-written paths; the first time one
    cannot, the log says why."""
    if not _enabled or torch.jit.is_tracing():
        return False
    if torch.is_autocast_enabled(like.device.type):
        _autocast_noted()
        return False
    return True


@cache
def _autocast_noted() -> None:
    """Log, once a process, why autocast keeps the eager operators."""
    log.info(
        "the decoder step runs eager PyTorch operators under autocast: their backward is "
        "written for one dtype"
    )


def _attend(query: Tensor, keys: Tensor, v: Tensor, values: Tensor, mask: Tensor):
    """`additive_attend`'s context and alpha, and sigmoid(2 x_ij) (B, T_src, A)."""
    # 2 (q_i + k_j) in one pass, and its sigmoid in place
    s = torch.add(2 * query.unsqueeze(1), keys, alpha=2).sigmoid_()
    scores = torch.mv(s.flatten(0, 1), v).view(mask.shape).mul_(2).sub_(v.sum())
    alpha = scores.masked_fill_(~mask, float("-inf")).softmax(dim=-1)  # (B, T_src)
    context = torch.bmm(alpha.unsqueeze(1), values).squeeze(1)  # (B, C)
    return context, alpha, s


class _AdditiveAttend(Function):
    """context, alpha = attend(v^T tanh(q_i + k_j)) for one decoder step."""

    @staticmethod
    def forward(ctx, query: Tensor, keys: Tensor, v: Tensor, values: Tensor, mask: Tensor):
        context, alpha, s = _attend(query, keys, v, values, mask)
        ctx.save_for_backward(s, v, values, alpha)
        return context, alpha

    @staticmethod
    @once_differentiable
    def backward(ctx, d_context: Tensor, d_alpha: Tensor):
        s, v, values, alpha = ctx.saved_tensors
        # through c_i = sum_j alpha_ij h_j (products and sums: a (B, T_src, 1) bmm is
        # several times slower here), then the softmax; padding has alpha = 0 and gets 0
        d_alpha = d_alpha + (values * d_context.unsqueeze(1)).sum(-1)  # (B, T_src)
        d_scores = alpha * (d_alpha - (alpha * d_alpha).sum(-1, keepdim=True))
        d_values = alpha.unsqueeze(-1) * d_context.unsqueeze(1)  # (B, T_src, C)
        # d x_ij = 4 d e_ij v sigmoid(2x)(1 - sigmoid(2x)); sigmoid_backward is g s (1 - s)
        d_x = torch.ops.aten.sigmoid_backward(d_scores.unsqueeze(-1) * (4 * v), s)
        d_v = torch.mv(s.flatten(0, 1).t(), d_scores.flatten()).mul_(2).sub_(d_scores.sum())
        return d_x.sum(1), d_x, d_v, d_values, None


def additive_attend(
    query: Tensor, keys: Tensor, v: Tensor, values: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor]:
    """Additive attention for one step (Bahdanau et al. 2015, eq. 6).

    Args:
        query: (B, A) W_s s, the query's projection.
        keys: (B, T_src, A) W_h h_j, the keys' projection.
        v: (A,) the score's output weights.
        values: (B, T_src, C) h_j.
        mask: (B, T_src) bool, True at real source tokens.

    Returns:
        context (B, C) = sum_j alpha_ij h_j and weights alpha (B, T_src).
    """
    if torch.is_grad_enabled():
        return _AdditiveAttend.apply(query, keys, v, values, mask)
    return _attend(query, keys, v, values, mask)[:2]  # decoding: no Function to build


def _gru(gi: Tensor, gh: Tensor, hidden: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The next h (B, D), and what the backward reads: r and z (B, 2D), n (B, D)."""
    size = hidden.size(-1)
    rz = torch.sigmoid_(gi[:, : 2 * size] + gh[:, : 2 * size])  # (B, 2D) r and z
    reset, update = rz.split(size, dim=-1)
    # the reset gate scales W_hn h + b_hn, as in nn.GRU
    new = torch.addcmul(gi[:, 2 * size :], reset, gh[:, 2 * size :]).tanh_()  # (B, D) n
    return torch.lerp(new, hidden, update), rz, new  # (1 - z) n + z h


class _GRUUpdate(Function):
    """nn.GRU's update from its input and hidden gates (order r, z, n)."""

    @staticmethod
    def forward(ctx, gi: Tensor, gh: Tensor, hidden: Tensor):
        out, rz, new = _gru(gi, gh, hidden)
        ctx.save_for_backward(rz, new, gh[:, 2 * hidden.size(-1) :], hidden)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out: Tensor):
        rz, new, h_n, hidden = ctx.saved_tensors
        reset, update = rz.chunk(2, dim=-1)
        d_hidden = d_out * update
        d_new = torch.ops.aten.tanh_backward(d_out - d_hidden, new)  # through n's tanh
        d_rz = torch.cat([d_new * h_n, d_out * (hidden - new)], dim=-1)
        d_rz = torch.ops.aten.sigmoid_backward(d_rz, rz)  # (B, 2D)
        return torch.cat([d_rz, d_new], -1), torch.cat([d_rz, d_new * reset], -1), d_hidden


def gru_update(gi: Tensor, gh: Tensor, hidden: Tensor) -> Tensor:
    """(B, 3D) input gates W_i x + b_i, (B, 3D) hidden gates W_h h + b_h, (B, D) h ->
    (B, D) the next h, with nn.GRU's equations."""
    if torch.is_grad_enabled():
        return _GRUUpdate.apply(gi, gh, hidden)
    return _gru(gi, gh, hidden)[0]


def _lstm(gates: Tensor, cell: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The next h and c (B, D), and what the backward reads: the gates' sigmoids (B, 4D),
    g and tanh(c) (B, D)."""
    size = cell.size(-1)
    sig = torch.sigmoid(gates)  # (B, 4D); the g block is unused, cheaper than 3 slices
    candidate = torch.tanh(gates[:, 2 * size : 3 * size])  # (B, D) g
    i, f, o = sig[:, :size], sig[:, size : 2 * size], sig[:, 3 * size :]
    after = torch.addcmul(f * cell, i, candidate)  # (B, D) the next c
    squashed = torch.tanh(after)
    return o * squashed, after, sig, candidate, squashed


class _LSTMUpdate(Function):
    """nn.LSTM's update from its summed gates (order i, f, g, o)."""

    @staticmethod
    def forward(ctx, gates: Tensor, cell: Tensor):
        hidden, after, sig, candidate, squashed = _lstm(gates, cell)
        ctx.save_for_backward(sig, candidate, cell, squashed)
        return hidden, after

    @staticmethod
    @once_differentiable
    def backward(ctx, d_hidden: Tensor, d_cell: Tensor):
        sig, candidate, cell_before, squashed = ctx.saved_tensors
        size = cell_before.size(-1)
        i, f, o = sig[:, :size], sig[:, size : 2 * size], sig[:, 3 * size :]
        d_cell = d_cell + torch.ops.aten.tanh_backward(d_hidden * o, squashed)
        d_gates = torch.cat(
            [
                torch.ops.aten.sigmoid_backward(d_cell * candidate, i),
                torch.ops.aten.sigmoid_backward(d_cell * cell_before, f),
                torch.ops.aten.tanh_backward(d_cell * i, candidate),
                torch.ops.aten.sigmoid_backward(d_hidden * squashed, o),
            ],
            dim=-1,
        )
        return d_gates, d_cell * f


def lstm_update(gates: Tensor, cell: Tensor) -> tuple[Tensor, Tensor]:
    """(B, 4D) summed gates, (B, D) c -> (B, D) the next h and c, with nn.LSTM's equations."""
    if torch.is_grad_enabled():
        return _LSTMUpdate.apply(gates, cell)
    return _lstm(gates, cell)[:2]
