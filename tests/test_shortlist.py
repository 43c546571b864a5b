"""The lexical shortlist: built from co-occurrence, stored in the run folder, and decoding
over it: the reference's words kept, the whole vocabulary giving the same output, a
sentence's output independent of its batch."""

from __future__ import annotations

import io
import random
from dataclasses import replace

import numpy as np
import pytest
import torch

from alignmt.answers.registry import load_models
from alignmt.checkpoint.shortlist_io import SHORTLIST, load_shortlist, save_shortlist
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.cli import main
from alignmt.decoding.door import open_translator
from alignmt.decoding.torch_engine.ensemble import Ensemble
from alignmt.decoding.torch_engine.plan import SearchPlan
from alignmt.decoding.torch_engine.search import search
from alignmt.decoding.torch_engine.shortlist import allowed_words
from alignmt.decoding.torch_engine.speed import Speed
from alignmt.model.batch import source_batch
from alignmt.text.cache import TokenArrays
from alignmt.text.prepare import prepare_text
from alignmt.text.shortlist import Shortlist, build_shortlist
from tests.conftest import held_out_toy_lines, write_file

EOS, UNK = 2, 3


def lexicon_corpus(n: int, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    """Pairs of a 40-word language and its translation: source word w (ids 4..43) becomes
    target word w + 100, in a shuffled order, and every target sentence also holds three
    frequent words (ids 4, 5, 6) and one word drawn at random (ids 50..99): the noise that
    co-occurs with everything."""
    rng = random.Random(seed)
    src, tgt = [], []
    for _ in range(n):
        words = rng.sample(range(4, 44), rng.randint(2, 6))
        out = [w + 100 for w in words] + [4, 5, 6, rng.randint(50, 99)]
        rng.shuffle(out)
        src.append(words)
        tgt.append(out)
    return src, tgt


def test_the_shortlist_never_drops_the_references_words():
    src, tgt = lexicon_corpus(2000)
    arrays = TokenArrays.from_pairs(list(zip(src, tgt, strict=True)))
    shortlist = build_shortlist(arrays, (44, 144), always=(EOS, UNK), per_word=1, frequent=3)
    assert set(shortlist.frequent.tolist()) == {4, 5, 6, EOS, UNK}
    assert shortlist.table[4:44, 0].tolist() == list(range(104, 144))  # each word's own
    test_src, test_tgt = lexicon_corpus(200, seed=1)
    batch, _ = source_batch_of(test_src)
    allowed = allowed_words(shortlist, batch, pad_id=0, vocab=144)  # (200, 144)
    for row, (words, reference) in enumerate(zip(test_src, test_tgt, strict=True)):
        kept = set(allowed[row].nonzero().squeeze(1).tolist())
        assert {w + 100 for w in words} | {4, 5, 6} <= kept
        assert len(kept) == len(words) + 5  # nothing else: the noise words are not listed
        assert set(reference) - kept <= set(range(50, 100))  # only the random word is out


def source_batch_of(sentences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, sentences))
    src = torch.zeros(len(sentences), width, dtype=torch.long)
    for row, words in enumerate(sentences):
        src[row, : len(words)] = torch.tensor(words)
    return src, torch.tensor([len(w) for w in sentences])


def test_dice_ranks_a_words_translation_above_what_co_occurs_with_everything():
    # p(t | s) would rank word 4 + 100 level with the noise word 50, seen with it as often.
    src = [[4], [4], [4], [5], [5]]
    tgt = [[104, 50], [104, 50], [104, 50], [50, 105], [50, 105]]
    arrays = TokenArrays.from_pairs(list(zip(src, tgt, strict=True)))
    shortlist = build_shortlist(arrays, (6, 106), always=(EOS,), per_word=2, frequent=0)
    assert shortlist.table[4].tolist() == [104, 50]
    assert shortlist.table[5].tolist() == [105, 50]
    assert shortlist.table[0].tolist() == [EOS, EOS]  # never seen: nothing but </s>


def test_co_occurrences_are_counted_the_same_in_chunks(monkeypatch):
    src, tgt = lexicon_corpus(300, seed=3)
    arrays = TokenArrays.from_pairs(list(zip(src, tgt, strict=True)))
    whole = build_shortlist(arrays, (44, 144), always=(EOS,), per_word=5, frequent=3)
    monkeypatch.setattr("alignmt.text.shortlist.PAIRS_PER_CHUNK", 7)
    chunked = build_shortlist(arrays, (44, 144), always=(EOS,), per_word=5, frequent=3)
    np.testing.assert_array_equal(whole.table, chunked.table)


def test_a_shortlist_holding_every_word_decodes_as_the_whole_vocabulary(toy_run):
    ckpt = load_checkpoint(toy_run)
    model, vocab = ckpt.model, len(ckpt.tgt_vocab)
    assert ckpt.shortlist is not None  # training wrote it
    every = Shortlist(ckpt.shortlist.table, np.arange(vocab))
    batches = toy_batches(ckpt)
    for speed in (Speed(), Speed(shortlist=every)):
        greedy = search(model, batches, SearchPlan(width=8, speed=speed))
        beam = search(model, batches, SearchPlan(width=8, beam_size=3, nbest=3, speed=speed))
        if speed.shortlist is None:
            plain = (greedy, beam)
    for ours, theirs in zip((greedy, beam), plain, strict=True):
        assert [h.tokens for h in _flat(ours)] == [h.tokens for h in _flat(theirs)]
        scores = torch.tensor([h.score for h in _flat(ours)])
        torch.testing.assert_close(scores, torch.tensor([h.score for h in _flat(theirs)]))


def _flat(hyps):
    return [h for item in hyps for h in item]


def toy_batches(ckpt, n: int = 40) -> list[tuple[torch.Tensor, torch.Tensor]]:
    rng = random.Random(5)
    words = ["a", "red", "dog", "cat", "runs", "sleeps", "big", "small", "the", "now"]
    lines = [[rng.choice(words) for _ in range(rng.randint(1, 6))] for _ in range(n)]
    return [source_batch(lines[i : i + 16], ckpt.src_vocab) for i in range(0, n, 16)]


def test_a_sentence_decodes_alike_alone_and_beside_others(toy_run):
    # The logits of a shortlisted step cover the union of its rows' words, but each row
    # keeps only its own: another sentence in the batch must not change an output.
    ckpt = load_checkpoint(toy_run)
    narrow = Speed(shortlist=Shortlist(ckpt.shortlist.table[:, :1], np.array([EOS])))
    batches = toy_batches(ckpt)
    together = [h for [h] in search(ckpt.model, batches, SearchPlan(width=16, speed=narrow))]
    rows = [(src[i : i + 1], n[i : i + 1]) for src, n in batches for i in range(len(n))]
    alone = [search(ckpt.model, [row], SearchPlan(width=1, speed=narrow))[0][0] for row in rows]
    assert [h.tokens for h in together] == [h.tokens for h in alone]
    allowed = {EOS, *ckpt.shortlist.table[:, 0].tolist()}
    assert all(set(h.tokens) <= allowed for h in together)


def test_the_toy_run_translates_as_well_over_a_narrow_shortlist(toy_run, tmp_path):
    """One translation per source word and only </s> and "." always: the word-for-word toy
    corpus needs nothing else, and greedy outputs stay those of the whole vocabulary (beam
    search may differ: each beam's log-probabilities are normalised over the shortlist)."""
    ckpt = load_checkpoint(toy_run)
    text = prepare_text(ckpt.config.data, ckpt.config.seed)
    full_stop = ckpt.tgt_vocab.encode(["."])[0]
    sizes = (len(ckpt.src_vocab), len(ckpt.tgt_vocab))
    narrow = build_shortlist(text.train, sizes, always=(EOS, full_stop), per_word=1, frequent=0)
    save_shortlist(tmp_path, narrow)
    lines = held_out_toy_lines(tmp_path, n=40, seed=9)
    plain = open_translator(ckpt)
    listed = open_translator(
        replace(ckpt, shortlist=load_shortlist(tmp_path)), shortlist=1, beam_size=1
    )
    expected = [t[0].text for t in plain.translate(lines, beam_size=1)]
    assert [t[0].text for t in listed.translate(lines)] == expected
    assert len(set(narrow.table[:, 0].tolist())) >= 10  # a word of its own for each word


def test_the_cli_builds_a_shortlist_and_translates_with_it(toy_run, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("model.safetensors", "config.yaml"):
        (run / name).write_bytes((toy_run / name).read_bytes())
    assert main(["shortlist", str(run)]) == 0
    assert "wrote" in capsys.readouterr().out and (run / SHORTLIST).is_file()
    np.testing.assert_array_equal(load_shortlist(run).table, load_shortlist(toy_run).table)
    outputs = []
    for flags in (["--weights", "int8"], ["--weights", "int8", "--shortlist", "20"]):
        text = io.BytesIO(b"a red dog runs\nthe cat sleeps\n")
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(text))
        assert main(["translate", str(run), *flags]) == 0
        outputs.append(capsys.readouterr().out.splitlines())
    # The toy's shortlist holds its whole small vocabulary: the same words, the same output.
    assert outputs[1] == outputs[0] and len(outputs[0]) == 2
    assert main(["translate", str(toy_run), "--shortlist", "101"]) == 2
    assert "depth 100 cannot give 101" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["translate", str(toy_run), "--shortlist", "-1"])
    assert "must be 0 or more, got -1" in capsys.readouterr().err


def test_bad_shortlists_are_refused_by_name(toy_run, tmp_path):
    ckpt = load_checkpoint(toy_run)
    with pytest.raises(ValueError, match=r"no shortlist\.safetensors.*alignmt shortlist"):
        open_translator(replace(ckpt, shortlist=None), search=replace_search(ckpt, 5))
    with pytest.raises(ValueError, match="depth 100 cannot give 101"):
        open_translator(ckpt, search=replace_search(ckpt, 101))
    small = Shortlist(ckpt.shortlist.table[:3], ckpt.shortlist.frequent)
    with pytest.raises(ValueError, match="does not fit its vocabularies"):
        open_translator(replace(ckpt, shortlist=small), search=replace_search(ckpt, 5))
    write_file(tmp_path / SHORTLIST, b"\x00" * 40)
    with pytest.raises(ValueError, match=f"{SHORTLIST}: not a readable shortlist"):
        load_shortlist(tmp_path)
    assert load_shortlist(tmp_path / "nowhere") is None


def replace_search(ckpt, k: int):
    return replace(ckpt.config.search, shortlist=k)


def test_a_server_decodes_with_the_speed_options_it_was_given(toy_run):
    served = load_models([toy_run], weights="int8", shortlist=5)["run"]
    speed = served.translator.engine.speed
    assert speed.int8 and speed.shortlist.depth == 5
    assert served.translator.translate(["a red dog"])[0][0].tokens[-1] == "</s>"
    assert (served.info.weights, served.info.shortlist) == ("int8", 5)  # /v1/models says so
    plain = load_models([toy_run])["run"].translator.engine.speed
    assert not plain.int8 and plain.shortlist is None  # the run's config: neither


def test_an_ensemble_decodes_over_a_shortlist_through_each_members_projection(toy_run):
    ckpt = load_checkpoint(toy_run)
    ensemble = Ensemble([ckpt.model, load_checkpoint(toy_run).model])
    every = Shortlist(ckpt.shortlist.table, np.arange(len(ckpt.tgt_vocab)))
    batches = toy_batches(ckpt)
    beam = SearchPlan(width=8, beam_size=3)
    plain = search(ensemble, batches, beam)
    listed = search(ensemble, batches, replace(beam, speed=Speed(shortlist=every)))
    assert [h[0].tokens for h in listed] == [h[0].tokens for h in plain]
    narrow = Speed(shortlist=Shortlist(ckpt.shortlist.table[:, :1], np.array([EOS])))
    outputs = search(ensemble, batches, replace(beam, speed=narrow))
    allowed = {EOS, *ckpt.shortlist.table[:, 0].tolist()}
    assert all(set(h[0].tokens) <= allowed for h in outputs)  # both members were restricted
    assert all("forward" not in vars(m.decoder.projection) for m in ensemble.members)
