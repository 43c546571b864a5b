"""Synthetic string tasks made in code: reversal, copy and sort.

Owns the tasks' definitions and seeded sampling of (source, target) string pairs, so the
demo and the tests need no downloads. Tokens are single characters: a string is its own
token sequence. Reversal is the alignment test of Bahdanau et al. (2015) in miniature: the
correct attention map is the anti-diagonal, copy's is the diagonal, and sort has no fixed
alignment at all.

It also scores a trained model on them, with the three numbers per source length that seed
001 (§37.5) and the core issue ask for:

- teacher-forced per-token accuracy: the decoder is fed the right previous token and we
  count how often its argmax is the right next one, over the string's characters (</s>
  excluded, as in the seed), which isolates "did it learn the alignment?";
- greedy exact match: free-running greedy decoding with real end-of-sequence handling; the
  output must equal the target and stop right after it;
- alignment: the share of those positions where the teacher-forced attention's argmax is
  the source position the character comes from (the anti-diagonal for reversal).

Does not own tokenisation, vocabularies or batching (`data`), nor corpus metrics (`evaluate`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from alignmt.data import Batch, Vocab, make_batch
from alignmt.model import Seq2Seq
from alignmt.search import decode

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


# --- Scoring a model on a task -----------------------------------------------------------


@dataclass
class TaskScores:
    """How well a model does a task on strings of one length (see `score_task`)."""

    length: int  # source length of every string in the set
    token_accuracy: float  # teacher-forced, over the L characters
    exact_match: float  # greedy, the whole output including </s>
    alignment: float | None  # argmax alpha on the expected source position; None: vanilla


@torch.no_grad()
def score_task(
    model: Seq2Seq,
    vocab: Vocab,
    task: str,
    length: int,
    *,
    n: int = 500,
    seed: int = 1234,
    max_len_ratio: float = 2.0,
    max_len_offset: int = 10,
) -> TaskScores:
    """Score `model` on `n` fresh strings of exactly `length` characters.

    Args:
        model: the trained model (switched to eval mode here).
        vocab: its character vocabulary (source and target share it).
        task: "reverse", "copy" or "sort".
        length: source length.
        n: number of strings.
        seed: the evaluation seed (independent of the training seed's stream).
        max_len_ratio, max_len_offset: greedy decoding's length limit.
    """
    model.eval()
    pairs = eval_set(task, length, n, seed)
    device = next(model.parameters()).device
    batch = make_batch([(vocab.encode(s), vocab.encode(t)) for s, t in pairs], vocab, vocab)
    batch = batch.to(device)
    out = model(batch.src, batch.src_len, batch.tgt_in)
    predicted = out.logits[:, :length].argmax(dim=-1)  # (n, L)
    token_accuracy = (predicted == batch.tgt_out[:, :length]).float().mean().item()

    alignment = None
    if out.attention is not None:
        expected = torch.tensor([source_positions(task, s) for s, _ in pairs], device=device)
        attended = out.attention[:, :length].argmax(dim=-1)  # (n, L)
        alignment = (attended == expected).float().mean().item()

    return TaskScores(
        length, token_accuracy, exact_match(model, batch, max_len_ratio, max_len_offset), alignment
    )


def exact_match(model: Seq2Seq, batch: Batch, max_len_ratio: float, max_len_offset: int) -> float:
    """Share of greedy outputs equal to the reference y_1 .. y_n </s>."""
    hypotheses = decode(
        model, batch.src, batch.src_len, max_len_ratio=max_len_ratio, max_len_offset=max_len_offset
    )
    references = [
        row[:n].tolist() for row, n in zip(batch.tgt_out, batch.tgt_len.tolist(), strict=True)
    ]
    return sum(h.tokens == r for h, r in zip(hypotheses, references, strict=True)) / len(references)
