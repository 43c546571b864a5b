"""Multi-head attention (Chen et al. 2018): the heads written out in float64 against the
single attention they generalise, each head's weights and their mean against the reference
in every order (the logits and alpha are held in test_decoder.py), gradients, padding, the
heads' state through search, the Flax twin, every engine's beam, the explorer's view of
each head, the heatmaps, and refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from alignmt import reference as ref
from alignmt.model.attention.additive import reference as additive_ref
from alignmt.model.attention.heads import reference as heads_ref
from alignmt.model.attention.mappings import reference as mappings_ref
from tests.architectures import HEADS_ARCHITECTURES, arch_id
from tests.conftest import padded_batch, tiny_model
from tests.test_attention import reference_scores
from tests.test_beam import assert_search_carries_each_rows_state
from tests.test_coverage_model import assert_alone_as_in_a_padded_batch
from tests.test_decoder import numpy


def test_one_head_with_identity_projections_is_the_single_attention():
    rng = np.random.default_rng(0)
    H, s, mask = rng.normal(size=(5, 4)), rng.normal(size=4), np.arange(5) < 4
    W_s, W_h, v = rng.normal(size=(3, 4)), rng.normal(size=(3, 4)), rng.normal(size=3)
    score = lambda q, K: additive_ref.additive_scores(q, K, W_s, W_h, v)  # noqa: E731
    softmax = mappings_ref.masked_softmax
    eye = np.eye(4)
    c, alpha, weights = heads_ref.multi_head(s, H, mask, score, softmax, eye, eye, eye, eye, 1)
    c_single, alpha_single = ref.attend(score(s, H), H, mask, softmax)
    np.testing.assert_allclose(c, c_single, rtol=0, atol=1e-14)
    np.testing.assert_allclose(alpha, alpha_single, rtol=0, atol=1e-14)
    np.testing.assert_allclose(weights, alpha_single[None], rtol=0, atol=1e-14)


@pytest.mark.parametrize("arch", HEADS_ARCHITECTURES, ids=arch_id)
def test_each_heads_weights_match_the_numpy_reference_in_float64(arch):
    """Each step's per-head weights (the state slot the explorer shows) are the reference's,
    the heads differ, and alpha is their mean."""
    model = tiny_model(**arch, readout="none" if arch["order"] == "luong" else "maxout")
    attention = model.decoder.attention
    with torch.no_grad():  # sharper heads than the tiny model's near-uniform ones
        for weight in attention.parameters():
            weight.mul_(2)
    w = {name: numpy(p) for name, p in attention.heads.named_parameters()}
    normalise = mappings_ref.MAPPINGS[attention.composition.mapping.kind]
    src, src_len, _, _ = padded_batch()
    memory, state = model.encode(src, src_len)
    query = torch.randn(src.size(0), model.decoder.hidden, dtype=torch.float64)
    context, alpha, slots = attention(query, state.slots, memory)
    spread = 0.0  # how far a head's weights are from their mean
    for b, n in enumerate(src_len.tolist()):
        H, mask = numpy(memory.states[b, :n]), np.ones(n, dtype=bool)
        score = lambda q, K: reference_scores(attention, q, K)  # noqa: E731
        W = (w["W_q.weight"], w["W_k.weight"], w["W_v.weight"], w["W_o.weight"])
        c, mean, weights = heads_ref.multi_head(
            numpy(query[b]), H, mask, score, normalise, *W, attention.heads.n
        )
        np.testing.assert_allclose(numpy(context[b]), c, rtol=0, atol=1e-10)
        np.testing.assert_allclose(numpy(slots["heads"][b, :n]).T, weights, rtol=0, atol=1e-10)
        np.testing.assert_allclose(numpy(alpha[b, :n]), mean, rtol=0, atol=1e-10)
        assert not slots["heads"][b, n:].any()
        spread = max(spread, np.abs(weights - mean).max())
    assert spread > 1e-3  # the heads look at different words


def test_gradients_with_respect_to_the_query_states_and_weights_match_finite_differences():
    model = tiny_model(**HEADS_ARCHITECTURES[0])
    src, src_len, _, _ = padded_batch()
    memory, state = model.encode(src, src_len)

    class Whole(torch.nn.Module):  # the step from the states on, for functional_call
        def __init__(self, attention):
            super().__init__()
            self.attention = attention

        def forward(self, query, states):
            moved = memory._replace(
                states=states, slots=self.attention.prepare(states, memory.mask)
            )
            return self.attention(query, state.slots, moved)[0]

    whole = Whole(model.decoder.attention)
    params = {name: p.detach().requires_grad_() for name, p in whole.named_parameters()}
    assert any(".heads." in name for name in params)
    query = torch.randn(src.size(0), model.decoder.hidden, dtype=torch.float64)
    inputs = (query.requires_grad_(), memory.states.detach().requires_grad_(), *params.values())
    context = lambda q, h, *ps: torch.func.functional_call(  # noqa: E731
        whole, dict(zip(params, ps, strict=True)), (q, h)
    )
    assert torch.autograd.gradcheck(context, inputs)


@pytest.mark.parametrize("arch", HEADS_ARCHITECTURES[:3], ids=arch_id)
def test_padding_never_changes_a_sentence_teacher_forced(arch):
    assert_alone_as_in_a_padded_batch(tiny_model(**arch, readout="none"))


@pytest.mark.parametrize("arch", [HEADS_ARCHITECTURES[0], HEADS_ARCHITECTURES[2]], ids=arch_id)
def test_search_carries_each_heads_weights_streamed_and_through_the_beam(arch):
    assert_search_carries_each_rows_state(tiny_model(**arch, seed=3))


@pytest.mark.parametrize(
    ("more", "says"),
    [
        (dict(attention="none"), r"model.attention=none has none"),
        (dict(heads=3), r"8 units \(C\) do not split into 3 equal heads"),
        (dict(attention_fn="monotonic"), r"model.attention_fn=monotonic keeps one state"),
        (dict(attention_window="local_p"), r"model.attention_window=local_p keeps one"),
        (dict(coverage="sum"), r"model.coverage=sum keeps one state"),
    ],
)
def test_heads_refuse_what_they_cannot_split(more, says):
    with pytest.raises(ValueError, match=says):
        tiny_model(**({"heads": 2} | more))


def test_a_steer_moves_every_head_and_the_context():
    model = tiny_model(**HEADS_ARCHITECTURES[0])
    src, src_len, _, _ = padded_batch()
    memory, state = model.encode(src, src_len)
    steer = torch.zeros_like(memory.mask, dtype=torch.float64)
    steer[0, 1] = 1.0  # the first row put on word 1; the others left alone
    query = torch.randn(src.size(0), model.decoder.hidden, dtype=torch.float64)
    attention = model.decoder.attention
    free = attention(query, state.slots, memory)
    steered = attention(query, state.slots, memory._replace(steer=steer))
    expected = steer[0].unsqueeze(-1).expand(-1, attention.heads.n)
    torch.testing.assert_close(steered[2]["heads"][0], expected, rtol=0, atol=0)
    torch.testing.assert_close(steered[1][0], steer[0], rtol=0, atol=0)
    torch.testing.assert_close(steered[0][1:], free[0][1:], rtol=0, atol=0)
    assert not torch.allclose(steered[0][0], free[0][0])


@pytest.mark.parametrize("arch", HEADS_ARCHITECTURES, ids=arch_id)
def test_the_flax_twin_attends_by_heads_as_pytorch_does(arch):
    pytest.importorskip("jax")
    import jax.numpy as jnp

    from alignmt.checkpoint.flax_io import params_from_tensors
    from alignmt.model.flax_seq2seq import FlaxSeq2Seq
    from tests.conftest import VOCAB
    from tests.test_flax_model import tiny_config

    readout = "none" if arch["order"] == "luong" else "tanh"
    model = tiny_model(**arch, readout=readout).float()
    cfg = tiny_config(arch, readout=readout, heads=arch["heads"])
    tensors = {k: v.numpy() for k, v in model.state_dict().items()}
    variables = {"params": params_from_tensors(tensors, cfg)}
    src, src_len, tgt_in, _ = padded_batch(src_lens=(8, 4, 7), tgt_lens=(6, 3, 5))
    with torch.no_grad():
        out = model(src, src_len, tgt_in)
    arrays = [jnp.asarray(t.numpy()) for t in (src, src_len, tgt_in)]
    log_probs, attention = FlaxSeq2Seq(cfg, VOCAB, VOCAB).apply(variables, *arrays)
    np.testing.assert_allclose(attention, out.attention, rtol=0, atol=1e-5)
    np.testing.assert_allclose(log_probs.logits, out.log_probs.logits, rtol=0, atol=1e-5)


@pytest.fixture(scope="module")
def heads_run(toy_run, tmp_path_factory):
    """An untrained four-head twin of the toy run whose heads are made sharper (weights
    far from uniform) and whose </s> is made unlikely: outputs of many steps."""
    from tests.conftest import untrained_twin

    def sharper_and_longer(model):
        for weight in model.decoder.attention.parameters():
            weight.mul_(3)
        model.decoder.output.proj.bias[model.eos_id] -= 3

    folder = tmp_path_factory.mktemp("heads") / "run"
    return untrained_twin(toy_run, folder, sharper_and_longer, heads=4)


@pytest.fixture(scope="module")
def heads_translators(heads_run):
    """The four-head model on each engine: PyTorch, Flax, and its ONNX export."""
    pytest.importorskip("jax")
    pytest.importorskip("onnxruntime")
    from tests.test_engines import on_each_engine

    return on_each_engine(heads_run)


@pytest.mark.parametrize("engine", ["torch", "flax", "onnxruntime"])
def test_each_engines_beam_search_over_a_multi_head_model_is_the_reference_search(
    heads_translators, engine
):
    from tests.test_engines import assert_beam_is_the_reference_search

    assert_beam_is_the_reference_search(heads_translators, engine)


def test_the_served_step_through_gives_each_heads_weights(heads_run):
    from tests.conftest import SERVE_LIMITS, post, serving

    with serving(heads_run, limits=SERVE_LIMITS) as client:
        (info,) = client.get("/v1/models").json()["models"]
        assert "4 heads of 12 units (Chen et al. 2018)" in info["mechanisms"]
        assert [(s["slot"], s["kind"]) for s in info["shown"]] == [("heads", "weights")]
        sentence = "the big dog sleeps now"  # 6 positions with </s>
        _, body = post(client, "/v1/step", {"sentence": sentence})
        for step in body["steps"]:
            heads = np.array(step["shown"]["heads"])
            assert heads.shape == (4, 6)
            np.testing.assert_allclose(heads.sum(1), 1, atol=1e-5)
            np.testing.assert_allclose(heads.mean(0), step["attention"], atol=1e-4)
        _, steered = post(client, "/v1/step", {"sentence": sentence, "override": {"1": 0}})
        assert steered["steps"][1]["shown"]["heads"] == [[1, 0, 0, 0, 0, 0]] * 4


def test_the_heatmaps_show_the_mean_and_each_head(heads_run):
    """`run.heatmap` and `alignmt evaluate --heatmaps`, each of the same output's steps."""
    import alignmt
    from alignmt.cli.evaluate import _heatmap
    from alignmt.decoding.door import open_translator

    sentence = "the big dog sleeps now"
    figure = alignmt.load(heads_run).heatmap(sentence)
    titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
    assert titles == ["α", "head 1", "head 2", "head 3", "head 4"]
    translator = open_translator(heads_run)
    (best,) = translator.translate([sentence])[0]
    figure = _heatmap(translator, sentence, best, "line 1")
    titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
    assert titles == ["line 1: α"] + [f"line 1: head {n}" for n in range(1, 5)]
    (image, *_) = figure.axes[0].get_images()
    np.testing.assert_allclose(image.get_array(), best.attention, atol=1e-6)


@pytest.mark.slow
def test_the_explorer_draws_each_heads_weights_under_the_source(heads_run, browser, tmp_path):
    """The written page, in Chromium: at a step, one row per head under the source, each
    cell as opaque as that head's weight on that word."""
    import json
    import re

    from benchmarks.browser import Explorer

    from alignmt.cli import main

    sentences = tmp_path / "in.txt"
    sentences.write_text("the big dog sleeps now\n")
    out = tmp_path / "page.html"
    assert main(["explore", str(heads_run), "--input", str(sentences), "--out", str(out)]) == 0
    stored = json.loads(
        re.search(r'type="application/json">(.*?)</script>', out.read_text(), re.S).group(1)
    )
    expected = stored["sentences"][0]["results"]["run"]["step"]["steps"][2]["shown"]["heads"]
    page = Explorer(browser)
    page.open(out.as_uri(), offline=True)
    page.wait_for(1)
    page.key("ArrowRight")
    page.key("ArrowRight")
    drawn = page.js(
        r"""
        const box = document.querySelector('.panel .shown-weights');
        const opacity = (td) => {
          const rgba = getComputedStyle(td).backgroundColor.match(/[\d.]+/g);
          return rgba.length === 4 ? Number(rgba[3]) : 1;
        };
        return {
          heads: [...box.querySelectorAll('tbody th')].map((th) => th.textContent),
          weights: [...box.querySelectorAll('tbody tr')]
            .map((tr) => [...tr.querySelectorAll('td')].map(opacity)),
        };"""
    )
    assert drawn["heads"] == ["head 1", "head 2", "head 3", "head 4"]
    assert np.ptp(expected) > 0.1  # weights that differ, so that their places are checked
    # the browser keeps a colour's opacity in 8 bits (steps of 1/255) and says it rounded
    np.testing.assert_allclose(drawn["weights"], expected, atol=5e-3)
    assert page.resources() == []
