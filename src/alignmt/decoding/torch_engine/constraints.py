"""Lexically constrained beam search: phrases each output must contain, and phrases it must
not, by dynamic beam allocation (Post & Vilar 2018).

A sentence's include phrases hold C tokens in all. A hypothesis has met c of them (a phrase
counts token by token while it is being written, and wholly once written); the candidates
of a step fall into C + 1 banks by c. Beam search keeps its K live beams from all banks
at once, so that hypotheses which took a constraint token early are not crowded out by
likelier ones that have not: the slots go round the banks, the most constraints met first,
each bank giving its next-best candidate, until K are kept. A bank with too few candidates
leaves its turns to the others, so the beam never grows with the number of constraints
(Hokamp & Liu's grid beam search keeps a beam per bank: K(C + 1) rows). With no include
phrases there is one bank, and the order is plain beam search's.

Each beam may extend by its K-best tokens, as in plain beam search, and also by the next
token of every phrase it could write now: the one it is in the middle of, or the first
token of each phrase not yet met. </s> is ruled out until every phrase is met, and an
exclude phrase's last token wherever the tokens before it were just written. Once a beam
has met every phrase, its </s> always ends a hypothesis: an ended one takes no live slot,
and the last bank's few slots would seldom go to </s>. At the length limit a hypothesis
that has not met them all ends too, ranked below every one that has.

A beam's way through its constraints is a row of int64 `progress` (`Table.start` lays it
out) that beam search keeps beside its scores, so that picking parents and refilling rows
with new sentences move it as they move everything else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from alignmt.decoding.constraint import Constraint
from alignmt.model.distribution import LogProbs

# How far below every hypothesis that met its constraints one that did not ranks, per
# constraint token missing, when the length limit ends it. Summed log-probabilities of
# outputs that fit in a limit are far smaller than this.
MISSING = 1e4


class Table(NamedTuple):
    """The constraints of every sentence of a search, in input order, as padded tensors.

    A beam's `progress` row (F = P + 2 + X - 1 int64) holds, in order:
    `done` (P) 1 where the phrase is wholly written; `active`, the phrase it is in the
    middle of (-1: none); `depth`, how many of that phrase's tokens it has written; and
    `recent` (X - 1), its last tokens (-1 before its first), which exclude phrases read.
    """

    include: Tensor  # (S, P, L) int64 each phrase's tokens, -1 after its end
    include_len: Tensor  # (S, P) int64 its length; 0 where a sentence has fewer phrases
    exclude: Tensor  # (S, E, X) int64 right-aligned: the last token at X - 1, -1 before
    exclude_len: Tensor  # (S, E) int64; 0 where a sentence has fewer phrases
    most: int  # the most include tokens any sentence must write: C + 1 banks at most

    @classmethod
    def of(cls, constraints: Sequence[Constraint | None], device: torch.device) -> Table:
        """The table of sentences with these constraints (None: none)."""
        given = [c or Constraint() for c in constraints]
        include, include_len = _padded([c.include for c in given], right=False)
        exclude, exclude_len = _padded([c.exclude for c in given], right=True)
        tensors = (x.to(device) for x in (include, include_len, exclude, exclude_len))
        most = int(include_len.sum(dim=1).max()) if len(given) else 0
        return cls(*tensors, most=most)

    @property
    def phrases(self) -> int:
        return self.include.size(1)

    @property
    def width(self) -> int:
        """F, the length of a progress row."""
        return self.phrases + 2 + self.exclude.size(2) - 1

    def need(self, sentences: Tensor) -> Tensor:
        """(B,) sentence indices -> (B,) how many include tokens each must write."""
        return self.include_len[sentences].sum(dim=1)

    def start(self, count: int, beams: int) -> Tensor:
        """(count, beams, F) the progress of beams that have written nothing."""
        row = torch.full((self.width,), -1, dtype=torch.int64, device=self.include.device)
        row[: self.phrases] = 0  # done
        row[self.phrases + 1] = 0  # depth
        return row.expand(count, beams, -1).clone()

    def met(self, sentences: Tensor, progress: Tensor) -> Tensor:
        """(B,) sentences and (B, M, F) progress -> (B, M) include tokens written."""
        done, _, depth, _ = self._split(progress)
        lengths = self.include_len[sentences][:, None]  # (B, 1, P)
        return (done * lengths).sum(dim=2) + depth

    def candidates(
        self, scores: Tensor, log_probs: LogProbs, progress: Tensor, sentences: Tensor, eos_id: int
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """`beam.candidates` under the sentences' constraints: 2K extensions of the K beams
        of each sentence, chosen round the banks, those ending in </s> last.

        Args:
            scores: (B, K) each beam's summed log-probability.
            log_probs: (B * K, V) each beam's next-token log p, sentence-major.
            progress: (B, K, F) each beam's progress.
            sentences: (B,) the sentences' places in the table.
            eos_id: the end symbol.

        Returns:
            scores, parents, tokens and rank, as `beam.candidates` returns them (rank is the
            order round the banks), and the candidates' progress (B, 2K, F).
        """
        K = progress.size(1)
        full = log_probs.full().unflatten(0, (-1, K))  # (B, K, V)
        full = self._rule_out(full, progress, sentences, eos_id)
        total = scores.unsqueeze(2) + full  # (B, K, V)
        pool, pool_tokens, pool_parents = self._pool(total, progress, sentences)  # (B, M) each
        parent_progress = progress.gather(1, _rows(pool_parents, progress.size(2)))
        pool_progress = self._advance(parent_progress, pool_tokens, sentences)  # (B, M, F)
        ends = (pool_tokens == eos_id) & (self.need(sentences) > 0)[:, None]
        order = self._round_the_banks(pool, self.met(sentences, pool_progress), ends, sentences)
        chosen = order[:, : min(2 * K, order.size(1))]  # (B, 2K) in round-the-banks order
        cand, tokens = pool.gather(1, chosen), pool_tokens.gather(1, chosen)
        rank = torch.sort((tokens == eos_id).int(), dim=1, stable=True).indices  # </s> last
        chosen = chosen.gather(1, rank)
        return (
            cand.gather(1, rank),
            pool_parents.gather(1, chosen),
            tokens.gather(1, rank),
            rank,
            pool_progress.gather(1, _rows(chosen, progress.size(2))),
        )

    def _pool(
        self, total: Tensor, progress: Tensor, sentences: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The candidates of a step: each beam's 2K best tokens and the phrase tokens it may
        write next (`_next_tokens`), each (beam, token) once.

        Args:
            total: (B, K, V) each beam's score plus each token's log-probability.

        Returns:
            scores (-inf for none), tokens and parent beams, each (B, M), M = K (2K + P).
        """
        B, K, V = total.shape
        top, token = total.topk(min(2 * K, V), dim=2)  # (B, K, W)
        forced, allowed = self._next_tokens(progress, sentences)  # (B, K, P)
        # a phrase token already among the beam's best is a candidate once
        again = (forced.unsqueeze(3) == token.unsqueeze(2)).any(dim=3)  # (B, K, P)
        # and so is a token that begins two phrases
        twice = (forced.unsqueeze(3) == forced.unsqueeze(2)) & allowed.unsqueeze(2)
        earlier = torch.ones(twice.shape[-2:], dtype=torch.bool, device=twice.device).tril(-1)
        again |= (twice & earlier).any(dim=3)
        forced_scores = total.gather(2, forced).masked_fill(~allowed | again, float("-inf"))
        pool = torch.cat([top, forced_scores], dim=2).flatten(1)  # (B, M)
        tokens = torch.cat([token, forced], dim=2).flatten(1)
        parents = torch.arange(K, device=total.device).repeat_interleave(pool.size(1) // K)
        return pool, tokens, parents.expand(B, -1)

    def missing(self, sentences: Tensor, progress: Tensor) -> Tensor:
        """(B,) sentences and (B, M, F) progress -> (B, M) include tokens still to write."""
        return self.need(sentences)[:, None] - self.met(sentences, progress)

    def _split(self, progress: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        P = self.phrases
        return progress[..., :P], progress[..., P], progress[..., P + 1], progress[..., P + 2 :]

    def _rule_out(
        self, log_probs: Tensor, progress: Tensor, sentences: Tensor, eos_id: int
    ) -> Tensor:
        """(B, K, V) log-probabilities with -inf where a token would complete an exclude
        phrase, and at </s> for beams that have not met every include phrase."""
        _, _, _, recent = self._split(progress)  # (B, K, X - 1)
        exclude = self.exclude[sentences].unsqueeze(1)  # (B, 1, E, X)
        before = exclude[..., :-1]  # (B, 1, E, X - 1)
        follows = ((before == -1) | (before == recent.unsqueeze(2))).all(dim=3)  # (B, K, E)
        follows &= self.exclude_len[sentences].unsqueeze(1) > 0
        last = exclude[..., -1].clamp(min=0).expand_as(follows)  # (B, K, E)
        # amin: +inf leaves a token as it was, -inf rules it out, whichever phrase comes first
        bar = torch.full_like(follows, float("inf"), dtype=log_probs.dtype)
        bar = bar.masked_fill(follows, float("-inf"))
        log_probs = log_probs.scatter_reduce(2, last, bar, reduce="amin")
        unmet = self.missing(sentences, progress) > 0  # (B, K)
        log_probs[..., eos_id] = log_probs[..., eos_id].masked_fill(unmet, float("-inf"))
        return log_probs

    def _next_tokens(self, progress: Tensor, sentences: Tensor) -> tuple[Tensor, Tensor]:
        """The token each beam would write next of each phrase: the next of the phrase it is
        in the middle of (and no other), else the first of each phrase not yet done.

        Returns:
            tokens (B, K, P) int64 (0 where not allowed) and allowed (B, K, P) bool.
        """
        done, active, depth, _ = self._split(progress)
        include = self.include[sentences]  # (B, P, L)
        B, P, L = include.shape
        K = progress.size(1)
        at = depth.clamp(max=L - 1)[..., None, None].expand(B, K, P, 1)  # (B, K, P, 1)
        following = include.unsqueeze(1).expand(B, K, P, L).gather(3, at).squeeze(3)
        first = include[:, None, :, 0].expand(B, K, P)
        phrase = torch.arange(P, device=progress.device)
        in_it = active.unsqueeze(2) == phrase  # (B, K, P) the phrase in progress
        free = (active < 0).unsqueeze(2) & (done == 0) & (self.include_len[sentences] > 0)[:, None]
        tokens = torch.where(in_it, following, first)
        allowed = in_it | free
        return tokens.where(allowed, 0), allowed

    def _advance(self, progress: Tensor, tokens: Tensor, sentences: Tensor) -> Tensor:
        """(B, M, F) progress after writing (B, M) tokens.

        The token continues the phrase in progress, or else that phrase's partial progress
        is dropped, and the token may begin (or, for a one-token phrase, be) the first
        phrase not yet done that begins with it."""
        done, active, depth, recent = self._split(progress)
        recent = torch.cat([recent, tokens.unsqueeze(2)], dim=2)[..., 1:]
        include, lengths = self.include[sentences], self.include_len[sentences]  # (B, P, L)
        B, P, L = include.shape
        if P == 0:
            return torch.cat([done, active.unsqueeze(2), depth.unsqueeze(2), recent], dim=2)
        M = tokens.size(1)
        phrases = include.unsqueeze(1).expand(B, M, P, L)
        a = active.clamp(min=0)
        current = phrases.gather(2, a[..., None, None].expand(B, M, 1, L)).squeeze(2)  # (B,M,L)
        expected = current.gather(2, depth.clamp(max=L - 1).unsqueeze(2)).squeeze(2)  # (B, M)
        goes_on = (active >= 0) & (tokens == expected)
        current_len = lengths.gather(1, a)  # (B, M)
        finishes = goes_on & (depth + 1 == current_len)
        begins = (done == 0) & (phrases[..., 0] == tokens.unsqueeze(2)) & (lengths > 0)[:, None]
        begun = begins.int().argmax(dim=2)  # (B, M) the first phrase it begins
        begins = begins.any(dim=2) & ~goes_on
        whole = begins & (lengths.gather(1, begun) == 1)
        phrase = torch.arange(P, device=tokens.device)
        done = done | ((phrase == a.unsqueeze(2)) & finishes.unsqueeze(2))
        done = done | ((phrase == begun.unsqueeze(2)) & whole.unsqueeze(2))
        partial = begins & ~whole
        active = torch.where(goes_on & ~finishes, active, torch.where(partial, begun, -1))
        depth = torch.where(goes_on & ~finishes, depth + 1, partial.long())
        return torch.cat([done, active.unsqueeze(2), depth.unsqueeze(2), recent], dim=2)

    def _round_the_banks(
        self, pool: Tensor, met: Tensor, ends: Tensor, sentences: Tensor
    ) -> Tensor:
        """(B, M) the pool's candidates in the order the beam's slots take them: round the
        banks, the most include tokens met first, each bank's best first; candidates with
        a score of -inf last.

        The </s> of each beam that has met its constraints (`ends`, (B, M)) comes before
        all: the banks leave the last bank too few slots for </s> to win one often, and a
        hypothesis that ends takes no live slot. (A sentence without constraints keeps
        plain beam search's order, where </s> ends only among the K best.)"""
        need = self.need(sentences)[:, None]  # (B, 1)
        order = pool.argsort(dim=1, descending=True, stable=True)  # (B, M) best first
        bank = met.gather(1, order)  # (B, M)
        place = torch.nn.functional.one_hot(bank, self.most + 1).cumsum(dim=1)  # (B, M, C + 1)
        turn = place.gather(2, bank.unsqueeze(2)).squeeze(2) - 1  # (B, M) its rank in its bank
        key = (turn * (need + 1) + need - bank).double()
        key = key.masked_fill(ends.gather(1, order), -1.0)
        key = key.masked_fill(pool.gather(1, order) == float("-inf"), float("inf"))
        return order.gather(1, key.argsort(dim=1, stable=True))


def _rows(index: Tensor, width: int) -> Tensor:
    """(B, M) indices -> (B, M, width), to gather whole rows of a (B, N, width) tensor."""
    return index.unsqueeze(2).expand(-1, -1, width)


def _padded(phrases: list[tuple[tuple[int, ...], ...]], right: bool) -> tuple[Tensor, Tensor]:
    """Each sentence's phrases as (S, P, L) int64, -1 where there is none, and (S, P) their
    lengths; `right` aligns each phrase's last token at L - 1. P and L are at least 1."""
    most = max((len(p) for p in phrases), default=0)
    longest = max((len(t) for p in phrases for t in p), default=1)
    out = torch.full((len(phrases), most, longest), -1, dtype=torch.int64)
    lengths = torch.zeros(len(phrases), most, dtype=torch.int64)
    for s, sentence in enumerate(phrases):
        for p, tokens in enumerate(sentence):
            start = longest - len(tokens) if right else 0
            out[s, p, start : start + len(tokens)] = torch.tensor(tokens)
            lengths[s, p] = len(tokens)
    return out, lengths
