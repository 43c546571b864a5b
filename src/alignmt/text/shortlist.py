"""A lexical shortlist: for each source token, the target tokens it most likely translates
to, and the target tokens frequent enough to be allowed in every sentence (Jean et al. 2015;
L'Hostis et al. 2016; Marian's lexical shortlist). At decoding time the output layer scores
only the union of a sentence's lists (decoding/torch_engine/shortlist.py).

The lists come from co-occurrence in the training pairs, ranked by the Dice coefficient
2 c(s, t) / (c(s) + c(t)), where c counts the pairs a token (or both) occurs in. Dice needs
no model and no aligner: one pass over the corpus as ids. It ranks a word's translation
above the frequent words that co-occur with everything, which p(t | s) alone ranks first;
those are allowed anyway. The model's own attention was the other choice, but in
Bahdanau's decoder order attention is one step behind the word it produces, and its
alignments are far from a word aligner's (AER 46% on Multi30k), so its links would rank
neighbours of the translation as highly as the translation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from alignmt.text.cache import TokenArrays

PAIRS_PER_CHUNK = 50_000  # bounds the co-occurrence keys held at once


@dataclass(frozen=True)
class Shortlist:
    """Each source token's likeliest translations, and the words every sentence may use."""

    table: np.ndarray  # (V_src, L) int64: row s, s's L best target tokens, best first
    frequent: np.ndarray  # (F,) int64: the most frequent target tokens and </s>, <unk>

    @property
    def depth(self) -> int:
        """L, the most translations per source token it holds."""
        return self.table.shape[1]

    def top(self, k: int) -> Shortlist:
        """Only the k best translations per source token, 1 <= k <= depth."""
        if not 1 <= k <= self.depth:
            raise ValueError(f"a shortlist of depth {self.depth} cannot give {k} words a token")
        return Shortlist(self.table[:, :k], self.frequent)


def build_shortlist(
    arrays: TokenArrays,
    vocab_sizes: tuple[int, int],
    *,
    always: tuple[int, ...],
    per_word: int = 100,
    frequent: int = 100,
) -> Shortlist:
    """The shortlist of a tokenised parallel corpus.

    Args:
        arrays: the training pairs as ids.
        vocab_sizes: (V_src, V_tgt).
        always: target ids every sentence may output whatever its words (</s>, <unk>).
        per_word: L, translations kept per source token (fewer seen: the rest repeat
            `always[0]`).
        frequent: how many of the most frequent target tokens are always allowed.
    """
    n_src, n_tgt = vocab_sizes
    keys, pairs = _cooccurrences(arrays, n_tgt)  # (K,) s * V_tgt + t, (K,) pairs holding both
    src_count = _token_counts(arrays.src_ids, arrays.src_offsets, n_src)
    tgt_count = _token_counts(arrays.tgt_ids, arrays.tgt_offsets, n_tgt)
    allowed = np.unique(np.concatenate([np.argsort(-tgt_count, kind="stable")[:frequent], always]))
    src, tgt = keys // n_tgt, keys % n_tgt
    dice = 2 * pairs / (src_count[src] + tgt_count[tgt])
    dice[np.isin(tgt, allowed)] = -1  # allowed anyway: they would only take up places
    order = np.lexsort((tgt, -dice, src))  # by source, best first, ties by id
    src, tgt = src[order], tgt[order]
    starts = np.searchsorted(src, np.arange(n_src))
    rank = np.arange(len(src)) - starts[src]  # each entry's place in its source's list
    keep = (rank < per_word) & (dice[order] > 0)
    table = np.full((n_src, per_word), always[0], dtype=np.int64)
    table[src[keep], rank[keep]] = tgt[keep]
    return Shortlist(table, allowed.astype(np.int64))


def _token_counts(ids: np.ndarray, offsets: np.ndarray, size: int) -> np.ndarray:
    """(size,) how many sentences each token occurs in."""
    sentence = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    once = np.unique(sentence * size + ids.astype(np.int64))
    return np.bincount(once % size, minlength=size).astype(np.float64)


def _cooccurrences(arrays: TokenArrays, n_tgt: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (source token, target token) seen in one pair, as s * V_tgt + t, and how many
    pairs hold both; counted PAIRS_PER_CHUNK pairs at a time."""
    keys, counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
    for start in range(0, len(arrays), PAIRS_PER_CHUNK):
        stop = min(start + PAIRS_PER_CHUNK, len(arrays))
        src = _distinct(arrays.src_ids, arrays.src_offsets, start, stop)  # (sentence, token)
        tgt = _distinct(arrays.tgt_ids, arrays.tgt_offsets, start, stop)
        chunk = _cross(src, tgt, stop - start, n_tgt)
        keys, inverse = np.unique(np.concatenate([keys, chunk]), return_inverse=True)
        counts = np.bincount(inverse, np.concatenate([counts, np.ones(len(chunk))]), len(keys))
    return keys, counts


def _distinct(
    ids: np.ndarray, offsets: np.ndarray, start: int, stop: int
) -> tuple[np.ndarray, np.ndarray]:
    """The distinct tokens of sentences start..stop-1: (sentence - start, token), sorted."""
    tokens = ids[offsets[start] : offsets[stop]].astype(np.int64)
    sentence = np.repeat(np.arange(stop - start), np.diff(offsets[start : stop + 1]))
    width = int(tokens.max(initial=0)) + 1
    once = np.unique(sentence * width + tokens)
    return once // width, once % width


def _cross(
    src: tuple[np.ndarray, np.ndarray], tgt: tuple[np.ndarray, np.ndarray], n: int, n_tgt: int
) -> np.ndarray:
    """s * V_tgt + t for every source token s and target token t of the same sentence."""
    (src_sentence, src_token), (tgt_sentence, tgt_token) = src, tgt
    tgt_start = np.searchsorted(tgt_sentence, np.arange(n))
    tgt_len = np.bincount(tgt_sentence, minlength=n)
    times = tgt_len[src_sentence]  # each source token meets its sentence's target tokens
    first = np.repeat(tgt_start[src_sentence], times)
    step = np.arange(times.sum()) - np.repeat(np.cumsum(times) - times, times)
    return np.repeat(src_token, times) * n_tgt + tgt_token[first + step]
