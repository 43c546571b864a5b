"""Stepping through the decoder and beam search as a tree, written once over an engine's step
(walk.py): on Flax and ONNX Runtime each gives the torch engine's answer on the same run
folder (its own trace.py, the reference here): the same tokens, forced or not, the same
candidates and tree, and every number within float32 rounding; with a prefix forced,
attention steered, a beam after them and the coverage penalty; with the values the explorer
shows (a local window's centre, each head's weights). The server answers /v1/step and
/v1/beam on every engine as on PyTorch."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.decoding.door import open_translator
from alignmt.decoding.engine import Unavailable
from alignmt.decoding.torch_engine.export import export_onnx
from tests.conftest import untrained_twin

pytest.importorskip("jax")
pytest.importorskip("onnxruntime")

LINES = ["the big dog sleeps now", "a cat", "the small red cat runs"]
SEARCH = dict(length_penalty=0.6, coverage_penalty=0.2)
# untrained twins of the toy run whose steps show values beside attention; </s> made
# unlikely, for outputs of many steps
TWINS = {
    "local_p": dict(attention="general", order="luong", attention_window="local_p", window=2),
    "heads": dict(heads=4),
}


def unlikely_end(model):
    head = model.decoder.proj if hasattr(model.decoder, "proj") else model.decoder.output.proj
    head.bias[model.eos_id] -= 3


def on_each_engine(run, folder) -> dict:
    """The run folder on each engine, PyTorch's first, with its export written to `folder`."""
    export_onnx(load_checkpoint(run), folder)
    return {
        "torch": open_translator(run, device="cpu", **SEARCH),
        "flax": open_translator(run, engine="flax", device="cpu", **SEARCH),
        "onnxruntime": open_translator(folder, **SEARCH),
    }


@pytest.fixture(scope="module")
def toy(toy_run, tmp_path_factory):
    return on_each_engine(toy_run, tmp_path_factory.mktemp("walk") / "onnx")


@pytest.fixture(scope="module", params=list(TWINS))
def twin(request, toy_run, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    run = untrained_twin(toy_run, folder / "run", unlikely_end, **TWINS[request.param])
    return on_each_engine(run, folder / "onnx")


def assert_same_steps(got, want) -> None:
    assert [s.token for s in got] == [s.token for s in want]
    assert [s.forced for s in got] == [s.forced for s in want]
    for g, w in zip(got, want, strict=True):
        assert g.log_prob == pytest.approx(w.log_prob, abs=1e-4)
        np.testing.assert_allclose(g.attention, w.attention, rtol=0, atol=1e-4)
        assert g.top_tokens == w.top_tokens
        np.testing.assert_allclose(g.top_log_probs, w.top_log_probs, rtol=0, atol=1e-4)
        assert g.shown.keys() == w.shown.keys()
        for slot, value in w.shown.items():
            np.testing.assert_allclose(g.shown[slot], value, rtol=0, atol=1e-4)


def asks(translator) -> list[dict]:
    """Greedy; a prefix that is not the model's choice; attention steered, with a beam."""
    first = translator.step_through(LINES[0]).steps[0]
    other = translator.tgt_vocab.itos[first.top_tokens[1]]
    return [
        dict(),
        dict(prefix=[other]),
        dict(prefix=[other], override={1: 0, 2: 2}, beam_size=3),
        dict(override={0: 2}, beam_size=4, top_k=7),
    ]


@pytest.mark.parametrize("engine", ["flax", "onnxruntime"])
def test_every_engine_steps_through_the_decoder_as_pytorch_does(toy, engine):
    torch_side = toy["torch"]
    for ask in asks(torch_side):
        for line in LINES:
            want = torch_side.step_through(line, **ask)
            got = toy[engine].step_through(line, **ask)
            assert got.translation.tokens == want.translation.tokens
            assert_same_steps(got.steps, want.steps)
            for position, column in ask.get("override", {}).items():
                assert got.steps[position].attention[column] == 1.0


@pytest.mark.parametrize("engine", ["flax", "onnxruntime"])
def test_the_values_shown_beside_attention_are_pytorchs_on_every_engine(twin, engine):
    want = twin["torch"].step_through(LINES[2], override={1: 0})
    assert want.steps[0].shown and len(want.steps) > 5  # it shows something, over many steps
    assert_same_steps(twin[engine].step_through(LINES[2], override={1: 0}).steps, want.steps)


def assert_same_trees(got, want) -> None:
    assert got.finished == want.finished
    assert len(got.nodes) == len(want.nodes)
    for g, w in zip(got.nodes, want.nodes, strict=True):
        where = (g.step, g.slot, g.parent, g.token, g.status)
        assert where == (w.step, w.slot, w.parent, w.token, w.status)
        assert g.score == pytest.approx(w.score, abs=1e-4)
        assert (g.final_score is None) == (w.final_score is None)
        if w.final_score is not None:
            assert g.final_score == pytest.approx(w.final_score, abs=1e-4)
        np.testing.assert_allclose(g.attention, w.attention, rtol=0, atol=1e-4)


@pytest.mark.parametrize("engine", ["flax", "onnxruntime"])
def test_every_engine_draws_pytorchs_beam_tree(toy, engine):
    for line in LINES:
        _, want = toy["torch"].beam_trace(line, beam_size=3)
        _, got = toy[engine].beam_trace(line, beam_size=3)
        assert_same_trees(got, want)


def test_an_ensemble_is_not_stepped_through_on_any_engine(toy_run, toy):
    folder = toy["onnxruntime"].origin.folder
    for members, engine in (([toy_run] * 2, "flax"), ([folder] * 2, "auto")):
        ensemble = open_translator(members, engine=engine, device="cpu")
        with pytest.raises(Unavailable, match=r"^stepping through the decoder is not available"):
            ensemble.step_through(LINES[0])
        with pytest.raises(Unavailable, match="with an ensemble: ask one of its members"):
            ensemble.beam_trace(LINES[0], beam_size=2)


def test_an_export_without_the_override_says_to_export_again(toy_run, tmp_path):
    export_onnx(load_checkpoint(toy_run), tmp_path / "old", steer=False)
    old = open_translator(tmp_path / "old")
    assert old.step_through(LINES[1]).steps  # stepping through needs no steer
    with pytest.raises(ValueError, match=r"takes no attention override.*export the run again"):
        old.step_through(LINES[1], override={0: 1})


def close(got, want, path: str = "") -> None:
    """Two JSON answers alike: the same strings and shapes, numbers within 1e-4."""
    if isinstance(want, dict):
        assert got.keys() == want.keys(), path
        for key in want:
            close(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, list):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            close(g, w, f"{path}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, abs=1e-4), path
    else:
        assert got == want, path


def test_the_server_steps_and_traces_on_every_engine_as_on_pytorch(toy_run, toy):
    from fastapi.testclient import TestClient

    from alignmt.answers.registry import load_models
    from alignmt.serve.app import create_app
    from tests.conftest import SERVE_LIMITS, post

    exported = toy["onnxruntime"].origin.folder
    asked = [
        ("/v1/step", {"sentence": LINES[0], "prefix": ["ein"], "override": {"1": 2}}),
        ("/v1/step", {"sentence": LINES[2], "beam_size": 3}),
        ("/v1/beam", {"sentence": LINES[0], "beam_size": 3}),
        ("/v1/step", {"sentence": LINES[1], "attribution": "erasure"}),
    ]
    answers = {}
    for name, runs, engine in (
        ("torch", [toy_run], "torch"),
        ("flax", [toy_run], "flax"),
        ("onnxruntime", [exported], "auto"),
    ):
        with TestClient(create_app(load_models(runs, engine=engine), SERVE_LIMITS)) as client:
            answers[name] = [post(client, path, body) for path, body in asked]
    for engine in ("flax", "onnxruntime"):
        for (status, body), (want_status, want) in zip(
            answers[engine], answers["torch"], strict=True
        ):
            assert status == want_status == 200, body
            named = lambda answer: {k: v for k, v in answer.items() if k != "model"}  # noqa: E731
            close(named(body), named(want))  # each names its own folder


# --- teacher-forced attention (decoding/forced.py) ------------------------------------------


def toy_pairs(translator) -> list[tuple[list[int], list[int]]]:
    """Each line with its greedy output, and with another output, as ids without specials."""
    pairs = []
    for line in LINES:
        src = translator.src_vocab.encode(translator.source_tokens(line))
        (best,) = translator.translate([line])[0]
        out = translator.tgt_vocab.encode(best.tokens[:-1])
        pairs += [(src, out), (src, out[::-1] + out[:1])]
    return pairs


@pytest.mark.parametrize("engine", ["flax", "onnxruntime"])
@pytest.mark.parametrize("method", ["attention", "shift"])
def test_every_engine_reads_teacher_forced_attention_as_pytorch_does(toy, engine, method):
    pairs = toy_pairs(toy["torch"])
    want = toy["torch"].engine.relevance(pairs, method, batch_size=3)
    got = toy[engine].engine.relevance(pairs, method, batch_size=4)
    for (src, out), g, w in zip(pairs, got, want, strict=True):
        assert g.shape == w.shape == (len(out) + 1, len(src) + 1)
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-4)


@pytest.mark.parametrize("engine", ["flax", "onnxruntime"])
def test_every_engine_counts_the_what_ifs_flips_as_pytorch_does(toy, engine):
    pairs = toy_pairs(toy["torch"])
    want = toy["torch"].engine.flips(pairs, batch_size=3)
    assert want[0] > 0 and want[1] > want[0]  # some steps flip, not all
    assert toy[engine].engine.flips(pairs, batch_size=4) == want


def test_the_offline_page_and_the_notebook_explore_a_flax_run_as_a_pytorch_one(
    toy_run, tmp_path, capsys
):
    from alignmt.answers.limits import Limits
    from alignmt.answers.page import answer
    from alignmt.cli import main
    from alignmt.notebook.run import load

    sentences = tmp_path / "in.txt"
    sentences.write_text(f"{LINES[0]}\n{LINES[2]}\n")
    pages = {}
    for engine in ("torch", "flax"):
        out = tmp_path / f"{engine}.html"
        flags = ["--input", str(sentences), "--out", str(out), "--beam", "3", "--engine", engine]
        assert main(["explore", str(toy_run), *flags]) == 0
        blob = re.search(r'type="application/json">(.*?)</script>', out.read_text(), re.S)
        pages[engine] = json.loads(blob.group(1))
    assert "2 sentences" in capsys.readouterr().out
    want, got = pages["torch"]["sentences"], pages["flax"]["sentences"]
    for g, w in zip(got, want, strict=True):
        ((name, mine),), ((_, theirs),) = g["results"].items(), w["results"].items()
        assert name == toy_run.name
        for answer_kind in ("step", "beam"):
            close(mine[answer_kind], theirs[answer_kind])
    notebook = {engine: load(toy_run, engine=engine) for engine in ("auto", "flax")}
    assert notebook["flax"].translator.engine.name == "flax"
    asked = {"sentence": LINES[1], "override": {"1": 0}}
    stepped = {
        engine: answer({"toy": run.served("toy")}, Limits(), "step", asked)
        for engine, run in notebook.items()
    }
    close(stepped["flax"], stepped["auto"])


def test_onnxruntime_erases_source_words_as_pytorch_does(toy, toy_run):
    """Erasure needs forward passes only: the exported encoder reads a keep weight per
    source embedding, and the log-probabilities lost are PyTorch's; the gradients it lacks
    are refused with the reason."""
    pairs = toy_pairs(toy["torch"])
    want = toy["torch"].engine.relevance(pairs, "erasure", batch_size=3)
    got = toy["onnxruntime"].engine.relevance(pairs, "erasure", batch_size=4)
    for (src, out), g, w in zip(pairs, got, want, strict=True):
        assert g.shape == w.shape == (len(out) + 1, len(src) + 1)
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-4)
    assert max(float(np.abs(w).max()) for w in want) > 0.1
    for method in ("gradient", "integrated"):
        with pytest.raises(Unavailable, match="without the gradients that gradient x input"):
            toy["onnxruntime"].engine.relevance(pairs, method)
