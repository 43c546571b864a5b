"""Tests for alignmt.evaluate's corpus metrics: the scores are sacreBLEU's own, sentences land in
the right length buckets, and the d2l book's sentence BLEU reproduces its printed examples.

Expected values come from sacreBLEU called directly, the book's printout or hand arithmetic,
never from alignmt itself.
"""

from __future__ import annotations

import json
import math

import pytest
import sacrebleu
from sacrebleu.metrics import BLEU, CHRF

from alignmt.analysis.scores import (
    BucketScore,
    CorpusScores,
    bleu_by_length,
    bucket_name,
    bucket_scores,
    corpus_scores,
    sentence_bleu_d2l,
)
from alignmt.analysis.tables import format_bucket_table, format_gap_table, format_scores_table

HYPS = [
    "The cat sat on the mat .",
    "A man is riding a red bicycle down the street .",
    "Two dogs play in the snow together .",
]
REFS = [
    "The cat sat on a mat .",
    "A man rides a red bike down the road .",
    "Two dogs are playing in the snow .",
]


def words(n: int, start: int = 0) -> str:
    """n distinct tokens, enough of them that BLEU has 4-grams to count."""
    return " ".join(f"w{i}" for i in range(start, start + n))


# --- corpus_scores --------------------------------------------------------------------------


@pytest.mark.parametrize("lowercase", [False, True])
def test_corpus_scores_are_sacrebleus_own(lowercase):
    scores = corpus_scores(HYPS, REFS, lowercase=lowercase)
    bleu = BLEU(lowercase=lowercase).corpus_score(HYPS, [REFS]).score
    chrf = CHRF(lowercase=lowercase).corpus_score(HYPS, [REFS]).score
    assert 0 < bleu < 100  # a partial match, so equality below means something
    assert scores.bleu == pytest.approx(bleu, abs=1e-12)
    assert scores.chrf == pytest.approx(chrf, abs=1e-12)
    assert (scores.sentences, scores.lowercase) == (3, lowercase)


def test_lowercasing_raises_bleu_and_chrf_when_only_case_differs():
    hyps = ["The Cat sat on the mat today ."]
    refs = ["the cat sat on the mat today ."]
    cased, lc = corpus_scores(hyps, refs), corpus_scores(hyps, refs, lowercase=True)
    assert lc.bleu == pytest.approx(100.0)
    assert lc.chrf == pytest.approx(100.0)
    assert cased.bleu < 90
    assert cased.chrf < 100


@pytest.mark.parametrize(("lowercase", "case"), [(True, "case:lc"), (False, "case:mixed")])
def test_signatures_say_the_casing_and_sacrebleu_version(lowercase, case):
    scores = corpus_scores(HYPS, REFS, lowercase=lowercase)
    for signature in (scores.bleu_signature, scores.chrf_signature):
        assert case in signature.split("|")
        assert "nrefs:1" in signature.split("|")
        assert f"version:{sacrebleu.__version__}" in signature.split("|")
    assert "tok:13a" in scores.bleu_signature.split("|")
    assert "nc:6" in scores.chrf_signature.split("|")


def test_mismatched_lengths_raise_naming_both_counts():
    with pytest.raises(ValueError, match=r"3 hypotheses but 5 references"):
        corpus_scores(HYPS, [*REFS, "extra one", "extra two"])


def test_no_sentences_raise():
    with pytest.raises(ValueError, match="no hypotheses"):
        corpus_scores([], [])


def test_corpus_scores_round_trip_through_json():
    scores = corpus_scores(HYPS, REFS, lowercase=True)
    assert CorpusScores(**json.loads(json.dumps(scores.as_dict()))) == scores


# --- bucket_scores --------------------------------------------------------------------------


def test_boundary_lengths_land_in_their_buckets():
    # Sentences of source length 9 and 21 are translated perfectly, 10 and 20 completely wrongly,
    # so moving any one of them across a boundary changes a bucket's count or its BLEU.
    src_lengths = [9, 10, 20, 21]
    refs = [words(6), words(6, 10), words(6, 20), words(6, 30)]
    hyps = [refs[0], words(6, 100), words(6, 200), refs[3]]
    buckets = bucket_scores(src_lengths, hyps, refs)
    assert [(b.name, b.sentences) for b in buckets] == [("< 10", 1), ("10–20", 2), ("> 20", 1)]
    assert [b.bleu for b in buckets] == pytest.approx([100.0, 0.0, 100.0])


def test_each_bucket_scores_like_sacrebleu_on_its_own_sentences():
    src_lengths = [3, 15, 30, 5, 12]
    hyps, refs = [*HYPS, HYPS[0], HYPS[1]], [*REFS, REFS[1], REFS[0]]
    buckets = bucket_scores(src_lengths, hyps, refs)
    members = {"< 10": [0, 3], "10–20": [1, 4], "> 20": [2]}
    for bucket in buckets:
        idx = members[bucket.name]
        expected = BLEU().corpus_score([hyps[i] for i in idx], [[refs[i] for i in idx]]).score
        assert bucket.bleu == pytest.approx(expected, abs=1e-12)
        assert bucket.sentences == len(idx)


def test_empty_buckets_score_none_and_serialise_as_null():
    buckets = bucket_scores([2, 4, 8], HYPS, REFS)
    assert [(b.sentences, b.bleu is None) for b in buckets] == [(3, False), (0, True), (0, True)]
    assert json.loads(json.dumps(buckets[1].as_dict())) == {
        "name": "10–20",
        "sentences": 0,
        "bleu": None,
    }


def test_bucket_scores_reject_a_source_length_count_that_differs():
    with pytest.raises(ValueError, match=r"2 source lengths but 3 hypotheses"):
        bucket_scores([1, 2], HYPS, REFS)


@pytest.mark.parametrize(
    ("low", "high", "name"), [(0, 9, "< 10"), (10, 20, "10–20"), (21, None, "> 20"), (5, 5, "5–5")]
)
def test_bucket_names_read_as_the_inclusive_bounds(low, high, name):
    assert bucket_name(low, high) == name


# --- bleu_by_length -------------------------------------------------------------------------


def test_bins_pool_until_full_and_the_long_tail_joins_the_last_point():
    # width 5, at least 2 sentences per point:
    #   bin 0-4: lengths 1, 3          -> a point of its own           (perfect translations)
    #   bin 5-9: length 6 (alone)      -> pooled with bin 10-14 (12)   (wrong translations)
    #   bin 15-19: lengths 17, 17      -> a point, then the tail (40) joins it: 15-44
    src_lengths = [1, 3, 6, 12, 17, 17, 40]
    refs = [words(6, 10 * i) for i in range(7)]
    hyps = [refs[0], refs[1], words(6, 100), words(6, 200), refs[4], words(6, 300), refs[6]]
    centres, bleus, counts = bleu_by_length(src_lengths, hyps, refs, width=5, min_sentences=2)
    assert centres == [2.0, 9.5, 29.5]
    assert counts == [2, 2, 3]
    tail = BLEU().corpus_score([hyps[i] for i in (4, 5, 6)], [[refs[i] for i in (4, 5, 6)]])
    assert bleus == pytest.approx([100.0, 0.0, tail.score])
    assert 0 < bleus[2] < 100


def test_full_bins_keep_their_own_width():
    src_lengths = [0, 4, 5, 9, 10, 14]
    hyps = refs = [words(5, i) for i in range(6)]
    centres, _, counts = bleu_by_length(src_lengths, hyps, refs, width=5, min_sentences=2)
    assert (centres, counts) == ([2.0, 7.0, 12.0], [2, 2, 2])


def test_a_set_smaller_than_min_sentences_gives_no_points():
    assert bleu_by_length([3, 12, 25], HYPS, REFS, min_sentences=4) == ([], [], [])


# --- sentence_bleu_d2l ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pred", "label", "printed"),
    [
        ("j'ai perdu .", "j'ai perdu .", "1.000"),
        ("je suis malade .", "je suis calme .", "0.658"),
        ("je suis chez moi .", "je suis chez moi .", "1.000"),
    ],
)
def test_d2l_bleu_reproduces_the_seeds_printed_examples(pred, label, printed):
    assert f"{sentence_bleu_d2l(pred, label, k=2):.3f}" == printed


def test_d2l_bleu_weights_the_seeds_example_by_hand():
    # p1 = 3/4 (je, suis, .), p2 = 1/3 (only "je suis"), no brevity penalty.
    expected = (3 / 4) ** 0.5 * (1 / 3) ** 0.25
    assert sentence_bleu_d2l("je suis malade .", "je suis calme .") == pytest.approx(expected)


def test_d2l_bleu_penalises_short_predictions():
    # All n-grams match, but 2 tokens against 4: exp(1 - 4/2).
    assert sentence_bleu_d2l("a b", "a b c d") == pytest.approx(math.exp(-1))
    # A longer prediction is not penalised for length, only through its precisions.
    assert sentence_bleu_d2l("a b c d", "a b") == pytest.approx((2 / 4) ** 0.5 * (1 / 3) ** 0.25)


def test_d2l_bleu_clips_repeated_words():
    # "the" appears once in the label, so only one of the three counts: p1 = 1/3.
    assert sentence_bleu_d2l("the the the", "the cat sat", k=1) == pytest.approx((1 / 3) ** 0.5)


def test_d2l_bleu_stops_at_the_predictions_length():
    # One token: only unigrams exist, so k=2 does not zero the score for lack of bigrams.
    assert sentence_bleu_d2l("a", "a", k=2) == pytest.approx(1.0)


def test_d2l_bleu_of_an_empty_prediction_is_zero():
    assert sentence_bleu_d2l("", "je suis calme .") == 0.0
    assert sentence_bleu_d2l("   ", "je suis calme .") == 0.0


# --- tables ---------------------------------------------------------------------------------

LC_SIG = "nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:2.6.0"
CASED_SIG = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
CHRF_SIG = "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0"
CHRF_LC_SIG = "nrefs:1|case:lc|eff:yes|nc:6|nw:0|space:no|version:2.6.0"


def scores(bleu: float, chrf: float, *, lowercase: bool, sentences: int = 1000) -> CorpusScores:
    return CorpusScores(
        bleu=bleu,
        chrf=chrf,
        bleu_signature=LC_SIG if lowercase else CASED_SIG,
        chrf_signature=CHRF_LC_SIG if lowercase else CHRF_SIG,
        lowercase=lowercase,
        sentences=sentences,
    )


def test_scores_table_has_a_row_per_run_and_each_signature_once():
    table = format_scores_table(
        {
            "attention": (
                scores(27.349, 55.0, lowercase=True),
                scores(26.06, 54.449, lowercase=False),
            ),
            "vanilla": (scores(17.96, 44.0, lowercase=True), scores(17.0, 43.21, lowercase=False)),
        }
    )
    lines = table.splitlines()
    assert lines[0] == "| run | BLEU lc | BLEU cased | chrF cased | sentences |"
    assert lines[2] == "| attention | 27.3 | 26.1 | 54.4 | 1000 |"
    assert lines[3] == "| vanilla | 18.0 | 17.0 | 43.2 | 1000 |"
    assert lines[5:] == [
        f"BLEU lc signature: {LC_SIG}",
        f"BLEU cased signature: {CASED_SIG}",
        f"chrF cased signature: {CHRF_SIG}",
    ]


def test_scores_table_rejects_a_pair_in_the_wrong_order():
    pair = (scores(20.0, 50.0, lowercase=False), scores(21.0, 51.0, lowercase=True))
    with pytest.raises(ValueError, match=r"'swapped'.*lowercased, cased"):
        format_scores_table({"swapped": pair})


def test_bucket_table_shows_bleu_and_counts_per_bucket():
    rows = {
        "attention": [
            BucketScore("< 10", 120, 30.04),
            BucketScore("10–20", 700, 25.56),
            BucketScore("> 20", 0, None),
        ],
    }
    lines = format_bucket_table(rows).splitlines()
    assert lines[0] == "| run | < 10 | 10–20 | > 20 |"
    assert lines[2] == "| attention | 30.0 (n=120) | 25.6 (n=700) | – (n=0) |"


@pytest.mark.parametrize("table", [format_bucket_table, format_gap_table])
def test_bucket_tables_reject_runs_with_different_buckets(table):
    rows = {"a": [BucketScore("< 10", 1, 10.0)], "b": [BucketScore("> 20", 1, 10.0)]}
    with pytest.raises(ValueError, match="'b'"):
        table(rows)


BUCKETS = ["< 10", "10–20", "> 20"]


def test_gap_table_gives_each_later_run_its_distance_from_the_first_and_its_share():
    def runs(*bleus):
        return [BucketScore(n, 10, b) for n, b in zip(BUCKETS, bleus, strict=True)]

    rows = {
        "attention": runs(40.0, 36.0, 20.0),
        "vanilla": runs(30.0, 27.0, 5.0),
        "empty": runs(10.0, None, 20.0),
        "zero": runs(0.0, 0.0, 0.0),
    }
    lines = format_gap_table({k: rows[k] for k in ("attention", "vanilla")}).splitlines()
    assert lines[0] == "| run | < 10 | 10–20 | > 20 |"
    assert lines[2:] == ["| vanilla | 10.0 (75%) | 9.0 (75%) | 15.0 (25%) |"]
    lines = format_gap_table({k: rows[k] for k in ("zero", "empty")}).splitlines()
    assert lines[2:] == ["| empty | – | – | – |"]  # no share of a first run's 0 BLEU
    lines = format_gap_table({k: rows[k] for k in ("attention", "empty")}).splitlines()
    assert lines[2:] == ["| empty | 30.0 (25%) | – | 0.0 (100%) |"]


def test_gap_table_needs_a_run_to_compare_with():
    with pytest.raises(ValueError, match="1 run"):
        format_gap_table({"alone": [BucketScore("< 10", 1, 10.0)]})
