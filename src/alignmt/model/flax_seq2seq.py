"""Seq2Seq in Flax (Linen): seq2seq.py's model, weight for weight, in JAX.

`FlaxSeq2Seq` is built from the same `ModelConfig` and holds the same tensors under the same
names (Flax kernels are (in, out); `checkpoint.flax_io` maps them to and from a run folder).
Its methods mirror the PyTorch model's: `encode`, the teacher-forced `__call__`, and
`decode_step`, which search runs inside `jax.lax.while_loop`. Everything is a pure function
of the parameters, so `jax.jit`, `jax.grad` and `jax.vmap` apply as they are.

Shapes use seq2seq.py's dimension key (B, T_src, T_tgt, E, H, C, D, A, R, V, L).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from alignmt.config import ModelConfig
from alignmt.config_rules import check_model
from alignmt.model.attention.registry import compose
from alignmt.model.flax_decoder import Decoder, Memory
from alignmt.model.flax_distribution import LogProbs
from alignmt.model.flax_init import embedding_init
from alignmt.model.flax_rnn import DecoderState, Direction

Array = jax.Array


class Encoder(nn.Module):
    """Embeddings and a (bi)directional L-layer GRU/LSTM over a padded batch (encoder.py)."""

    vocab_size: int
    emb_dim: int
    hidden: int
    layers: int
    cell_kind: str
    bidirectional: bool
    dropout: float
    state_dropout: float
    pad_id: int

    @nn.compact
    def __call__(
        self, src: Array, src_len: Array, train: bool, embedded: Array | None = None
    ) -> tuple[Array, Array]:
        """src (B, T_src) ids, src_len (B,) -> states (B, T_src, C), 0 at padding, and the
        top layer's final state (B, C) = [h_fwd(last real token); h_bwd(first)].
        `embedded` (B, T_src, E): read in place of the ids' embeddings (attribution's
        inputs, flax_engine/relevance.py)."""
        embed = nn.Embed(
            self.vocab_size, self.emb_dim, embedding_init=embedding_init(self.pad_id), name="embed"
        )
        drop = nn.Dropout(self.dropout)
        inputs = embed(src) if embedded is None else embedded
        inputs = drop(inputs, deterministic=not train)  # (B, T_src, E)
        for layer in range(self.layers):
            if layer:  # nn.GRU's dropout: between stacked layers only
                inputs = drop(inputs, deterministic=not train)
            directions = [False, True] if self.bidirectional else [False]
            runs = [
                Direction(
                    self.cell_kind,
                    inputs.shape[-1],
                    self.hidden,
                    reverse,
                    name=f"rnn_l{layer}" + ("_reverse" if reverse else ""),
                )(inputs, src_len)
                for reverse in directions
            ]
            inputs = jnp.concatenate([states for states, _ in runs], -1)  # (B, T_src, C)
        final = jnp.concatenate([last for _, last in runs], -1)  # (B, C)
        states = nn.Dropout(self.state_dropout)(inputs, deterministic=not train)
        return states, final


class FlaxSeq2Seq(nn.Module):
    """An RNN encoder-decoder with or without attention, as `ModelConfig` describes."""

    cfg: ModelConfig
    src_vocab: int
    tgt_vocab: int
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 3
    # a copying model's (model.copy): each source word's target id, or -1 (seq2seq.py's
    # `copy_table`, made from the vocabularies by alignmt.text.copy.copy_table)
    copy_table: tuple[int, ...] | None = None

    def setup(self) -> None:
        cfg = self.cfg
        check_model(cfg)
        if cfg.copy and self.copy_table is None:
            raise ValueError("model.copy: a copying model needs its copy_table")
        self.encoder = Encoder(
            self.src_vocab,
            cfg.emb_dim,
            cfg.enc_hidden,
            cfg.enc_layers,
            cfg.rnn,
            cfg.bidirectional,
            cfg.dropout,
            cfg.state_dropout,
            self.pad_id,
        )
        self.decoder = Decoder(
            vocab_size=self.tgt_vocab,
            emb_dim=cfg.emb_dim,
            hidden=cfg.dec_hidden,
            enc_dim=cfg.enc_hidden * (2 if cfg.bidirectional else 1),
            layers=cfg.dec_layers,
            cell_kind=cfg.rnn,
            initial=cfg.init,
            dropout=cfg.dropout,
            pad_id=self.pad_id,
            unk_id=self.unk_id,
            order=_order(cfg),
            composition=compose(cfg),
            readout=cfg.readout,
            readout_dim=cfg.readout_dim,
            feed_context=cfg.context == "every_step",
            tied=cfg.tie_embeddings,
        )

    @property
    def has_attention(self) -> bool:
        return self.cfg.attention != "none"

    def encode(
        self, src: Array, src_len: Array, train: bool = False, embedded: Array | None = None
    ):
        """src (B, T_src) ids ending in </s>, src_len (B,) -> (Memory, initial DecoderState).
        A copying model reads a word its vocabulary lacks (V_src + its first position) as
        <unk>, and copies it by that id. `embedded`: the encoder's inputs in place of the
        ids' embeddings."""
        states, final = self.encoder(self.known_source(src), src_len, train, embedded)
        mask = src != self.pad_id  # (B, T_src)
        memory = self.decoder.prepare(states, mask, final)
        if self.cfg.copy:
            ids = self.decoder.pointer.prepare(src, jnp.asarray(self.copy_table))  # (B, T_src)
            memory = memory._replace(slots=memory.slots | {"copy_ids": ids})
        return memory, self.decoder.init_state(final, memory)

    def known_source(self, src: Array) -> Array:
        """Source ids as the embeddings read them: a copied word's extended id as <unk>."""
        return jnp.where(src >= self.src_vocab, self.unk_id, src) if self.cfg.copy else src

    def __call__(
        self,
        src: Array,
        src_len: Array,
        tgt_in: Array,
        train: bool = False,
        teacher: Array | None = None,
        pick: str = "sample",
        embedded: Array | None = None,
    ):
        """Teacher forcing: log p (B, T_tgt, V) and attention (B, T_tgt, T_src) or None.
        With `teacher`, scheduled sampling: each position reads the true y_{i-1} with that
        probability, else the model's own `pick` (needs a "sampling" rng). `embedded`: the
        encoder's inputs in place of the source ids' embeddings (see `encode`)."""
        memory, state = self.encode(src, src_len, train, embedded)
        if teacher is None:
            log_probs, attention, _ = self.decoder(tgt_in, state, memory, train)
            return log_probs, attention
        log_probs, attention, _ = self.decoder.unroll_sampled(
            tgt_in, state, memory, train, teacher, pick
        )
        return log_probs, attention

    def decode_step(self, prev: Array, state: DecoderState, memory: Memory):
        """One search step: prev (N,) -> log p (N, V), the new state, alpha (N, T_src)|None."""
        return self.decoder.step(prev, state, memory)


def sequence_loss(
    log_probs: LogProbs,
    targets: Array,
    pad_id: int,
    label_smoothing: float = 0.0,
    smooth_over: int | None = None,
) -> Array:
    """Mean cross-entropy over real target tokens, label-smoothed as `F.cross_entropy` is
    (Szegedy et al. 2016): (1 - eps) (-log p_y) + eps mean_v(-log p_v).

    Args:
        log_probs: (B, T_tgt, V), a teacher-forced `__call__`'s.
        targets: (B, T_tgt) ids y_1 .. y_n </s>, padded with pad_id.
        smooth_over: smooth over the first `smooth_over` ids only (a copying model's
            vocabulary, not its extended ids); None: over all V.

    Returns:
        A scalar; 0 for a batch without real tokens.
    """
    scores = log_probs.scores
    logp = jax.nn.log_softmax(scores.astype(jnp.promote_types(scores.dtype, jnp.float32)))
    nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]  # (B, T_tgt)
    if label_smoothing:
        uniform = logp[..., :smooth_over].mean(axis=-1)
        nll = (1 - label_smoothing) * nll - label_smoothing * uniform
    real = targets != pad_id
    return jnp.where(real, nll, 0).sum() / jnp.maximum(real.sum(), 1)


def _order(cfg: ModelConfig) -> str:
    """The decoder's order: "vanilla" without attention, "mixture" where the mapping's output
    is a mixture over positions (hard monotonic attention), else `cfg.order`."""
    if cfg.attention == "none":
        return "vanilla"
    return "mixture" if compose(cfg).mixture else cfg.order
