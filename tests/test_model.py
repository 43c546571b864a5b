"""Seq2Seq end to end on tiny models: shapes, padding, learning, and input validation."""

from __future__ import annotations

import pytest
import torch

from alignmt.config import ModelConfig
from alignmt.model.loss import sequence_loss
from alignmt.model.seq2seq import Seq2Seq
from tests.architectures import ARCHITECTURES, LOCAL_ARCHITECTURES, SPARSE_ARCHITECTURES, arch_id
from tests.conftest import VOCAB, padded_batch, tiny_model


@pytest.mark.parametrize("arch", ARCHITECTURES, ids=arch_id)
def test_forward_returns_logits_and_attention_of_the_documented_shapes(arch):
    model = tiny_model(**arch)
    src, src_len, tgt_in, _ = padded_batch()
    out = model(src, src_len, tgt_in)
    assert out.log_probs.logits.shape == (3, tgt_in.size(1), VOCAB)
    if arch["attention"] == "none":
        assert out.attention is None and not model.has_attention
    else:
        assert out.attention.shape == (3, tgt_in.size(1), src.size(1))


@pytest.mark.parametrize(
    "arch", ARCHITECTURES + SPARSE_ARCHITECTURES + LOCAL_ARCHITECTURES, ids=arch_id
)
def test_padding_does_not_change_the_translation(arch):
    """A sentence alone and inside a padded batch: same logits, same attention, and the
    padded source positions get exactly zero weight (summing to 1 over the real ones, or
    less under local-p's Gaussian)."""
    model = tiny_model(**arch, dtype=torch.float32)
    src, src_len, tgt_in, tgt_len = padded_batch()
    padded = model(src, src_len, tgt_in)
    for b in range(src.size(0)):
        n, m = int(src_len[b]), int(tgt_len[b])
        alone = model(src[b : b + 1, :n], src_len[b : b + 1], tgt_in[b : b + 1, :m])
        torch.testing.assert_close(padded.log_probs.logits[b, :m], alone.log_probs.logits[0])
        if padded.attention is not None:
            torch.testing.assert_close(padded.attention[b, :m, :n], alone.attention[0])
            assert torch.equal(
                padded.attention[b, :, n:], torch.zeros_like(padded.attention[b, :, n:])
            )
            total = padded.attention[b].sum(-1)
            if arch.get("attention_window") == "local_p":
                assert (total <= 1 + 1e-6).all() and (total > 0).all()
            else:
                torch.testing.assert_close(total, torch.ones(tgt_in.size(1)))


@pytest.mark.parametrize(
    "arch",
    [
        dict(rnn="gru", bidirectional=True, layers=1, attention="additive", order="bahdanau"),
        dict(rnn="gru", bidirectional=True, layers=1, attention="none", order="bahdanau"),
        # 300 updates each (5-8 s of CPU): the other two decoders in the full suite
        *(
            pytest.param(arch, marks=pytest.mark.slow)
            for arch in (
                dict(rnn="lstm", bidirectional=False, layers=2, attention="general", order="luong"),
                dict(rnn="gru", bidirectional=True, layers=1, attention="concat", order="cgru"),
            )
        ),
    ],
    ids=arch_id,
)
def test_one_batch_is_overfit_to_near_zero_loss(arch):
    torch.manual_seed(0)
    cfg = ModelConfig(
        rnn=arch["rnn"],
        emb_dim=16,
        enc_hidden=32,
        enc_layers=arch["layers"],
        bidirectional=arch["bidirectional"],
        dec_hidden=32,
        dec_layers=arch["layers"],
        attention=arch["attention"],
        attn_dim=32,
        order=arch["order"],
        init="bridge",
    )
    model = Seq2Seq.from_config(cfg, src_vocab=VOCAB, tgt_vocab=VOCAB)
    src, src_len, tgt_in, tgt_len = padded_batch(src_lens=(7, 3, 5, 6), tgt_lens=(6, 2, 4, 5))
    tgt_out = torch.roll(tgt_in, -1, dims=1)  # y_1 .. y_n </s>, built from tgt_in
    tgt_out[torch.arange(4), tgt_len - 1] = 2
    tgt_out[torch.arange(tgt_in.size(1))[None, :] >= tgt_len[:, None]] = 0
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = None
    for _ in range(300):
        loss = sequence_loss(model(src, src_len, tgt_in).log_probs.logits, tgt_out, pad_id=0)
        first = first if first is not None else loss.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert first > 1.0
    assert loss.item() < 0.01


def test_inputs_of_the_wrong_shape_are_refused_with_the_argument_named():
    model = tiny_model()
    src, src_len, tgt_in, _ = padded_batch()
    with pytest.raises(ValueError, match="src must be a \\(B, T_src\\) int64"):
        model(src.double(), src_len, tgt_in)
    with pytest.raises(ValueError, match="src_len must be \\(B,\\)"):
        model(src, src_len[:2], tgt_in)
    with pytest.raises(ValueError, match="src_len must lie in \\[1, T_src = 6\\]"):
        model(src, torch.tensor([7, 2, 4]), tgt_in)
    with pytest.raises(ValueError, match="tgt_in must be \\(B, T_tgt\\) with B = 3"):
        model(src, src_len, tgt_in[:2])


def test_dot_attention_with_mismatched_sizes_fails_at_construction():
    cfg = ModelConfig(attention="dot", enc_hidden=8, bidirectional=True, dec_hidden=8)
    with pytest.raises(ValueError, match="query_dim=8 and key_dim=16"):
        Seq2Seq.from_config(cfg, src_vocab=VOCAB, tgt_vocab=VOCAB)


def test_a_readout_layer_in_the_luong_order_is_refused_not_ignored():
    cfg = ModelConfig(attention="general", order="luong", readout="maxout")
    with pytest.raises(ValueError, match=r"model\.readout=maxout has no place in the luong order"):
        Seq2Seq.from_config(cfg, src_vocab=VOCAB, tgt_vocab=VOCAB)


@pytest.mark.parametrize("order", ["bahdanau", "luong"])
def test_tied_embeddings_share_one_matrix_with_the_output_projection(order):
    readout = dict(readout="tanh", readout_dim=8) if order == "bahdanau" else {}
    cfg = ModelConfig(
        emb_dim=8,
        enc_hidden=4,
        dec_hidden=8,
        attention="general",
        order=order,
        tie_embeddings=True,
        **readout,
    )
    model = Seq2Seq.from_config(cfg, src_vocab=VOCAB, tgt_vocab=VOCAB)
    proj = model.decoder.proj if order == "luong" else model.decoder.output.proj
    assert proj.weight is model.decoder.embed.weight
    untied = Seq2Seq.from_config(
        ModelConfig(**{**vars(cfg), "tie_embeddings": False}), src_vocab=VOCAB, tgt_vocab=VOCAB
    )
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert n(untied) - n(model) == VOCAB * 8
    # a loss gradient reaches the shared matrix from both of its uses
    src, src_len, tgt_in, _ = padded_batch()
    model(src, src_len, tgt_in).log_probs.logits.sum().backward()
    assert model.decoder.embed.weight.grad[tgt_in.max()].abs().sum() > 0


def test_tying_needs_the_layer_before_the_vocabulary_to_have_emb_dim_units():
    with pytest.raises(ValueError, match=r"tie_embeddings needs 8 .* found 24"):
        Seq2Seq.from_config(
            ModelConfig(emb_dim=8, enc_hidden=4, dec_hidden=8, tie_embeddings=True),
            src_vocab=VOCAB,
            tgt_vocab=VOCAB,
        )
