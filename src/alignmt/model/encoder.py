"""The encoder: source embeddings and a GRU or LSTM, uni- or bidirectional, 1..L layers.

Bahdanau et al. (2015), §3.2: the encoder keeps *every* state h_j (for a bidirectional
RNN, the forward and backward states side by side), not only the last one. It also returns
the final state, which a vanilla decoder uses as its fixed context and a bridge uses to
initialise the decoder.

Sequences are packed, so the recurrence never reads padding: a sentence gets the same
states alone and inside a padded batch, and the backward direction starts at its own last
real token, not at the batch's last column.
"""

from __future__ import annotations

from typing import Literal

from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

RNNKind = Literal["gru", "lstm"]


class Encoder(nn.Module):
    """Embeddings + a (bi)directional, multi-layer GRU/LSTM over packed sequences."""

    def __init__(
        self,
        *,
        vocab_size: int,
        emb_dim: int,
        hidden: int,
        layers: int = 1,
        rnn: RNNKind = "gru",
        bidirectional: bool = False,
        dropout: float = 0.0,
        state_dropout: float = 0.0,
        pad_id: int = 0,
    ) -> None:
        """`dropout` applies to the embeddings (and between layers); `state_dropout` to the
        returned states, which a small corpus lets attention over-fit to."""
        super().__init__()
        self.layers = layers
        self.directions = 2 if bidirectional else 1
        self.hidden = hidden
        self.out_dim = self.directions * hidden  # C
        self.embed = nn.Embedding(vocab_size, emb_dim, padding_idx=pad_id)
        self.dropout = nn.Dropout(dropout)
        self.state_dropout = nn.Dropout(state_dropout)
        rnn_class = {"gru": nn.GRU, "lstm": nn.LSTM}[rnn]
        self.rnn = rnn_class(
            emb_dim,
            hidden,
            num_layers=layers,
            batch_first=True,
            bidirectional=bidirectional,
            # PyTorch applies this between stacked layers only (and warns when L = 1).
            dropout=dropout if layers > 1 else 0.0,
        )

    def forward(self, src: Tensor, src_len: Tensor) -> tuple[Tensor, Tensor]:
        """Encode a padded batch.

        Args:
            src: (B, T_src) int64 source ids, padded.
            src_len: (B,) int64 real lengths (≥ 1).

        Returns:
            states: (B, T_src, C) every h_j of the top layer (after `state_dropout`); exactly
                0 at padding.
            final: (B, C) the top layer's final state, [h_fwd(last real token); h_bwd(first)].
        """
        emb = self.dropout(self.embed(src))  # (B, T_src, E)
        # pack_padded_sequence wants lengths on the CPU; enforce_sorted=False sorts internally
        # and restores the batch order, so callers never sort.
        packed = pack_padded_sequence(emb, src_len.cpu(), batch_first=True, enforce_sorted=False)
        packed_states, final = self.rnn(packed)
        states, _ = pad_packed_sequence(packed_states, batch_first=True, total_length=src.size(1))
        if isinstance(final, tuple):  # LSTM (h_n, c_n): the decoder is initialised from h_n
            final = final[0]
        # PyTorch's (L * dirs, B, H) -> the top layer's directions side by side: (B, dirs * H)
        top = final.view(self.layers, self.directions, -1, self.hidden)[-1]  # (dirs, B, H)
        return self.state_dropout(states), top.permute(1, 0, 2).flatten(1)
