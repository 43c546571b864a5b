from __future__ import annotations

import random

import pytest

from alignmt.text.tasks import ALPHABET, TASKS, eval_set, random_strings, sample_pairs, target_for


@pytest.mark.parametrize(
    ("task", "source", "target"),
    [
        ("reverse", "attention", "noitnetta"),
        ("reverse", "", ""),
        ("copy", "hello", "hello"),
        ("sort", "banana", "aaabnn"),
        ("sort", "zyx", "xyz"),
    ],
)
def test_targets_are_right_on_hand_worked_examples(task, source, target):
    assert target_for(task, source) == target


def test_unknown_task_raises_and_names_the_tasks():
    with pytest.raises(ValueError, match="reverse, copy, sort"):
        target_for("rot13", "abc")
    with pytest.raises(ValueError, match="unknown task"):
        sample_pairs("rot13", random.Random(0), 0, 1, 3)
    with pytest.raises(ValueError, match="unknown task"):
        eval_set("rot13", length=5, n=3, seed=0)


@pytest.mark.parametrize("task", TASKS)
def test_sample_pairs_pair_each_source_with_its_target(task):
    pairs = sample_pairs(task, random.Random(0), 50, 1, 8)
    assert len(pairs) == 50
    assert all(target == target_for(task, source) for source, target in pairs)


def test_sample_pairs_are_reproducible_for_a_seed_and_differ_for_another():
    first = sample_pairs("reverse", random.Random(7), 20, 3, 10)
    again = sample_pairs("reverse", random.Random(7), 20, 3, 10)
    other = sample_pairs("reverse", random.Random(8), 20, 3, 10)
    assert first == again
    assert first != other


def test_lengths_lie_within_the_bounds_and_both_bounds_occur():
    strings = random_strings(random.Random(0), 2000, 3, 10)
    lengths = {len(s) for s in strings}
    assert lengths == set(range(3, 11))


def test_strings_use_only_the_alphabet_and_cover_it():
    strings = random_strings(random.Random(0), 500, 5, 5)
    assert set("".join(strings)) == set(ALPHABET)


@pytest.mark.parametrize(("n", "min_len", "max_len"), [(-1, 1, 2), (3, 5, 4), (3, -1, 2)])
def test_random_strings_reject_bad_arguments(n, min_len, max_len):
    with pytest.raises(ValueError):
        random_strings(random.Random(0), n, min_len, max_len)


@pytest.mark.parametrize("length", [1, 7, 15])
def test_eval_set_sources_have_exactly_the_length_asked(length):
    pairs = eval_set("reverse", length=length, n=40, seed=0)
    assert len(pairs) == 40
    assert all(len(source) == length for source, _ in pairs)


def test_eval_set_is_the_same_for_the_same_seed_and_differs_for_another():
    assert eval_set("sort", length=6, n=30, seed=1) == eval_set("sort", length=6, n=30, seed=1)
    assert eval_set("sort", length=6, n=30, seed=1) != eval_set("sort", length=6, n=30, seed=2)


def test_eval_set_of_a_length_does_not_depend_on_other_lengths_evaluated():
    alone = eval_set("copy", length=9, n=10, seed=3)
    random.seed(0)  # the global generator must not matter either
    for length in (3, 5, 12):
        eval_set("copy", length=length, n=10, seed=3)
    assert eval_set("copy", length=9, n=10, seed=3) == alone


def test_eval_set_sources_are_the_same_for_every_task():
    sources = {task: [s for s, _ in eval_set(task, length=8, n=10, seed=0)] for task in TASKS}
    assert sources["reverse"] == sources["copy"] == sources["sort"]
