"""Decoding over a lexical shortlist on Flax and ONNX Runtime (decoding/shortlisted.py): each
row's log-probabilities renormalised over its sentence's allowed words, which is the torch
engine's distribution over the shortlist's logits (torch_engine/shortlist.py, the
reference here). On a copy of the toy run with a narrow shortlist, each engine gives the
torch engine's greedy and beam n-best (tokens equal, scores within 1e-4), which the
shortlist changes; the export carries the shortlist; and a model whose output layer is not
a plain projection is refused as on PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

from alignmt.checkpoint.shortlist_io import SHORTLIST, save_shortlist
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.decoding.door import open_translator
from alignmt.decoding.shortlisted import allowed_words, restricted
from alignmt.decoding.torch_engine.export import export_onnx
from alignmt.text.prepare import prepare_text
from alignmt.text.shortlist import Shortlist, build_shortlist
from tests.conftest import held_out_toy_lines

pytest.importorskip("jax")
pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def listed(toy_run, tmp_path_factory):
    """A copy of the toy run with a shortlist of two translations a word and no frequent
    words but </s>, its export, and each engine decoding over one word a token."""
    run = tmp_path_factory.mktemp("listed") / "run"
    run.mkdir()
    for name in ("model.safetensors", "config.yaml"):
        (run / name).write_bytes((toy_run / name).read_bytes())
    ckpt = load_checkpoint(run)
    text = prepare_text(ckpt.config.data, ckpt.config.seed)
    sizes = (len(ckpt.src_vocab), len(ckpt.tgt_vocab))
    eos = ckpt.tgt_vocab.eos_id
    save_shortlist(run, build_shortlist(text.train, sizes, always=(eos,), per_word=2, frequent=0))
    export_onnx(load_checkpoint(run), run.parent / "onnx")
    lines = held_out_toy_lines(run.parent, n=30, seed=11)
    engines = {
        "torch": open_translator(run, device="cpu", shortlist=1),
        "flax": open_translator(run, engine="flax", device="cpu", shortlist=1),
        "onnxruntime": open_translator(run.parent / "onnx", shortlist=1),
    }
    return run, lines, engines


def test_the_export_carries_the_runs_shortlist(listed):
    run, _, _ = listed
    assert (run.parent / "onnx" / SHORTLIST).read_bytes() == (run / SHORTLIST).read_bytes()


@pytest.mark.parametrize("engine", ["flax", "onnxruntime"])
@pytest.mark.parametrize(("beam", "nbest"), [(1, 1), (3, 2)])
def test_every_engine_decodes_over_the_shortlist_as_pytorch_does(listed, engine, beam, nbest):
    run, lines, engines = listed
    want = engines["torch"].translate(lines, beam_size=beam, nbest=nbest)
    got = engines[engine].translate(lines, beam_size=beam, nbest=nbest)
    for g_hyps, w_hyps in zip(got, want, strict=True):
        assert [h.tokens for h in g_hyps] == [h.tokens for h in w_hyps]
        for g, w in zip(g_hyps, w_hyps, strict=True):
            assert g.score == pytest.approx(w.score, abs=1e-4)
            assert g.probabilities == pytest.approx(w.probabilities, abs=1e-4)
    whole = open_translator(run, device="cpu").translate(lines, beam_size=beam, nbest=nbest)
    moved = [abs(g[0].score - w[0].score) for g, w in zip(got, whole, strict=True)]
    assert max(moved) > 1e-3  # the shortlist renormalises: scores move


def test_restriction_keeps_each_rows_own_words_renormalised():
    shortlist = Shortlist(np.array([[5], [6], [7]]), np.array([0]))
    allowed = allowed_words(shortlist, [[1, 2], [0]], vocab=9)
    assert allowed.tolist() == [
        [i in (0, 6, 7) for i in range(9)],
        [i in (0, 5) for i in range(9)],
    ]
    log_probs = np.log(np.full((2, 9), 1 / 9, np.float32))
    kept = restricted(log_probs, allowed)
    np.testing.assert_allclose(np.exp(kept).sum(axis=1), 1.0, rtol=1e-6)
    assert np.exp(kept[0, 6]) == pytest.approx(1 / 3) and kept[0, 5] == -np.inf


def test_a_model_without_a_plain_projection_is_refused_on_every_engine(toy_run, tmp_path):
    from tests.conftest import untrained_twin

    run = untrained_twin(toy_run, tmp_path / "run", copy=True)
    save_shortlist(run, Shortlist(np.zeros((1, 1), np.int64), np.zeros(1, np.int64)))
    for engine in ("torch", "flax"):
        with pytest.raises(ValueError, match="holds for a plain output projection"):
            open_translator(run, engine=engine, device="cpu", shortlist=1)
