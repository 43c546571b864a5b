"""Greedy and beam search over an exported model's graphs, in NumPy.

The torch engine's searches (torch_engine/search.py), written again in NumPy's ops: the
same rows, candidates, stopping rule and back-trace, so that a sentence gets the same
output on either engine but for rounding. Sentences are encoded a batch of `width` at a
time, when the first of them is needed, and their rows are refilled: when a sentence ends,
the next one takes over its rows at the next step (continuous batching), so that every
step runs the step graph over a full batch until the input runs out (rows.py). The length
limit, GNMT's length normalisation and coverage penalty (Wu et al. 2016, eq. 14) and the
stopping rule are rules.py's; for the coverage penalty each row's attention summed so far
rides in the state as one more field, `covered`, which the step graph does not read.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import numpy as np

from alignmt.decoding.engine import Call
from alignmt.decoding.onnx_engine.model import OnnxModel
from alignmt.decoding.onnx_engine.rows import Fields, Pending, Rows, pad_dim1, refill, select
from alignmt.decoding.results import Hypothesis, stack_rows, summed
from alignmt.decoding.rules import cannot_improve, coverage_penalty, length_penalty

COVERED = "covered"  # the state's field of each row's attention summed so far


def search(model: OnnxModel, sentences: list[list[int]], how: Call) -> list[list[Hypothesis]]:
    """Greedy search (a beam of one, one hypothesis) or beam search over a group of
    sentences (source ids ending in </s>); see `Engine.searcher`."""
    src_lens = [len(ids) for ids in sentences]
    pending = Pending(model, sentences, how)
    if how.search.beam_size == 1 and how.nbest == 1:
        return _greedy(model, pending, how, src_lens)
    return _beam(model, pending, how, src_lens)


# --- greedy search ---------------------------------------------------------------------------


def _greedy(
    model: OnnxModel, pending: Pending, how: Call, src_lens: list[int]
) -> list[list[Hypothesis]]:
    """The most probable token at every step, one row per sentence."""
    start = pending.take(how.width)
    if start is None:
        return []
    state, memory, rows = start
    history = []  # each step's (sentences, positions, tokens, log-probabilities, alpha)
    while len(rows.sentence):
        if how.check is not None:
            how.check()
        log_probs, state, alpha = model.step(rows.prev, state, memory)  # (S, V)
        tokens = log_probs.argmax(axis=1)
        chosen = np.take_along_axis(log_probs, tokens[:, None], axis=1)[:, 0]
        history.append((rows.sentence, rows.position, tokens, chosen, alpha))
        rows = rows._replace(position=rows.position + 1, prev=tokens)
        done = (tokens == model.eos_id) | (rows.position >= rows.limit)
        state, memory, rows = refill(done, pending, state, memory, rows)
    return [[h] for h in _greedy_outputs(history, src_lens)]


def _greedy_outputs(history: list, src_lens: list[int]) -> list[Hypothesis]:
    """Each sentence's output from the steps that chose it."""
    tokens: list[list[int]] = [[] for _ in src_lens]
    scores: list[list[float]] = [[] for _ in src_lens]
    alphas: list[list[np.ndarray]] = [[] for _ in src_lens]
    for sentences, _, taken, their_log_probs, alpha in history:  # (S,) each; alpha (S, T_src)
        chosen = zip(sentences, taken, their_log_probs, strict=True)
        for row, (i, token, log_prob) in enumerate(chosen):
            tokens[i].append(int(token))
            scores[i].append(float(log_prob))
            if alpha is not None:
                alphas[i].append(alpha[row, : src_lens[i]])
    return [
        Hypothesis(t, summed(s), stack_rows(a), s)
        for t, s, a in zip(tokens, scores, alphas, strict=True)
    ]


# --- beam search -----------------------------------------------------------------------------


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


def _beam(
    model: OnnxModel, pending: Pending, how: Call, src_lens: list[int]
) -> list[list[Hypothesis]]:
    """Keep the K best partial outputs of each sentence (see `torch_engine.search.beam_search`
    for the rule): a sentence's K beams run as K rows, sentence-major (row s * K + k)."""
    K, alpha, beta = how.search.beam_size, how.search.length_penalty, how.search.coverage_penalty
    start = pending.take(how.width)
    if start is None:
        return []
    begin = partial(_started, K=K, nbest=how.nbest, covering=bool(beta))
    state, memory, beams = begin(start)
    history: list[Step] = []
    while len(beams.rows.sentence):
        if how.check is not None:
            how.check()
        flat = beams.rows.prev.reshape(-1)  # (S * K,)
        covered = state.get(COVERED)
        log_probs, state, weights = model.step(flat, state, memory)  # (S * K, V)
        cp = None
        if covered is not None:  # each row's attention after this step, and its penalty
            if weights is None:
                raise ValueError("search.coverage_penalty sums attention, and this model has none")
            state[COVERED] = pad_dim1(covered, weights.shape[1]) + weights
            cp = coverage_penalty(state[COVERED], beta).reshape(len(beams.scores), K)
        step, beams, done = _beam_step(beams, log_probs, weights, model.eos_id, alpha, cp)
        history.append(step)
        sentences = np.arange(len(step.parents))[:, None]  # (S, 1)
        parents = (sentences * K + step.parents[:, :K]).reshape(-1)  # (S * K,) their rows
        state = select(state, parents)  # each live beam's parent's
        state, memory, beams = refill(done, pending, state, memory, beams, K, begin)
    return _backtrack(history, len(src_lens), how.nbest, src_lens)


def _started(taken: tuple, K: int, nbest: int, covering: bool) -> tuple[Fields, Fields, Beams]:
    """Newly taken sentences' states and memories repeated per beam, and their beams: only
    beam 0 is live at first, or all K would extend <s> alike. `covering`: their rows'
    attention summed so far (none yet) joins the state."""
    state, memory, rows = taken
    if covering:
        state = state | {COVERED: np.zeros((len(rows.sentence), 0), np.float32)}
    repeat = np.repeat(np.arange(len(rows.sentence)), K)
    scores = np.full((len(rows.sentence), K), -np.inf, np.float32)
    scores[:, 0] = 0.0
    beams = Beams(
        rows._replace(prev=np.repeat(rows.prev[:, None], K, axis=1)),
        scores,
        np.zeros(len(rows.sentence), np.int64),
        np.full((len(rows.sentence), nbest), -np.inf, np.float32),
    )
    return select(state, repeat), select(memory, repeat), beams


def _beam_step(
    beams: Beams,
    log_probs: np.ndarray,
    weights: np.ndarray | None,
    eos_id: int,
    alpha: float,
    cp: np.ndarray | None = None,
) -> tuple[Step, Beams, np.ndarray]:
    """One step of every sentence's beams: its record, the beams after it, and which
    sentences stop. `cp` (S, K): each beam's coverage penalty after this step, added to the
    rank of the hypotheses its candidates end."""
    S, K = beams.scores.shape
    log_probs = log_probs.reshape(S, K, -1)
    cand, parents, tokens, rank, own = _candidates(beams.scores, log_probs, eos_id)
    length = beams.rows.position + 1  # (S,) the candidates' length
    at_limit = length >= beams.rows.limit
    # Of the K best, </s> ends a hypothesis (at the limit all do); -inf ones are not live yet
    ends = (rank < K) & np.isfinite(cand) & ((tokens == eos_id) | at_limit[:, None])
    lengths = length.astype(np.float64)  # lp in float64, then float32, as for a Python int
    ranked = cand / length_penalty(lengths, alpha).astype(np.float32)[:, None]
    if cp is not None:
        ranked = ranked + np.take_along_axis(cp, parents, axis=1).astype(np.float32)
    ended = np.where(ends, ranked, -np.inf).astype(np.float32)
    attention = None if weights is None else weights.reshape(S, K, -1)
    rows = beams.rows
    step = Step(rows.sentence, rows.position, tokens, parents, own, ended, cand, attention)
    best = -np.sort(-np.concatenate([beams.best, ended], axis=1), axis=1)[:, : beams.best.shape[1]]
    count = beams.ended + ends.sum(axis=1)
    rows = rows._replace(position=length, prev=tokens[:, :K])
    after = Beams(rows, cand[:, :K], count, best)
    live = cand[:, :K].max(axis=1).astype(np.float64)
    nth = best[:, -1].astype(np.float64)
    hopeless = cannot_improve(nth, live, lengths, rows.limit.astype(np.float64), alpha)
    return step, after, at_limit | (count >= K) | hopeless


def _candidates(scores: np.ndarray, log_probs: np.ndarray, eos_id: int) -> tuple:
    """The 2K best one-token extensions of each sentence's K beams, best first with those
    ending in </s> last: scores, parents, tokens, rank (place before </s> went last) and the
    token's own log-probability, each (S, 2K)."""
    S, K, V = log_probs.shape
    width = min(2 * K, V)
    # A sentence's 2K best extensions are among each beam's own 2K best.
    top = _row_tops(log_probs.reshape(S * K, V), width).reshape(S, K, width)
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


def _row_tops(log_probs: np.ndarray, width: int) -> np.ndarray:
    """(N, V) -> (N, width) int64: each row's `width` largest entries' columns, in column
    order. The threshold comes from a partition of the values, which is twice as fast as
    one of their indices; a tie at a threshold (more than `width` at or above it) falls
    back to a stable sort, which keeps the lowest of the tied columns."""
    N, V = log_probs.shape
    kth = V - width
    threshold = np.partition(log_probs, kth, axis=1)[:, kth : kth + 1]  # (N, 1)
    at_or_above = np.flatnonzero(log_probs >= threshold)  # flat: 15x faster than 2-D nonzero
    if len(at_or_above) == N * width:
        return (at_or_above % V).reshape(N, width)
    # the lowest columns among those tied, as the reference search breaks ties
    return np.sort(np.argsort(-log_probs, axis=1, kind="stable")[:, :width], axis=1)


def _backtrack(
    history: list[Step], count: int, nbest: int, src_lens: list[int]
) -> list[list[Hypothesis]]:
    """Each sentence's nbest best ended hypotheses, best first, traced back through the
    parents (see `torch_engine.beam.backtrack`)."""
    # each sentence's ended candidates: (rank, output position, slot)
    ended: list[list[tuple[float, int, int]]] = [[] for _ in range(count)]
    at: dict[tuple[int, int], tuple[int, int]] = {}  # (sentence, position) -> (step, its row)
    for t, step in enumerate(history):
        rows = zip(step.sentences.tolist(), step.positions.tolist(), strict=True)
        for row, (sentence, position) in enumerate(rows):
            at[sentence, position] = (t, row)
            for slot in np.flatnonzero(np.isfinite(step.ended[row])):
                ended[sentence].append((float(step.ended[row, slot]), position, int(slot)))
    out = []
    for sentence, found in enumerate(ended):
        best = sorted(found, key=lambda entry: -entry[0])[:nbest]
        out.append([_trace(history, at, sentence, p, slot, src_lens) for _, p, slot in best])
    return out


def _trace(
    history: list[Step], at: dict, sentence: int, position: int, slot: int, src_lens: list[int]
) -> Hypothesis:
    """The hypothesis whose last candidate sits at `slot` of the sentence's step at output
    `position`, followed back through its parents: slot k of a step is live beam k of the
    next."""
    tokens, own, alphas = [], [], []
    t, row = at[sentence, position]
    score = float(history[t].scores[row, slot])
    while True:
        t, row = at[sentence, position]
        step = history[t]
        parent = int(step.parents[row, slot])
        tokens.append(int(step.tokens[row, slot]))
        own.append(float(step.own[row, slot]))
        if step.attention is not None:
            alphas.append(step.attention[row, parent, : src_lens[sentence]])
        if position == 0:
            break
        position, slot = position - 1, parent
    return Hypothesis(tokens[::-1], score, stack_rows(alphas[::-1]), own[::-1])
