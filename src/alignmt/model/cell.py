"""The decoder's recurrence: an L-layer GRU or LSTM advanced one step at a time, with
PyTorch's gate layout and equations (nn.GRU: r, z, n, with b_hn inside r * (W_hn h + b_hn);
nn.LSTM: i, f, g, o), so that its weights are laid out as nn.GRU's and nn.LSTM's are."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from alignmt.model import fused
from alignmt.model.attention.spec import Axis
from alignmt.model.encoder import RNNKind


class DecoderState(NamedTuple):
    """What the recurrence carries from step to step. All fields are batch-first, so a
    beam can reorder every field with one `index_select(0, ...)`."""

    hidden: Tensor  # (B, L, D) s_i of every layer
    cell: Tensor | None  # (B, L, D) LSTM memory cells; None for a GRU
    feed: Tensor | None  # (B, D) Luong's h~_{i-1} for input feeding; None otherwise
    # the attention mechanisms' own state (coverage's C_{i-1,j}, a local window's step and
    # p_i), by the slot names and axes they declare (attention/spec.py); rows first
    slots: dict[str, Tensor]


# The axes of the recurrence's own fields; the slots' are declared by their mechanisms.
STATE_AXES: dict[str, tuple[Axis, ...]] = {
    "hidden": ("rows", "units", "units"),
    "cell": ("rows", "units", "units"),
    "feed": ("rows", "units"),
}


class StackedCell(nn.Module):
    """An L-layer GRU or LSTM advanced one step at a time.

    The first layer's input [y_{i-1}; x_i] is projected in two parts (W_ih = [W_y | W_x]):
    `embed_in` for the embedding, applied by the caller to all steps at once, and `extra_in`
    for the per-step part x_i (the context c_i, or Luong's h~_{i-1}; None when extra_dim is 0
    and the input is y_{i-1} alone). Gate layout and equations are PyTorch's nn.GRU / nn.LSTM
    (gates r, z, n and i, f, g, o).
    """

    def __init__(
        self,
        *,
        rnn: RNNKind,
        emb_dim: int,
        extra_dim: int,
        hidden: int,
        layers: int,
        dropout: float,
    ) -> None:
        super().__init__()
        self.is_lstm = rnn == "lstm"
        self.layers = layers
        gates = (4 if self.is_lstm else 3) * hidden
        self.embed_in = nn.Linear(emb_dim, gates)  # carries the input bias b_ih
        self.extra_in = nn.Linear(extra_dim, gates, bias=False) if extra_dim else None
        self.layer_in = nn.ModuleList(nn.Linear(hidden, gates) for _ in range(layers - 1))
        self.hidden_in = nn.ModuleList(nn.Linear(hidden, gates) for _ in range(layers))
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_gates: Tensor, state: DecoderState) -> DecoderState:
        """One step of every layer.

        Args:
            input_gates: (B, G) the first layer's W_ih [y_{i-1}; x_i] + b_ih, G = 3D or 4D.
            state: the state after step i - 1.

        Returns:
            The state after step i (its other fields are passed through unchanged).
        """
        hiddens, cells = [], []
        below = None
        for layer in range(self.layers):
            gi = input_gates if layer == 0 else self.layer_in[layer - 1](self.dropout(below))
            gh = self.hidden_in[layer](state.hidden[:, layer])  # (B, G)
            if self.is_lstm:
                below, cell = _lstm_update(gi + gh, state.cell[:, layer])
                cells.append(cell)
            else:
                below = _gru_update(gi, gh, state.hidden[:, layer])
            hiddens.append(below)
        return state._replace(
            hidden=torch.stack(hiddens, dim=1),
            cell=torch.stack(cells, dim=1) if self.is_lstm else None,
        )


def _gru_update(gi: Tensor, gh: Tensor, hidden: Tensor) -> Tensor:
    """nn.GRU's equations; gi and gh are (B, 3D) with gate order r, z, n (fused.gru_update
    where it applies: the same numbers, with a hand-written backward)."""
    if fused.applies(gi):
        return fused.gru_update(gi, gh, hidden)
    i_r, i_z, i_n = gi.chunk(3, dim=-1)
    h_r, h_z, h_n = gh.chunk(3, dim=-1)
    reset = torch.sigmoid(i_r + h_r)
    update = torch.sigmoid(i_z + h_z)
    new = torch.tanh(i_n + reset * h_n)  # the reset gate scales W_hn h + b_hn, as in PyTorch
    return new + update * (hidden - new)  # (1 - z) n + z h


def _lstm_update(gates: Tensor, cell: Tensor) -> tuple[Tensor, Tensor]:
    """nn.LSTM's equations; gates is (B, 4D) with gate order i, f, g, o (fused.lstm_update
    where it applies)."""
    if fused.applies(gates):
        return fused.lstm_update(gates, cell)
    i, f, g, o = gates.chunk(4, dim=-1)
    cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(cell), cell
