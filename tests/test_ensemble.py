"""Ensembles: several run folders decoding as one, by their mean log-probabilities."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch

from alignmt.checkpoint.torch_io import load_checkpoint, save_checkpoint
from alignmt.cli import main
from alignmt.decoding.door import open_translator
from alignmt.decoding.torch_engine.ensemble import Ensemble
from alignmt.decoding.translator import Translator
from alignmt.model.batch import source_batch
from alignmt.text.vocab import SPECIALS, Vocab
from tests.conftest import vanilla_twin
from tests.test_confidence import LINES


@pytest.fixture(scope="module")
def twin(toy_run, tmp_path_factory):
    """The toy run with every weight nudged: another model on the same vocabularies."""
    ckpt = load_checkpoint(toy_run)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in ckpt.model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    folder = tmp_path_factory.mktemp("twin") / "twin"
    tokenizers = (ckpt.src_tokenizer, ckpt.tgt_tokenizer)
    save_checkpoint(
        folder, ckpt.model, ckpt.config, ckpt.src_vocab, ckpt.tgt_vocab, 1, tokenizers=tokenizers
    )
    return folder


def ensemble(runs, engine: str = "auto", **search) -> Translator:
    return open_translator([str(r) for r in runs], engine=engine, device="cpu", **search)


def single(run, **search) -> Translator:
    return open_translator(run, device="cpu", **search)


@pytest.mark.parametrize("beam", [1, 4])
def test_an_ensemble_of_one_decodes_as_its_model(toy_run, beam):
    nbest = 1 if beam == 1 else 3
    alone = single(toy_run, beam_size=beam).translate(LINES, nbest=nbest, batch_size=3)
    one = ensemble([toy_run], beam_size=beam).translate(LINES, nbest=nbest, batch_size=3)
    for a_hyps, e_hyps in zip(alone, one, strict=True):
        assert [h.tokens for h in e_hyps] == [h.tokens for h in a_hyps]
        for a, e in zip(a_hyps, e_hyps, strict=True):
            assert e.score == pytest.approx(a.score, abs=1e-5)
            torch.testing.assert_close(torch.as_tensor(e.attention), torch.as_tensor(a.attention))


def test_a_step_is_the_mean_of_the_members_log_probabilities_and_attention(toy_run, twin):
    models = [load_checkpoint(run).model for run in (toy_run, twin)]
    vocab = load_checkpoint(toy_run).src_vocab
    src, src_len = source_batch([s.split() for s in LINES], vocab)
    both = Ensemble(models)
    memory, state = both.encode(src, src_len)
    prev = torch.full((len(LINES),), models[0].bos_id)
    log_probs, _, alpha = both.decode_step(prev, state, memory)
    logits = log_probs.logits
    steps = [m.decode_step(prev, *reversed(m.encode(src, src_len))) for m in models]
    expected = torch.stack([s[0].full() for s in steps]).mean(0)
    torch.testing.assert_close(logits, expected)
    torch.testing.assert_close(alpha, (steps[0][2] + steps[1][2]) / 2)


@pytest.mark.parametrize("beam", [1, 3])
def test_an_ensembles_output_does_not_depend_on_batching(toy_run, twin, beam):
    """Rows move between sentences as they end (continuous batching): every member's state
    must move with them."""
    t = ensemble([toy_run, twin], beam_size=beam)
    one_by_one = [h[0].tokens for h in t.translate(LINES, batch_size=1)]
    assert [h[0].tokens for h in t.translate(LINES, batch_size=3)] == one_by_one
    assert one_by_one != [h[0].tokens for h in single(twin, beam_size=beam).translate(LINES)]


def test_a_member_without_attention_joins_and_the_mean_is_over_those_that_attend(toy_run, tmp_path):
    vanilla = vanilla_twin(toy_run, tmp_path / "vanilla")
    out = ensemble([toy_run, vanilla]).translate(LINES, batch_size=2)
    for hyps in out:
        assert hyps[0].attention is not None
        torch.testing.assert_close(
            torch.as_tensor(hyps[0].attention).sum(-1), torch.ones(len(hyps[0].tokens))
        )


def test_models_with_another_vocabulary_are_refused(toy_run, tmp_path):
    ckpt = load_checkpoint(toy_run)
    other = Vocab([*ckpt.tgt_vocab.itos[len(SPECIALS) : -2], "extra", "words"])  # same size
    save_checkpoint(tmp_path / "other", ckpt.model, ckpt.config, ckpt.src_vocab, other, 0)
    with pytest.raises(ValueError, match="target vocabulary differs"):
        ensemble([toy_run, tmp_path / "other"])


def test_translate_and_evaluate_take_several_runs(toy_run, twin, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("\n".join(LINES).encode())))
    assert main(["translate", str(toy_run), str(twin), "--beam", "3", "--jsonl"]) == 0
    rows = [json.loads(line)[0] for line in capsys.readouterr().out.splitlines()]
    expected = ensemble([toy_run, twin], beam_size=3).translate(LINES)
    assert [r["text"] for r in rows] == [h[0].text for h in expected]
    out, src, ref = tmp_path / "eval", tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("\n".join(LINES) + "\n")
    ref.write_text("\n".join(h[0].text for h in expected) + "\n")
    flags = ["--src", str(src), "--ref", str(ref), "--out", str(out), "--beam", "3"]
    assert main(["evaluate", str(toy_run), str(twin), *flags]) == 0
    assert "run+twin" in capsys.readouterr().out
    assert json.loads((out / "scores.json").read_text())["name"] == "run+twin"


def test_the_server_translates_with_an_ensemble_and_refuses_to_step_through_it(toy_run, twin):
    from fastapi.testclient import TestClient

    from alignmt.answers.registry import load_models
    from alignmt.serve.app import create_app

    served = load_models([toy_run, f"{toy_run}+{twin}"])
    assert list(served) == ["run", "run+twin"]
    with TestClient(create_app(served)) as client:
        info = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
        assert info["run+twin"]["ensemble"] == ["run", "twin"] and info["run"]["ensemble"] is None
        body = {"model": "run+twin", "sentences": LINES, "beam_size": 3}
        answer = client.post("/v1/translate", json=body).json()
        expected = ensemble([toy_run, twin], beam_size=3).translate(LINES)
        texts = [t["hypotheses"][0]["text"] for t in answer["translations"]]
        assert texts == [h[0].text for h in expected]
        refused = client.post("/v1/step", json={"model": "run+twin", "sentence": LINES[0]})
        assert refused.status_code == 422 and "not available with an ensemble" in refused.text


def assert_decodes_as_pytorchs(translator: Translator, runs, beam: int) -> None:
    """`translator`'s ensemble decodes LINES as PyTorch's ensemble of `runs` does, rows
    refilled as sentences end (two at a time) and n-best 3 with a beam: the same tokens,
    scores within 1e-4 and the best's attention within 1e-5."""
    nbest = 1 if beam == 1 else 3
    want = ensemble(runs, beam_size=beam).translate(LINES, nbest=nbest, batch_size=2)
    got = translator.translate(LINES, nbest=nbest, batch_size=2)
    for ours, theirs in zip(got, want, strict=True):
        assert [h.tokens for h in ours] == [h.tokens for h in theirs]
        assert [h.score for h in ours] == pytest.approx([h.score for h in theirs], abs=1e-4)
        np.testing.assert_allclose(ours[0].attention, theirs[0].attention, atol=1e-5)


@pytest.mark.parametrize("beam", [1, 3])
def test_exported_members_decode_on_onnx_runtime_as_the_torch_ensemble(
    toy_run, twin, tmp_path, beam
):
    """An ensemble of exported folders (and one with a member without attention) searches on
    ONNX Runtime as PyTorch's ensemble of their run folders does, n-best and rows refilled as
    sentences end included; and samples."""
    pytest.importorskip("onnxruntime")
    from alignmt.decoding.rules import Sampling
    from alignmt.decoding.torch_engine.export import export_onnx

    vanilla = vanilla_twin(toy_run, tmp_path / "vanilla")
    for runs in ([toy_run, twin], [toy_run, vanilla]):
        folders = [tmp_path / f"onnx_{i}" for i in range(len(runs))]
        for run, folder in zip(runs, folders, strict=True):
            export_onnx(load_checkpoint(run), folder)
        onnx = ensemble(folders, beam_size=beam)
        assert onnx.engine.name == "onnxruntime"
        assert_decodes_as_pytorchs(onnx, runs, beam)
    drawn = onnx.translate(LINES[:2], sampling=Sampling(samples=3, seed=2))
    assert [len(hyps) for hyps in drawn] == [3, 3]


def test_an_ensemble_of_exported_and_run_folders_is_refused_by_name(toy_run, tmp_path):
    pytest.importorskip("onnxruntime")
    from alignmt.decoding.torch_engine.export import export_onnx

    export_onnx(load_checkpoint(toy_run), tmp_path / "onnx")
    with pytest.raises(ValueError, match=r"onnx: an exported model ensembles with exported"):
        ensemble([tmp_path / "onnx", toy_run])


@pytest.mark.parametrize("beam", [1, 3])
def test_run_folders_ensemble_on_the_flax_engine_as_on_pytorch(toy_run, twin, tmp_path, beam):
    """The flax engine's ensemble (its compiled searches over every member's step) against
    PyTorch's: a member without attention too, n-best, and sampling."""
    pytest.importorskip("jax")
    from alignmt.decoding.rules import Sampling

    vanilla = vanilla_twin(toy_run, tmp_path / "vanilla")
    for runs in ([toy_run, twin], [toy_run, vanilla]):
        flax = ensemble(runs, beam_size=beam, engine="flax")
        assert flax.engine.name == "flax"
        assert_decodes_as_pytorchs(flax, runs, beam)
    drawn = flax.translate(LINES[:2], sampling=Sampling(samples=3, seed=2))
    assert [len(hyps) for hyps in drawn] == [3, 3]
