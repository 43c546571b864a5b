"""Guided alignment (Chen et al. 2016): the loss against hand-computed values, its gradient
reaching attention, the guide a batch carries, links read from Pharaoh files and learnt by
eflomal (pieces inheriting their word's links, dropped lines skipped), and refusals."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from alignmt.config import load_config
from alignmt.model.batch import guide_matrix, make_batch
from alignmt.model.loss import alignment_loss
from alignmt.text.cache import TokenArrays
from alignmt.text.corpus import CorpusError
from alignmt.text.guide import (
    TokenLinks,
    eflomal_training_links,
    pharaoh_training_links,
    token_links,
    word_of,
)
from alignmt.text.vocab import Vocab
from alignmt.training.optim import guide_weight
from alignmt.training.run import guided_links
from tests.conftest import padded_batch, tiny_model


def test_the_loss_equals_hand_computed_cross_entropy_and_squared_error():
    attention = torch.tensor([[[0.5, 0.3, 0.2], [0.1, 0.1, 0.8], [0.6, 0.4, 0.0]]])
    guide = torch.tensor([[[0.5, 0.5, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]])
    # token 0: half on each of two words; token 1: no links, adds nothing; token 2: word 0
    ce = (-(0.5 * math.log(0.5) + 0.5 * math.log(0.3)) - math.log(0.6)) / 2
    assert float(alignment_loss(attention, guide, "ce")) == pytest.approx(ce, rel=1e-6)
    mse = ((0.0 + 0.2**2 + 0.2**2) + (0.4**2 + 0.4**2 + 0.0)) / 2
    assert float(alignment_loss(attention, guide, "mse")) == pytest.approx(mse, rel=1e-6)
    assert float(alignment_loss(attention, torch.zeros_like(guide))) == 0.0


def test_padding_with_zero_attention_adds_nothing_and_no_nan():
    attention = torch.tensor([[[0.7, 0.3, 0.0]]], requires_grad=True)
    guide = torch.tensor([[[1.0, 0.0, 0.0]]])
    loss = alignment_loss(attention, guide)
    loss.backward()
    assert float(loss.detach()) == pytest.approx(-math.log(0.7))
    assert torch.isfinite(attention.grad).all()


@pytest.mark.parametrize("order", ["bahdanau", "luong", "cgru"])
def test_the_guided_loss_trains_the_attention_parameters(order):
    attention = "general" if order == "luong" else "additive"
    model = tiny_model(attention=attention, order=order, dtype=torch.float64).train()
    src, src_len, tgt_in, _ = padded_batch()
    tgt_out = torch.roll(tgt_in, -1, dims=1)
    tgt_out[tgt_in == 0] = 0
    links = [[(0, 0), (1, 1)], [(0, 0)], []]
    guide = guide_matrix(links, make_batch_like(src, tgt_out)).double()

    def attention_grads(**guided):
        model.zero_grad()
        model.loss(src, src_len, tgt_in, tgt_out, **guided).backward()
        return {n: p.grad.clone() for n, p in model.decoder.attention.named_parameters()}

    plain = attention_grads()
    guided = attention_grads(guide=guide, guide_weight=1.0)
    assert plain and all(not torch.allclose(plain[n], guided[n]) for n in plain)
    # the difference is the alignment loss's own gradient
    model.zero_grad()
    memory, state = model.encode(src, src_len)
    out = model.decoder(tgt_in, state, memory)
    alignment_loss(out.attention, guide).backward()
    for name, param in model.decoder.attention.named_parameters():
        torch.testing.assert_close(guided[name] - plain[name], param.grad)


def make_batch_like(src, tgt_out):
    """A stand-in with the shapes `guide_matrix` reads."""
    return type("Shapes", (), {"src": src, "tgt_out": tgt_out})()


def test_a_guide_spreads_each_target_tokens_links_evenly_and_leaves_the_rest_zero():
    vocab = Vocab(list("abcdef"))
    batch = make_batch([([4, 5, 6], [7, 8]), ([4], [9, 4, 5])], vocab, vocab)
    guide = guide_matrix([[(0, 0), (2, 0), (1, 1)], [(0, 2)]], batch)
    assert guide.shape == (2, 4, 4)  # T_tgt = 3 + </s>, T_src = 3 + </s>
    assert guide[0, 0].tolist() == [0.5, 0.0, 0.5, 0.0]
    assert guide[0, 1].tolist() == [0.0, 1.0, 0.0, 0.0]
    assert guide[1, 2].tolist() == [1.0, 0.0, 0.0, 0.0]
    rows = guide.sum(-1)
    assert rows.tolist() == [[1, 1, 0, 0], [0, 0, 1, 0]]  # </s>, padding: no links


def test_subword_pieces_inherit_their_words_links():
    vocab = Vocab(["▁a", "▁bla", "ck", "▁c", "at"])
    ids = [vocab.stoi[p] for p in ["▁a", "▁bla", "ck", "▁c", "at"]]
    assert word_of(ids, vocab, subwords=True) == [0, 1, 1, 2, 2]
    assert word_of(ids, vocab, subwords=False) == [0, 1, 2, 3, 4]
    # word 1 ("black", two pieces) -- word 0 of a two-word target ("noir" + "e" pieces)
    links = token_links({(1, 0), (2, 1)}, [0, 1, 1, 2, 2], [0, 0, 1])
    assert links == {(1, 0), (1, 1), (2, 0), (2, 1), (3, 2), (4, 2)}


def corpus_arrays(lines):
    pairs = [([5, 6, 7], [8, 9]), ([5], [6, 7, 8])]
    arrays = TokenArrays.from_pairs(pairs)
    return TokenArrays(
        arrays.src_ids, arrays.src_offsets, arrays.tgt_ids, arrays.tgt_offsets, np.array(lines)
    )


def test_pharaoh_links_follow_each_pair_to_its_line_past_dropped_ones(tmp_path: Path):
    vocab = Vocab([f"w{i}" for i in range(10)])
    path = tmp_path / "train.align"

    def read(text: str) -> TokenLinks:  # pairs from lines 1 and 3 of the corpus
        path.write_text(text)
        arrays, vocabs = corpus_arrays([1, 3]), (vocab, vocab)
        return pharaoh_training_links(
            str(path), arrays, vocabs, subwords=False, truncated=False, corpus="c"
        )

    # line 2 holds the links of a pair that was dropped (empty, too long...)
    links = read("0-0\n9-9\n0-0 0-2 0p1\n")
    assert links.of([0, 1]) == [[(0, 0)], [(0, 0), (0, 1), (0, 2)]]  # possible links too
    with pytest.raises(CorpusError, match=r"train\.align:3: link 0-5 lies outside"):
        read("0-0\n9-9\n0-5\n")
    with pytest.raises(CorpusError, match="has 1 lines of links but c has training pairs up"):
        read("0-0\n")


def test_eflomal_links_are_learnt_once_and_then_read_from_the_cache(tmp_path, monkeypatch):
    vocab = Vocab([f"w{i}" for i in range(10)])
    calls = []

    def fake_eflomal(sources, targets):
        calls.append((sources, targets))
        return [{(0, 0)} for _ in sources]

    monkeypatch.setattr("alignmt.text.guide.eflomal_links", fake_eflomal)
    arrays = corpus_arrays([1, 2])
    first = eflomal_training_links(arrays, (vocab, vocab), subwords=False, cache=tmp_path)
    again = eflomal_training_links(arrays, (vocab, vocab), subwords=False, cache=tmp_path)
    assert len(calls) == 1 and calls[0][0] == [["w1", "w2", "w3"], ["w1"]]  # ids 0-3 are specials
    assert first.of([0, 1]) == again.of([0, 1]) == [[(0, 0)], [(0, 0)]]
    assert len(list(tmp_path.glob("eflomal-*.npz"))) == 1


def test_token_links_round_trip_through_their_arrays():
    links = TokenLinks.from_sets([{(0, 1), (2, 0)}, set(), {(1, 1)}])
    assert len(links) == 3 and links.of([2, 1, 0]) == [[(1, 1)], [], [(0, 1), (2, 0)]]


def test_the_weight_halves_every_half_life():
    cfg = load_config(None, ["train.guided_alignment=task", "train.guided_weight=0.8"]).train
    assert guide_weight(cfg, 1000) == 0.8
    cfg = load_config(None, ["train.guided_alignment=task", "train.guided_half_life=100"]).train
    assert guide_weight(cfg, 0) == 0.5 and guide_weight(cfg, 200) == pytest.approx(0.125)
    assert guide_weight(load_config(None, []).train, 0) == 0.0


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["train.guided_alignment=task", "data.task=corpus"], "synthetic task's own alignment"),
        (["train.guided_alignment=eflomal"], "use train.guided_alignment=task"),
        (["train.guided_alignment=task", "model.attention=none"], "model.attention=none has none"),
        (
            ["train.guided_alignment=task", "model.attention_fn=sparsemax"],
            "train.guided_cost=ce takes log alpha, which model.attention_fn=sparsemax makes "
            "infinite where it is exactly 0",
        ),
    ],
)
def test_sources_that_cannot_guide_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        guided_links(load_config(None, overrides), text=None, world=None)


@pytest.mark.slow  # two trainings, compared
def test_guiding_reversal_towards_its_alignment_makes_attention_align_sooner(tmp_path):
    from alignmt.analysis.task_scores import alignment_score
    from alignmt.training.run import train
    from tests.test_train import tiny_config

    aligned = {}
    for source in ("", "task"):
        cfg = tiny_config(tmp_path / (source or "plain"), steps=120, guided_alignment=source)
        result = train(cfg, progress=False)
        score = alignment_score(result.model, result.src_vocab, "reverse", (4,), n=100, seed=7)
        aligned[source] = score.precision
    # measured: 99.3% of positions on the anti-diagonal guided, 92.2% not
    assert aligned["task"] >= 0.98 and aligned[""] <= aligned["task"] - 0.05


def _diagonal_pharaoh(prefix: str) -> str:
    """The toy corpus is word for word: word i of each line translates as word i."""
    path = Path(prefix + ".align")
    lines = Path(prefix + ".en").read_text().splitlines()
    path.write_text(
        "".join(" ".join(f"{i}-{i}" for i in range(len(ln.split()))) + "\n" for ln in lines)
    )
    return str(path)


def _diagonal_share(result, cfg) -> float:
    """How often a validation pair's teacher-forced argmax attention is on the diagonal."""
    from alignmt.analysis.align import token_links
    from alignmt.text.prepare import prepare_text
    from tests.conftest import engine_of

    text = prepare_text(cfg.data, cfg.seed, progress=False)
    engine = engine_of(result.model, text.src_vocab, text.tgt_vocab)
    found = token_links(engine, text.valid_ids)
    pairs = [(len(s), len(t)) for s, t in text.valid_ids]
    on = sum(
        1 for links, (n, _) in zip(found, pairs, strict=True) for i, j in links if i == j and j < n
    )
    return on / sum(n for n, _ in pairs)


@pytest.mark.slow  # two trainings, compared
def test_a_pharaoh_file_guides_a_corpus_run_towards_its_links(tmp_path):
    from alignmt.training.run import train
    from tests.conftest import toy_corpus_config

    shares = {}
    for name in ("plain", "guided"):
        cfg = toy_corpus_config(tmp_path / name, steps=150, eval_every=0)
        if name == "guided":
            cfg.train.guided_alignment = _diagonal_pharaoh(cfg.data.train)
        shares[name] = _diagonal_share(train(cfg, progress=False), cfg)
    # measured: 89.9% of the words on the diagonal guided, 56.0% not
    assert shares["guided"] >= 0.85 and shares["guided"] > shares["plain"] + 0.2
