"""Sampling: temperature, top-k and top-p draws, repeatable by seed, in translate and the API."""

from __future__ import annotations

import io
import math

import pytest
import torch

from alignmt.answers.limits import Limits
from alignmt.cli import main
from alignmt.decoding.door import open_translator
from alignmt.decoding.rules import Sampling
from alignmt.decoding.torch_engine.sample import reshaped, sampler
from alignmt.decoding.translator import Translator
from alignmt.model.distribution import LogProbs
from tests.conftest import serving
from tests.test_confidence import LINES, teacher_forced

PROBS = torch.tensor([[0.5, 0.3, 0.15, 0.05]])


def translator(run, **search) -> Translator:
    return open_translator(run, device="cpu", **search)


def kept(sampling: Sampling) -> list[bool]:
    return reshaped(PROBS.log(), sampling).isfinite()[0].tolist()


def test_top_k_and_top_p_keep_the_tokens_they_should():
    assert kept(Sampling()) == [True] * 4
    assert kept(Sampling(top_k=2)) == [True, True, False, False]
    # the nucleus: 0.5 is short of 0.7, 0.5 + 0.3 reaches it, so two tokens stay
    assert kept(Sampling(top_p=0.7)) == [True, True, False, False]
    assert kept(Sampling(top_p=0.8)) == [True, True, False, False]
    assert kept(Sampling(top_p=0.81)) == [True, True, True, False]
    assert kept(Sampling(top_p=0.1)) == [True, False, False, False]
    assert kept(Sampling(top_k=3, top_p=0.5)) == [True, False, False, False]


def test_temperature_raises_the_probabilities_to_its_inverse_power():
    got = reshaped(PROBS.log(), Sampling(temperature=0.5)).softmax(dim=-1)
    expected = PROBS**2 / (PROBS**2).sum()
    torch.testing.assert_close(got, expected)


def test_draws_follow_the_reshaped_distribution_and_report_the_models_probability():
    logits = PROBS.log().expand(20_000, 4)
    generator = torch.Generator().manual_seed(0)
    for sampling, expected in (
        (Sampling(), PROBS[0]),
        (Sampling(top_p=0.7), torch.tensor([0.625, 0.375, 0, 0])),
        (Sampling(temperature=2.0), PROBS[0].sqrt() / PROBS[0].sqrt().sum()),
    ):
        tokens, log_probs = sampler(sampling, generator)(LogProbs(logits))
        share = torch.bincount(tokens, minlength=4) / len(tokens)
        torch.testing.assert_close(share, expected.float(), atol=0.015, rtol=0)
        torch.testing.assert_close(log_probs.exp(), PROBS[0][tokens])


def test_bad_sampling_options_are_refused():
    for bad in (dict(temperature=0), dict(top_k=-1), dict(top_p=0), dict(top_p=1.5)):
        with pytest.raises(ValueError):
            Sampling(**bad)


def test_the_same_seed_draws_the_same_outputs_and_another_seed_others(toy_run):
    t = translator(toy_run)
    hot = dict(temperature=3.0, samples=4)
    first = t.translate(LINES, sampling=Sampling(seed=1, **hot), batch_size=3)
    again = t.translate(LINES, sampling=Sampling(seed=1, **hot), batch_size=3)
    other = t.translate(LINES, sampling=Sampling(seed=2, **hot), batch_size=3)
    assert [len(s) for s in first] == [4] * len(LINES)
    texts = [[h.text for h in s] for s in first]
    assert texts == [[h.text for h in s] for s in again]
    assert texts != [[h.text for h in s] for s in other]
    assert len({text for s in texts for text in s}) > len(LINES)  # the draws differ


def test_top_k_1_is_greedy_search(toy_run):
    greedy = translator(toy_run, beam_size=1).translate(LINES)
    drawn = translator(toy_run).translate(LINES, sampling=Sampling(top_k=1, temperature=5.0))
    for g, d in zip(greedy, drawn, strict=True):
        assert d[0].tokens == g[0].tokens
        assert d[0].probabilities == pytest.approx(g[0].probabilities, abs=1e-6)


def test_a_samples_probabilities_are_the_models_teacher_forced_ones(toy_run):
    t = translator(toy_run)
    drawn = t.translate(LINES, sampling=Sampling(temperature=2.0, top_p=0.9, seed=3))
    for line, (sample,) in zip(LINES, drawn, strict=True):
        expected = teacher_forced(t, t.source_tokens(line), sample)
        assert sample.probabilities == pytest.approx(expected, abs=1e-5)
        assert sum(map(math.log, sample.probabilities)) == pytest.approx(sample.score, abs=1e-4)


def run_translate(toy_run, capsys, monkeypatch, *flags) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("\n".join(LINES).encode())))
    code = main(["translate", str(toy_run), *flags])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_translate_samples_repeatably_and_refuses_flags_that_do_not_fit(
    toy_run, capsys, monkeypatch
):
    flags = ["--sample", "--samples", "3", "--temperature", "2", "--seed", "7"]
    code, out, _ = run_translate(toy_run, capsys, monkeypatch, *flags)
    assert code == 0 and [len(line.split("\t")) for line in out.splitlines()] == [3] * len(LINES)
    assert run_translate(toy_run, capsys, monkeypatch, *flags)[1] == out
    for bad, says in (
        (["--temperature", "2"], "only apply with --sample"),
        (["--sample", "--nbest", "2"], "--samples, not --nbest"),
    ):
        code, _, err = run_translate(toy_run, capsys, monkeypatch, *bad)
        assert code == 2 and says in err, bad
    for flag, value in (("--top-p", "1.5"), ("--temperature", "0"), ("--top-k", "0")):
        with pytest.raises(SystemExit) as refused:  # by the parser, before any work
            run_translate(toy_run, capsys, monkeypatch, "--sample", flag, value)
        assert refused.value.code == 2 and flag in capsys.readouterr().err


def test_the_api_samples_repeatably(toy_run):
    limits = Limits(max_sentences=8, max_source_tokens=12, max_beam=6, max_top_k=10)
    with serving(toy_run, limits=limits) as client:

        def draw(**sample):
            body = {"sentences": LINES[:2], "sample": sample}
            return client.post("/v1/translate", json=body)

        first = draw(temperature=3.0, samples=3, seed=5)
        assert first.status_code == 200
        hyps = [[h["text"] for h in t["hypotheses"]] for t in first.json()["translations"]]
        assert [len(h) for h in hyps] == [3, 3]
        assert draw(temperature=3.0, samples=3, seed=5).json() == first.json()
        for hyp in first.json()["translations"][0]["hypotheses"]:
            assert len(hyp["probabilities"]) == len(hyp["tokens"])
        too_many = draw(samples=5)  # 2 x 5 draws over max_sentences 8
        assert too_many.status_code == 422 and "max_sentences" in too_many.text
        assert draw(top_p=0).status_code == 422
        refused = client.post(
            "/v1/translate", json={"sentences": ["a cat"], "nbest": 2, "sample": {}}
        )
        assert refused.status_code in (400, 422)
