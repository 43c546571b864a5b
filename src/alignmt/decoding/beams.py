"""Beam search's step in NumPy, over any engine's log-probabilities: the 2K candidates of each
sentence's K beams, which of them end a hypothesis, the beams kept, and when a sentence
stops. The onnxruntime engine's searches (onnx_engine/search.py) run it over many sentences
at once; the views of one sentence from inside (walk.py) run it on every engine. It follows
the torch engine's beam search (torch_engine/beam.py) op for op, so that a sentence gets the
same output on every engine but for rounding; the rules it ranks and stops by are rules.py's.
Nothing here imports a framework.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from alignmt.decoding.banks import MISSING, Table, row_tops
from alignmt.decoding.rules import cannot_improve, length_penalty


class Rows(NamedTuple):
    """The bookkeeping of the sentences being searched, (S,) each."""

    sentence: np.ndarray  # int64 its place in the group
    position: np.ndarray  # int64 the output position its next step fills
    limit: np.ndarray  # int64 its length limit
    prev: np.ndarray  # int64 its last token (<s> first); (S, K) in beam search


class Step(NamedTuple):
    """What one beam step keeps for the back-trace, for the S sentences it searched; its 2K
    candidates sit in slots 0..2K-1, the K live beams first."""

    sentences: np.ndarray  # (S,) each sentence's place in the group
    positions: np.ndarray  # (S,) the output position its candidates fill
    tokens: np.ndarray  # (S, 2K) each candidate's last token
    parents: np.ndarray  # (S, 2K) the beam (0..K-1) it extends
    own: np.ndarray  # (S, 2K) its last token's log-probability
    ended: np.ndarray  # (S, 2K) score / lp where it ends a hypothesis, else -inf
    scores: np.ndarray  # (S, 2K) summed log-probabilities
    attention: np.ndarray | None  # (S, K, T_src) alpha of each beam fed to this step


class Beams(NamedTuple):
    """The beams of the S sentences being searched."""

    rows: Rows  # prev is (S, K)
    scores: np.ndarray  # (S, K) the live beams' summed log-probabilities, best first
    ended: np.ndarray  # (S,) how many hypotheses have ended
    best: np.ndarray  # (S, nbest) the best ended ones' score / lp, best first
    progress: np.ndarray  # (S, K, F) int64 the live beams' way through their lexical
    # constraints (banks.Table); F = 0 without


def first_beams(rows: Rows, K: int, nbest: int, table: Table | None = None) -> Beams:
    """The beams of sentences just taken: only beam 0 is live at first (score 0, the others
    -inf), or all K would extend <s> alike; with `table`, none has met a constraint yet."""
    count = len(rows.sentence)
    progress = np.zeros((count, K, 0), np.int64) if table is None else table.start(count, K)
    scores = np.full((count, K), -np.inf, np.float32)
    scores[:, 0] = 0.0
    return Beams(
        rows._replace(prev=np.repeat(rows.prev[:, None], K, axis=1)),
        scores,
        np.zeros(count, np.int64),
        np.full((count, nbest), -np.inf, np.float32),
        progress,
    )


def beam_step(
    beams: Beams,
    log_probs: np.ndarray,
    weights: np.ndarray | None,
    eos_id: int,
    alpha: float,
    cp: np.ndarray | None = None,
    table: Table | None = None,
) -> tuple[Step, Beams, np.ndarray]:
    """One step of every sentence's beams: its record, the beams after it, and which
    sentences stop. `cp` (S, K): each beam's coverage penalty after this step, added to the
    rank of the hypotheses its candidates end. `table`: the sentences' lexical constraints,
    whose banks choose the candidates (banks.py); a hypothesis the length limit ends before
    it met them ranks `MISSING` lower per token missing."""
    S, K = beams.scores.shape
    log_probs = log_probs.reshape(S, K, -1)
    progress = beams.progress
    if table is None:
        cand, parents, tokens, rank, own = candidates(beams.scores, log_probs, eos_id)
    else:
        sentences = beams.rows.sentence
        found = table.candidates(beams.scores, log_probs, progress, sentences, eos_id)
        cand, parents, tokens, rank, progress = found
        own = log_probs[np.arange(S)[:, None], parents, tokens]
    length = beams.rows.position + 1  # (S,) the candidates' length
    at_limit = length >= beams.rows.limit
    # Of the K best, </s> ends a hypothesis (at the limit all do); -inf ones are not live yet
    ends = (rank < K) & np.isfinite(cand) & ((tokens == eos_id) | at_limit[:, None])
    lengths = length.astype(np.float64)  # lp in float64, then float32, as for a Python int
    ranked = cand / length_penalty(lengths, alpha).astype(np.float32)[:, None]
    if cp is not None:
        ranked = ranked + np.take_along_axis(cp, parents, axis=1).astype(np.float32)
    if table is not None:
        ranked = ranked - MISSING * table.missing(beams.rows.sentence, progress)
    ended = np.where(ends, ranked, -np.inf).astype(np.float32)
    attention = None if weights is None else weights.reshape(S, K, -1)
    rows = beams.rows
    step = Step(rows.sentence, rows.position, tokens, parents, own, ended, cand, attention)
    best = -np.sort(-np.concatenate([beams.best, ended], axis=1), axis=1)[:, : beams.best.shape[1]]
    count = beams.ended + ends.sum(axis=1)
    rows = rows._replace(position=length, prev=tokens[:, :K])
    after = Beams(rows, cand[:, :K], count, best, progress[:, :K])
    live = cand[:, :K].max(axis=1).astype(np.float64)
    nth = best[:, -1].astype(np.float64)
    hopeless = cannot_improve(nth, live, lengths, rows.limit.astype(np.float64), alpha)
    return step, after, at_limit | (count >= K) | hopeless


def candidates(scores: np.ndarray, log_probs: np.ndarray, eos_id: int) -> tuple:
    """The 2K best one-token extensions of each sentence's K beams, best first with those
    ending in </s> last: scores, parents, tokens, rank (place before </s> went last) and the
    token's own log-probability, each (S, 2K)."""
    S, K, V = log_probs.shape
    width = min(2 * K, V)
    # A sentence's 2K best extensions are among each beam's own 2K best.
    top = row_tops(log_probs.reshape(S * K, V), width).reshape(S, K, width)
    own = np.take_along_axis(log_probs, top, axis=2)
    total = (scores[:, :, None] + own).reshape(S, K * width)
    best = np.argsort(-total, axis=1, kind="stable")[:, : 2 * K]  # (S, 2K) best first
    cand = np.take_along_axis(total, best, axis=1)
    parents = best // width
    tokens = np.take_along_axis(top.reshape(S, K * width), best, axis=1)
    own = np.take_along_axis(own.reshape(S, K * width), best, axis=1)
    rank = np.argsort(tokens == eos_id, axis=1, kind="stable")  # </s> last
    take = lambda x: np.take_along_axis(x, rank, axis=1)  # noqa: E731
    return take(cand), take(parents), take(tokens), rank, take(own)
