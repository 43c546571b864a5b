"""Word-level confidence: each output token's probability, from every search and command."""

from __future__ import annotations

import io
import json
import math

import pytest
import torch

from alignmt.cli import main
from alignmt.decoding.door import open_translator
from alignmt.decoding.results import Translation
from alignmt.decoding.translator import Translator
from alignmt.model.batch import source_batch

LINES = ["the big dog sleeps now", "a cat", "the small red cat runs", "dog"]


def translator(run, **search) -> Translator:
    return open_translator(run, device="cpu", **search)


def teacher_forced(t: Translator, src_tokens: list[str], out: Translation) -> list[float]:
    """The probability the model gives each token of `out`, fed the tokens before it."""
    src, src_len = source_batch([src_tokens], t.src_vocab)
    ids = t.tgt_vocab.encode(out.tokens)
    tgt_in = torch.tensor([[t.tgt_vocab.bos_id, *ids[:-1]]])
    with torch.no_grad():
        logits = t.engine.model(src, src_len, tgt_in).log_probs.logits[0]  # (T, V)
    probs = logits.double().softmax(dim=-1)
    return probs[torch.arange(len(ids)), ids].tolist()


@pytest.mark.parametrize("beam", [1, 4])
def test_token_probabilities_are_the_teacher_forced_probabilities_of_the_output(toy_run, beam):
    t = translator(toy_run, beam_size=beam)
    nbest = 1 if beam == 1 else 3
    results = t.translate(LINES, nbest=nbest, batch_size=2)
    for line, hyps in zip(LINES, results, strict=True):
        assert len(hyps) == nbest
        for hyp in hyps:
            expected = teacher_forced(t, t.source_tokens(line), hyp)
            assert len(hyp.probabilities) == len(hyp.tokens)
            assert hyp.probabilities == pytest.approx(expected, abs=1e-5)
            assert sum(map(math.log, hyp.probabilities)) == pytest.approx(hyp.score, abs=1e-4)


def test_stepping_through_and_the_beam_trace_give_the_searches_probabilities(toy_run):
    greedy = translator(toy_run, beam_size=1).translate(LINES[:1])[0][0]
    stepped = translator(toy_run).step_through(LINES[0]).translation
    assert stepped.tokens == greedy.tokens
    assert stepped.probabilities == pytest.approx(greedy.probabilities, abs=1e-6)
    t = translator(toy_run, beam_size=4)
    src_tokens, trace = t.beam_trace(LINES[0], beam_size=4)
    best = t.hypothesis(src_tokens, trace, trace.finished[0])
    # The trace decodes one sentence alone, translate a batch: float32 kernels may round the
    # two differently (a relative 1.04e-6 on an AVX-512 Xeon), so the bound is the searches'
    # own 1e-5 above, not approx's default relative 1e-6.
    beamed = t.translate(LINES[:1])[0][0]
    assert best.probabilities == pytest.approx(beamed.probabilities, abs=1e-5)


def test_translate_jsonl_prints_each_tokens_probability(toy_run, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("\n".join(LINES).encode())))
    assert main(["translate", str(toy_run), "--jsonl", "--nbest", "2", "--alignment"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = translator(toy_run).translate(LINES, nbest=2)
    assert len(rows) == len(LINES)
    for row, hyps in zip(rows, expected, strict=True):
        assert [h["text"] for h in row] == [h.text for h in hyps]
        for got, hyp in zip(row, hyps, strict=True):
            assert got["tokens"] == hyp.tokens and got["alignment"] == hyp.alignment
            assert got["probabilities"] == pytest.approx(hyp.probabilities, abs=1e-5)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("\n".join(LINES).encode())))
    assert main(["translate", str(toy_run), "--jsonl", "--nbest", "2", "--backend", "flax"]) == 0
    on_flax = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    for row, hyps in zip(on_flax, expected, strict=True):  # the flax engine's are the same
        assert [h["tokens"] for h in row] == [h.tokens for h in hyps]
        for got, hyp in zip(row, hyps, strict=True):
            assert got["probabilities"] == pytest.approx(hyp.probabilities, abs=1e-5)
