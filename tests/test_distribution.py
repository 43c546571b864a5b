"""The model owns its output distribution: `LogProbs` read the same whether a step hands out
logits or log-probabilities, and a decoder whose output is not a plain projection trains,
searches and exports with every reader, while what holds for a plain projection alone (the
fused loss, int8, the shortlist) steps aside or refuses."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from alignmt.decoding.torch_engine.search import beam_decode, decode
from alignmt.model.distribution import LogProbs
from tests.conftest import padded_batch, tiny_model


def both(seed: int = 0, shape=(4, 9)) -> tuple[LogProbs, LogProbs]:
    """The same distributions as logits and as log-probabilities, in float64."""
    logits = 3 * torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).double()
    return LogProbs(logits=logits), LogProbs(normalised=logits.log_softmax(-1))


def test_logits_and_log_probabilities_read_alike():
    plain, normalised = both()
    torch.testing.assert_close(plain.full(), normalised.full(), rtol=0, atol=1e-12)
    for got, want in zip(plain.best(), normalised.best(), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    base = torch.arange(4.0, dtype=torch.float64)[:, None]
    (plain_top, plain_ids), (top, ids) = plain.top(3, base), normalised.top(3, base)
    assert torch.equal(plain_ids, ids)
    torch.testing.assert_close(plain_top, top, rtol=0, atol=1e-12)
    expected = normalised.full().topk(3).values + base
    torch.testing.assert_close(top, expected, rtol=0, atol=0)
    # softmax of either's scores is the distribution
    torch.testing.assert_close(plain.scores.softmax(-1), normalised.scores.softmax(-1))


def test_forcing_a_token_leaves_it_all_the_probability():
    for dist in both():
        forced = dist.forced(5).full()
        assert torch.equal(forced[:, 5], torch.zeros(4, dtype=torch.float64))
        assert torch.isinf(forced[:, :5]).all() and torch.isinf(forced[:, 6:]).all()


def test_a_bfloat16_step_is_read_in_float32():
    plain, _ = both()
    low = LogProbs(logits=plain.logits.bfloat16())
    assert low.float().logits.dtype == torch.float32
    assert low.float().full().dtype == torch.float32
    assert plain.float().logits.dtype == torch.float64  # float64 stays float64


def mixture_like(**arch):
    """A model whose decoder declares an output that is not a plain projection (as a copy
    mechanism's mixture is): it hands out log-probabilities, here its projection's own."""
    model = tiny_model(**arch)
    plain = type(model.decoder)

    class NotPlain(plain):
        plain_projection = False

        def distribution(self, features):
            return LogProbs(normalised=super().distribution(features).full())

    model.decoder.__class__ = NotPlain
    return model


@pytest.mark.parametrize("order", ["bahdanau", "luong"])
def test_a_decoder_that_hands_out_log_probabilities_trains_to_the_same_loss(order):
    arch = dict(attention="general" if order == "luong" else "additive", order=order)
    plain, other = tiny_model(**arch), mixture_like(**arch)
    src, src_len, tgt_in, _ = padded_batch()
    tgt_out = torch.roll(tgt_in, -1, dims=1).masked_fill(tgt_in == 0, 0)
    for smoothing in (0.0, 0.1):
        expected = plain.loss(src, src_len, tgt_in, tgt_out, label_smoothing=smoothing)
        got = other.loss(src, src_len, tgt_in, tgt_out, label_smoothing=smoothing)
        assert math.isclose(got.item(), expected.item(), rel_tol=1e-12)
    got.backward()
    assert other.decoder.projection.weight.grad.abs().sum() > 0


def test_every_search_reads_a_decoder_that_hands_out_log_probabilities():
    plain, other = tiny_model(), mixture_like()
    src, src_len, _, _ = padded_batch()
    for search in (decode, beam_decode):
        for a, b in zip(search(plain, src, src_len), search(other, src, src_len), strict=True):
            a, b = (a if isinstance(a, list) else [a]), (b if isinstance(b, list) else [b])
            assert [h.tokens for h in a] == [h.tokens for h in b]
            np.testing.assert_allclose([h.score for h in a], [h.score for h in b], atol=1e-12)


@pytest.mark.parametrize("asked", [{"weights": "int8"}, {"shortlist": 5}])
def test_int8_and_the_shortlist_refuse_an_output_that_is_not_a_plain_projection(toy_run, asked):
    from dataclasses import replace

    from alignmt.checkpoint.torch_io import load_checkpoint
    from alignmt.decoding.torch_engine.engine import TorchEngine

    ckpt = load_checkpoint(toy_run)
    model = ckpt.model
    decoder = type(model.decoder)
    model.decoder.__class__ = type("NotPlain", (decoder,), {"plain_projection": False})
    search = replace(ckpt.config.search, **asked)
    with pytest.raises(ValueError, match="holds for a plain output projection"):
        TorchEngine(model, search=search, vocabs=(ckpt.src_vocab, ckpt.tgt_vocab))
