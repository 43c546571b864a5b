"""The decoders with attention, one per decoder order (`model.order`): where the query
comes from, on `decoder.Decoder`'s recurrence and unroll.

- `BahdanauDecoder` (Bahdanau et al. 2015, §3.1 and App. A.2.2): the
  previous state s_{i-1} queries the encoder, c_i = sum_j alpha_ij h_j,
  s_i = RNN(s_{i-1}, [y_{i-1}; c_i]), and the output reads [s_i; c_i; y_{i-1}], straight
  into the vocabulary or through a maxout/tanh readout layer first.
- `LuongDecoder` (Luong et al. 2015, §3 and §3.3): the RNN runs first,
  s_i = RNN(s_{i-1}, [y_{i-1}; h~_{i-1}]) (input feeding); then s_i queries the encoder and
  the attentional vector h~_i = tanh(W_c [c_i; s_i]) is projected to the vocabulary.
- `ConditionalDecoder`, the conditional GRU of Nematus and Marian (Sennrich et al. 2017,
  §2.3): a first transition reads y_{i-1}, s'_i = RNN_1(s_{i-1}, y_{i-1}); s'_i queries the
  encoder; a second transition reads the context, s_i = RNN_2(s'_i, c_i); the output reads
  [s_i; c_i; y_{i-1}] as Bahdanau's does. The query has seen y_{i-1}, Bahdanau's s_{i-1} has not.

`AttentionDecoder` holds what the three share: the scorer, the key projection made once per
sentence (`prepare`), the coverage model, and the window of local attention (window.py).
The scorers live in `attention.py`; the step interface, the unroll, the readout layer and the
decoder without attention in `decoder.py`.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor, nn

from alignmt.model.attention import AttentionFn, AttentionKind, make_attention
from alignmt.model.cell import DecoderState, StackedCell
from alignmt.model.decoder import Decoder, Memory, ReadoutKind
from alignmt.model.window import LocalWindow, WindowKind

CoverageKind = Literal["none", "sum", "fertility"]


class AttentionDecoder(Decoder):
    """A decoder with a scorer over the encoder states (`Decoder`'s arguments, plus the
    score, its hidden size for additive and concat (and local-p's position network), how
    scores become weights, the coverage model, the window: global, or local with half-width
    `half_width`, and the location score's number of `positions`).

    Coverage (Tu et al. 2016, §3.1.1, "linguistic coverage"): C_{i,j} = C_{i-1,j} + α_ij / Φ_j
    with C_{0,j} = 0 enters the next step's score (see attention.py). "sum" has Φ_j = 1; under
    "fertility" each source word learns how many target words it tends to produce,
    Φ_j = N σ(U_f h_j), so that C_{i,j} ≈ 1 says "translated as often as it should be".
    """

    def __init__(
        self,
        *,
        attention: AttentionKind,
        attn_dim: int,
        attention_fn: AttentionFn = "softmax",
        coverage: CoverageKind = "none",
        max_fertility: float = 2.0,
        window: WindowKind = "global",
        half_width: int = 10,
        positions: int = 100,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self.attention = make_attention(
            attention,
            query_dim=self.hidden,
            key_dim=self.enc_dim,
            attn_dim=attn_dim,
            coverage=coverage != "none",
            fn=attention_fn,
            positions=positions,
        )
        self.coverage = coverage
        self.max_fertility = max_fertility  # N
        self.U_f = nn.Linear(self.enc_dim, 1, bias=False) if coverage == "fertility" else None
        self.window = None
        if window != "global":
            self.window = LocalWindow(
                window, query_dim=self.hidden, attn_dim=attn_dim, half_width=half_width
            )

    def prepare(self, states: Tensor, mask: Tensor, final: Tensor) -> Memory:
        """Project the keys once per source batch, and the fertilities for fertility
        coverage; `final` is unused (attention reads states)."""
        rate = None
        if self.U_f is not None:
            fertility = self.max_fertility * torch.sigmoid(self.U_f(states).squeeze(-1))
            rate = torch.where(mask, fertility.reciprocal(), 0.0)  # (B, T_src)
        return Memory(states, mask, self.attention.project_keys(states), None, rate)

    def init_state(self, final: Tensor, memory: Memory) -> DecoderState:
        state = super().init_state(final, memory)
        if self.coverage != "none":
            state = state._replace(coverage=memory.states.new_zeros(memory.mask.shape))  # C_0
        if self.window is not None:
            start = final.new_zeros(final.size(0))  # (B,) step 0, and no window yet
            state = state._replace(step=start, centre=start)
        return state

    def _attend(
        self, query: Tensor, state: DecoderState, memory: Memory
    ) -> tuple[Tensor, Tensor, DecoderState]:
        """c_i (B, C) and α_i (B, T_src) for `query`, and the state with C_i and the
        window's next step and centre p_i."""
        mask, prior = memory.mask, None
        if self.window is not None:
            window = self.window(query, state.step, memory.mask)
            mask, prior = window.mask, window.prior
            state = state._replace(step=state.step + 1, centre=window.centre)
        keys = (query, memory.keys, memory.states, mask)
        context, alpha = self.attention(*keys, state.coverage, prior)
        if memory.steer is not None:
            # rows whose steer is all zero attend as the model does: a graph that always
            # takes a steer (`alignmt export --web`) steers only the rows asked
            steered = memory.steer.sum(dim=1, keepdim=True) > 0  # (B, 1)
            alpha = torch.where(steered, memory.steer, alpha)
            moved = torch.bmm(alpha.unsqueeze(1), memory.states).squeeze(1)  # (B, C)
            context = torch.where(steered, moved, context)
        if state.coverage is None:
            return context, alpha, state
        gained = alpha if memory.coverage_rate is None else alpha * memory.coverage_rate
        return context, alpha, state._replace(coverage=state.coverage + gained)


class BahdanauDecoder(AttentionDecoder):
    """Query s_{i-1}; s_i = RNN(s_{i-1}, [y_{i-1}; c_i]); logits from [s_i; c_i; y_{i-1}].

    Takes `Decoder`'s arguments, the score, and the readout layer's kind and size.
    """

    def __init__(
        self,
        *,
        attention: AttentionKind = "additive",
        attn_dim: int = 128,
        readout: ReadoutKind = "none",
        readout_dim: int = 128,
        **common: Any,
    ) -> None:
        super().__init__(attention=attention, attn_dim=attn_dim, **common)
        self.output = self._readout(readout, readout_dim)

    def _advance(
        self, gates: Tensor, state: DecoderState, memory: Memory
    ) -> tuple[DecoderState, Tensor, Tensor]:
        query = state.hidden[:, -1]  # (B, D) s_{i-1} of the top layer
        context, alpha, state = self._attend(query, state, memory)
        state = self.rnn(gates + self.rnn.extra_in(context), state)
        return state, torch.cat([state.hidden[:, -1], context], dim=-1), alpha  # (B, D + C)

    def _features(self, features: Tensor, emb: Tensor, memory: Memory) -> Tensor:
        return self.output(torch.cat([features, emb], dim=-1))  # [s_i; c_i; y_{i-1}]


class LuongDecoder(AttentionDecoder):
    """s_i = RNN(s_{i-1}, [y_{i-1}; h~_{i-1}]); query s_i; h~_i = tanh(W_c [c_i; s_i]).

    Takes `Decoder`'s arguments and the score; h~_i is its readout.
    """

    def __init__(
        self, *, attention: AttentionKind = "general", attn_dim: int = 128, **common: Any
    ) -> None:
        # Input feeding: x_i is h~_{i-1}, of the decoder's size.
        super().__init__(
            attention=attention, attn_dim=attn_dim, extra_dim=common["hidden"], **common
        )
        self.W_c = nn.Linear(self.enc_dim + self.hidden, self.hidden, bias=False)  # eq. 5
        self.proj = nn.Linear(self.hidden, self.vocab_size)

    def init_state(self, final: Tensor, memory: Memory) -> DecoderState:
        # h~_0 = 0: nothing has been attended to before the first step.
        state = super().init_state(final, memory)
        return state._replace(feed=final.new_zeros(final.size(0), self.hidden))

    def _advance(
        self, gates: Tensor, state: DecoderState, memory: Memory
    ) -> tuple[DecoderState, Tensor, Tensor]:
        state = self.rnn(gates + self.rnn.extra_in(state.feed), state)
        query = state.hidden[:, -1]  # (B, D) s_i of the top layer
        context, alpha, state = self._attend(query, state, memory)
        attentional = torch.tanh(self.W_c(torch.cat([context, query], dim=-1)))  # (B, D)
        return state._replace(feed=attentional), attentional, alpha

    @property
    def projection(self) -> nn.Linear:
        return self.proj

    def _features(self, features: Tensor, emb: Tensor, memory: Memory) -> Tensor:
        return self.dropout(features)


class ConditionalDecoder(BahdanauDecoder):
    """s'_i = RNN_1(s_{i-1}, y_{i-1}); query s'_i; s_i = RNN_2(s'_i, c_i); logits from
    [s_i; c_i; y_{i-1}] (Sennrich et al. 2017, §2.3), with GRU or LSTM cells: Bahdanau's
    decoder with the query moved after a first transition, and its output layer kept.

    With L layers, the two transitions make the first layer, and layers 2..L are stacked
    on its s_i as in `StackedCell`, reading the layer below and not the context: `rnn` is
    RNN_1 (one layer, input y_{i-1}), `rnn2` is RNN_2 and the layers above it (its
    `embed_in` maps c_i). An LSTM's memory cell passes through both transitions as the
    hidden state does. Takes `BahdanauDecoder`'s arguments.
    """

    def __init__(self, **arguments: Any) -> None:
        super().__init__(extra_dim=0, rnn_layers=1, **arguments)
        self.rnn2 = StackedCell(
            rnn="lstm" if self.rnn.is_lstm else "gru",
            emb_dim=self.enc_dim,
            extra_dim=0,
            hidden=self.hidden,
            layers=self.layers,
            dropout=self.dropout.p,
        )

    def _advance(
        self, gates: Tensor, state: DecoderState, memory: Memory
    ) -> tuple[DecoderState, Tensor, Tensor]:
        first = self.rnn(gates, _first_layer(state))  # s'_i: layer 1 has read y_{i-1}
        query = first.hidden[:, 0]  # (B, D)
        context, alpha, state = self._attend(query, state, memory)
        # RNN_2 continues layer 1 from s'_i; the layers above start from their s_{i-1}
        inner = state._replace(
            hidden=torch.cat([first.hidden, state.hidden[:, 1:]], dim=1),
            cell=None if state.cell is None else torch.cat([first.cell, state.cell[:, 1:]], 1),
        )
        state = self.rnn2(self.rnn2.embed_in(context), inner)
        return state, torch.cat([state.hidden[:, -1], context], dim=-1), alpha  # (B, D + C)


def _first_layer(state: DecoderState) -> DecoderState:
    """`state` cut to its first layer: (B, 1, D) hidden (and cell)."""
    cell = None if state.cell is None else state.cell[:, :1]
    return state._replace(hidden=state.hidden[:, :1], cell=cell)
