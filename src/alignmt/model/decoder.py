"""Decoders: one step (state, y_{i-1}, memory) -> (log p(y_i), state, alpha_i), and the
teacher-forced unroll over it.

Owns what every decoder shares: what it reads of the encoder (`Memory`), what it returns
(`DecoderOutput`, `Unrolled`), scheduled sampling (`Sampling`), the output layer (`Readout`)
and `Decoder`, the embeddings, the recurrence (`cell.StackedCell`), s_0 and the unroll; and
the decoder without attention:

- `VanillaDecoder` (Cho et al. 2014, the baseline): no attention; the final encoder state c
  is a fixed context fed at every step, s_i = RNN(s_{i-1}, [y_{i-1}; c]), output from
  [s_i; c; y_{i-1}]. Or, as in Sutskever et al. (2014), c reaches the decoder only through
  its initial state: s_i = RNN(s_{i-1}, y_{i-1}), output from [s_i; y_{i-1}].

The three decoders with attention (Bahdanau's, Luong's and the conditional GRU's order) are
in `attention_decoder.py`; attention itself in the room, `attention/`.

Under teacher forcing everything that does not depend on the recurrence is computed once,
outside the time loop: the attention's memory slots (in `prepare`), the embedding part of the
RNN input projection (and, for vanilla, the fixed context's part), and the output layer over
all steps at once. `forward` and a loop of `step` run the same `_advance` and give the same
log-probabilities.

A decoder owns its output distribution: `step` and `forward` hand out `LogProbs`
(distribution.py), which every search, the exporter and the analyses read. Its output layer is
a plain projection, log p = log_softmax(W features + b) (`plain_projection`): what the fused
training loss, int8 matmuls and the shortlist rely on; or, where the attention's composition
has the pointer-generator (`copy`), that projection mixed with copying source words, over a
vocabulary extended by the source's words (attention/copy).
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor, nn

from alignmt.model.attention.spec import Axis
from alignmt.model.cell import STATE_AXES, DecoderState, StackedCell
from alignmt.model.distribution import LogProbs
from alignmt.model.encoder import RNNKind

ReadoutKind = Literal["none", "tanh", "maxout"]

InitKind = Literal["zeros", "bridge"]


class Memory(NamedTuple):
    """What the decoder reads from the encoder; fixed for a whole sentence."""

    states: Tensor  # (B, T_src, C) h_j: the attention's keys and values
    mask: Tensor  # (B, T_src) bool, True at real tokens
    context: Tensor | None  # (B, C) vanilla's fixed context (final encoder state); else None
    # what the attention mechanisms make once per sentence (a score's projected keys,
    # fertility's 1 / Phi_j), by the slot names and axes they declare; rows first
    slots: dict[str, Tensor]
    # (B, T_src) weights that replace the step's alpha_i, whatever the scores (the explorer's
    # what-if), in the rows where they are not all zero; None to attend as the model does
    steer: Tensor | None = None


# The axes of the memory's own fields; the slots' are declared by their mechanisms.
MEMORY_AXES: dict[str, tuple[Axis, ...]] = {
    "states": ("rows", "source", "units"),
    "mask": ("rows", "source"),
    "context": ("rows", "units"),
    "steer": ("rows", "source"),
}


def flat_fields(fields: DecoderState | Memory) -> dict[str, Tensor]:
    """The fields a state or memory holds, by name, its slots among them (None ones left out):
    what a graph (an exported step, a CUDA graph) takes as flat tensors."""
    own = {n: getattr(fields, n) for n in fields._fields if n != "slots"}
    return {n: v for n, v in own.items() if v is not None} | dict(fields.slots)


def from_flat(kind: type, values: dict[str, Tensor]) -> DecoderState | Memory:
    """`flat_fields`' inverse: a `kind` (DecoderState or Memory) with the fields `values`
    names, the other names its slots, and None elsewhere."""
    values = dict(values)
    own = {n: values.pop(n) for n in kind._fields if n in values}
    return kind(**(dict.fromkeys(kind._fields) | own | {"slots": values}))


class DecoderOutput(NamedTuple):
    log_probs: LogProbs  # (B, T_tgt, V)
    attention: Tensor | None  # (B, T_tgt, T_src) alpha_ij; None for vanilla
    state: DecoderState  # after the last step


class Unrolled(NamedTuple):
    """A teacher-forced unroll stopped before the vocabulary projection (for a fused loss)."""

    features: Tensor  # (B, T_tgt, R) what `Decoder.projection` maps to the logits
    attention: Tensor | None  # (B, T_tgt, T_src) alpha_ij; None for vanilla
    state: DecoderState  # after the last step


class Sampling(NamedTuple):
    """Scheduled sampling (Bengio et al. 2015): what a training unroll feeds back."""

    teacher: float  # eps_i: the probability that a position reads the true y_{i-1}
    pick: str  # the model's own y_{i-1}: "sample" from its distribution, or its "argmax"

    def mix(self, gold: Tensor, scores: Tensor) -> Tensor:
        """(B,) the next inputs: per row, `gold` (B,) with probability eps, else the
        model's own token from the step before's `scores` (B, V), whose softmax is its
        distribution (no gradient flows through the choice, as in the paper)."""
        if self.pick == "argmax":
            own = scores.argmax(-1)
        else:
            own = torch.multinomial(scores.float().softmax(-1), 1).squeeze(1)
        keep = torch.rand(gold.shape, device=gold.device) < self.teacher
        return torch.where(keep, gold, own)


class Readout(nn.Module):
    """The output layer over [s_i; c_i; y_{i-1}] (Bahdanau et al. 2015, App. A.2.2).

    "none" projects the features straight to the vocabulary. "maxout" and "tanh"
    first map them to R units, maxout taking the max of adjacent pairs of 2R linear units
    as in the paper; the vocabulary matmul then costs R x V instead of (D + C + E) x V.
    `forward` stops before that matmul, `proj`: the decoder applies it, or the training loss
    fuses it with the cross-entropy.
    """

    def __init__(
        self, *, in_dim: int, kind: ReadoutKind, readout_dim: int, vocab_size: int, dropout: float
    ) -> None:
        super().__init__()
        self.kind = kind
        units = {"none": 0, "tanh": readout_dim, "maxout": 2 * readout_dim}[kind]
        self.hidden = nn.Linear(in_dim, units) if units else None
        self.dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(readout_dim if units else in_dim, vocab_size)

    def forward(self, features: Tensor) -> Tensor:
        """(..., in_dim) -> (..., R or in_dim): what the vocabulary projection `proj` reads."""
        if self.kind == "tanh":
            features = torch.tanh(self.hidden(features))
        elif self.kind == "maxout":
            features = self.hidden(features).unflatten(-1, (-1, 2)).amax(dim=-1)  # (..., R)
        return self.dropout(features)


class Decoder(nn.Module):
    """What the decoders share: embeddings, the recurrence, the initial state, and
    the teacher-forced unroll. Subclasses say what `prepare` keeps of the encoder, how one
    step reads it (`_advance`), which input gates are known before the loop
    (`_input_gates`), how step features become the output layer's input (`_features`) and
    which Linear maps that to the vocabulary (`projection`)."""

    def __init__(
        self,
        *,
        vocab_size: int,
        emb_dim: int,
        hidden: int,
        enc_dim: int,
        layers: int = 1,
        rnn: RNNKind = "gru",
        init: InitKind = "zeros",
        dropout: float = 0.0,
        pad_id: int = 0,
        unk_id: int = 3,
        extra_dim: int | None = None,
        rnn_layers: int | None = None,
    ) -> None:
        """`extra_dim` is the size of x_i in the RNN input [y_{i-1}; x_i]: the context
        (enc_dim) unless a subclass feeds something else, or 0 for no x_i. `rnn_layers` is
        the depth of `self.rnn` where it is not the whole stack of `layers`."""
        super().__init__()
        self.vocab_size, self.emb_dim, self.enc_dim = vocab_size, emb_dim, enc_dim
        self.hidden, self.layers, self.unk_id = hidden, layers, unk_id
        # the pointer-generator (See et al. 2017), where the attention's composition has one:
        # the output distribution extended by copying source words (attention/copy)
        self.copy: nn.Module | None = None
        self.embed = nn.Embedding(vocab_size, emb_dim, padding_idx=pad_id)
        self.dropout = nn.Dropout(dropout)
        self.rnn = StackedCell(
            rnn=rnn,
            emb_dim=emb_dim,
            extra_dim=enc_dim if extra_dim is None else extra_dim,
            hidden=hidden,
            layers=layers if rnn_layers is None else rnn_layers,
            dropout=dropout,
        )
        # Bahdanau et al. (2015, App. A.2.2) start from s_0 = tanh(W_s h_1^<-), the backward
        # state; bridge reads both directions' final states, for every layer; zeros: none.
        self.bridge = nn.Linear(enc_dim, layers * hidden) if init == "bridge" else None

    def init_state(self, final: Tensor, memory: Memory) -> DecoderState:
        """s_0 from the encoder's final state `final` (B, C); `memory` from `prepare`."""
        batch = final.size(0)
        if self.bridge is None:
            hidden = final.new_zeros(batch, self.layers, self.hidden)
        else:
            hidden = torch.tanh(self.bridge(final)).view(batch, self.layers, self.hidden)
        return DecoderState(
            hidden=hidden,
            cell=torch.zeros_like(hidden) if self.rnn.is_lstm else None,
            feed=None,
            slots={},
        )

    def forward(self, tgt_in: Tensor, state: DecoderState, memory: Memory) -> DecoderOutput:
        """Teacher-forced unroll.

        Args:
            tgt_in: (B, T_tgt) int64 decoder inputs <s> y_1 .. y_n, padded.
            state: initial state (from `init_state`).
            memory: from `prepare`.

        Returns:
            log p (B, T_tgt, V) (V + T_src with copying), attention (B, T_tgt, T_src) or
            None, and the final state.
            Padded target steps produce values that the loss ignores; they never feed back
            into earlier steps.
        """
        unrolled = self.unroll(tgt_in, state, memory)
        return DecoderOutput(self.distribution(unrolled.features), *unrolled[1:])

    def unroll(
        self,
        tgt_in: Tensor,
        state: DecoderState,
        memory: Memory,
        sampling: Sampling | None = None,
    ) -> Unrolled:
        """`forward` up to the output layer: its input (B, T_tgt, R), not log p.
        With `sampling`, each position after the first reads y_{i-1} from tgt_in or the
        model's own output before it (scheduled sampling)."""
        if sampling is not None:
            return self._unroll_sampled(tgt_in, state, memory, sampling)
        emb = self.dropout(self.embed(self._known(tgt_in)))  # (B, T_tgt, E)
        gates = self._input_gates(emb, memory)  # (B, T_tgt, G)
        features, weights = [], []
        # unbind, not gates[:, t]: each slice's backward would fill a zero (B, T_tgt, G)
        # tensor, T_tgt times over; unbind's backward stacks the step gradients once.
        for step_gates in gates.unbind(1):
            state, feature, alpha = self._advance(step_gates, state, memory)
            features.append(feature)
            weights.append(alpha)
        steps = torch.stack(features, dim=1)  # (B, T_tgt, F)
        attention = None if weights[0] is None else torch.stack(weights, dim=1)
        out = self._features(steps, emb, memory)  # (B, T_tgt, R)
        if self.copy is not None:
            out = self._copying(out, attention, steps, emb, memory)[0]
        return Unrolled(out, attention, state)

    def _unroll_sampled(
        self, tgt_in: Tensor, state: DecoderState, memory: Memory, sampling: Sampling
    ) -> Unrolled:
        """`unroll` one step at a time, each step's input chosen after the step before: the
        input gates and output features of teacher forcing, computed per step."""
        prev = tgt_in[:, 0]  # (B,) <s>
        features, weights = [], []
        for t in range(tgt_in.size(1)):
            emb = self.dropout(self.embed(self._known(prev))).unsqueeze(1)  # (B, 1, E)
            gates = self._input_gates(emb, memory)[:, 0]
            state, feature, alpha = self._advance(gates, state, memory)
            out = self._features(feature.unsqueeze(1), emb, memory)  # (B, 1, R)
            if self.copy is not None:
                out = self._copying(out, alpha.unsqueeze(1), feature.unsqueeze(1), emb, memory)[0]
            features.append(out)
            weights.append(alpha)
            if t + 1 < tgt_in.size(1):
                with torch.no_grad():
                    scores = self.distribution(features[-1][:, 0]).scores  # (B, V)
                prev = sampling.mix(tgt_in[:, t + 1], scores)
        attention = None if weights[0] is None else torch.stack(weights, dim=1)
        return Unrolled(torch.cat(features, dim=1), attention, state)

    def step(
        self, prev: Tensor, state: DecoderState, memory: Memory
    ) -> tuple[Tensor, DecoderState, Tensor | None]:
        """One decoding step.

        Args:
            prev: (B,) int64 the previous output y_{i-1} (<s> at the first step).
            state: the state after step i - 1.
            memory: from `prepare`.

        Returns:
            log p(y_i) (B, V) (V + T_src with copying), the new state, and alpha_i
            (B, T_src) or None.
        """
        emb = self.dropout(self.embed(self._known(prev))).unsqueeze(1)  # (B, 1, E)
        state, feature, alpha = self._advance(self._input_gates(emb, memory)[:, 0], state, memory)
        out = self._features(feature.unsqueeze(1), emb, memory)  # (B, 1, R)
        if self.copy is not None:
            out, p_gen = self._copying(out, alpha.unsqueeze(1), feature.unsqueeze(1), emb, memory)
            copied = (1 - p_gen) * alpha  # (B, T_src) each word's share by copying
            slots = {"p_gen": p_gen[:, 0], "copied": copied.unsqueeze(-1)}
            state = state._replace(slots=state.slots | slots)
        return self.distribution(out).at((slice(None), 0)), state, alpha

    @property
    def plain_projection(self) -> bool:
        """Whether log p = log_softmax(projection(features)): the fused loss, int8 and the
        shortlist hold for this output layer only, and refuse a decoder with another."""
        return self.copy is None

    def _known(self, ids: Tensor) -> Tensor:
        """Token ids as the embeddings read them: a copied word's extended id (>= V) as
        <unk>, as See et al. (2017) feed it back."""
        return ids if self.copy is None else ids.masked_fill(ids >= self.vocab_size, self.unk_id)

    def _copying(
        self, out: Tensor, alpha: Tensor, steps: Tensor, emb: Tensor, memory: Memory
    ) -> tuple[Tensor, Tensor]:
        """The pointer-generator over `out` (B, T, R), the output layer's input: log P over
        the extended vocabulary (B, T, V + T_src) and p_gen (B, T), p_gen reading the step
        features `steps` (B, T, F) and y_{i-1}'s embeddings (B, T, E)."""
        logits = self.projection(out)
        return self.copy(logits, alpha, torch.cat([steps, emb], -1), memory.slots["copy_ids"])

    @property
    def projection(self) -> nn.Linear:
        """The vocabulary projection: the readout layer's (Luong's decoder has its own)."""
        return self.output.proj

    def distribution(self, features: Tensor) -> LogProbs:
        """(..., R) output features -> log p over the vocabulary, (..., V); with copying,
        the features are log p over the extended vocabulary already."""
        if self.copy is not None:
            return LogProbs(normalised=features)
        return LogProbs(logits=self.projection(features))

    def axes(self) -> dict[str, tuple[Axis, ...]]:
        """Every field the state and the memory may hold, by name, with its axes."""
        return STATE_AXES | MEMORY_AXES

    def _input_gates(self, emb: Tensor, memory: Memory) -> Tensor:
        """(B, T, E) -> (B, T, G): the first layer's input projection known before the loop."""
        return self.rnn.embed_in(emb)

    def _readout(self, kind: ReadoutKind, readout_dim: int, *, context: bool = True) -> Readout:
        """The output layer over [s_i; c_i; y_{i-1}], or [s_i; y_{i-1}] without a context."""
        return Readout(
            in_dim=self.hidden + (self.enc_dim if context else 0) + self.emb_dim,
            kind=kind,
            readout_dim=readout_dim,
            vocab_size=self.vocab_size,
            dropout=self.dropout.p,
        )


class VanillaDecoder(Decoder):
    """No attention: s_i = RNN(s_{i-1}, [y_{i-1}; c]) with c the final encoder state, or,
    with `feed_context=False`, s_i = RNN(s_{i-1}, y_{i-1}) and c only in s_0 (via the bridge).

    Takes `Decoder`'s arguments, the readout layer's kind and size, and `feed_context`.
    """

    def __init__(
        self,
        *,
        readout: ReadoutKind = "none",
        readout_dim: int = 128,
        feed_context: bool = True,
        **common: Any,
    ) -> None:
        super().__init__(**common, extra_dim=None if feed_context else 0)
        self.feed_context = feed_context
        self.output = self._readout(readout, readout_dim, context=feed_context)

    def prepare(self, states: Tensor, mask: Tensor, final: Tensor) -> Memory:
        """Keep the final state as the fixed context c (if it is fed); the other states go
        unused."""
        return Memory(states, mask, final if self.feed_context else None, {})

    def _input_gates(self, emb: Tensor, memory: Memory) -> Tensor:
        if memory.context is None:
            return self.rnn.embed_in(emb)
        # c is the same at every step, so its input projection joins the embedding's.
        return self.rnn.embed_in(emb) + self.rnn.extra_in(memory.context).unsqueeze(1)

    def _advance(
        self, gates: Tensor, state: DecoderState, memory: Memory
    ) -> tuple[DecoderState, Tensor, None]:
        state = self.rnn(gates, state)
        return state, state.hidden[:, -1], None

    def _features(self, features: Tensor, emb: Tensor, memory: Memory) -> Tensor:
        if memory.context is None:
            return self.output(torch.cat([features, emb], dim=-1))  # [s_i; y_{i-1}]
        context = memory.context.unsqueeze(1).expand(-1, features.size(1), -1)  # (B, T, C)
        # [s_i; c; y_{i-1}]
        return self.output(torch.cat([features, context, emb], dim=-1))
