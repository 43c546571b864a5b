"""Exact hard monotonic attention (Wu & Cotterell 2019): the filter's marginal against
enumerating every monotonic alignment, the model's steps against the float64 reference (log
p, alpha, the posterior, the shown position and p_move), its teacher-forced likelihood
against enumeration, gradients, padding invariance, distributions that sum to one, search
with beams that reorder rows, overfitting one batch, and refusals."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from alignmt.model.attention.hard_monotonic import reference as hard_ref
from alignmt.model.attention.hard_monotonic import torch as hard_torch
from tests.conftest import padded_batch, tiny_model
from tests.test_attention import reference_scores
from tests.test_beam import assert_search_carries_each_rows_state
from tests.test_coverage_model import assert_alone_as_in_a_padded_batch
from tests.test_decoder import numpy, readout_weights, stack_weights


def enumerated(transition_scores: np.ndarray, emitted: np.ndarray, mask: np.ndarray) -> float:
    """p(y | x) by brute force: every monotonic alignment a (a_1 <= a_2 <= ... over the real
    positions), the product of its transitions p(a_i | a_{i-1}) (from a_0 = 0) and its
    emissions p(y_i | a_i). transition_scores: (I, T) e_ij; emitted: (I, T) p(y_i | a_i = j)."""
    real = np.flatnonzero(mask)
    total = 0.0
    for a in itertools.product(real, repeat=len(emitted)):
        if any(later < earlier for earlier, later in itertools.pairwise(a)):
            continue
        p, previous = 1.0, 0
        for i, j in enumerate(a):
            p *= hard_ref.transitions(transition_scores[i], mask)[previous, j] * emitted[i, j]
            previous = j
        total += p
    return total


def filtered(transition_scores: np.ndarray, emitted: np.ndarray, mask: np.ndarray) -> float:
    """p(y | x) as the decoder makes it: the product of each step's mixture p(y_i)."""
    posterior, p = hard_ref.first_posterior(len(mask)), 1.0
    for e, emission in zip(transition_scores, emitted, strict=True):
        alpha = hard_ref.prior(posterior, e, mask)
        p *= alpha @ emission
        posterior = hard_ref.observe(alpha, emission)
    return p


@pytest.mark.parametrize("T,n,steps", [(1, 1, 3), (3, 3, 3), (5, 3, 4), (4, 4, 5), (6, 5, 2)])
def test_the_filters_marginal_is_the_sum_over_every_monotonic_alignment(T, n, steps):
    rng = np.random.default_rng(T * 100 + n * 10 + steps)
    mask = np.arange(T) < n
    for _ in range(3):
        scores = rng.normal(size=(steps, T)) * 2
        emitted = np.where(mask, rng.random((steps, T)), 0.7)  # padding's are never read
        exact = enumerated(scores, emitted, mask)
        assert math.isclose(filtered(scores, emitted, mask), exact, rel_tol=1e-13)


def test_transitions_never_go_back_and_each_row_is_a_distribution():
    mask = np.arange(6) < 4
    P = hard_ref.transitions(np.random.default_rng(0).normal(size=6), mask)
    assert not np.tril(P, -1).any() and not P[:, 4:].any() and not P[4:].any()
    np.testing.assert_allclose(P[:4].sum(-1), 1.0, rtol=0, atol=1e-15)


def hard_model(seed: int = 0, readout: str = "tanh", **more):
    model = tiny_model(attention_fn="hard_monotonic", readout=readout, seed=seed, **more)
    with torch.no_grad():  # transitions spread over several positions, not all near uniform
        model.decoder.attention.score.v.weight.mul_(6.0)
    return model


def reference_steps(model, b: int, n: int, prevs, memory, state):
    """The reference decoder's steps for sentence b: each step's (log p, alpha, p_move), and
    the emissions and scores that made them."""
    decoder = model.decoder
    H = numpy(memory.states[b, :n])
    hs = [numpy(h) for h in state.hidden[b]]
    cs = None if state.cell is None else [numpy(c) for c in state.cell[b]]
    score = lambda s, H: reference_scores(decoder.attention, s, H)  # noqa: E731
    layers, out = stack_weights(decoder.rnn), readout_weights(decoder)
    posterior, mask, steps = hard_ref.first_posterior(n), np.ones(n, dtype=bool), []
    for i, prev in enumerate(prevs):
        y = numpy(decoder.embed.weight)[prev]
        log_p, hs, cs, alpha, emitted, p_move = hard_ref.step(
            y, hs, cs, H, mask, score, posterior, layers, out
        )
        steps.append((log_p, alpha, p_move, emitted, score(hs[-1], H)))
        if i + 1 < len(prevs):
            posterior = hard_ref.observe(alpha, emitted[:, prevs[i + 1]])
    return steps


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_five_steps_match_the_numpy_reference_in_float64(rnn):
    model = hard_model(rnn=rnn, layers=2)
    src, src_len, _, _ = padded_batch()
    memory, state = model.encode(src, src_len)
    g = torch.Generator().manual_seed(5)
    prevs = [torch.full((3,), model.bos_id)]
    prevs += [torch.randint(4, 13, (3,), generator=g) for _ in range(4)]
    steps = []
    for prev in prevs:
        log_probs, state, alpha = model.decode_step(prev, state, memory)
        steps.append((log_probs, alpha, dict(state.slots)))
    initial = model.encode(src, src_len)[1]
    moved = 0
    for b, n in enumerate(src_len.tolist()):
        expected = reference_steps(model, b, n, [int(p[b]) for p in prevs], memory, initial)
        for (log_probs, alpha, slots), (ref_log_p, ref_alpha, ref_move, _, _) in zip(
            steps, expected, strict=True
        ):
            np.testing.assert_allclose(numpy(log_probs.full()[b]), ref_log_p, rtol=0, atol=1e-10)
            np.testing.assert_allclose(numpy(alpha[b, :n]), ref_alpha, rtol=0, atol=1e-10)
            assert not alpha[b, n:].any()
            position = float(np.arange(n) @ ref_alpha)
            assert math.isclose(slots["position"][b].item(), position, abs_tol=1e-10)
            assert math.isclose(slots["move"][b].item(), ref_move, abs_tol=1e-10)
            assert math.isclose(log_probs.full()[b].exp().sum().item(), 1.0, abs_tol=1e-12)
            moved += position > 1.0
    assert moved >= 3  # the prior went past the first positions: the checks compared more


def test_the_teacher_forced_likelihood_is_the_sum_over_every_monotonic_alignment():
    model = hard_model(seed=2)
    src, src_len, tgt_in, tgt_len = padded_batch(src_lens=(5, 3), tgt_lens=(4, 5))
    tgt_out = torch.roll(tgt_in, -1, dims=1)
    tgt_out[:, -1] = model.eos_id
    log_probs = model(src, src_len, tgt_in).log_probs.full()
    memory, state = model.encode(src, src_len)
    for b, (n, m) in enumerate(zip(src_len.tolist(), tgt_len.tolist(), strict=True)):
        tokens = tgt_out[b, :m].tolist()
        steps = reference_steps(model, b, n, tgt_in[b, :m].tolist(), memory, state)
        scores = np.stack([step[4] for step in steps])
        emitted = np.stack([step[3][:, y] for step, y in zip(steps, tokens, strict=True)])
        exact = enumerated(scores, emitted, np.ones(n, dtype=bool))
        model_says = log_probs[b, torch.arange(m), tokens].sum().item()
        assert math.isclose(model_says, math.log(exact), rel_tol=0, abs_tol=1e-10)


def test_gradients_of_the_likelihood_match_finite_differences():
    model = hard_model(seed=1)
    src, src_len, tgt_in, _ = padded_batch(src_lens=(4, 3), tgt_lens=(3, 2))
    tgt_out = torch.roll(tgt_in, -1, dims=1)
    names = ["decoder.attention.score.v.weight", "decoder.output.proj.weight"]
    params = {name: p for name, p in model.named_parameters()}

    def loss(v, proj):
        weights = {names[0]: v, names[1]: proj}
        return (
            torch.func.functional_call(model, params | weights, (src, src_len, tgt_in))[0]
            .full()
            .gather(-1, tgt_out.unsqueeze(-1))
            .sum()
        )

    inputs = tuple(params[name].detach().clone().requires_grad_(True) for name in names)
    assert torch.autograd.gradcheck(loss, inputs, eps=1e-6, atol=1e-8)


def test_the_log_space_step_holds_no_inf_and_no_nan_in_its_gradients():
    model = hard_model().train()
    src, src_len, tgt_in, _ = padded_batch(src_lens=(7, 1, 4), tgt_lens=(6, 2, 3))
    tgt_out = torch.roll(tgt_in, -1, dims=1)
    tgt_out[tgt_in == 0] = 0
    model.loss(src, src_len, tgt_in, tgt_out).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert all(torch.isfinite(g).all() for g in grads)
    assert model.decoder.attention.score.v.weight.grad.abs().sum() > 0


def test_padding_never_changes_a_sentence_teacher_forced():
    assert_alone_as_in_a_padded_batch(hard_model())


def test_search_carries_the_posterior_streamed_and_through_the_beam():
    assert_search_carries_each_rows_state(hard_model(seed=3))


def test_one_batch_is_learnt_to_the_letter():
    """A hundred and fifty steps on one batch of copies fit it exactly."""
    model = tiny_model(attention_fn="hard_monotonic", seed=0, dtype=torch.float32).train()
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 13, (8, 6), generator=g)
    src[:, -1] = model.eos_id
    src_len = torch.full((8,), 6)
    tgt_in = torch.cat([torch.full((8, 1), model.bos_id), src[:, :-1]], 1)
    optimiser = torch.optim.Adam(model.parameters(), lr=0.03)
    for _ in range(150):
        optimiser.zero_grad()
        model.loss(src, src_len, tgt_in, src).backward()
        optimiser.step()
    model.eval()
    with torch.no_grad():
        out = model(src, src_len, tgt_in)
    assert torch.equal(out.log_probs.full().argmax(-1), src)


@pytest.mark.parametrize(
    "setting,message",
    [
        (dict(attention_window="local_m"), r"cut it short.*attention_window=global"),
        (dict(order="luong"), r"has its own order.*model.order at bahdanau"),
        (dict(coverage="sum"), r"model.coverage=none"),
        (dict(heads=2), r"keeps one state or window.*model.heads=1"),
    ],
)
def test_what_hard_monotonic_attention_refuses(setting, message):
    with pytest.raises(ValueError, match=message):
        tiny_model(attention_fn="hard_monotonic", **setting)


def test_the_explorer_is_told_the_position_and_the_move_probability():
    composition = hard_model().decoder.attention.composition
    shown = {s.slot: s for s in composition.shown}
    assert shown["position"].kind == "position" and shown["position"].label == "a_i"
    assert shown["move"].kind == "probability"
    assert composition.mixture and not hard_model().decoder.plain_projection


def test_unreachable_positions_are_finite_and_weigh_nothing():
    scores = torch.tensor([[0.3, -1.0, 2.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, False]])
    log_P = hard_torch.log_transitions(scores, mask)
    assert torch.isfinite(log_P).all()
    P = log_P.exp()[0, :3]  # from the real positions (a padding row is never weighed)
    assert not P.tril(-1).any() and not P[:, 3].any()
    torch.testing.assert_close(P.sum(-1), torch.ones(3, dtype=torch.float64), rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    "readout,more", [("tanh", {}), ("none", {}), ("tanh", dict(readout_dim=5, tie_embeddings=True))]
)
def test_the_flax_twin_emits_and_aligns_as_pytorch_does(readout, more):
    pytest.importorskip("jax")
    import jax.numpy as jnp

    from tests.test_flax_model import twins

    arch = dict(rnn="lstm", bidirectional=True, layers=2, attention="additive", order="bahdanau")
    arch |= {"attention_fn": "hard_monotonic"}
    model, flax_model, variables = twins(arch, torch.float32, readout=readout, **more)
    src, src_len, tgt_in, _ = padded_batch(src_lens=(9, 4, 7), tgt_lens=(6, 3, 5))
    with torch.no_grad():
        out = model(src, src_len, tgt_in)
    arrays = [jnp.asarray(t.numpy()) for t in (src, src_len, tgt_in)]
    log_probs, attention = flax_model.apply(variables, *arrays, train=False)
    np.testing.assert_allclose(attention, out.attention, rtol=0, atol=1e-5)
    np.testing.assert_allclose(log_probs.full(), out.log_probs.full(), rtol=0, atol=1e-5)


@pytest.fixture(scope="module")
def hard_run(toy_run, tmp_path_factory):
    """An untrained hard monotonic twin of the toy run, with sharper transition scores and an
    unlikely </s>: outputs of many steps whose prior moves."""
    from tests.conftest import untrained_twin

    def sharper_and_longer(model):
        model.decoder.attention.score.v.weight.mul_(6.0)
        model.decoder.output.proj.bias[model.eos_id] -= 3

    folder = tmp_path_factory.mktemp("hard_monotonic") / "run"
    return untrained_twin(toy_run, folder, sharper_and_longer, attention_fn="hard_monotonic")


@pytest.fixture(scope="module")
def hard_translators(hard_run):
    """The hard monotonic model on each engine: PyTorch, Flax, and its ONNX export."""
    pytest.importorskip("jax")
    pytest.importorskip("onnxruntime")
    from tests.test_engines import on_each_engine

    return on_each_engine(hard_run)


@pytest.mark.parametrize("engine", ["torch", "flax", "onnxruntime"])
def test_each_engines_beam_search_over_a_hard_monotonic_model_is_the_reference_search(
    hard_translators, engine
):
    from tests.test_engines import assert_beam_is_the_reference_search

    assert_beam_is_the_reference_search(hard_translators, engine)


def test_the_served_step_through_gives_the_position_and_the_move_probability(hard_run):
    from tests.conftest import SERVE_LIMITS, post, serving

    with serving(hard_run, limits=SERVE_LIMITS) as client:
        (info,) = client.get("/v1/models").json()["models"]
        assert any(m.startswith("exact hard monotonic attention") for m in info["mechanisms"])
        assert [(s["slot"], s["label"], s["kind"]) for s in info["shown"]] == [
            ("position", "a_i", "position"),
            ("move", "p_move", "probability"),
        ]
        _, body = post(client, "/v1/step", {"sentence": "the big dog sleeps now"})
        steps = body["steps"]
        assert len(steps) > 3
        for step in steps:
            alpha = np.array(step["attention"])
            assert math.isclose(step["shown"]["position"], alpha @ np.arange(6), abs_tol=1e-3)
            assert 0 <= step["shown"]["move"] <= 1 + 1e-6
        # steered to the first word, the decoder emits from there
        sentence = {"sentence": "the big dog sleeps now", "override": {"1": 0}}
        _, steered = post(client, "/v1/step", sentence)
        assert steered["steps"][1]["shown"]["position"] == 0
        assert steered["steps"][1]["attention"] == np.eye(6)[0].tolist()
