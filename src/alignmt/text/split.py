"""Corpus splits on disk, and the length-bucketed order in which their pairs are batched.

`read_split` and `stream_split` find a split (a TSV file, PREFIX.src and PREFIX.tgt, each
possibly gzipped, or a corpus's part by name, `multi30k:train`, which `corpora` locates in
the data folder) and read it through `corpus`, which owns reading files line by line and the
errors that name file and line. `bucket_batches` groups pair indices of similar lengths, so
that little of a batch is padding; it works on lengths alone, in NumPy.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from alignmt.text import corpora
from alignmt.text.corpus import (
    CorpusError,
    Pair,
    PairStream,
    read_stream,
    stream_parallel,
    stream_tsv,
)

log = logging.getLogger(__name__)


def read_split(spec: str, *, src_lang: str, tgt_lang: str, swap: bool, what: str) -> list[Pair]:
    """The sentence pairs of one corpus split.

    Args:
        spec: a `.tsv` file (source<TAB>target[<TAB>...]), a PREFIX naming the line-aligned
            files PREFIX.{src_lang} and PREFIX.{tgt_lang}, each possibly gzipped (`.gz`), or
            a corpus's part by name (`multi30k:train`, `tatoeba:eng-fra`).
        src_lang, tgt_lang: the file suffixes.
        swap: TSV only; take the second column as the source.
        what: the config key that named `spec`, for messages.

    Returns:
        The pairs; empty ones are dropped and reported by `corpus`.
    """
    pairs, report = read_stream(
        stream_split(spec, src_lang=src_lang, tgt_lang=tgt_lang, swap=swap, what=what)
    )
    log.info("%s", report.summary())
    return pairs


def stream_split(spec: str, *, src_lang: str, tgt_lang: str, swap: bool, what: str) -> PairStream:
    """The sentence pairs of one corpus split, streamed: `read_split` for corpora too big
    to hold in memory (same arguments). The files must exist; they are read as the stream
    is iterated over."""
    if corpora.named(spec):
        spec = corpora.locate(spec, (src_lang, tgt_lang), what)
    if spec.endswith((".tsv", ".tsv.gz")):
        if not Path(spec).is_file():
            raise CorpusError(f"{what}: {spec} does not exist{_DATA_HINT}")
        return stream_tsv(spec, src_column=int(swap), tgt_column=int(not swap))
    return stream_parallel(*(_find(spec, lang, what) for lang in (src_lang, tgt_lang)))


_DATA_HINT = " (a path, or a corpus alignmt can get by name: alignmt data list)"


def _find(prefix: str, lang: str, what: str) -> Path:
    for path in (Path(f"{prefix}.{lang}"), Path(f"{prefix}.{lang}.gz")):
        if path.is_file():
            return path
    raise CorpusError(f"{what}: neither {prefix}.{lang} nor {prefix}.{lang}.gz exists{_DATA_HINT}")


def bucket_batches(
    lengths: Sequence[tuple[int, int]] | np.ndarray,
    *,
    batch_size: int,
    batch_tokens: int = 0,
    rng: random.Random,
    pool: int = 100,
) -> list[np.ndarray]:
    """One epoch's batches of pair indices, grouped by length to waste little on padding.

    The pairs are shuffled, cut into pools of `pool` batches' worth, sorted by (target,
    source) length within each pool and cut into batches; then the batches are shuffled.
    Sorting only within pools keeps some randomness in what shares a batch.

    Args:
        lengths: (N, 2) (source, target) token counts of each pair, a sequence of pairs or
            an integer array.
        batch_size: sentences per batch when `batch_tokens` is 0.
        batch_tokens: > 0: fill each batch while its padded target tokens (rows x longest
            target) stay within this budget; a longer pair still gets a batch of its own.
        rng: the shuffling generator (seeded per epoch by the caller, for resuming).
        pool: batches per sorting pool.

    Returns:
        (B_i,) int64 arrays of indices; every pair appears exactly once.
    """
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1, 2)  # (N, 2)
    # Python's shuffle, not numpy's: the same rng gives the same batches as it always has.
    order = list(range(len(lengths)))
    rng.shuffle(order)
    order = np.fromiter(order, dtype=np.int64, count=len(lengths))
    # With a token budget, size pools as if sentences were ~16 tokens (Multi30k averages 13).
    per_pool = pool * (batch_size if not batch_tokens else max(1, batch_tokens // 16))
    # One stable sort by the key (pool, target, source), packed into one integer, sorts each
    # pool by (target, source) with ties left in shuffled order, as sorting each pool would.
    src, tgt = lengths[order, 0], lengths[order, 1]
    pools = np.arange(len(order)) // per_pool
    key = (pools * (tgt.max(initial=0) + 1) + tgt) * (src.max(initial=0) + 1) + src
    order = order[np.argsort(key, kind="stable")]
    if batch_tokens:
        cuts = _token_cuts((lengths[order, 1] + 1).tolist(), per_pool, batch_tokens)
    else:  # pools hold whole batches, so every batch_size-th position starts one
        cuts = range(batch_size, len(order), batch_size)
    batches = np.split(order, cuts) if len(order) else []
    rng.shuffle(batches)
    return batches


def _token_cuts(targets: list[int], per_pool: int, batch_tokens: int) -> list[int]:
    """Where batches start (the first excepted) in pools of sorted target lengths (+ </s>)."""
    cuts, rows, longest = [], 0, 0
    for position, target in enumerate(targets):
        if position % per_pool == 0:  # a new pool starts a new batch
            if position:
                cuts.append(position)
            rows, longest = 0, 0
        longest_with = max(longest, target)
        if rows and longest_with * (rows + 1) > batch_tokens:
            cuts.append(position)
            rows, longest_with = 0, target
        rows += 1
        longest = longest_with
    return cuts
