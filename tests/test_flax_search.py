"""The flax engine's search (decoding/flax_engine/search.py) against PyTorch's on the toy
run: the same outputs greedy and beam, whatever the batching, a bounded number of
compilations, and `alignmt translate --backend flax` printing what the torch backend
prints."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import replace

import pytest

if os.environ.get("CI"):  # CI installs the [flax] extra: its absence is a failure there
    import jax  # noqa: F401
else:
    pytest.importorskip("jax", reason="the [flax] extra is not installed: pip install -e '.[flax]'")

import numpy as np
import torch

from alignmt.checkpoint.flax_io import load_flax, params_from_tensors
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.cli import main
from alignmt.config import ModelConfig, SearchConfig
from alignmt.decoding.flax_engine.batch import bucket
from alignmt.decoding.flax_engine.search import FlaxSearch
from alignmt.decoding.rules import max_output_len
from alignmt.decoding.torch_engine.search import beam_decode, decode
from alignmt.model.batch import source_batch
from alignmt.model.flax_seq2seq import FlaxSeq2Seq
from alignmt.model.seq2seq import Seq2Seq
from tests.conftest import LEXICON

WORDS = sorted(LEXICON)
# toy sentences of 1 to 6 words (2 to 7 ids with </s>: one source bucket), two with words
# the model never saw
LINES = [" ".join(WORDS[(3 * i) % 10 :][: 1 + i % 6]) for i in range(10)] + [
    "a zebra runs",
    "the big okapi sleeps now",
]


def stdin(text: str) -> io.TextIOWrapper:
    """A standard input holding `text`, with the binary `.buffer` that translate reads."""
    return io.TextIOWrapper(io.BytesIO(text.encode()))


def _ids(ckpt, lines):
    return [ckpt.src_vocab.encode(ckpt.src_tokenizer.encode(line), add_eos=True) for line in lines]


@pytest.fixture(scope="module")
def toy(toy_run):
    """The toy run in both frameworks, its search config made greedy, and LINES as ids."""
    ckpt, flax = load_checkpoint(toy_run), load_flax(toy_run)
    return ckpt, flax, replace(ckpt.config.search, beam_size=1), _ids(ckpt, LINES)


@pytest.fixture(scope="module")
def greedy(toy):
    """One greedy FlaxSearch of the toy run, 16 sentences at a time, and its outputs."""
    _, flax, greedy, ids = toy
    search = FlaxSearch(flax.model, flax.params, greedy, batch_size=16)
    return search, search(ids)


def _limits(search):
    return dict(max_len_ratio=search.max_len_ratio, max_len_offset=search.max_len_offset)


def _ended(hyp):
    """Whether </s> ended the hypothesis, not the length limit."""
    return hyp.tokens[-1:] == [2]


def _assert_same(torch_hyps, flax_hyps):
    assert len(torch_hyps) == len(flax_hyps)
    for t, f in zip(torch_hyps, flax_hyps, strict=True):
        assert f.tokens == t.tokens
        assert f.score == pytest.approx(t.score, abs=1e-4)
        assert f.token_scores == pytest.approx(t.token_scores, abs=1e-4)
        assert (f.attention is None) == (t.attention is None)
        if f.attention is not None:
            np.testing.assert_allclose(f.attention, t.attention, atol=1e-5)


def test_greedy_output_is_pytorchs_for_every_sentence_of_a_batch(toy, greedy):
    ckpt, _, _, _ = toy
    src, src_len = source_batch([ckpt.src_tokenizer.encode(line) for line in LINES], ckpt.src_vocab)
    cfg = ckpt.config.search
    expected = decode(ckpt.model, src, src_len, **_limits(cfg))
    search, out = greedy
    assert [len(hyps) for hyps in out] == [1] * len(LINES)
    for t, [f] in zip(expected, out, strict=True):
        _assert_same([t], [f])
    assert all(_ended(hyps[0]) for hyps in out)  # the toy run has learnt to stop
    assert search.shapes == [(16, 8)]


@pytest.mark.parametrize(("beam_size", "nbest"), [(3, 1), (5, 2)])
def test_beam_output_is_pytorchs_best_hypotheses(toy, beam_size, nbest):
    ckpt, flax, _, ids = toy
    cfg = replace(ckpt.config.search, beam_size=beam_size)
    src, src_len = source_batch([ckpt.src_tokenizer.encode(line) for line in LINES], ckpt.src_vocab)
    kw = dict(beam_size=beam_size, nbest=nbest, length_penalty=cfg.length_penalty, **_limits(cfg))
    expected = beam_decode(ckpt.model, src, src_len, **kw)
    out = FlaxSearch(flax.model, flax.params, cfg, nbest=nbest, batch_size=16)(ids)
    for t, f in zip(expected, out, strict=True):
        assert len(f) == nbest
        _assert_same(t, f)


def test_the_length_limit_and_the_length_penalty_match_pytorchs_on_an_untrained_model():
    """Random weights rarely produce </s>: most outputs end at their length limit."""
    cfg = ModelConfig(emb_dim=6, enc_hidden=5, dec_hidden=7, attn_dim=4, rnn="lstm")
    torch.manual_seed(0)
    model = Seq2Seq.from_config(cfg, src_vocab=13, tgt_vocab=13).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.5)  # sharper distributions, fewer near-ties
    params = params_from_tensors({k: v.numpy() for k, v in model.state_dict().items()}, cfg)
    lens = [1, 2, 4, 7, 9]
    ids = [[4 + (3 * b + t) % 9 for t in range(n - 1)] + [2] for b, n in enumerate(lens)]
    src = torch.tensor([row + [0] * (max(lens) - len(row)) for row in ids])
    search = SearchConfig(beam_size=4, length_penalty=1.0, max_len_ratio=0.5, max_len_offset=2)
    kw = dict(beam_size=4, nbest=2, length_penalty=1.0, **_limits(search))
    expected = beam_decode(model, src, torch.tensor(lens), **kw)
    out = FlaxSearch(FlaxSeq2Seq(cfg, 13, 13), params, search, nbest=2)(ids)
    for t, f in zip(expected, out, strict=True):
        _assert_same(t, f)
    assert sum(not _ended(h) for hyps in out for h in hyps) >= 5
    limits = max_output_len(lens, 0.5, 2)
    for hyps, n in zip(out, limits, strict=True):
        assert all(len(h.tokens) <= n for h in hyps)


def test_batch_composition_and_padding_never_change_a_sentence_output(toy, greedy):
    _, flax, greedy_cfg, ids = toy
    _, alone = greedy
    search = FlaxSearch(flax.model, flax.params, greedy_cfg, batch_size=4)
    long = ids[-1][:-1] * 5 + [2]  # 26 ids: 32 source columns for the sentences beside it
    reordered = search(ids[::-1])[::-1]  # other neighbours in each batch
    padded = search([long, *ids[:3]])[1:]  # three rows and a long source: padded to (4, 32)
    for f, [t] in zip(reordered + padded, alone + alone[:3], strict=True):
        assert f[0].tokens == t.tokens
        assert f[0].score == pytest.approx(t.score, abs=1e-5)
        np.testing.assert_allclose(f[0].attention, t.attention, atol=1e-6)
    assert search.shapes == [(4, 8), (4, 32)]


def test_compilations_stay_within_the_buckets_of_the_batch_shapes(toy):
    _, flax, greedy, ids = toy
    search = FlaxSearch(flax.model, flax.params, greedy, batch_size=4)
    words = [token for source in ids for token in source[:-1]] * 2
    lengths = [3, 5, 7, 9, 12, 15, 17, 20, 25, 30, 4, 6, 10, 28, 2]
    sources = [[*words[i : i + n - 1], 2] for i, n in enumerate(lengths)]
    search(sources)
    buckets = {bucket(len(s), 8) for s in sources}
    assert buckets == {8, 16, 32}
    # sorted by length, 15 sentences make three full batches of 4 and one of 3 (4 rows): one
    # compilation per source bucket
    assert search.compilations == len(buckets)
    search(sources[8::-1][:8])  # other full batches of the same buckets: no compilation
    assert search.compilations == len(buckets)
    search(sources[:2])  # two rows: a batch shape of its own
    assert search.shapes[-1] == (2, 8) and search.compilations == len(set(search.shapes))


def test_translate_backend_flax_prints_what_backend_torch_prints(
    toy_run, capsys, monkeypatch, caplog
):
    text = "a red dog runs\n\nthe small cat sleeps now\nbig zebra\n"
    for flags in (["--nbest", "2", "--alignment"], ["--beam", "1", "--replace-unk"]):
        printed = {}
        for backend in ("torch", "flax"):
            monkeypatch.setattr("sys.stdin", stdin(text))
            assert main(["translate", str(toy_run), "--backend", backend, *flags]) == 0
            printed[backend] = capsys.readouterr()
        assert printed["flax"].out == printed["torch"].out
        assert len(printed["flax"].out.split("\n")) == 5  # four lines, the blank one kept
    warned = [r.getMessage() for r in caplog.records if r.name == "alignmt.decoding.words"]
    assert len(warned) == 4 and len(set(warned)) == 1  # both backends name the unknown word
    assert "line 4: 'zebra'" in warned[0]
    monkeypatch.setattr("sys.stdin", stdin("a dog\n"))
    assert main(["translate", str(toy_run), "--backend", "flax", "--weights", "int8"]) == 2
    assert "int8 is not available with the flax engine" in capsys.readouterr().err


def test_flax_decoding_imports_no_torch():
    code = (
        "import sys, alignmt.decoding.flax_engine.search, alignmt.decoding.flax_engine.engine, "
        "alignmt.cli.translate; assert 'torch' not in sys.modules, 'torch imported'"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_a_bfloat16_flax_engine_decodes_much_as_float32_in_float32_results(toy_run):
    """Weights in bfloat16, every matmul in it, each step's scores read in float32: the
    outputs mostly those of float32, the numbers moved by bfloat16's rounding only."""
    import jax
    import jax.numpy as jnp

    from alignmt.decoding.door import open_translator
    from tests.conftest import LEXICON

    words = sorted(LEXICON)
    lines = [" ".join(words[i % 10 : i % 10 + 1 + i % 4]) for i in range(20)]
    full = open_translator(toy_run, engine="flax", device="cpu")
    half = open_translator(toy_run, engine="flax", device="cpu", precision="bfloat16")
    leaves = jax.tree_util.tree_leaves(half.engine.params)
    assert {leaf.dtype for leaf in leaves} == {jnp.dtype(jnp.bfloat16)}
    for beam in (1, 3):
        want = [h[0] for h in full.translate(lines, beam_size=beam)]
        got = [h[0] for h in half.translate(lines, beam_size=beam)]
        assert sum(w.text == g.text for w, g in zip(want, got, strict=True)) >= 0.8 * len(lines)
        assert all(g.attention.dtype == np.float32 for g in got)
        moved = [abs(w.score - g.score) for w, g in zip(want, got, strict=True)]
        assert 1e-5 < max(moved) < 0.1  # rounded as bfloat16 rounds, no further
    stepped = half.step_through(lines[3], top_k=3, beam_size=3)
    assert stepped.translation.text and stepped.steps[0].attention.dtype == np.float32
    _, trace = half.beam_trace(lines[3], beam_size=3)
    assert trace.finished and trace.nodes[0].attention.dtype == np.float32
