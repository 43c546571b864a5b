"""Lexically constrained beam search in NumPy (banks.py), on the engines whose searches step
from NumPy: ONNX Runtime in its batched search, Flax one sentence at a time over its jitted
step. Each gives the torch engine's constrained n-best on the same run (its own
constraints.py, the reference here): the same tokens, scores within 1e-4, include phrases
met and exclude phrases absent, a phrase of several tokens, a token the model would not
write, and sentences without constraints beside constrained ones; and the beam tree under
constraints is PyTorch's."""

from __future__ import annotations

import pytest

from alignmt.decoding.banks import Table
from alignmt.decoding.constraint import Constraint

pytest.importorskip("jax")
pytest.importorskip("onnxruntime")

LINES = ["the big dog sleeps now", "a cat", "the small red cat runs", "dog", "a red dog runs"]
PHRASES = [  # (include, exclude) per line, in target words
    (["katze"], []),
    (["großer hund"], ["ein"]),
    ([], []),
    (["jetzt", "roter"], []),
    ([], ["roter"]),
]


@pytest.fixture(scope="module")
def toy(toy_run, tmp_path_factory):
    from tests.test_walk import on_each_engine

    return on_each_engine(toy_run, tmp_path_factory.mktemp("banks") / "onnx")


def constraints(translator) -> list[Constraint]:
    return [translator.constraint(include, exclude) for include, exclude in PHRASES]


@pytest.mark.parametrize("engine", ["flax", "onnxruntime"])
@pytest.mark.parametrize(("beam", "nbest"), [(1, 1), (4, 2)])
def test_every_engine_keeps_to_constraints_as_pytorch_does(toy, engine, beam, nbest):
    wanted = constraints(toy["torch"])
    want = toy["torch"].translate(LINES, beam_size=beam, nbest=nbest, constraints=wanted)
    got = toy[engine].translate(LINES, beam_size=beam, nbest=nbest, constraints=wanted)
    for line, g_hyps, w_hyps, constraint in zip(LINES, got, want, wanted, strict=True):
        assert [h.tokens for h in g_hyps] == [h.tokens for h in w_hyps], line
        for g, w in zip(g_hyps, w_hyps, strict=True):
            assert g.score == pytest.approx(w.score, abs=1e-4)
        best = g_hyps[0]
        assert all(toy[engine].met(best, constraint))
        ids = toy[engine].tgt_vocab.encode(best.tokens)
        assert not any(constraint.broken(ids))
    plain = toy["torch"].translate(LINES, beam_size=beam)
    assert got[0][0].tokens != plain[0][0].tokens  # "katze" is not the model's own choice


@pytest.mark.parametrize("engine", ["flax", "onnxruntime"])
def test_every_engine_draws_pytorchs_beam_tree_under_constraints(toy, engine):
    from tests.test_walk import assert_same_trees

    for line, constraint in zip(LINES, constraints(toy["torch"]), strict=True):
        _, want = toy["torch"].beam_trace(line, beam_size=3, constraint=constraint)
        _, got = toy[engine].beam_trace(line, beam_size=3, constraint=constraint)
        assert_same_trees(got, want)


def test_a_table_lays_out_each_sentences_phrases():
    table = Table.of([Constraint(include=((4, 5), (6,)), exclude=((7, 8, 9),)), None])
    assert table.include.tolist() == [[[4, 5], [6, -1]], [[-1, -1], [-1, -1]]]
    assert table.exclude.tolist() == [[[7, 8, 9]], [[-1, -1, -1]]]
    assert table.most == 3 and table.width == 2 + 2 + 2
    assert table.start(1, 2).tolist() == [[[0, 0, -1, 0, -1, -1]] * 2]


def test_each_rows_top_columns_are_a_stable_sorts_whatever_ties_and_minus_infinities():
    """`row_tops` against the stable sort it stands for, on rows with many ties, many -inf
    (a shortlist's, a beam not yet live) and rows all -inf."""
    import numpy as np

    from alignmt.decoding.banks import row_tops

    rng = np.random.default_rng(0)
    for trial in range(200):
        rows, vocab = int(rng.integers(1, 6)), int(rng.integers(3, 40))
        width = int(rng.integers(1, vocab + 1))
        scores = rng.integers(-3, 3, (rows, vocab)).astype(np.float32)
        scores[rng.random(scores.shape) < 0.4] = -np.inf
        if trial % 7 == 0:
            scores[0] = -np.inf
        want = np.sort(np.argsort(-scores, axis=1, kind="stable")[:, :width], axis=1)
        assert (row_tops(scores, width) == want).all()
