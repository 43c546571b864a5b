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
- `MixtureDecoder`, for a mapping whose output is a mixture over source positions (exact hard
  monotonic attention, Wu & Cotterell 2019): s_i = RNN(s_{i-1}, y_{i-1}) reads no context;
  s_i queries the encoder; each position j makes its own output distribution from
  [s_i; h_j; y_{i-1}], and p(y_i) = sum_j alpha_ij p(y_i | s_i, h_j).

`AttentionDecoder` holds what the three share: its attention, a composition of the room's
mechanisms (attention/: a score, a mapping from scores to weights, and modifiers such as a
local window or coverage), whose memory it prepares once per sentence and whose state slots
it carries from step to step. The step interface, the unroll, the readout layer and the
decoder without attention are in `decoder.py`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from alignmt.model.attention.spec import Axis, Composition
from alignmt.model.attention.torch import Attention
from alignmt.model.cell import DecoderState, StackedCell
from alignmt.model.decoder import Decoder, Memory, ReadoutKind, Sampling, Unrolled
from alignmt.model.distribution import LogProbs


class AttentionDecoder(Decoder):
    """A decoder that attends: `Decoder`'s arguments, plus the composition of its attention
    (`attention.registry.compose` makes one from a model config)."""

    def __init__(self, *, attention: Composition, **common: Any) -> None:
        super().__init__(**common)
        self.attention = Attention(attention, query_dim=self.hidden, key_dim=self.enc_dim)
        if attention.output is not None:
            sizes = dict(features=self._copy_features(), vocab_size=self.vocab_size)
            self.copy = attention.output.build("torch", **sizes)

    def _copy_features(self) -> int:
        """The units p_gen reads: the step's features and y_{i-1}, [s_i; c_i; y_{i-1}]."""
        return self.hidden + self.enc_dim + self.emb_dim

    def axes(self) -> dict[str, tuple[Axis, ...]]:
        """`Decoder.axes`, and the slots the attention's mechanisms declare."""
        composition = self.attention.composition
        slots = {slot.name: slot.axes for slot in (*composition.state, *composition.memory)}
        return super().axes() | slots

    def prepare(self, states: Tensor, mask: Tensor, final: Tensor) -> Memory:
        """The memory the mechanisms make once per source batch (the score's projected keys,
        ...); `final` is unused (attention reads states)."""
        return Memory(states, mask, None, self.attention.prepare(states, mask))

    def init_state(self, final: Tensor, memory: Memory) -> DecoderState:
        state = super().init_state(final, memory)
        slots = self.attention.start(memory)
        if self.copy is not None:  # what the explorer shows of copying, before the first step
            shares = memory.states.new_zeros(*memory.mask.shape, 1)  # (B, T_src, 1)
            slots |= {"p_gen": shares.new_zeros(shares.size(0)), "copied": shares}
        return state._replace(slots=slots)

    def _attend(
        self, query: Tensor, state: DecoderState, memory: Memory
    ) -> tuple[Tensor, Tensor, DecoderState]:
        """c_i (B, C) and α_i (B, T_src) for `query`, and the state with the mechanisms'
        slots after the step."""
        context, alpha, slots = self.attention(query, state.slots, memory)
        return context, alpha, state._replace(slots=slots)


class BahdanauDecoder(AttentionDecoder):
    """Query s_{i-1}; s_i = RNN(s_{i-1}, [y_{i-1}; c_i]); logits from [s_i; c_i; y_{i-1}].

    Takes `AttentionDecoder`'s arguments, and the readout layer's kind and size.
    """

    def __init__(
        self, *, readout: ReadoutKind = "none", readout_dim: int = 128, **common: Any
    ) -> None:
        super().__init__(**common)
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

    Takes `AttentionDecoder`'s arguments; h~_i is its readout.
    """

    def __init__(self, **common: Any) -> None:
        # Input feeding: x_i is h~_{i-1}, of the decoder's size.
        super().__init__(extra_dim=common["hidden"], **common)
        self.W_c = nn.Linear(self.enc_dim + self.hidden, self.hidden, bias=False)  # eq. 5
        self.proj = nn.Linear(self.hidden, self.vocab_size)

    def _copy_features(self) -> int:
        """[h~_i; y_{i-1}]: the attentional vector holds c_i and s_i."""
        return self.hidden + self.emb_dim

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


class MixtureDecoder(AttentionDecoder):
    """s_i = RNN(s_{i-1}, y_{i-1}); query s_i; log p(y_i) = log sum_j alpha_ij p(y_i | s_i, h_j),
    each p(. | s_i, h_j) the output layer over [s_i; h_j; y_{i-1}].

    Its mapping keeps the alignment's posterior, gives the step's log alpha_i
    (`log_weights`) and takes each position's log p(y_{i-1}) (`observe`), which this decoder
    reads from two slots it fills: `emitting` (B, T_src, R), each position's output
    features, and `normaliser` (B, T_src), their logits' log-sum-exp; once the next step
    knows y_i, they give each position's log p(y_i | s_i, h_j) (`_observe`). The output is
    log p itself, not logits (`plain_projection` is False), and its unroll is a loop of
    `step`: each step's alignment depends on the words before it. Takes
    `BahdanauDecoder`'s arguments.
    """

    plain_projection = False

    def __init__(
        self, *, readout: ReadoutKind = "none", readout_dim: int = 128, **common: Any
    ) -> None:
        super().__init__(extra_dim=0, **common)
        self.output = self._readout(readout, readout_dim)

    def init_state(self, final: Tensor, memory: Memory) -> DecoderState:
        state = super().init_state(final, memory)
        features = self.projection.in_features
        emitting = memory.states.new_zeros(*memory.mask.shape, features)  # (B, T_src, R)
        normaliser = memory.states.new_zeros(memory.mask.shape)
        return state._replace(slots=state.slots | {"emitting": emitting, "normaliser": normaliser})

    def step(
        self, prev: Tensor, state: DecoderState, memory: Memory
    ) -> tuple[LogProbs, DecoderState, Tensor]:
        """`Decoder.step`: log p(y_i) (B, V) as log-probabilities, the state, alpha_i."""
        emb = self.dropout(self.embed(prev))  # (B, E)
        state = self._observe(prev, state)
        state = self.rnn(self.rnn.embed_in(emb), state)
        query = state.hidden[:, -1]  # (B, D) s_i
        _, alpha, state = self._attend(query, state, memory)
        T = memory.states.size(1)
        per_position = [query.unsqueeze(1).expand(-1, T, -1), memory.states]
        features = self.output(torch.cat([*per_position, emb.unsqueeze(1).expand(-1, T, -1)], -1))
        logits = self.projection(features)  # (B, T_src, V)
        normaliser = torch.logsumexp(logits, dim=-1)  # (B, T_src)
        emitted = logits - normaliser.unsqueeze(-1)  # log p(w | s_i, h_j)
        log_alpha = self.attention.mapping.log_weights(state.slots)  # (B, T_src)
        log_p = torch.logsumexp(log_alpha.unsqueeze(-1) + emitted, dim=1)  # (B, V)
        slots = state.slots | {"emitting": features, "normaliser": normaliser}
        return LogProbs(normalised=log_p), state._replace(slots=slots), alpha

    def _observe(self, prev: Tensor, state: DecoderState) -> DecoderState:
        """The state with the alignment's posterior after y_{i-1} = `prev` (B,): from the
        last step's features, each position's log p(y_{i-1} | s_{i-1}, h_j), (B, T_src)."""
        slots = state.slots
        weight, bias = self.projection.weight[prev], self.projection.bias[prev]  # (B, R), (B,)
        logit = torch.einsum("btr,br->bt", slots["emitting"], weight) + bias.unsqueeze(-1)
        emitted = logit - slots["normaliser"]  # (B, T_src)
        return state._replace(slots=self.attention.mapping.observe(slots, emitted))

    def unroll(
        self,
        tgt_in: Tensor,
        state: DecoderState,
        memory: Memory,
        sampling: Sampling | None = None,
    ) -> Unrolled:
        """`Decoder.unroll` as a loop of `step`; its features are log p (B, T_tgt, V)."""
        log_probs, weights, prev = [], [], tgt_in[:, 0]
        for t in range(tgt_in.size(1)):
            step_log_probs, state, alpha = self.step(prev, state, memory)
            log_probs.append(step_log_probs.normalised)
            weights.append(alpha)
            if t + 1 < tgt_in.size(1):
                gold = tgt_in[:, t + 1]
                prev = gold if sampling is None else sampling.mix(gold, log_probs[-1].detach())
        return Unrolled(torch.stack(log_probs, 1), torch.stack(weights, 1), state)

    def distribution(self, features: Tensor) -> LogProbs:
        """The unroll's features are log p already."""
        return LogProbs(normalised=features)


def _first_layer(state: DecoderState) -> DecoderState:
    """`state` cut to its first layer: (B, 1, D) hidden (and cell)."""
    cell = None if state.cell is None else state.cell[:, :1]
    return state._replace(hidden=state.hidden[:, :1], cell=cell)
