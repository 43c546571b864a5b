"""Local attention (Luong, Pham & Manning 2015, §3.2) and the location score: the window,
local-p's Gaussian and predicted position, what happens at the sentence's ends, and the
explorer's what-if inside a window. (Parity with the float64 reference and padding
invariance run over tests/conftest.py's LOCAL_ARCHITECTURES in test_decoder.py and
test_model.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from alignmt.config import ModelConfig
from alignmt.model.attention.local import reference as local_ref
from alignmt.model.attention.local.torch import LocalWindow
from alignmt.model.attention.torch import Focus
from alignmt.model.seq2seq import Seq2Seq
from tests.conftest import VOCAB, padded_batch, tiny_model


def lengths_mask(lengths=(6, 2, 4)) -> torch.Tensor:
    return torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]


def window_of(window: LocalWindow, query, step, mask) -> tuple[torch.Tensor, ...]:
    """The window's (mask, prior, p_i) for one step at output positions `step` (B,)."""
    focus, slots = window.focus(query, {"step": step}, None, Focus(mask, None, None))
    return focus.mask, focus.prior, slots["centre"]


@pytest.mark.parametrize("order,score", [("luong", "general"), ("bahdanau", "additive")])
def test_local_m_with_a_window_covering_the_sentence_is_global_attention(order, score):
    arch = dict(rnn="gru", attention=score, order=order)
    wide = tiny_model(**arch, attention_window="local_m", window=6)
    plain = tiny_model(**arch)  # same seed: local-m adds no weights
    src, src_len, tgt_in, _ = padded_batch()
    local, global_ = wide(src, src_len, tgt_in), plain(src, src_len, tgt_in)
    torch.testing.assert_close(local.attention, global_.attention, rtol=0, atol=0)
    torch.testing.assert_close(local.log_probs.logits, global_.log_probs.logits, rtol=0, atol=0)
    narrow = tiny_model(**arch, attention_window="local_m", window=1)(src, src_len, tgt_in)
    assert not torch.allclose(narrow.log_probs.logits, global_.log_probs.logits)


def test_local_m_weighs_only_the_window_around_i_and_stays_at_the_end_past_the_source():
    model = tiny_model(attention="general", order="luong", attention_window="local_m", window=1)
    src, src_len, _, _ = padded_batch()
    memory, state = model.encode(src, src_len)
    for i in range(8):
        _, state, alpha = model.decode_step(torch.full((3,), 5), state, memory)
        for b, n in enumerate(src_len.tolist()):
            p = min(i, n - 1)
            assert state.slots["centre"][b] == p
            outside = [j for j in range(alpha.size(1)) if abs(j - p) > 1 or j >= n]
            assert torch.equal(alpha[b, outside], torch.zeros(len(outside), dtype=alpha.dtype))
            torch.testing.assert_close(alpha[b].sum(), torch.tensor(1.0, dtype=alpha.dtype))


def test_the_window_keeps_only_real_positions_where_it_crosses_the_ends():
    window = LocalWindow("local_m", query_dim=3, attn_dim=4, half_width=2)
    mask = lengths_mask((6, 3))
    inside, _, _ = window_of(window, torch.zeros(2, 3), torch.tensor([0.0, 2.0]), mask)
    assert inside.tolist() == [
        [True, True, True, False, False, False],  # j in [-2, 2]: -2 and -1 dropped
        [True, True, True, False, False, False],  # j in [0, 4]: 3 and 4 are padding
    ]


def test_local_p_predicts_a_position_within_the_sentence_and_weighs_it_by_a_gaussian():
    torch.manual_seed(0)
    window = LocalWindow("local_p", query_dim=3, attn_dim=4, half_width=2).double()
    mask = lengths_mask()
    query = torch.randn(3, 3, dtype=torch.float64) * 3
    inside, prior, centre = window_of(window, query, torch.zeros(3, dtype=torch.float64), mask)
    S = mask.sum(-1).double()
    assert ((centre >= 0) & (centre <= S)).all()
    distance = torch.arange(6, dtype=torch.float64) - centre[:, None]
    torch.testing.assert_close(prior, torch.exp(-(distance**2) / 2.0))  # 2 sigma^2 = 2
    assert torch.equal(inside, mask & (distance.abs() <= 2))
    assert inside.any(-1).all()  # never an empty window


def test_local_p_weights_are_the_windowed_softmax_times_the_gaussian_and_sum_below_one():
    model = tiny_model(attention="general", order="luong", attention_window="local_p", window=2)
    src, src_len, tgt_in, _ = padded_batch()
    out = model(src, src_len, tgt_in)
    total = out.attention.sum(-1)  # (B, T_tgt)
    assert (total < 1).all() and (total > 0).all()


def test_local_p_position_network_passes_gradcheck_in_float64():
    """p_i learns through the Gaussian alone: its gradient, by finite differences."""
    torch.manual_seed(1)
    window = LocalWindow("local_p", query_dim=3, attn_dim=4, half_width=2).double()
    mask = lengths_mask()
    query = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    step = torch.zeros(3, dtype=torch.float64)
    torch.autograd.gradcheck(lambda q: window_of(window, q, step, mask)[1], (query,))
    torch.autograd.gradcheck(lambda q: window_of(window, q, step, mask)[2], (query,))


@pytest.mark.parametrize("window", ["local_m", "local_p"])
def test_a_local_model_trains_end_to_end_with_gradients_on_every_weight(window):
    model = tiny_model(attention="additive", attention_window=window, window=1)
    model.train()
    src, src_len, tgt_in, _ = padded_batch()
    out = model(src, src_len, tgt_in)
    out.log_probs.logits.logsumexp(-1).sum().backward()
    for name, parameter in model.named_parameters():
        if name != "decoder.embed.weight":  # padding's row has none
            assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


def test_the_location_score_reads_positions_not_words_and_refuses_longer_sentences():
    model = tiny_model(attention="location", order="luong")  # positions=8
    src, src_len, _, _ = padded_batch()
    memory, state = model.encode(src, src_len)
    swapped = memory._replace(states=memory.states.flip(0))
    _, _, alpha = model.decode_step(torch.full((3,), 5), state, memory)
    _, _, other = model.decode_step(torch.full((3,), 5), state, swapped)
    assert torch.equal(alpha, other)  # the same query scores every sentence alike
    long = torch.full((1, 9), 5)
    long[0, -1] = 2
    with pytest.raises(ValueError, match=r"at most 8 source positions \(model.positions\)"):
        model.encode(long, torch.tensor([9]))


def test_a_window_needs_attention():
    cfg = ModelConfig(attention="none", attention_window="local_p")
    with pytest.raises(ValueError, match=r"model\.attention=none has none"):
        Seq2Seq.from_config(cfg, src_vocab=VOCAB, tgt_vocab=VOCAB)


def test_steered_attention_puts_all_weight_on_the_chosen_word_even_outside_the_window():
    model = tiny_model(attention="general", order="luong", attention_window="local_p", window=1)
    src, src_len, _, _ = padded_batch()
    memory, state = model.encode(src[:1], src_len[:1])
    steer = torch.zeros(1, src.size(1), dtype=torch.float64)
    steer[0, 5] = 1.0
    _, _, alpha = model.decode_step(torch.tensor([5]), state, memory._replace(steer=steer))
    assert torch.equal(alpha, steer)


def test_steer_moves_only_the_rows_it_names():
    model = tiny_model(attention="additive", order="bahdanau")
    src, src_len, _, _ = padded_batch()
    memory, state = model.encode(src, src_len)
    prev = torch.full((3,), 5)
    logits, _, alpha = model.decode_step(prev, state, memory)
    logits = logits.logits
    steer = torch.zeros_like(alpha)  # (B, T_src)
    steer[1, 0] = 1.0  # row 1 onto its first word; rows 0 and 2 all zero: not steered
    moved_logits, _, moved = model.decode_step(prev, state, memory._replace(steer=steer))
    moved_logits = moved_logits.logits
    assert torch.equal(moved[1], steer[1]) and not torch.allclose(moved_logits[1], logits[1])
    for row in (0, 2):
        assert torch.equal(moved[row], alpha[row]) and torch.equal(moved_logits[row], logits[row])


def test_reference_local_windows_follow_the_equations():
    mask = np.array([True] * 5 + [False])
    inside, prior = local_ref.local_m(7, D=1)(np.zeros(2), mask)  # past the end: p = S - 1 = 4
    assert inside.tolist() == [False, False, False, True, True, False] and prior is None
    W_p, v_p = np.zeros((3, 2)), np.zeros(3)  # sigmoid(0) = 1/2: p = S / 2 = 2.5
    inside, prior = local_ref.local_p(W_p, v_p, D=2)(np.ones(2), mask)
    assert inside.tolist() == [False, True, True, True, True, False]
    np.testing.assert_allclose(prior[2], np.exp(-0.25 / 2), rtol=0, atol=1e-15)


@pytest.fixture(scope="module")
def local_run(toy_run, tmp_path_factory):
    """An untrained local-p twin of the toy run (Luong's order and general score, D = 2),
    whose </s> is made unlikely: outputs of many steps, so many windows."""
    from tests.conftest import untrained_twin

    def unlikely_end(model):
        model.decoder.proj.bias[model.eos_id] -= 3

    local = dict(attention="general", order="luong", attention_window="local_p", window=2)
    folder = tmp_path_factory.mktemp("local") / "run"
    return untrained_twin(toy_run, folder, unlikely_end, **local)


@pytest.fixture(scope="module")
def local_translators(local_run):
    """The local-p model on each engine: PyTorch, Flax, and its ONNX export."""
    pytest.importorskip("jax")
    pytest.importorskip("onnxruntime")
    from tests.test_engines import on_each_engine

    return on_each_engine(local_run)


def test_the_served_step_through_gives_each_windows_centre_and_steers_outside_it(local_run):
    from tests.conftest import SERVE_LIMITS, post, serving

    with serving(local_run, limits=SERVE_LIMITS) as client:
        (info,) = client.get("/v1/models").json()["models"]
        assert "local-p window (Luong et al. 2015), D = 2" in info["mechanisms"]
        assert [(s["slot"], s["label"], s["reach"]) for s in info["shown"]] == [
            ("centre", "p_i", 2)
        ]
        sentence = "the big dog sleeps now"  # 6 positions with </s>
        _, body = post(client, "/v1/step", {"sentence": sentence})
        assert len(body["steps"]) > 3
        for step in body["steps"]:
            centre, alpha = step["shown"]["centre"], np.array(step["attention"])
            assert 0 <= centre <= 6
            far = np.abs(np.arange(6) - centre) > 2
            assert (alpha[far] == 0).all() and alpha.sum() < 1
        outside = int(np.argmax(np.abs(np.arange(6) - body["steps"][1]["shown"]["centre"])))
        _, steered = post(client, "/v1/step", {"sentence": sentence, "override": {"1": outside}})
        assert steered["steps"][1]["attention"] == np.eye(6)[outside].tolist()


@pytest.mark.parametrize("engine", ["torch", "flax", "onnxruntime"])
def test_each_engines_beam_search_over_a_local_model_is_the_reference_search(
    local_translators, engine
):
    from tests.test_engines import assert_beam_is_the_reference_search

    assert_beam_is_the_reference_search(local_translators, engine)
