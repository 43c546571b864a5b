"""The recurrences in Flax (Linen), with PyTorch's gate layout and equations, so that one set
of weights serves both frameworks: nn.GRU's r, z, n with b_hn inside r * (W_hn h + b_hn),
and nn.LSTM's i, f, g, o.

Flax's own GRUCell has no b_hn (its reset gate multiplies W_hn h alone), so it cannot hold
a PyTorch GRU; the cells here can. Each layer keeps two Dense maps, `ih` (input to gates,
with b_ih) and `hh` (state to gates, with b_hh): PyTorch's weight_ih / weight_hh, transposed.

The encoder's input projection W_ih x + b_ih reads no state, so it runs on all time steps
at once; only W_hh h runs inside the `scan` over time. Padding never reaches a state: at a
padded step the carry passes through unchanged and the output is 0 (what PyTorch's packed
sequences give), and the backward direction reverses each row within its own length.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from alignmt.model.flax_init import torch_dense

Array = jax.Array


def gru_update(gi: Array, gh: Array, hidden: Array) -> Array:
    """nn.GRU's equations; gi and gh are (B, 3D) with gate order r, z, n."""
    i_r, i_z, i_n = jnp.split(gi, 3, axis=-1)
    h_r, h_z, h_n = jnp.split(gh, 3, axis=-1)
    reset = jax.nn.sigmoid(i_r + h_r)
    update = jax.nn.sigmoid(i_z + h_z)
    new = jnp.tanh(i_n + reset * h_n)  # b_hn sits inside gh, so the reset gate scales it
    return new + update * (hidden - new)  # (1 - z) n + z h


def lstm_update(gates: Array, cell: Array) -> tuple[Array, Array]:
    """nn.LSTM's equations; gates is (B, 4D) with gate order i, f, g, o. Returns (c', h')."""
    i, f, g, o = jnp.split(gates, 4, axis=-1)
    cell = jax.nn.sigmoid(f) * cell + jax.nn.sigmoid(i) * jnp.tanh(g)
    return cell, jax.nn.sigmoid(o) * jnp.tanh(cell)


class Direction(nn.Module):
    """One direction of one encoder layer over a padded batch (PyTorch's weight_ih_lK and
    weight_hh_lK, or their _reverse twins).

    The carry is h for a GRU and (c, h) for an LSTM, Flax's order.
    """

    rnn: str  # "gru" | "lstm"
    in_dim: int
    hidden: int
    reverse: bool = False

    def setup(self) -> None:
        gates = (4 if self.rnn == "lstm" else 3) * self.hidden
        bound = 1 / math.sqrt(self.hidden)  # nn.GRU / nn.LSTM draw every weight from this
        self.ih = torch_dense(gates, self.in_dim, bound=bound)
        self.hh = torch_dense(gates, self.hidden, bound=bound)

    def __call__(self, inputs: Array, lengths: Array) -> tuple[Array, Array]:
        """Run over `inputs` (B, T, I) with real lengths (B,).

        Returns:
            states (B, T, H), 0 at padding, and the final h (B, H): at the last real token
            going forward, at the first going backward.
        """
        batch, steps, _ = inputs.shape
        mask = jnp.arange(steps)[None] < lengths[:, None]  # (B, T)
        order = _within_length(lengths, steps) if self.reverse else None
        gates = self.ih(inputs if order is None else _gather_steps(inputs, order))  # (B, T, G)
        zeros = jnp.zeros((batch, self.hidden), gates.dtype)
        carry = (zeros, zeros) if self.rnn == "lstm" else zeros
        scan = nn.scan(
            _masked_step,
            variable_broadcast="params",
            split_rngs={"params": False},
            in_axes=1,
            out_axes=1,
        )
        carry, states = scan(self, carry, (gates, mask))  # states (B, T, H)
        final = carry[1] if self.rnn == "lstm" else carry
        return (states if order is None else _gather_steps(states, order)), final

    def step(self, carry, gates: Array):
        """One step of the cell from the input's gates (B, G); returns the new carry and h."""
        gh = self.hh(carry[1] if self.rnn == "lstm" else carry)
        if self.rnn == "lstm":
            carry = lstm_update(gates + gh, carry[0])
            return carry, carry[1]
        hidden = gru_update(gates, gh, carry)
        return hidden, hidden


def _masked_step(module: Direction, carry, inputs):
    """The scanned body: a padded step keeps the carry and outputs 0."""
    gates, real = inputs  # (B, G), (B,)
    new, hidden = module.step(carry, gates)
    keep = real[:, None]
    carry = jax.tree_util.tree_map(lambda n, o: jnp.where(keep, n, o), new, carry)
    return carry, jnp.where(keep, hidden, 0)


def _within_length(lengths: Array, steps: int) -> Array:
    """(B, T) indices that reverse each row's first `length` steps and leave its padding."""
    t = jnp.arange(steps)[None]
    return jnp.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)


def _gather_steps(values: Array, order: Array) -> Array:
    """values (B, T, F) reordered along T by order (B, T); the reversal is its own inverse."""
    return jnp.take_along_axis(values, order[..., None], axis=1)


class DecoderState(NamedTuple):
    """What the decoder carries from step to step, batch-first like the PyTorch one."""

    hidden: Array  # (B, L, D) s_i of every layer
    cell: Array | None  # (B, L, D) LSTM memory cells; None for a GRU
    feed: Array | None  # (B, D) Luong's h~_{i-1} for input feeding; None otherwise
    slots: dict[str, Array]  # the attention mechanisms' state (cell.DecoderState's)


class StackedCell(nn.Module):
    """The decoder's L-layer recurrence advanced one step (cell.StackedCell's layout:
    embed_in carries b_ih for y_{i-1}, extra_in the per-step input x_i, layer_in_K the
    input of layer K + 1, hidden_in_K W_hh and b_hh of layer K)."""

    rnn: str
    emb_dim: int
    extra_dim: int
    hidden: int
    layers: int
    dropout: float

    def setup(self) -> None:
        gates = (4 if self.rnn == "lstm" else 3) * self.hidden
        self.embed_in = torch_dense(gates, self.emb_dim)
        if self.extra_dim:
            self.extra_in = torch_dense(gates, self.extra_dim, bias=False)
        self.layer_in = [torch_dense(gates, self.hidden) for _ in range(self.layers - 1)]
        self.hidden_in = [torch_dense(gates, self.hidden) for _ in range(self.layers)]
        self.drop = nn.Dropout(self.dropout)

    def __call__(self, input_gates: Array, state: DecoderState, train: bool) -> DecoderState:
        """One step of every layer from the first layer's input gates (B, G)."""
        hiddens, cells = [], []
        below = None
        for layer in range(self.layers):
            if layer == 0:
                gi = input_gates
            else:
                gi = self.layer_in[layer - 1](self.drop(below, deterministic=not train))
            gh = self.hidden_in[layer](state.hidden[:, layer])  # (B, G)
            if self.rnn == "lstm":
                cell, below = lstm_update(gi + gh, state.cell[:, layer])
                cells.append(cell)
            else:
                below = gru_update(gi, gh, state.hidden[:, layer])
            hiddens.append(below)
        return state._replace(
            hidden=jnp.stack(hiddens, axis=1),
            cell=jnp.stack(cells, axis=1) if self.rnn == "lstm" else None,
        )
