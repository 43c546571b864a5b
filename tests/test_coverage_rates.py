"""Over- and under-translation, counted from a translation's output and attention."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from alignmt.analysis.coverage import (
    coverage_rates,
    over_translated,
    repeats,
    under_translated,
)
from alignmt.cli import main


def words(text: str) -> list[str]:
    return text.split()


def test_repeats_count_each_n_gram_occurrence_after_its_first():
    assert repeats(words("a b c")) == 0
    assert repeats(words("a b a b a b")) == 3  # bigram "a b" thrice (2 repeats), "b a" twice (1)
    assert repeats(words("a b a b a b"), n=1) == 4
    assert repeats([]) == 0 and repeats(["a"]) == 0


def test_an_output_is_over_translated_when_it_repeats_more_than_its_source():
    src = words("a man on a man")  # "a man" repeats once in the source
    assert not over_translated(src, words("ein mann auf ein mann </s>"))
    assert over_translated(words("a red car"), words("ein rotes auto rotes auto </s>"))
    assert not over_translated(words("a red car </s>"), words("ein rotes auto </s>"))


def test_under_translated_source_tokens_have_under_half_of_the_attention_in_all():
    attention = np.array(  # 3 output steps over 3 source tokens and </s>
        [[0.9, 0.0, 0.05, 0.05], [0.1, 0.3, 0.1, 0.5], [0.0, 0.3, 0.2, 0.5]]
    )
    # sums 1.0, 0.6, 0.35 (and </s> 1.05, left aside): one token of three is left out
    assert under_translated(attention) == (1, 3)


def test_corpus_rates_count_sentences_and_source_tokens():
    full = np.eye(3)  # each of 2 source tokens and </s> gets one step's attention
    empty = np.zeros((2, 3))
    rows = [
        SimpleNamespace(src_tokens=["a", "b", "</s>"], tokens=["x", "y", "</s>"], attention=full),
        SimpleNamespace(src_tokens=["a", "b", "</s>"], tokens=["x", "x", "x"], attention=empty),
    ]
    rates = coverage_rates(rows, n=1)
    assert rates.over == 0.5 and rates.under == pytest.approx(2 / 4)
    assert rates.sentences == 2 and rates.source_tokens == 4
    vanilla = [SimpleNamespace(src_tokens=["a", "</s>"], tokens=["x"], attention=None)]
    assert coverage_rates(vanilla).under is None


def test_evaluate_prints_and_stores_both_rates(toy_run, tmp_path, capsys):
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("the big dog sleeps now\na cat\n")
    ref.write_text("der große hund schläft jetzt .\neine katze .\n")
    out = tmp_path / "eval"
    assert (
        main(["evaluate", str(toy_run), "--src", str(src), "--ref", str(ref), "--out", str(out)])
        == 0
    )
    assert "Coverage: over-translation" in capsys.readouterr().out
    stored = json.loads((out / "scores.json").read_text())["coverage"]
    assert stored["sentences"] == 2 and 0 <= stored["under"] <= 1
