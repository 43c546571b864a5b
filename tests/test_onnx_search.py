"""The onnxruntime engine's search: each row's best columns with and without ties, and
continuous batching that never changes a sentence's output."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from alignmt.decoding.door import open_translator
from alignmt.decoding.engine import Call

pytest.importorskip("onnxruntime")

from alignmt.decoding.banks import row_tops

LINES = [
    "the big dog sleeps now", "a cat", "the small red cat runs", "dog", "", "a big dog runs now",
    "the cat sleeps", "small red dog", "the small big red cat sleeps now", "a dog runs",
]  # fmt: skip


@pytest.mark.parametrize("ties", [False, True])
def test_each_rows_best_columns_are_found_with_and_without_ties(ties):
    rng = np.random.default_rng(0)
    log_probs = rng.standard_normal((6, 40)).astype(np.float32)
    if ties:  # row 2's fourth best equals its fifth: more than 4 at or above the threshold
        order = np.argsort(-log_probs[2])
        log_probs[2, order[4]] = log_probs[2, order[3]]
    top = row_tops(log_probs, 4)
    assert top.shape == (6, 4)
    for row, columns in zip(log_probs, top, strict=True):
        assert len(set(columns.tolist())) == 4
        assert np.sort(row[columns]).tolist() == np.sort(row)[-4:].tolist()


@pytest.fixture(scope="module")
def exported(toy_exported):
    return open_translator(toy_exported)


@pytest.mark.parametrize("beam", [1, 3])
def test_refilled_rows_never_change_a_sentences_output(exported, beam):
    """One sentence at a time, or ten through three rows that sentences take over as others
    end, sorted by length or not: the same outputs."""
    alone = [h[0] for line in LINES for h in exported.translate([line], beam_size=beam)]
    for width in (3, 64):
        together = [h[0] for h in exported.translate(LINES, batch_size=width, beam_size=beam)]
        for a, t in zip(alone, together, strict=True):
            assert t.tokens == a.tokens
            assert t.score == pytest.approx(a.score, abs=1e-5)
            if a.attention is not None:
                np.testing.assert_allclose(t.attention, a.attention, atol=1e-6)


def test_rows_refilled_with_shorter_sources_than_the_batchs_decode_as_alone(exported):
    """Longest first, so that each sentence taking over rows has a shorter source than the
    memory it joins (zero-padded along the source, which the mask reads as padding)."""
    tokens = [exported.source_tokens(line) for line in LINES if line]
    ids = sorted((exported.src_vocab.encode(t, add_eos=True) for t in tokens), key=len)[::-1]
    searched = exported.engine.searcher(Call(search=replace(exported.search, beam_size=3), width=3))
    together = searched(ids, None)
    alone = [searched([row], None)[0] for row in ids]
    for t, a in zip(together, alone, strict=True):
        assert t[0].tokens == a[0].tokens
        np.testing.assert_allclose(t[0].attention, a[0].attention, atol=1e-6)
