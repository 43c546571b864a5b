"""The coverage model (Tu et al. 2016): parity with the float64 reference in both decoder
orders, padding invariance, what the coverage holds, gradients, search, and refusals."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from alignmt.model.attention.coverage import reference as coverage_ref
from tests.conftest import padded_batch, tiny_model
from tests.test_beam import assert_search_carries_each_rows_state
from tests.test_decoder import numpy, reference_step

CASES = [
    dict(rnn=rnn, bidirectional=bi, layers=layers, attention=attention, order=order)
    for rnn, bi, layers in [("gru", True, 1), ("lstm", False, 2), ("gru", False, 2)]
    for attention, order in itertools.product(["additive", "concat"], ["bahdanau", "luong", "cgru"])
]


def case_id(arch: dict) -> str:
    bi = "bi" if arch["bidirectional"] else "uni"
    return f"{arch['rnn']}-{bi}-L{arch['layers']}-{arch['attention']}-{arch['order']}"


def model_for(arch: dict, coverage: str, seed: int = 0):
    readout = "none" if arch["order"] == "luong" else "tanh"
    model = tiny_model(**arch, readout=readout, coverage=coverage, seed=seed)
    if coverage != "none":  # V drawn larger than its init, so that coverage moves the scores
        with torch.no_grad():
            model.decoder.attention.coverage.V.weight.mul_(5.0)
    return model


@pytest.mark.parametrize("coverage", ["sum", "fertility"])
@pytest.mark.parametrize("arch", CASES, ids=case_id)
def test_four_coverage_steps_match_the_numpy_reference_in_float64(arch, coverage):
    model = model_for(arch, coverage)
    decoder = model.decoder
    src, src_len, _, _ = padded_batch()
    memory, state = model.encode(src, src_len)
    g = torch.Generator().manual_seed(5)
    prevs = [torch.randint(4, 13, (src.size(0),), generator=g) for _ in range(4)]
    for b, n in enumerate(src_len.tolist()):
        hs = [numpy(h) for h in state.hidden[b]]
        cs = None if state.cell is None else [numpy(c) for c in state.cell[b]]
        feed = None if state.feed is None else numpy(state.feed[b])
        H = numpy(memory.states[b, :n])
        phi = None
        if coverage == "fertility":
            coverage_model = decoder.attention.coverage
            U_f, N = numpy(coverage_model.U_f.weight)[0], coverage_model.max_fertility
            phi = coverage_ref.fertility(H, U_f, N)
        C = np.zeros(n)
        step_state = state
        for prev in prevs:
            log_probs, step_state, alpha = model.decode_step(prev, step_state, memory)
            logits = log_probs.logits
            expected = reference_step(decoder, b, prev.numpy(), hs, cs, feed, memory, n, C)
            ref_logits, hs, cs, feed, ref_alpha = expected
            C = coverage_ref.next_coverage(C, ref_alpha, phi)
            np.testing.assert_allclose(numpy(logits[b]), ref_logits, rtol=0, atol=1e-10)
            np.testing.assert_allclose(numpy(alpha[b, :n]), ref_alpha, rtol=0, atol=1e-10)
            np.testing.assert_allclose(
                numpy(step_state.slots["coverage"][b, :n]), C, rtol=0, atol=1e-10
            )
            assert torch.equal(
                step_state.slots["coverage"][b, n:], torch.zeros(src.size(1) - n).double()
            )
    assert C.sum() > 1.0  # the coverage grew: the checks above compared nonzero C


@pytest.mark.parametrize("coverage", ["sum", "fertility"])
@pytest.mark.parametrize("order", ["bahdanau", "luong", "cgru"])
def test_padding_never_changes_a_sentence_teacher_forced(order, coverage):
    arch = dict(rnn="gru", bidirectional=True, layers=1, attention="additive", order=order)
    assert_alone_as_in_a_padded_batch(model_for(arch, coverage))


def assert_alone_as_in_a_padded_batch(model) -> None:
    """Each sentence of a padded batch, teacher-forced, gets the logits and attention it
    gets alone to 1e-12 (float64), and its padding exactly zero weight: for a model whose
    attention carries state from step to step (coverage, a monotonic walk)."""
    src, src_len, tgt_in, tgt_len = padded_batch(src_lens=(6, 2, 4), tgt_lens=(3, 5, 4))
    out = model(src, src_len, tgt_in)
    for b in range(len(src_len)):
        n, m = int(src_len[b]), int(tgt_len[b])
        alone = model(src[b : b + 1, :n], src_len[b : b + 1], tgt_in[b : b + 1, :m])
        torch.testing.assert_close(
            out.log_probs.scores[b, :m], alone.log_probs.scores[0], rtol=0, atol=1e-12
        )
        torch.testing.assert_close(out.attention[b, :m, :n], alone.attention[0], rtol=0, atol=1e-12)
        assert not out.attention[b, :, n:].any()


@pytest.mark.parametrize("order", ["bahdanau", "luong", "cgru"])
def test_sum_coverage_is_the_attention_summed_over_steps_and_forward_equals_steps(order):
    arch = dict(rnn="lstm", bidirectional=True, layers=1, attention="concat", order=order)
    model = model_for(arch, "sum")
    src, src_len, tgt_in, _ = padded_batch()
    out = model(src, src_len, tgt_in)
    torch.testing.assert_close(
        out.state.slots["coverage"], out.attention.sum(1), rtol=0, atol=1e-12
    )
    memory, state = model.encode(src, src_len)
    for t in range(tgt_in.size(1)):
        log_probs, state, _ = model.decode_step(tgt_in[:, t], state, memory)
        torch.testing.assert_close(log_probs.logits, out.log_probs.logits[:, t], rtol=0, atol=1e-12)
    torch.testing.assert_close(
        state.slots["coverage"], out.state.slots["coverage"], rtol=0, atol=1e-12
    )


def test_fertility_coverage_divides_each_word_by_a_fertility_in_0_to_N():
    arch = dict(rnn="gru", bidirectional=True, layers=1, attention="additive", order="bahdanau")
    model = model_for(arch, "fertility")
    src, src_len, tgt_in, _ = padded_batch()
    out = model(src, src_len, tgt_in)
    memory, _ = model.encode(src, src_len)
    rate = memory.slots["coverage_rate"]  # 1 / Phi_j
    mask = src != 0
    assert torch.all(rate[mask] > 1 / model.decoder.attention.coverage.max_fertility)  # Phi_j < N
    assert torch.equal(rate[~mask], torch.zeros_like(rate[~mask]))
    torch.testing.assert_close(
        out.state.slots["coverage"], out.attention.sum(1) * rate, rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("coverage", ["sum", "fertility"])
def test_the_loss_trains_the_coverage_weights(coverage):
    arch = dict(rnn="gru", bidirectional=True, layers=1, attention="additive", order="bahdanau")
    model = model_for(arch, coverage).train()
    src, src_len, tgt_in, _ = padded_batch()
    tgt_out = torch.roll(tgt_in, -1, dims=1)
    tgt_out[tgt_in == 0] = 0
    model.loss(src, src_len, tgt_in, tgt_out).backward()
    names = ["attention.coverage.V.weight"]
    names += ["attention.coverage.U_f.weight"] if coverage == "fertility" else []
    for name in names:
        grad = dict(model.decoder.named_parameters())[name].grad
        assert grad is not None and grad.abs().sum() > 0, name


@pytest.mark.parametrize("order", ["bahdanau", "luong", "cgru"])
def test_search_carries_coverage_streamed_and_through_the_beam(order):
    arch = dict(rnn="gru", bidirectional=True, layers=1, attention="additive", order=order)
    assert_search_carries_each_rows_state(model_for(arch, "fertility", seed=3))


@pytest.mark.parametrize("attention", ["dot", "general", "scaled_dot"])
def test_coverage_refuses_scores_without_a_hidden_layer(attention):
    with pytest.raises(
        ValueError, match=r"score has none: use a score with one \(additive, concat\)"
    ):
        tiny_model(attention=attention, coverage="sum")


def test_coverage_refuses_a_model_without_attention():
    with pytest.raises(ValueError, match=r"model\.attention=none has none"):
        tiny_model(attention="none", coverage="fertility")


def test_a_model_without_coverage_has_no_coverage_weights_or_state():
    model = tiny_model()
    names = [name for name, _ in model.named_parameters()]
    assert not [name for name in names if ".V." in name or "U_f" in name]
    src, src_len, _, _ = padded_batch()
    memory, state = model.encode(src, src_len)
    assert "coverage" not in state.slots and "coverage_rate" not in memory.slots
