"""The decoders in Flax (Linen): the four decoders of decoder.py and attention_decoder.py in
one module, with their parameter names and equations.

- "bahdanau" (Bahdanau et al. 2015, §3.1): s_{i-1} queries the encoder, c_i = sum_j alpha_ij
  h_j, s_i = RNN(s_{i-1}, [y_{i-1}; c_i]), logits from [s_i; c_i; y_{i-1}] (through a
  readout layer or not).
- "luong" (Luong et al. 2015, §3 and §3.3): s_i = RNN(s_{i-1}, [y_{i-1}; h~_{i-1}]), s_i
  queries the encoder, h~_i = tanh(W_c [c_i; s_i]) is projected to the vocabulary.
- "cgru" (Sennrich et al. 2017, §2.3): s'_i = RNN_1(s_{i-1}, y_{i-1}) queries the encoder,
  s_i = RNN_2(s'_i, c_i), logits from [s_i; c_i; y_{i-1}] as in "bahdanau".
- "vanilla" (Cho et al. 2014): no attention; the final encoder state c feeds every step and
  the output, or (Sutskever et al. 2014) only s_0.
- "mixture" (attention_decoder.MixtureDecoder; hard monotonic attention, Wu & Cotterell
  2019): s_i = RNN(s_{i-1}, y_{i-1}) queries the encoder, and p(y_i) = sum_j alpha_ij
  p(y_i | s_i, h_j), each from the output layer over [s_i; h_j; y_{i-1}]. Its unroll is a scan
  of `step`, and its features are log p.

Where the attention's composition has the pointer-generator (See et al. 2017;
attention/copy), the output layer's distribution is mixed with copying source words, over
the vocabulary extended by the source's words (decoder.py's `_copying`): its features are
log p over V + T_src, and a copied word read back is embedded as <unk>.

Teacher forcing runs the recurrence under `nn.scan` (one compiled step, looped by XLA); what
does not depend on the recurrence (the embeddings' input gates, the readout, the vocabulary
projection) runs on all steps at once outside it.
"""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from alignmt.model.attention.flax import Attention
from alignmt.model.attention.spec import Composition
from alignmt.model.flax_distribution import LogProbs
from alignmt.model.flax_init import embedding_init, torch_dense, uniform
from alignmt.model.flax_rnn import DecoderState, StackedCell

Array = jax.Array


class Memory(NamedTuple):
    """What the decoder reads from the encoder; fixed for a whole sentence."""

    states: Array  # (B, T_src, C) h_j
    mask: Array  # (B, T_src) bool, True at real tokens
    context: Array | None  # (B, C) vanilla's fixed context; else None
    slots: dict[str, Array]  # what the attention mechanisms made (decoder.Memory's)
    # (B, T_src) weights that replace alpha in the rows where they are not all zero: the
    # explorer's attention override (decoder.Memory's); None: no row is steered
    steer: Array | None = None


class TiedBias(nn.Module):
    """The vocabulary projection of tied embeddings (Press & Wolf 2017): the target embedding
    matrix (V, E) transposed, plus a bias of its own."""

    vocab_size: int
    fan_in: int

    @nn.compact
    def __call__(self, features: Array, embedding: Array) -> Array:
        bias = self.param("bias", uniform(self.fan_in**-0.5), (self.vocab_size,))
        return features @ embedding.T + bias


class Readout(nn.Module):
    """The output layer over [s_i; c_i; y_{i-1}] (decoder.Readout): "none", "tanh", or
    "maxout" over adjacent pairs of 2R units (Bahdanau et al. 2015, App. A.2.2)."""

    in_dim: int
    kind: str
    readout_dim: int
    vocab_size: int
    dropout: float
    tied: bool

    def setup(self) -> None:
        units = {"none": 0, "tanh": self.readout_dim, "maxout": 2 * self.readout_dim}[self.kind]
        if units:
            self.hidden = torch_dense(units, self.in_dim)
        fan_in = self.readout_dim if units else self.in_dim
        self.proj = (
            TiedBias(self.vocab_size, fan_in) if self.tied else torch_dense(self.vocab_size, fan_in)
        )
        self.drop = nn.Dropout(self.dropout)

    def __call__(self, features: Array, train: bool) -> Array:
        """(..., in_dim) -> (..., R or in_dim), what `project` reads."""
        if self.kind == "tanh":
            features = jnp.tanh(self.hidden(features))
        elif self.kind == "maxout":
            pre = self.hidden(features)
            features = pre.reshape(*pre.shape[:-1], -1, 2).max(axis=-1)  # (..., R)
        return self.drop(features, deterministic=not train)

    def project(self, features: Array, embedding: Array) -> Array:
        """(..., R) -> (..., V) logits."""
        return self.proj(features, embedding) if self.tied else self.proj(features)

    def project_one(self, features: Array, token: Array, embedding: Array) -> Array:
        """(B, T, R) features and (B,) tokens -> (B, T) each row's logit of its token."""
        params = jax.tree_util.tree_map(jnp.asarray, self.proj.variables["params"])
        weight = jnp.asarray(embedding)[token] if self.tied else params["kernel"].T[token]
        bias = params["bias"][token]  # (B, R) and (B,)
        return jnp.einsum("btr,br->bt", features, weight) + bias[:, None]


class Decoder(nn.Module):
    """Embeddings, the recurrence, attention (or a fixed context) and the output layer."""

    vocab_size: int
    emb_dim: int
    hidden: int
    enc_dim: int
    layers: int
    cell_kind: str  # "gru" | "lstm"
    initial: str  # s_0: "zeros" | "bridge"
    dropout: float
    pad_id: int
    order: str  # "bahdanau" | "luong" | "cgru" | "vanilla"
    composition: Composition | None  # the room's mechanisms; None for vanilla
    readout: str
    readout_dim: int
    feed_context: bool  # vanilla: c at every step (True) or only in s_0
    tied: bool
    unk_id: int = 3

    def setup(self) -> None:
        std = self.emb_dim**-0.5 if self.tied else 1.0  # seq2seq._tie_output's reason
        self.embed = nn.Embed(
            self.vocab_size, self.emb_dim, embedding_init=embedding_init(self.pad_id, std)
        )
        extra = {"bahdanau": self.enc_dim, "luong": self.hidden, "cgru": 0, "mixture": 0}.get(
            self.order, self.enc_dim if self.feed_context else 0
        )
        # the conditional GRU's first transition is one layer; its second and the layers
        # above it are rnn2 (attention_decoder.ConditionalDecoder)
        layers = 1 if self.order == "cgru" else self.layers
        self.rnn = StackedCell(
            self.cell_kind, self.emb_dim, extra, self.hidden, layers, self.dropout
        )
        if self.order == "cgru":
            self.rnn2 = StackedCell(
                self.cell_kind, self.enc_dim, 0, self.hidden, self.layers, self.dropout
            )
        if self.initial == "bridge":
            self.bridge = torch_dense(self.layers * self.hidden, self.enc_dim)
        if self.order != "vanilla":
            self.attention = Attention(self.composition, self.hidden, self.enc_dim)
        if self.copies:  # p_gen reads [s_i; c_i; y_{i-1}], or Luong's [h~_i; y_{i-1}]
            step = self.hidden + (0 if self.order == "luong" else self.enc_dim)
            sizes = dict(features=step + self.emb_dim, vocab_size=self.vocab_size)
            self.pointer = self.composition.output.build("flax", **sizes)
        if self.order == "luong":
            self.W_c = torch_dense(self.hidden, self.enc_dim + self.hidden, bias=False)  # eq. 5
            self.proj = (
                TiedBias(self.vocab_size, self.hidden)
                if self.tied
                else torch_dense(self.vocab_size, self.hidden)
            )
        else:
            context = self.order != "vanilla" or self.feed_context
            self.output = Readout(
                self.hidden + (self.enc_dim if context else 0) + self.emb_dim,
                self.readout,
                self.readout_dim,
                self.vocab_size,
                self.dropout,
                self.tied,
            )
        self.drop = nn.Dropout(self.dropout)

    @property
    def copies(self) -> bool:
        """Whether the output copies source words (the pointer-generator)."""
        return self.composition is not None and self.composition.output is not None

    def known(self, ids: Array) -> Array:
        """Token ids as the embeddings read them: a copied word's extended id as <unk>."""
        return jnp.where(ids >= self.vocab_size, self.unk_id, ids) if self.copies else ids

    def copying(self, out: Array, alpha: Array, steps: Array, emb: Array, memory: Memory):
        """log P over the extended vocabulary (B, T, V + T_src) and p_gen (B, T), from the
        output layer's input `out` (B, T, R), alpha (B, T, T_src), the step features
        `steps` (B, T, F) and y_{i-1}'s embeddings (B, T, E)."""
        logits = self.project(out)
        features = jnp.concatenate([steps, emb], -1)
        return self.pointer(logits, alpha, features, memory.slots["copy_ids"])

    def init_state(self, final: Array, memory: Memory) -> DecoderState:
        """s_0 from the encoder's final state (B, C): zeros, or tanh(W final) per layer; the
        attention mechanisms' first slots."""
        batch = final.shape[0]
        if self.initial == "bridge":
            hidden = jnp.tanh(self.bridge(final)).reshape(batch, self.layers, self.hidden)
        else:
            hidden = jnp.zeros((batch, self.layers, self.hidden), final.dtype)
        slots = {} if self.order == "vanilla" else self.attention.start(memory)
        if self.order == "mixture":  # what MixtureDecoder keeps of each position's emission
            units = self.readout_dim if self.readout != "none" else self.output.in_dim
            zeros = jnp.zeros(memory.mask.shape, final.dtype)
            slots = slots | {"emitting": zeros[..., None].repeat(units, -1), "normaliser": zeros}
        if self.copies:  # what the explorer shows of copying, before the first step
            shares = jnp.zeros((*memory.mask.shape, 1), final.dtype)  # (B, T_src, 1)
            slots = slots | {"p_gen": jnp.zeros((batch,), final.dtype), "copied": shares}
        return DecoderState(
            hidden=hidden,
            cell=jnp.zeros_like(hidden) if self.cell_kind == "lstm" else None,
            feed=jnp.zeros((batch, self.hidden), final.dtype) if self.order == "luong" else None,
            slots=slots,
        )

    def prepare(self, states: Array, mask: Array, final: Array) -> Memory:
        """What every step reads: the attention's memory slots, made once, or vanilla's fixed
        context."""
        if self.order == "vanilla":
            return Memory(states, mask, final if self.feed_context else None, {})
        return Memory(states, mask, None, self.attention.prepare(states, mask))

    def __call__(self, tgt_in: Array, state: DecoderState, memory: Memory, train: bool):
        """Teacher-forced unroll: log p (B, T_tgt, V), attention (B, T_tgt, T_src) or None,
        and the state after the last step."""
        features, attention, state = self.unroll(tgt_in, state, memory, train)
        return self.distribution(features), attention, state

    def unroll(self, tgt_in: Array, state: DecoderState, memory: Memory, train: bool):
        """`__call__` up to the vocabulary projection: features (B, T_tgt, R)."""
        if self.order == "mixture":
            return self.unroll_mixture(tgt_in, state, memory, train)
        emb = self.drop(self.embed(self.known(tgt_in)), deterministic=not train)  # (B, T_tgt, E)

        def body(module: Decoder, carry: DecoderState, gates: Array):
            carry, feature, alpha = module.advance(gates, carry, memory, train)
            return carry, (feature, alpha)

        state, (steps, attention) = _scan(body)(self, state, self.input_gates(emb, memory))
        out = self.features(steps, emb, memory, train)
        if self.copies:
            out = self.copying(out, attention, steps, emb, memory)[0]
        return out, attention, state

    def unroll_sampled(
        self, tgt_in: Array, state: DecoderState, memory: Memory, train: bool, teacher, pick: str
    ):
        """`unroll` with scheduled sampling (decoder.Sampling): each position after the
        first reads the true y_{i-1} with probability `teacher`, else the model's own output
        at the step before, drawn with the "sampling" rng stream ("sample") or its
        "argmax"; no gradient flows through the choice. log p (B, T_tgt, V): each step's
        projection serves both the choice and the loss."""

        def body(module: Decoder, carry, gold: Array):
            state, prev = carry
            if module.order == "mixture":  # its log p serve as the logits
                log_probs, state, alpha = module.mixture_step(prev, state, memory, train)
                logits = log_probs.normalised
            else:
                emb = module.drop(module.embed(module.known(prev)), deterministic=not train)
                emb = emb[:, None]  # (B, 1, E)
                gates = module.input_gates(emb, memory)[:, 0]
                state, step, alpha = module.advance(gates, state, memory, train)
                out = module.features(step[:, None], emb, memory, train)  # (B, 1, R)
                if module.copies:  # its log p over V + T_src serve as the logits
                    log_p = module.copying(out, alpha[:, None], step[:, None], emb, memory)[0]
                    logits = log_p[:, 0]
                else:
                    logits = module.project(out)[:, 0]  # (B, V)
            chosen = jax.lax.stop_gradient(logits)
            draw, coin = jax.random.split(module.make_rng("sampling"))
            if pick == "argmax":
                own = jnp.argmax(chosen, -1)
            else:
                own = jax.random.categorical(draw, chosen.astype(jnp.float32))
            keep = jax.random.uniform(coin, gold.shape) < teacher
            return (state, jnp.where(keep, gold, own).astype(prev.dtype)), (logits, alpha)

        scan = _scan(body, "sampling")
        # step t's true next input is tgt_in[:, t + 1]; the last step's choice goes unused
        golds = jnp.concatenate([tgt_in[:, 1:], tgt_in[:, :1]], 1)
        (state, _), (logits, attention) = scan(self, (state, tgt_in[:, 0]), golds)
        return LogProbs(logits=logits), attention, state

    def step(self, prev: Array, state: DecoderState, memory: Memory):
        """One decoding step (no dropout): prev (B,) ids -> log p (B, V), the new state,
        alpha (B, T_src) or None."""
        if self.order == "mixture":
            return self.mixture_step(prev, state, memory, False)
        emb = self.embed(self.known(prev))[:, None]  # (B, 1, E)
        gates = self.input_gates(emb, memory)[:, 0]
        state, step, alpha = self.advance(gates, state, memory, False)
        out = self.features(step[:, None], emb, memory, False)  # (B, 1, R)
        if self.copies:
            out, p_gen = self.copying(out, alpha[:, None], step[:, None], emb, memory)
            copied = (1 - p_gen) * alpha  # (B, T_src) each word's share by copying
            slots = {"p_gen": p_gen[:, 0], "copied": copied[..., None]}
            state = state._replace(slots=state.slots | slots)
        log_probs = self.distribution(out)
        return jax.tree_util.tree_map(lambda a: a[:, 0], log_probs), state, alpha  # (B, V)

    def unroll_mixture(self, tgt_in: Array, state: DecoderState, memory: Memory, train: bool):
        """`unroll` of the "mixture" order: a scan of its step; features are log p."""

        def body(module: Decoder, carry: DecoderState, prev: Array):
            log_probs, carry, alpha = module.mixture_step(prev, carry, memory, train)
            return carry, (log_probs.normalised, alpha)

        state, (log_probs, attention) = _scan(body)(self, state, tgt_in)
        return log_probs, attention, state

    def mixture_step(self, prev: Array, state: DecoderState, memory: Memory, train: bool):
        """MixtureDecoder.step: the posterior after y_{i-1} = prev (B,), s_i, alpha_i, and
        log p(y_i) = log sum_j alpha_ij p(y_i | s_i, h_j), (B, V)."""
        emb = self.drop(self.embed(prev), deterministic=not train)  # (B, E)
        mapping, slots = self.attention.mapping, state.slots
        logit = self.output.project_one(slots["emitting"], prev, self.embed.embedding)
        state = state._replace(slots=mapping.observe(slots, logit - slots["normaliser"]))
        state = self.rnn(self.rnn.embed_in(emb), state, train)
        query = state.hidden[:, -1]  # (B, D) s_i
        _, alpha, state = self.attended(query, state, memory, train)
        B, T, _ = memory.states.shape
        parts = [jnp.broadcast_to(query[:, None], (B, T, self.hidden)), memory.states]
        parts.append(jnp.broadcast_to(emb[:, None], (B, T, self.emb_dim)))
        features = self.output(jnp.concatenate(parts, -1), train)  # (B, T_src, R)
        logits = self.output.project(features, self.embed.embedding)  # (B, T_src, V)
        normaliser = jax.nn.logsumexp(logits, -1)
        emitted = logits - normaliser[..., None]
        log_alpha = mapping.log_weights(state.slots)[..., None]  # (B, T_src, 1)
        log_p = jax.nn.logsumexp(log_alpha + emitted, axis=1)  # (B, V)
        slots = state.slots | {"emitting": features, "normaliser": normaliser}
        return LogProbs(normalised=log_p), state._replace(slots=slots), alpha

    def input_gates(self, emb: Array, memory: Memory) -> Array:
        """(B, T, E) -> (B, T, G): the first layer's input projection known before the loop."""
        gates = self.rnn.embed_in(emb)
        if self.order == "vanilla" and memory.context is not None:  # c is the same each step
            gates = gates + self.rnn.extra_in(memory.context)[:, None]
        return gates

    def advance(self, gates: Array, state: DecoderState, memory: Memory, train: bool):
        """One step of the recurrence and attention: (state, step features, alpha)."""
        if self.order == "vanilla":
            state = self.rnn(gates, state, train)
            return state, state.hidden[:, -1], None
        if self.order == "bahdanau":
            context, alpha, state = self.attended(state.hidden[:, -1], state, memory, train)
            state = self.rnn(gates + self.rnn.extra_in(context), state, train)
            return state, jnp.concatenate([state.hidden[:, -1], context], -1), alpha
        if self.order == "cgru":
            return self.conditional(gates, state, memory, train)
        state = self.rnn(gates + self.rnn.extra_in(state.feed), state, train)
        query = state.hidden[:, -1]  # (B, D) s_i
        context, alpha, state = self.attended(query, state, memory, train)
        attentional = jnp.tanh(self.W_c(jnp.concatenate([context, query], -1)))  # (B, D)
        return state._replace(feed=attentional), attentional, alpha

    def conditional(self, gates: Array, state: DecoderState, memory: Memory, train: bool):
        """The conditional GRU's step: s'_i from y_{i-1} in the first layer, the query s'_i,
        then s_i from c_i, the layers above reading the layer below."""
        lstm = state.cell is not None
        first = self.rnn(
            gates,
            state._replace(hidden=state.hidden[:, :1], cell=state.cell[:, :1] if lstm else None),
            train,
        )
        query = first.hidden[:, 0]  # s'_i
        context, alpha, state = self.attended(query, state, memory, train)
        inner = state._replace(
            hidden=jnp.concatenate([first.hidden, state.hidden[:, 1:]], 1),
            cell=jnp.concatenate([first.cell, state.cell[:, 1:]], 1) if lstm else None,
        )
        state = self.rnn2(self.rnn2.embed_in(context), inner, train)
        return state, jnp.concatenate([state.hidden[:, -1], context], -1), alpha

    def attended(self, query: Array, state: DecoderState, memory: Memory, train: bool):
        """c_i (B, C) and alpha_i (B, T_src) for `query`, and the state with the attention
        mechanisms' slots after the step."""
        context, alpha, slots = self.attention(query, state.slots, memory, train)
        return context, alpha, state._replace(slots=slots)

    def features(self, features: Array, emb: Array, memory: Memory, train: bool) -> Array:
        """Step features (B, T, .) -> what the vocabulary projection reads (B, T, R)."""
        if self.order == "luong":
            return self.drop(features, deterministic=not train)
        parts = [features]
        if memory.context is not None:  # vanilla's fixed c
            parts.append(
                jnp.broadcast_to(memory.context[:, None], (*features.shape[:2], self.enc_dim))
            )
        return self.output(jnp.concatenate([*parts, emb], -1), train)  # [s_i; c_i; y_{i-1}]

    def distribution(self, features: Array) -> LogProbs:
        """(..., R) output features -> log p over the vocabulary, (..., V) (decoder.py's);
        the "mixture" order's features, and a copying model's, are log p already."""
        if self.order == "mixture" or self.copies:
            return LogProbs(normalised=features)
        return LogProbs(logits=self.project(features))

    def project(self, features: Array) -> Array:
        """(..., R) -> (..., V)."""
        embedding = self.embed.embedding
        if self.order == "luong":
            return self.proj(features, embedding) if self.tied else self.proj(features)
        return self.output.project(features, embedding)


def _scan(body, *streams: str):
    """`body` (module, carry, x_t) -> (carry, y_t) looped over the time axis (1) of its
    inputs and outputs by `nn.scan`, sharing the parameters and drawing fresh dropout masks
    (and the random `streams` named) at each step."""
    rngs = {"params": False, "dropout": True} | dict.fromkeys(streams, True)
    return nn.scan(body, variable_broadcast="params", split_rngs=rngs, in_axes=1, out_axes=1)
