"""Packed-weight Linears for decoding: the same outputs, and a clean way back."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from alignmt.config import ModelConfig
from alignmt.decoding.torch_engine import packed
from alignmt.decoding.torch_engine.packed import mkl_packing_available, packed_linears
from alignmt.decoding.torch_engine.search import beam_decode, decode
from alignmt.model.seq2seq import Seq2Seq
from tests.conftest import VOCAB, padded_batch, tiny_model

needs_mkl = pytest.mark.skipif(not mkl_packing_available(), reason="PyTorch built without MKL")


@needs_mkl
def test_a_packed_linear_computes_what_the_plain_one_does_and_is_restored_after():
    torch.manual_seed(0)
    linear = nn.Linear(40, 300)
    x = torch.randn(8, 40)  # the 8 rows packed for: MKL's packed GEMM, not a fallback
    with torch.no_grad():
        plain = linear(x)
        with packed_linears(linear, rows=8):
            assert "forward" in vars(linear)  # the packed path is in place
            inside = linear(x)
            weight = linear.weight.clone()
            linear.weight.zero_()  # the packed copy is what 8 rows read; other counts fall back
            packed_copy, fallback = linear(x), linear(x[:5])
            linear.weight.copy_(weight)
            rows = linear(x[:5])  # fewer rows than packed for
        assert "forward" not in vars(linear)
    torch.testing.assert_close(inside, plain, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(packed_copy, plain, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(fallback, linear.bias.detach().expand(5, -1))
    torch.testing.assert_close(rows, plain[:5], rtol=1e-6, atol=1e-5)


def test_nothing_is_packed_where_gradients_flow_or_weights_are_not_float32():
    linear = nn.Linear(4, 3)
    with packed_linears(linear, rows=2):  # gradients on: training must see the real weight
        assert "forward" not in vars(linear)
    with torch.no_grad(), packed_linears(linear.double(), rows=2):
        assert "forward" not in vars(linear)


def tied_model() -> Seq2Seq:
    """A float32 model whose projection shares the target embeddings (one weight, two
    Linears' worth of uses)."""
    torch.manual_seed(2)
    cfg = ModelConfig(
        emb_dim=6,
        enc_hidden=4,
        dec_hidden=8,
        attn_dim=6,
        readout="tanh",
        readout_dim=6,
        tie_embeddings=True,
    )
    return Seq2Seq.from_config(cfg, src_vocab=VOCAB, tgt_vocab=VOCAB).eval()


@needs_mkl
@pytest.mark.parametrize("make", [lambda: tiny_model(dtype=torch.float32, seed=2), tied_model])
def test_decoding_with_packed_weights_gives_the_plain_outputs(monkeypatch, make):
    model = make()
    src, src_len, _, _ = padded_batch(src_lens=(9, 2, 5, 7), tgt_lens=(1,) * 4)
    calls = []
    original = torch.ops.mkl._mkl_linear
    monkeypatch.setattr(torch.ops.mkl, "_mkl_linear", lambda *a: calls.append(1) or original(*a))
    greedy, beam = decode(model, src, src_len), beam_decode(model, src, src_len, beam_size=3)
    assert calls  # the packed path ran
    monkeypatch.setattr(packed, "mkl_packing_available", lambda: False)
    plain_greedy = decode(model, src, src_len)
    plain_beam = beam_decode(model, src, src_len, beam_size=3)
    ours = greedy + [b[0] for b in beam]
    plain = plain_greedy + [b[0] for b in plain_beam]
    for a, b in zip(ours, plain, strict=True):
        assert a.tokens == b.tokens
        assert math.isclose(a.score, b.score, rel_tol=1e-4)


def test_nothing_is_packed_under_autocast_whose_bfloat16_packing_would_bypass():
    linear = nn.Linear(4, 3)
    bfloat16 = torch.autocast("cpu", dtype=torch.bfloat16)
    with torch.no_grad(), bfloat16, packed_linears(linear, rows=2):
        assert "forward" not in vars(linear)
        assert linear(torch.randn(2, 4)).dtype == torch.bfloat16
