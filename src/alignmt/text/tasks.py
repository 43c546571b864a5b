"""Synthetic string tasks made in code: reversal, copy and sort.

Owns the tasks' definitions and seeded sampling of (source, target) string pairs, so the
demo and the tests need no downloads. Tokens are single characters: a string is its own
token sequence. Reversal is the alignment test of Bahdanau et al. (2015) in miniature: the
correct attention map is the anti-diagonal, copy's is the diagonal, and sort has no fixed
alignment at all. Scoring a model on a task is `alignmt.analysis.task_scores`'.
"""

from __future__ import annotations

import random

TASKS = ("reverse", "copy", "sort")


ALPHABET = "abcdefghijklmnopqrstuvwxyz"


def target_for(task: str, source: str) -> str:
    """The target string of `task` for `source`.

    Args:
        task: one of `TASKS`.
        source: the source string.

    Returns:
        The reversed, copied or sorted source.
    """
    if task == "reverse":
        return source[::-1]
    if task == "copy":
        return source
    if task == "sort":
        return "".join(sorted(source))
    raise ValueError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")


def source_positions(task: str, source: str) -> list[int]:
    """For each target character, the source position it comes from: the alignment a
    perfect attention map would put its weight on.

    Reverse gives the anti-diagonal, copy the diagonal; for sort it is the stable argsort,
    one of several right answers when a letter repeats.
    """
    positions = list(range(len(source)))
    if task == "reverse":
        return positions[::-1]
    if task == "copy":
        return positions
    if task == "sort":
        return sorted(positions, key=lambda j: source[j])
    raise ValueError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")


def random_strings(rng: random.Random, n: int, min_len: int, max_len: int) -> list[str]:
    """`n` strings of letters from `ALPHABET`, each length uniform in [min_len, max_len].

    Args:
        rng: the only source of randomness, so a seed reproduces the strings.
        n: how many strings.
        min_len: shortest length, inclusive.
        max_len: longest length, inclusive.

    Returns:
        The strings, in the order drawn.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 0 <= min_len <= max_len:
        raise ValueError(f"need 0 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    return ["".join(rng.choices(ALPHABET, k=rng.randint(min_len, max_len))) for _ in range(n)]


def sample_pairs(
    task: str, rng: random.Random, n: int, min_len: int, max_len: int
) -> list[tuple[str, str]]:
    """`n` (source, target) pairs of `task` with source lengths in [min_len, max_len].

    Args:
        task: one of `TASKS`.
        rng: the only source of randomness.
        n: how many pairs.
        min_len: shortest source, inclusive.
        max_len: longest source, inclusive.

    Returns:
        The pairs, in the order drawn.
    """
    # Checked before drawing so an unknown task fails even when n == 0.
    target_for(task, "")
    return [(src, target_for(task, src)) for src in random_strings(rng, n, min_len, max_len)]


def eval_set(task: str, length: int, n: int, seed: int) -> list[tuple[str, str]]:
    """`n` pairs of `task` whose sources have exactly `length` characters.

    Each (seed, length) has its own generator, so a length's set does not depend on which
    other lengths are evaluated, or in what order; the sources do not depend on the task.

    Args:
        task: one of `TASKS`.
        length: the source length.
        n: how many pairs.
        seed: the evaluation seed.

    Returns:
        The pairs; the same arguments always give the same list.
    """
    # A string seed is hashed with SHA-512 by `random.Random`: stable across runs and
    # platforms, and unlike `seed * 1000 + length` it cannot collide for long lengths.
    rng = random.Random(f"eval:{seed}:{length}")
    return sample_pairs(task, rng, n, length, length)
