"""Monotonic attention (Raffel et al. 2017): the expected alignment against enumerating the
walk's decisions, parity with the float64 reference in each order, in training (the
expectation) and in decoding (the walk), gradients, padding invariance, the walk's
direction, search with beams that reorder rows, and refusals."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from alignmt.model.attention.monotonic import reference as monotonic_ref
from alignmt.model.attention.monotonic import torch as monotonic_torch
from tests.conftest import padded_batch, tiny_model
from tests.test_beam import assert_search_carries_each_rows_state
from tests.test_coverage_model import assert_alone_as_in_a_padded_batch
from tests.test_decoder import numpy, reference_step


def enumerated(p: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """The walk's stopping distribution by brute force: every vector of stop (1) or move (0)
    decisions, weighted by its probability, and for each start the first stop it reaches."""
    T = len(p)
    alpha = np.zeros(T)
    for decisions in itertools.product([0, 1], repeat=T):
        chance = math.prod(p[m] if d else 1 - p[m] for m, d in enumerate(decisions))
        for start, weight in enumerate(previous):
            stop = next((j for j in range(start, T) if decisions[j]), None)
            if stop is not None:
                alpha[stop] += weight * chance
    return alpha


def random_row(rng, T: int, n: int):
    """Scores (T,), a mask of n real positions, and a distribution over them."""
    e, mask = rng.normal(size=T) * 2, np.arange(T) < n
    previous = np.where(mask, rng.random(T), 0.0)
    return e, mask, previous / previous.sum()


@pytest.mark.parametrize("T,n", [(1, 1), (3, 3), (5, 3), (6, 6), (7, 5)])
def test_the_expected_alignment_is_the_walks_stopping_distribution(T, n):
    rng = np.random.default_rng(T * 10 + n)
    for _ in range(5):
        e, mask, previous = random_row(rng, T, n)
        p = monotonic_ref.stop_probabilities(e, mask, r=-0.5)
        alpha = monotonic_ref.expected_alignment(p, previous)
        np.testing.assert_allclose(alpha, enumerated(p, previous), rtol=0, atol=1e-14)
        assert math.isclose(alpha.sum(), 1.0, abs_tol=1e-14)  # </s> keeps what is left
        assert not alpha[n:].any()


def test_batched_expected_alignment_and_walk_match_the_reference_in_float64():
    rng = np.random.default_rng(0)
    lengths, T = [7, 2, 5, 1], 7
    rows = [random_row(rng, T, n) for n in lengths]
    e, mask, previous = (torch.tensor(np.stack(part)) for part in zip(*rows, strict=True))
    p = torch.where(monotonic_torch.last_real(mask), 1.0, torch.sigmoid(e + 0.3)) * mask
    log_move = torch.nn.functional.logsigmoid(-(e + 0.3))
    alpha = monotonic_torch.expected_alignment(p, log_move, previous)
    starts = torch.tensor([3, 1, 0, 0])
    walked = monotonic_torch.walk(p, starts)
    for b, (row_e, row_mask, row_previous) in enumerate(rows):
        ref_p = monotonic_ref.stop_probabilities(row_e, row_mask, r=0.3)
        expected = monotonic_ref.expected_alignment(ref_p, row_previous)
        np.testing.assert_allclose(alpha[b].numpy(), expected, rtol=0, atol=1e-14)
        stop = monotonic_ref.walk(ref_p, int(starts[b]))
        assert walked[b].tolist() == np.eye(T)[stop].tolist()


def test_the_expectation_of_a_walk_without_chance_is_the_walk():
    p = np.array([0.0, 1.0, 0.0, 0.0, 1.0, 1.0])
    for start in range(6):
        alpha = monotonic_ref.expected_alignment(p, np.eye(6)[start])
        assert alpha.tolist() == np.eye(6)[monotonic_ref.walk(p, start)].tolist()


def monotonic_model(order: str, seed: int = 0, **more):
    model = tiny_model(
        order=order,
        readout="none" if order == "luong" else "tanh",
        attention_fn="monotonic",
        monotonic_noise=0.0,
        seed=seed,
        **more,
    )
    with torch.no_grad():  # stop probabilities spread over (0, 1) rather than all near 0.27
        model.decoder.attention.score.v.weight.mul_(8.0)
        model.decoder.attention.mapping.r.fill_(0.2)
    return model


@pytest.mark.parametrize("training", [True, False], ids=["expected", "walk"])
@pytest.mark.parametrize("order", ["bahdanau", "luong", "cgru"])
def test_four_monotonic_steps_match_the_numpy_reference_in_float64(order, training):
    model = monotonic_model(order).train(training)
    decoder = model.decoder
    r = decoder.attention.mapping.r.item()
    src, src_len, _, _ = padded_batch()
    memory, state = model.encode(src, src_len)
    g = torch.Generator().manual_seed(5)
    prevs = [torch.randint(4, 13, (src.size(0),), generator=g) for _ in range(4)]
    moved = 0
    for b, n in enumerate(src_len.tolist()):
        hs = [numpy(h) for h in state.hidden[b]]
        cs = None if state.cell is None else [numpy(c) for c in state.cell[b]]
        feed = None if state.feed is None else numpy(state.feed[b])
        previous, step_state = monotonic_ref.first_alignment(n), state
        for prev in prevs:
            log_probs, step_state, alpha = model.decode_step(prev, step_state, memory)
            normalise = monotonic_ref.monotonic(previous, r, hard=not training)
            expected = reference_step(
                decoder, b, prev.numpy(), hs, cs, feed, memory, n, normalise=normalise
            )
            ref_logits, hs, cs, feed, ref_alpha = expected
            np.testing.assert_allclose(numpy(log_probs.logits[b]), ref_logits, rtol=0, atol=1e-10)
            np.testing.assert_allclose(numpy(alpha[b, :n]), ref_alpha, rtol=0, atol=1e-10)
            position = float(np.arange(n) @ ref_alpha)
            slots = step_state.slots
            assert math.isclose(slots["position"][b].item(), position, abs_tol=1e-10)
            np.testing.assert_allclose(numpy(slots["previous"][b, :n]), ref_alpha, atol=1e-10)
            moved += position > float(np.arange(n) @ previous)
            previous = ref_alpha
    assert moved >= 2  # the walks went somewhere: the checks compared more than position 0


@pytest.mark.parametrize("training", [True, False], ids=["expected", "walk"])
@pytest.mark.parametrize("order", ["bahdanau", "luong", "cgru"])
def test_padding_never_changes_a_sentence_teacher_forced(order, training):
    assert_alone_as_in_a_padded_batch(monotonic_model(order).train(training))


def test_gradients_of_the_expected_alignment_match_finite_differences():
    mapping = monotonic_model("bahdanau").decoder.attention.mapping.train()
    rng = np.random.default_rng(3)
    rows = [random_row(rng, 5, n) for n in (5, 3)]
    e, mask, previous = (torch.tensor(np.stack(part)) for part in zip(*rows, strict=True))
    e.requires_grad_(True)
    previous.requires_grad_(True)

    def alpha(e, previous, r):
        return torch.func.functional_call(mapping, {"r": r}, (e, mask, {"previous": previous}))[0]

    r = mapping.r.detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(alpha, (e, previous, r), eps=1e-6, atol=1e-8)


def test_the_loss_trains_r_and_the_score_through_the_expectation():
    model = monotonic_model("bahdanau").train()
    src, src_len, tgt_in, _ = padded_batch()
    tgt_out = torch.roll(tgt_in, -1, dims=1)
    tgt_out[tgt_in == 0] = 0
    model.loss(src, src_len, tgt_in, tgt_out).backward()
    attention = model.decoder.attention
    assert attention.mapping.r.grad.abs() > 0
    assert attention.score.v.weight.grad.abs().sum() > 0


def test_noise_only_in_training():
    model = monotonic_model("bahdanau")
    model.decoder.attention.mapping.noise = 1.0
    src, src_len, tgt_in, _ = padded_batch()
    model.eval()
    assert torch.equal(model(src, src_len, tgt_in).attention, model(src, src_len, tgt_in).attention)
    model.train()
    first, second = (model(src, src_len, tgt_in).attention for _ in range(2))
    assert not torch.equal(first, second)
    torch.testing.assert_close(first.sum(-1), torch.ones_like(first.sum(-1)), rtol=0, atol=1e-12)


def test_the_walk_only_moves_right_and_stops_where_p_first_reaches_one_half():
    model = monotonic_model("luong", seed=4)
    with torch.no_grad():
        model.decoder.attention.mapping.r.fill_(-1.0)
    src, src_len, _, _ = padded_batch(src_lens=(9, 4, 7), tgt_lens=(1, 1, 1))
    memory, state = model.encode(src, src_len)
    positions = []
    prev, g = torch.full((3,), model.bos_id), torch.Generator().manual_seed(0)
    for _ in range(8):
        _, after, alpha = model.decode_step(prev, state, memory)
        assert torch.equal(alpha.sum(-1), torch.ones(3, dtype=alpha.dtype))
        assert torch.equal(alpha.amax(-1), torch.ones(3, dtype=alpha.dtype))  # one-hot
        stop = after.slots["stop"]
        assert torch.all((stop >= 0.5) & (stop <= 1))  # p where it stopped reached 1/2
        positions.append(after.slots["position"])
        state, prev = after, torch.randint(4, 13, (3,), generator=g)
    walked = torch.stack(positions)  # (steps, B)
    assert torch.all(walked[1:] >= walked[:-1])
    assert (walked[1:] > walked[:-1]).sum() >= 3  # it did walk


@pytest.mark.parametrize("order", ["bahdanau", "cgru"])
def test_search_carries_the_walk_streamed_and_through_the_beam(order):
    assert_search_carries_each_rows_state(monotonic_model(order, seed=3))


def test_monotonic_attention_refuses_a_local_window():
    with pytest.raises(ValueError, match=r"walks the source itself.*attention_window=global"):
        tiny_model(attention_fn="monotonic", attention_window="local_m")


def test_the_explorer_is_told_the_position_and_the_stop_probability():
    composition = tiny_model(attention_fn="monotonic").decoder.attention.composition
    shown = {s.slot: s for s in composition.shown}
    assert shown["position"].kind == "position" and shown["position"].label == "t_i"
    assert shown["stop"].kind == "probability"
    assert [slot.name for slot in composition.state] == ["previous", "position", "stop"]


# a seed and an r for each order under which the tiny model's walks move on
WALKS = {"bahdanau": (2, 0.5), "luong": (2, 0.5), "cgru": (2, 0.0)}


@pytest.mark.parametrize("train", [True, False], ids=["expected", "walk"])
@pytest.mark.parametrize("order", ["bahdanau", "luong", "cgru"])
def test_the_flax_twin_expects_and_walks_as_pytorch_does(order, train):
    pytest.importorskip("jax")
    import jax.numpy as jnp

    from alignmt.checkpoint.flax_io import params_from_tensors
    from alignmt.model.flax_seq2seq import FlaxSeq2Seq
    from tests.conftest import VOCAB
    from tests.test_flax_model import tiny_config

    seed, r = WALKS[order]
    model = monotonic_model(order, seed=seed).float().train(train)
    with torch.no_grad():
        model.decoder.attention.mapping.r.fill_(r)
    arch = dict(rnn="gru", bidirectional=True, layers=1, attention="additive", order=order)
    readout = "none" if order == "luong" else "tanh"
    cfg = tiny_config(arch | {"attention_fn": "monotonic"}, readout=readout, monotonic_noise=0.0)
    tensors = {k: v.numpy() for k, v in model.state_dict().items()}
    variables = {"params": params_from_tensors(tensors, cfg)}
    src, src_len, tgt_in, _ = padded_batch(src_lens=(9, 4, 7), tgt_lens=(6, 3, 5))
    with torch.no_grad():
        out = model(src, src_len, tgt_in)
    arrays = [jnp.asarray(t.numpy()) for t in (src, src_len, tgt_in)]
    log_probs, attention = FlaxSeq2Seq(cfg, VOCAB, VOCAB).apply(variables, *arrays, train=train)
    np.testing.assert_allclose(attention, out.attention, rtol=0, atol=1e-5)
    np.testing.assert_allclose(log_probs.logits, out.log_probs.logits, rtol=0, atol=1e-5)
    if not train:  # a walk went past its first stop
        assert max(len(set(row.tolist())) for row in out.attention.argmax(-1)) >= 3


@pytest.fixture(scope="module")
def monotonic_run(toy_run, tmp_path_factory):
    """An untrained monotonic twin of the toy run, whose scores are made sharper (so that
    the walk moves and stops) and whose </s> is made unlikely: outputs of many steps."""
    from tests.conftest import untrained_twin

    def sharper_and_longer(model):
        model.decoder.attention.score.v.weight.mul_(6.0)
        model.decoder.output.proj.bias[model.eos_id] -= 3

    folder = tmp_path_factory.mktemp("monotonic") / "run"
    monotonic = dict(attention_fn="monotonic", monotonic_bias=0.0)
    return untrained_twin(toy_run, folder, sharper_and_longer, **monotonic)


@pytest.fixture(scope="module")
def monotonic_translators(monotonic_run):
    """The monotonic model on each engine: PyTorch, Flax, and its ONNX export."""
    pytest.importorskip("jax")
    pytest.importorskip("onnxruntime")
    from tests.test_engines import on_each_engine

    return on_each_engine(monotonic_run)


@pytest.mark.parametrize("engine", ["torch", "flax", "onnxruntime"])
def test_each_engines_beam_search_over_a_monotonic_model_is_the_reference_search(
    monotonic_translators, engine
):
    from tests.test_engines import assert_beam_is_the_reference_search

    assert_beam_is_the_reference_search(monotonic_translators, engine)


def test_the_served_step_through_gives_the_position_and_the_stop_probability(monotonic_run):
    from tests.conftest import SERVE_LIMITS, post, serving

    with serving(monotonic_run, limits=SERVE_LIMITS) as client:
        (info,) = client.get("/v1/models").json()["models"]
        assert any(m.startswith("monotonic attention (Raffel") for m in info["mechanisms"])
        assert [(s["slot"], s["label"], s["kind"]) for s in info["shown"]] == [
            ("position", "t_i", "position"),
            ("stop", "p_stop", "probability"),
        ]
        sentence = "the big dog sleeps now"  # 6 positions with </s>
        _, body = post(client, "/v1/step", {"sentence": sentence})
        positions = [step["shown"]["position"] for step in body["steps"]]
        assert len(positions) > 3 and positions == sorted(positions)
        for step, position in zip(body["steps"], positions, strict=True):
            assert step["attention"] == np.eye(6)[int(position)].tolist()
            assert 0.5 <= step["shown"]["stop"] <= 1
        # steered back to the first word, the walk goes on from there
        _, steered = post(client, "/v1/step", {"sentence": sentence, "override": {"1": 0}})
        assert steered["steps"][1]["shown"]["position"] == 0
        assert steered["steps"][2]["shown"]["position"] <= positions[2]
