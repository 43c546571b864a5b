"""The loss: plain cross-entropy over real tokens, and the same loss fused with the vocabulary
projection, which must match it in value and in every gradient."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from alignmt.model.loss import linear_cross_entropy, sequence_loss
from tests.conftest import loss_targets, padded_batch, tiny_model


def test_loss_is_the_mean_over_real_tokens_and_ignores_padding():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 7, generator=g)
    targets = torch.tensor([[5, 6, 2, 0], [4, 2, 0, 0]])
    real = targets != 0
    expected = -logits.log_softmax(-1).gather(2, targets[..., None])[..., 0][real].mean()
    torch.testing.assert_close(sequence_loss(logits, targets, pad_id=0), expected)
    scrambled = logits.clone()
    scrambled[~real] = torch.randn(int((~real).sum()), 7, generator=g) * 100
    torch.testing.assert_close(sequence_loss(scrambled, targets, pad_id=0), expected)


def test_label_smoothing_mixes_the_target_with_a_uniform_distribution():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 7, generator=g)
    targets = torch.tensor([[5, 6, 2], [4, 2, 0]])
    logp, real = logits.log_softmax(-1), targets != 0
    nll = -logp.gather(2, targets[..., None])[..., 0][real]
    uniform = -logp.mean(-1)[real]
    expected = (0.9 * nll + 0.1 * uniform).mean()
    torch.testing.assert_close(sequence_loss(logits, targets, 0, label_smoothing=0.1), expected)


def _projection_problem(bias: bool, seed: int = 0):
    """features (B, T, R), weight (V, R), bias (V,) or None and padded targets (B, T), float64."""
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(3, 5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(11, 4, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(11, generator=g, dtype=torch.float64, requires_grad=True) if bias else None
    targets = torch.tensor([[5, 6, 2, 0, 0], [4, 2, 0, 0, 0], [7, 8, 9, 10, 2]])
    return features, weight, b, targets


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("chunk_elements", [11, 33, 1 << 22])  # 1 row, 3 rows, all at once
def test_the_fused_loss_matches_projection_then_cross_entropy_in_value_and_gradients(
    bias, smoothing, chunk_elements
):
    features, weight, b, targets = _projection_problem(bias)
    inputs = [t for t in (features, weight, b) if t is not None]
    expected = sequence_loss(F.linear(features, weight, b), targets, 0, smoothing)
    want = torch.autograd.grad(expected * 3.0, inputs)
    fused = linear_cross_entropy(features, weight, b, targets, 0, smoothing, chunk_elements)
    got = torch.autograd.grad(fused * 3.0, inputs)  # an upstream gradient other than 1
    torch.testing.assert_close(fused, expected, rtol=1e-12, atol=1e-12)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
    with torch.no_grad():  # the loss-only path, for validation
        torch.testing.assert_close(
            linear_cross_entropy(features, weight, b, targets, 0, smoothing, chunk_elements),
            expected.detach(),
            rtol=1e-12,
            atol=1e-12,
        )


def test_padded_positions_neither_change_the_fused_loss_nor_receive_gradient():
    features, weight, b, targets = _projection_problem(bias=True)
    loss = linear_cross_entropy(features, weight, b, targets, 0)
    (grad,) = torch.autograd.grad(loss, features)
    assert torch.all(grad[targets == 0] == 0) and torch.all(grad[targets != 0].abs().sum(-1) > 0)
    scrambled = features.detach().clone()
    scrambled[targets == 0] = float("nan")  # never read
    torch.testing.assert_close(linear_cross_entropy(scrambled, weight, b, targets, 0), loss)


@pytest.mark.parametrize(
    "arch",
    [
        dict(readout="maxout"),
        dict(readout="tanh", rnn="lstm", layers=2),
        dict(attention="general", order="luong"),
        dict(attention="none"),
        dict(attention="none", context="init_only", bidirectional=False),
    ],
    ids=["bahdanau-maxout", "bahdanau-tanh-lstm2", "luong", "vanilla", "vanilla-init_only"],
)
def test_model_loss_equals_the_loss_of_its_logits_with_the_same_gradients(arch):
    model = tiny_model(**arch).train()  # dropout is 0: train mode is deterministic here
    src, src_len, tgt_in, tgt_len = padded_batch()
    tgt_out = loss_targets(tgt_in, tgt_len)
    params = [p for p in model.parameters()]
    logits = model(src, src_len, tgt_in).log_probs.logits
    expected = sequence_loss(logits, tgt_out, model.pad_id, 0.1)
    want = torch.autograd.grad(expected, params, allow_unused=True)
    fused = model.loss(src, src_len, tgt_in, tgt_out, 0.1)
    got = torch.autograd.grad(fused, params, allow_unused=True)
    torch.testing.assert_close(fused, expected, rtol=1e-12, atol=1e-12)
    for (name, _), g, w in zip(model.named_parameters(), got, want, strict=True):
        assert (g is None) == (w is None), name
        if g is not None:
            torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-12, msg=name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_under_bfloat16_autocast_the_fused_loss_and_gradients_stay_near_float32s(dtype):
    """`dtype`: the features' (a tanh readout's output is bfloat16 under autocast)."""
    problem = _projection_problem(bias=True)
    features, weight, b = (t.detach().float().requires_grad_() for t in problem[:3])
    targets = problem[3]
    expected = linear_cross_entropy(features, weight, b, targets, 0, 0.1, chunk_elements=33)
    want = torch.autograd.grad(expected, [features, weight, b])
    x = features.detach().to(dtype).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused = linear_cross_entropy(x, weight, b, targets, 0, 0.1, chunk_elements=33)
        with torch.no_grad():
            loss_only = linear_cross_entropy(x, weight, b, targets, 0, 0.1, chunk_elements=33)
    got = torch.autograd.grad(fused, [x, weight, b])
    assert fused.dtype == loss_only.dtype == torch.float32  # summed in float32
    assert [g.dtype for g in got] == [dtype, torch.float32, torch.float32]
    torch.testing.assert_close(fused, expected, rtol=2e-2, atol=0)
    torch.testing.assert_close(loss_only, fused.detach())
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.float(), w, rtol=0.05, atol=0.02)
