"""Seq2Seq: wires the encoder, a decoder and the special token ids together.

Owns `encode` (source -> memory and initial decoder state), the teacher-forced `forward`
and `loss`, and `decode_step`, the step function that search runs; the step and `forward`
hand out log-probabilities (`distribution.LogProbs`). The loss functions live
in `loss`; decoding strategies in `alignmt.decoding`.

Dimension key, used in every shape comment of the package:

    B      batch size (sentences)            K  beam size; N = B * K
    T_src  padded source length, incl. </s>  T_tgt  padded target length
    E      embedding size                    H  encoder units per direction
    C      encoder state size, dirs * H      D  decoder hidden size
    A      attention hidden size             R  readout units
    V      vocabulary size                   L  RNN layers
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from alignmt.config import ModelConfig
from alignmt.config_rules import check_model
from alignmt.model.attention.registry import compose
from alignmt.model.attention.spec import Composition
from alignmt.model.attention_decoder import (
    BahdanauDecoder,
    ConditionalDecoder,
    LuongDecoder,
    MixtureDecoder,
)
from alignmt.model.cell import DecoderState
from alignmt.model.decoder import DecoderOutput, Memory, Sampling, VanillaDecoder
from alignmt.model.distribution import LogProbs
from alignmt.model.encoder import Encoder
from alignmt.model.loss import alignment_loss, linear_cross_entropy, sequence_loss


class Seq2Seq(nn.Module):
    """An RNN encoder-decoder, with or without attention."""

    def __init__(
        self,
        *,
        encoder: Encoder,
        decoder: nn.Module,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        unk_id: int = 3,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = pad_id, bos_id, eos_id, unk_id
        if self.copies:  # each source word's target id, or -1 (`set_copy_table`)
            table = torch.full((encoder.embed.num_embeddings,), -1, dtype=torch.long)
            self.register_buffer("copy_table", table)

    @classmethod
    def from_config(
        cls,
        cfg: ModelConfig,
        *,
        src_vocab: int,
        tgt_vocab: int,
        pad_id: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
        unk_id: int = 3,
    ) -> Seq2Seq:
        """Build the model a `ModelConfig` describes; the only place that reads it."""
        check_model(cfg)
        composition = compose(cfg)
        encoder = Encoder(
            vocab_size=src_vocab,
            emb_dim=cfg.emb_dim,
            hidden=cfg.enc_hidden,
            layers=cfg.enc_layers,
            rnn=cfg.rnn,
            bidirectional=cfg.bidirectional,
            dropout=cfg.dropout,
            state_dropout=cfg.state_dropout,
            pad_id=pad_id,
        )
        common = dict(
            vocab_size=tgt_vocab,
            emb_dim=cfg.emb_dim,
            hidden=cfg.dec_hidden,
            enc_dim=encoder.out_dim,
            layers=cfg.dec_layers,
            rnn=cfg.rnn,
            init=cfg.init,
            dropout=cfg.dropout,
            pad_id=pad_id,
            unk_id=unk_id,
        )
        readout = dict(readout=cfg.readout, readout_dim=cfg.readout_dim)
        attention = dict(attention=composition)
        if composition is None:
            decoder = VanillaDecoder(**common, **readout, feed_context=cfg.context == "every_step")
        elif composition.mixture:
            decoder = MixtureDecoder(**common, **attention, **readout)
        elif cfg.order == "luong":
            decoder = LuongDecoder(**common, **attention)
        elif cfg.order == "cgru":
            decoder = ConditionalDecoder(**common, **attention, **readout)
        else:
            decoder = BahdanauDecoder(**common, **attention, **readout)
        if cfg.tie_embeddings:
            _tie_output(decoder)
        ids = dict(pad_id=pad_id, bos_id=bos_id, eos_id=eos_id, unk_id=unk_id)
        return cls(encoder=encoder, decoder=decoder, **ids)

    @property
    def has_attention(self) -> bool:
        return not isinstance(self.decoder, VanillaDecoder)

    @property
    def copies(self) -> bool:
        """Whether the decoder copies source words (the pointer-generator)."""
        return getattr(self.decoder, "copy", None) is not None

    def set_copy_table(self, table: Sequence[int]) -> None:
        """Each source vocabulary word's target id, or -1 where the target vocabulary lacks
        it (`alignmt.text.copy.copy_table`): where the pointer-generator copies it to."""
        self.copy_table.copy_(torch.as_tensor(table, dtype=torch.long))

    @property
    def composition(self) -> Composition | None:
        """The attention's mechanisms (attention/spec.py); None without attention."""
        return self.decoder.attention.composition if self.has_attention else None

    def encode(self, src: Tensor, src_len: Tensor) -> tuple[Memory, DecoderState]:
        """Run the encoder and prepare what every decoder step reads.

        Args:
            src: (B, T_src) int64 source ids ending in </s>, padded with pad_id.
            src_len: (B,) int64 real lengths, 1 ≤ src_len ≤ T_src.

        Returns:
            The memory (states, mask, projected keys) and the initial decoder state.
        """
        _check_source(src, src_len)
        # a copying model reads a word its vocabulary lacks, V_src + its first position, as
        # <unk>, and copies it by that id (`Copy.prepare`)
        known = src.masked_fill(src >= len(self.copy_table), self.unk_id) if self.copies else src
        states, final = self.encoder(known, src_len)  # (B, T_src, C), (B, C)
        mask = src != self.pad_id  # (B, T_src)
        memory = self.decoder.prepare(states, mask, final)
        if self.copies:
            ids = self.decoder.copy.prepare(src, self.copy_table)  # (B, T_src)
            memory = memory._replace(slots=memory.slots | {"copy_ids": ids})
        return memory, self.decoder.init_state(final, memory)

    def forward(self, src: Tensor, src_len: Tensor, tgt_in: Tensor) -> DecoderOutput:
        """Teacher forcing: log p (B, T_tgt, V) and attention (B, T_tgt, T_src) or None.

        Args:
            src: (B, T_src) int64 source ids, padded.
            src_len: (B,) int64 real source lengths.
            tgt_in: (B, T_tgt) int64 decoder inputs <s> y_1 .. y_n, padded.
        """
        if tgt_in.dim() != 2 or tgt_in.size(0) != src.size(0):
            raise ValueError(
                f"tgt_in must be (B, T_tgt) with B = {src.size(0)}, got {tuple(tgt_in.shape)}"
            )
        memory, state = self.encode(src, src_len)
        return self.decoder(tgt_in, state, memory)

    def loss(
        self,
        src: Tensor,
        src_len: Tensor,
        tgt_in: Tensor,
        tgt_out: Tensor,
        label_smoothing: float = 0.0,
        guide: Tensor | None = None,
        guide_weight: float = 0.0,
        guide_cost: str = "ce",
        sampling: Sampling | None = None,
    ) -> Tensor:
        """Teacher-forced mean cross-entropy over real target tokens: the value (and the
        gradients) of `sequence_loss(self(src, src_len, tgt_in).log_probs.full(), tgt_out,
        ...)`, with a plain projection fused into the loss (see loss.py); with a guide,
        plus guide_weight times guided alignment's `alignment_loss`.

        Args:
            src, src_len, tgt_in: as in `forward`.
            tgt_out: (B, T_tgt) int64 targets y_1 .. y_n </s>, padded with pad_id.
            label_smoothing: as in `sequence_loss`.
            guide: (B, T_tgt, T_src) word links as distributions (see `alignment_loss`).
            guide_weight, guide_cost: lambda and the cost of the alignment loss.
            sampling: scheduled sampling's teacher rate and pick; None: teacher forcing.
        """
        memory, state = self.encode(src, src_len)
        unrolled = self.decoder.unroll(tgt_in, state, memory, sampling)  # (B, T_tgt, R)
        loss = self.output_loss(unrolled.features, tgt_out, label_smoothing)
        if guide is None or not guide_weight:
            return loss
        if unrolled.attention is None:
            raise ValueError("guided alignment trains attention, and this model has none")
        return loss + guide_weight * alignment_loss(unrolled.attention, guide, guide_cost)

    def output_loss(
        self, features: Tensor, tgt_out: Tensor, label_smoothing: float = 0.0
    ) -> Tensor:
        """The mean cross-entropy over real target tokens of the distribution the decoder
        makes of `features` (B, T_tgt, R), an unroll's: fused with the projection (see
        loss.py) where the decoder's output is a plain projection."""
        if not self.decoder.plain_projection:
            log_probs = self.decoder.distribution(features).full()  # (B, T_tgt, V)
            # copying's extended ids are no words to smooth over
            vocab = self.decoder.vocab_size if self.copies else None
            return sequence_loss(log_probs, tgt_out, self.pad_id, label_smoothing, vocab)
        proj = self.decoder.projection
        return linear_cross_entropy(
            features, proj.weight, proj.bias, tgt_out, self.pad_id, label_smoothing
        )

    def decode_step(
        self, prev: Tensor, state: DecoderState, memory: Memory
    ) -> tuple[LogProbs, DecoderState, Tensor | None]:
        """One step for search: log p (N, V), the new state, alpha (N, T_src) or None.

        Args:
            prev: (N,) int64 previous output tokens (bos_id at the first step).
            state: the decoder state after the previous step.
            memory: from `encode`, with N rows (repeated per beam where needed).
        """
        return self.decoder.step(prev, state, memory)


def _tie_output(decoder: nn.Module) -> None:
    """Share the target embedding matrix with the vocabulary projection (Press & Wolf 2017):
    V x E fewer parameters, which helps most where the corpus is small."""
    proj = decoder.projection
    # check_model refused other sizes from the config alone; this holds it to the decoder built
    assert proj.in_features == decoder.emb_dim, (proj.in_features, decoder.emb_dim)
    # nn.Embedding draws N(0, 1), which as output weights would give logits of std ~sqrt(E)
    # and a far-too-confident untrained model; N(0, 1/E) keeps them near unit scale.
    with torch.no_grad():
        nn.init.normal_(decoder.embed.weight, std=decoder.emb_dim**-0.5)
        decoder.embed.weight[decoder.embed.padding_idx].zero_()
    proj.weight = decoder.embed.weight


def _check_source(src: Tensor, src_len: Tensor) -> None:
    if src.dim() != 2 or src.dtype != torch.long:
        raise ValueError(
            f"src must be a (B, T_src) int64 tensor, got {src.dtype} {tuple(src.shape)}"
        )
    if src_len.shape != (src.size(0),):
        raise ValueError(f"src_len must be (B,) = ({src.size(0)},), got {tuple(src_len.shape)}")
    if src_len.numel() and (src_len.min() < 1 or src_len.max() > src.size(1)):
        raise ValueError(f"src_len must lie in [1, T_src = {src.size(1)}], got {src_len.tolist()}")
