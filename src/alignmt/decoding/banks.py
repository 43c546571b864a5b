"""Lexically constrained beam search's candidates in NumPy: dynamic beam allocation (Post &
Vilar 2018) over any engine's log-probabilities, for the searches written over an engine's
step (beams.py's step, in onnx_engine/search.py and walk.py).

The rules are the torch engine's, op for op (torch_engine/constraints.py says them whole):
a hypothesis that has met c of a sentence's C include tokens sits in bank c; the K live
beams are taken round the banks, the most met first; each beam may extend by its 2K best
tokens and by the next token of each phrase it could write now; </s> waits until every
phrase is met, and an exclude phrase's last token is ruled out after the tokens before it.
A beam's way through its constraints is a row of int64 `progress` that the search keeps
beside its scores. Nothing here imports a framework.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from alignmt.decoding.constraint import Constraint

# How far below every hypothesis that met its constraints one that did not ranks, per
# constraint token missing, when the length limit ends it (torch_engine/constraints.py's)
MISSING = 1e4


class Table(NamedTuple):
    """The constraints of every sentence of a search, in input order, as padded arrays.

    A beam's `progress` row (F = P + 2 + X - 1 int64) holds `done` (P) 1 where the phrase
    is wholly written; `active`, the phrase it is in the middle of (-1: none); `depth`, how
    many of its tokens it has written; and `recent` (X - 1), its last tokens (-1 before its
    first), which exclude phrases read.
    """

    include: np.ndarray  # (S, P, L) int64 each phrase's tokens, -1 after its end
    include_len: np.ndarray  # (S, P) int64 its length; 0 where a sentence has fewer phrases
    exclude: np.ndarray  # (S, E, X) int64 right-aligned: the last token at X - 1, -1 before
    exclude_len: np.ndarray  # (S, E) int64; 0 where a sentence has fewer phrases
    most: int  # the most include tokens any sentence must write: C + 1 banks at most

    @classmethod
    def of(cls, constraints: Sequence[Constraint | None]) -> Table:
        """The table of sentences with these constraints (None: none)."""
        given = [c or Constraint() for c in constraints]
        include, include_len = _padded([c.include for c in given], right=False)
        exclude, exclude_len = _padded([c.exclude for c in given], right=True)
        most = int(include_len.sum(axis=1).max()) if len(given) and include_len.size else 0
        return cls(include, include_len, exclude, exclude_len, most)

    @property
    def phrases(self) -> int:
        return self.include.shape[1]

    @property
    def width(self) -> int:
        """F, the length of a progress row."""
        return self.phrases + 2 + self.exclude.shape[2] - 1

    def need(self, sentences: np.ndarray) -> np.ndarray:
        """(B,) sentence indices -> (B,) how many include tokens each must write."""
        return self.include_len[sentences].sum(axis=1)

    def start(self, count: int, beams: int) -> np.ndarray:
        """(count, beams, F) the progress of beams that have written nothing."""
        row = np.full(self.width, -1, np.int64)
        row[: self.phrases] = 0  # done
        row[self.phrases + 1] = 0  # depth
        return np.tile(row, (count, beams, 1))

    def met(self, sentences: np.ndarray, progress: np.ndarray) -> np.ndarray:
        """(B,) sentences and (B, M, F) progress -> (B, M) include tokens written."""
        done, _, depth, _ = self._split(progress)
        lengths = self.include_len[sentences][:, None]  # (B, 1, P)
        return (done * lengths).sum(axis=2) + depth

    def missing(self, sentences: np.ndarray, progress: np.ndarray) -> np.ndarray:
        """(B,) sentences and (B, M, F) progress -> (B, M) include tokens still to write."""
        return self.need(sentences)[:, None] - self.met(sentences, progress)

    def candidates(
        self,
        scores: np.ndarray,
        log_probs: np.ndarray,
        progress: np.ndarray,
        sentences: np.ndarray,
        eos_id: int,
    ) -> tuple[np.ndarray, ...]:
        """2K extensions of the K beams of each sentence, chosen round the banks, those
        ending in </s> last.

        Args:
            scores: (B, K) each beam's summed log-probability.
            log_probs: (B * K, V) each beam's next-token log p, sentence-major.
            progress: (B, K, F) each beam's progress.
            sentences: (B,) the sentences' places in the table.
            eos_id: the end symbol.

        Returns:
            scores, parents, tokens and rank (the order round the banks), (B, 2K) each, as
            beams.py's `candidates` gives them, and the candidates' progress (B, 2K, F).
        """
        K = progress.shape[1]
        full = log_probs.reshape(len(scores), K, -1)  # (B, K, V)
        full = self._rule_out(full, progress, sentences, eos_id)
        total = scores[:, :, None] + full  # (B, K, V)
        pool, pool_tokens, pool_parents = self._pool(total, progress, sentences)  # (B, M) each
        parent_progress = np.take_along_axis(progress, pool_parents[:, :, None], axis=1)
        pool_progress = self._advance(parent_progress, pool_tokens, sentences)  # (B, M, F)
        ends = (pool_tokens == eos_id) & (self.need(sentences) > 0)[:, None]
        order = self._round_the_banks(pool, self.met(sentences, pool_progress), ends, sentences)
        take = lambda x, i: np.take_along_axis(x, i, axis=1)  # noqa: E731
        chosen = order[:, : min(2 * K, order.shape[1])]  # (B, 2K) round the banks
        cand, tokens = take(pool, chosen), take(pool_tokens, chosen)
        rank = np.argsort(tokens == eos_id, axis=1, kind="stable")  # </s> last
        chosen = take(chosen, rank)
        return (
            take(cand, rank),
            take(pool_parents, chosen),
            take(tokens, rank),
            rank,
            np.take_along_axis(pool_progress, chosen[:, :, None], axis=1),
        )

    def _split(self, progress: np.ndarray) -> tuple[np.ndarray, ...]:
        P = self.phrases
        return progress[..., :P], progress[..., P], progress[..., P + 1], progress[..., P + 2 :]

    def _pool(self, total: np.ndarray, progress: np.ndarray, sentences: np.ndarray) -> tuple:
        """Each beam's 2K best tokens and the phrase tokens it may write next, each (beam,
        token) once: scores (-inf for none), tokens and parent beams, (B, M) each."""
        B, K, V = total.shape
        # each beam's W best columns, best first, ties to the lower column (a stable sort of
        # the W found by a partition, not of all V)
        columns = row_tops(total.reshape(B * K, V), min(2 * K, V)).reshape(B, K, -1)
        values = np.take_along_axis(total, columns, axis=2)
        order = np.argsort(-values, axis=2, kind="stable")
        token = np.take_along_axis(columns, order, axis=2)  # (B, K, W)
        top = np.take_along_axis(values, order, axis=2)
        forced, allowed = self._next_tokens(progress, sentences)  # (B, K, P)
        # a phrase token already among the beam's best is a candidate once, and so is a
        # token that begins two phrases
        again = (forced[..., None] == token[:, :, None, :]).any(axis=3)  # (B, K, P)
        twice = (forced[..., :, None] == forced[..., None, :]) & allowed[..., None, :]
        earlier = np.tril(np.ones(twice.shape[-2:], bool), -1)
        again |= (twice & earlier).any(axis=3)
        forced_scores = np.take_along_axis(total, forced, axis=2)
        forced_scores = np.where(~allowed | again, -np.inf, forced_scores)
        pool = np.concatenate([top, forced_scores], axis=2).reshape(B, -1)  # (B, M)
        tokens = np.concatenate([token, forced], axis=2).reshape(B, -1)
        parents = np.repeat(np.arange(K), pool.shape[1] // K)
        return pool, tokens, np.broadcast_to(parents, pool.shape)

    def _rule_out(
        self, log_probs: np.ndarray, progress: np.ndarray, sentences: np.ndarray, eos_id: int
    ) -> np.ndarray:
        """(B, K, V) log-probabilities with -inf where a token would complete an exclude
        phrase, and at </s> for beams that have not met every include phrase."""
        recent = self._split(progress)[3]  # (B, K, X - 1)
        exclude = self.exclude[sentences][:, None]  # (B, 1, E, X)
        before = exclude[..., :-1]
        follows = ((before == -1) | (before == recent[:, :, None, :])).all(axis=3)  # (B, K, E)
        follows &= (self.exclude_len[sentences] > 0)[:, None]
        last = np.broadcast_to(np.maximum(exclude[..., -1], 0), follows.shape)
        out = log_probs.copy()
        b, k, e = np.nonzero(follows)
        out[b, k, last[b, k, e]] = -np.inf
        unmet = self.missing(sentences, progress) > 0  # (B, K)
        out[..., eos_id] = np.where(unmet, -np.inf, out[..., eos_id])
        return out

    def _next_tokens(
        self, progress: np.ndarray, sentences: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The token each beam would write next of each phrase: the next of the phrase it is
        in the middle of (and no other), else the first of each phrase not yet done; tokens
        (B, K, P) int64 (0 where not allowed) and allowed (B, K, P) bool."""
        done, active, depth, _ = self._split(progress)
        include = self.include[sentences]  # (B, P, L)
        P, L = include.shape[1:]
        at = np.minimum(depth, L - 1)[:, :, None, None]  # (B, K, 1, 1)
        following = np.take_along_axis(include[:, None], at, axis=3)[..., 0]  # (B, K, P)
        first = np.broadcast_to(include[:, None, :, 0], following.shape)
        in_it = active[..., None] == np.arange(P)  # (B, K, P) the phrase in progress
        free = (active < 0)[..., None] & (done == 0) & (self.include_len[sentences] > 0)[:, None]
        allowed = in_it | free
        return np.where(allowed, np.where(in_it, following, first), 0), allowed

    def _advance(self, progress: np.ndarray, tokens: np.ndarray, sentences: np.ndarray):
        """(B, M, F) progress after writing (B, M) tokens: the token continues the phrase
        in progress, or else that phrase's partial progress is dropped, and the token may
        begin (or, for a one-token phrase, be) the first phrase not yet done that begins
        with it."""
        done, active, depth, recent = self._split(progress)
        recent = np.concatenate([recent, tokens[..., None]], axis=2)[..., 1:]
        include, lengths = self.include[sentences], self.include_len[sentences]  # (B, P, L)
        P, L = include.shape[1:]
        if P == 0:
            return np.concatenate([done, active[..., None], depth[..., None], recent], axis=2)
        phrases = include[:, None]  # (B, 1, P, L)
        a = np.maximum(active, 0)  # (B, M)
        current = np.take_along_axis(phrases, a[..., None, None], axis=2)[:, :, 0]  # (B, M, L)
        expected = np.take_along_axis(current, np.minimum(depth, L - 1)[..., None], axis=2)
        goes_on = (active >= 0) & (tokens == expected[..., 0])
        finishes = goes_on & (depth + 1 == np.take_along_axis(lengths, a, axis=1))
        begins = (done == 0) & (phrases[..., 0] == tokens[..., None]) & (lengths > 0)[:, None]
        begun = begins.argmax(axis=2)  # (B, M) the first phrase it begins
        begins = begins.any(axis=2) & ~goes_on
        whole = begins & (np.take_along_axis(lengths, begun, axis=1) == 1)
        phrase = np.arange(P)
        done = done | ((phrase == a[..., None]) & finishes[..., None])
        done = done | ((phrase == begun[..., None]) & whole[..., None])
        partial = begins & ~whole
        going = goes_on & ~finishes
        active = np.where(going, active, np.where(partial, begun, -1))
        depth = np.where(going, depth + 1, partial.astype(np.int64))
        return np.concatenate([done, active[..., None], depth[..., None], recent], axis=2)

    def _round_the_banks(
        self, pool: np.ndarray, met: np.ndarray, ends: np.ndarray, sentences: np.ndarray
    ) -> np.ndarray:
        """(B, M) the pool's candidates in the order the beam's slots take them: round the
        banks, the most include tokens met first, each bank's best first; the </s> of each
        beam that has met its constraints before all, and -inf scores last."""
        need = self.need(sentences)[:, None]  # (B, 1)
        order = np.argsort(-pool, axis=1, kind="stable")  # (B, M) best first
        bank = np.take_along_axis(met, order, axis=1)
        place = np.cumsum(bank[..., None] == np.arange(self.most + 1), axis=1)  # (B, M, C + 1)
        turn = np.take_along_axis(place, bank[..., None], axis=2)[..., 0] - 1  # rank in its bank
        key = (turn * (need + 1) + need - bank).astype(np.float64)
        key = np.where(np.take_along_axis(ends, order, axis=1), -1.0, key)
        key = np.where(np.take_along_axis(pool, order, axis=1) == -np.inf, np.inf, key)
        return np.take_along_axis(order, np.argsort(key, axis=1, kind="stable"), axis=1)


def _padded(
    phrases: list[tuple[tuple[int, ...], ...]], right: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Each sentence's phrases as (S, P, L) int64, -1 where there is none, and (S, P) their
    lengths; `right` aligns each phrase's last token at L - 1. L is at least 1."""
    most = max((len(p) for p in phrases), default=0)
    longest = max((len(t) for p in phrases for t in p), default=1)
    out = np.full((len(phrases), most, longest), -1, np.int64)
    lengths = np.zeros((len(phrases), most), np.int64)
    for s, sentence in enumerate(phrases):
        for p, tokens in enumerate(sentence):
            start = longest - len(tokens) if right else 0
            out[s, p, start : start + len(tokens)] = tokens
            lengths[s, p] = len(tokens)
    return out, lengths


def row_tops(log_probs: np.ndarray, width: int) -> np.ndarray:
    """(N, V) -> (N, width) int64: each row's `width` largest entries' columns, in column
    order. The threshold comes from a partition of the values, which is twice as fast as
    one of their indices; a tie at a threshold (more than `width` at or above it) falls
    back to a stable sort, which keeps the lowest of the tied columns."""
    N, V = log_probs.shape
    if np.isneginf(log_probs).any():
        # -inf (a beam not yet live, a word outside a shortlist, a token ruled out) ties
        # everywhere, and a partition over many ties is 15x slower: such columns get
        # distinct keys below every score instead, the lower column the higher, as the
        # reference search breaks ties
        below = np.float32(-1e30) * (1 + np.arange(V, dtype=np.float32) / V)
        log_probs = np.where(np.isneginf(log_probs), below, log_probs)
    kth = V - width
    threshold = np.partition(log_probs, kth, axis=1)[:, kth : kth + 1]  # (N, 1)
    above = log_probs >= threshold  # (N, V)
    at_or_above = np.flatnonzero(above)  # flat: 15x faster than 2-D nonzero
    if len(at_or_above) == N * width:
        return (at_or_above % V).reshape(N, width)
    tied = np.flatnonzero(above.sum(axis=1) != width)  # the rows that tie at their threshold
    out = np.empty((N, width), np.int64)
    fine = np.setdiff1d(np.arange(N), tied)
    out[fine] = np.nonzero(above[fine])[1].reshape(len(fine), width)
    order = np.argsort(-log_probs[tied], axis=1, kind="stable")[:, :width]
    out[tied] = np.sort(order, axis=1)
    return out
