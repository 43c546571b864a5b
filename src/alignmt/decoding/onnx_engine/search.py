"""Greedy and beam search over an exported model's graphs, in NumPy.

The torch engine's searches (torch_engine/search.py), written again in NumPy's ops: the
same rows, candidates, stopping rule and back-trace, so that a sentence gets the same
output on either engine but for rounding. Sentences are encoded a batch of `width` at a
time, when the first of them is needed, and their rows are refilled: when a sentence ends,
the next one takes over its rows at the next step (continuous batching), so that every
step runs the step graph over a full batch until the input runs out. The length limit,
GNMT's length normalisation (Wu et al. 2016, eq. 14) and the stopping rule are rules.py's.

A state or a memory is a dict of (N, ...) arrays by field name, as the graphs name them;
memories of batches whose sources differ in length are joined by zero-padding the shorter
along the source, which the mask reads as padding.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from alignmt.decoding.engine import Call
from alignmt.decoding.onnx_engine.model import OnnxModel
from alignmt.decoding.results import Hypothesis
from alignmt.decoding.rules import cannot_improve, length_penalty, max_output_len

Fields = dict[str, np.ndarray]


class Rows(NamedTuple):
    """The bookkeeping of the sentences being searched, (S,) each."""

    sentence: np.ndarray  # int64 its place in the group
    position: np.ndarray  # int64 the output position its next step fills
    limit: np.ndarray  # int64 its length limit
    prev: np.ndarray  # int64 its last token (<s> first); (S, K) in beam search


class Pending:
    """The sentences of a group waiting to be searched: encoded `width` at a time, only when
    needed, and handed out a few at a time."""

    def __init__(self, model: OnnxModel, sentences: list[list[int]], how: Call) -> None:
        self.batches = _encoded(model, sentences, how)
        self.state: Fields = {}
        self.memory: Fields = {}
        self.limit = np.zeros(0, np.int64)
        self.taken = 0  # sentences handed out so far
        self.bos_id = model.bos_id

    def take(self, n: int) -> tuple[Fields, Fields, Rows] | None:
        """The next n sentences (fewer if the group runs out); None when none is left."""
        while len(self.limit) < n:
            more = next(self.batches, None)
            if more is None:
                break
            self.state = _joined(self.state, more[0])
            self.memory = _joined(self.memory, more[1])
            self.limit = np.concatenate([self.limit, more[2]])
        count = min(n, len(self.limit))
        if count == 0:
            return None
        state, self.state = _split(self.state, count)
        memory, self.memory = _split(self.memory, count)
        limit, self.limit = self.limit[:count], self.limit[count:]
        sentence = np.arange(self.taken, self.taken + count)
        self.taken += count
        prev = np.full(count, self.bos_id, np.int64)
        return state, memory, Rows(sentence, np.zeros(count, np.int64), limit, prev)


def _encoded(model: OnnxModel, sentences: list[list[int]], how: Call) -> Iterator[tuple]:
    """Each batch of `how.width` sentences encoded: (state, memory, length limits)."""
    s = how.search
    for start in range(0, len(sentences), how.width):
        batch = sentences[start : start + how.width]
        state, memory = model.encode_ids(batch)
        lengths = [len(ids) for ids in batch]
        yield state, memory, max_output_len(lengths, s.max_len_ratio, s.max_len_offset)


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
        state, memory, rows = _refill(done, pending, state, memory, rows, 1)
    return [[h] for h in _greedy_outputs(history, src_lens)]


def _greedy_outputs(history: list, src_lens: list[int]) -> list[Hypothesis]:
    """Each sentence's output from the steps that chose it."""
    tokens: list[list[int]] = [[] for _ in src_lens]
    scores: list[list[float]] = [[] for _ in src_lens]
    alphas: list[list[np.ndarray]] = [[] for _ in src_lens]
    for sentences, _, chosen, log_probs, alpha in history:
        for row, (i, token, log_prob) in enumerate(zip(sentences, chosen, log_probs, strict=True)):
            tokens[i].append(int(token))
            scores[i].append(float(log_prob))
            if alpha is not None:
                alphas[i].append(alpha[row, : src_lens[i]])
    return [
        Hypothesis(t, _summed(s), _stacked(a), s)
        for t, s, a in zip(tokens, scores, alphas, strict=True)
    ]


def _summed(log_probs: list[float]) -> float:
    """A float32 sum in order, token after token, as beam search sums its scores."""
    total = np.float32(0.0)
    for value in log_probs:
        total = np.float32(total + np.float32(value))
    return float(total)


def _stacked(rows: list[np.ndarray]) -> np.ndarray | None:
    return np.stack(rows) if rows else None


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
    K, alpha = how.search.beam_size, how.search.length_penalty
    start = pending.take(how.width)
    if start is None:
        return []
    state, memory, beams = _started(start, K, how.nbest)
    history: list[Step] = []
    while len(beams.rows.sentence):
        if how.check is not None:
            how.check()
        flat = beams.rows.prev.reshape(-1)
        log_probs, state, weights = model.step(flat, state, memory)  # (S * K, V)
        step, beams, done = _beam_step(beams, log_probs, weights, model.eos_id, alpha)
        history.append(step)
        parents = (np.arange(len(step.parents))[:, None] * K + step.parents[:, :K]).reshape(-1)
        state = _rows(state, parents)  # each live beam's parent's
        state, memory, beams = _refill(done, pending, state, memory, beams, K, how.nbest)
    return _backtrack(history, len(src_lens), how.nbest, src_lens)


def _started(taken: tuple, K: int, nbest: int) -> tuple[Fields, Fields, Beams]:
    """Newly taken sentences' states and memories repeated per beam, and their beams: only
    beam 0 is live at first, or all K would extend <s> alike."""
    state, memory, rows = taken
    repeat = np.repeat(np.arange(len(rows.sentence)), K)
    scores = np.full((len(rows.sentence), K), -np.inf, np.float32)
    scores[:, 0] = 0.0
    beams = Beams(
        rows._replace(prev=np.repeat(rows.prev[:, None], K, axis=1)),
        scores,
        np.zeros(len(rows.sentence), np.int64),
        np.full((len(rows.sentence), nbest), -np.inf, np.float32),
    )
    return _rows(state, repeat), _rows(memory, repeat), beams


def _beam_step(
    beams: Beams, log_probs: np.ndarray, weights: np.ndarray | None, eos_id: int, alpha: float
) -> tuple[Step, Beams, np.ndarray]:
    """One step of every sentence's beams: its record, the beams after it, and which
    sentences stop."""
    S, K = beams.scores.shape
    log_probs = log_probs.reshape(S, K, -1)
    cand, parents, tokens, rank, own = _candidates(beams.scores, log_probs, eos_id)
    length = beams.rows.position + 1  # (S,) the candidates' length
    at_limit = length >= beams.rows.limit
    # Of the K best, </s> ends a hypothesis (at the limit all do); -inf ones are not live yet
    ends = (rank < K) & np.isfinite(cand) & ((tokens == eos_id) | at_limit[:, None])
    lengths = length.astype(np.float64)  # lp in float64, then float32, as for a Python int
    ranked = cand / length_penalty(lengths, alpha).astype(np.float32)[:, None]
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
    back to the indices' partition."""
    N, V = log_probs.shape
    kth = V - width
    threshold = np.partition(log_probs, kth, axis=1)[:, kth : kth + 1]  # (N, 1)
    at_or_above = np.flatnonzero(log_probs >= threshold)  # flat: 15x faster than 2-D nonzero
    if len(at_or_above) == N * width:
        return (at_or_above % V).reshape(N, width)
    return np.argpartition(log_probs, kth, axis=1)[:, kth:]


def _backtrack(
    history: list[Step], count: int, nbest: int, src_lens: list[int]
) -> list[list[Hypothesis]]:
    """Each sentence's nbest best ended hypotheses, best first, traced back through the
    parents (see `torch_engine.beam.backtrack`)."""
    ended: list[list[tuple[float, int, int]]] = [[] for _ in range(count)]  # (rank, step, slot)
    at: dict[tuple[int, int], int] = {}  # (sentence, position) -> its step in history
    for t, step in enumerate(history):
        for row, sentence in enumerate(step.sentences.tolist()):
            at[sentence, int(step.positions[row])] = t
            for slot in np.flatnonzero(np.isfinite(step.ended[row])):
                ended[sentence].append((float(step.ended[row, slot]), t, int(slot)))
    out = []
    for sentence, found in enumerate(ended):
        best = sorted(found, key=lambda entry: -entry[0])[:nbest]
        out.append([_trace(history, at, sentence, t, slot, src_lens) for _, t, slot in best])
    return out


def _trace(
    history: list[Step], at: dict, sentence: int, t: int, slot: int, src_lens: list[int]
) -> Hypothesis:
    """The hypothesis whose last candidate sits at `slot` of step `t`."""
    tokens, own, alphas = [], [], []
    score = float(history[t].scores[_row(history[t], sentence), slot])
    while True:
        step = history[t]
        row = _row(step, sentence)
        parent = int(step.parents[row, slot])
        tokens.append(int(step.tokens[row, slot]))
        own.append(float(step.own[row, slot]))
        if step.attention is not None:
            alphas.append(step.attention[row, parent, : src_lens[sentence]])
        position = int(step.positions[row])
        if position == 0:
            break
        t, slot = at[sentence, position - 1], parent
    return Hypothesis(tokens[::-1], score, _stacked(alphas[::-1]), own[::-1])


def _row(step: Step, sentence: int) -> int:
    return int(np.flatnonzero(step.sentences == sentence)[0])


# --- rows ------------------------------------------------------------------------------------


def _refill(
    done: np.ndarray,
    pending: Pending,
    state: Fields,
    memory: Fields,
    book: Rows | Beams,
    K: int,
    nbest: int = 1,
) -> tuple[Fields, Fields, Rows | Beams]:
    """Continuous batching between two steps: the rows of the sentences that are `done` go
    to the next sentences waiting; once none waits, the batch shrinks to the rest."""
    free = np.flatnonzero(done)
    if len(free) == 0:
        return state, memory, book
    new = pending.take(len(free))
    if new is not None:
        taken, free = free[: len(new[2].sentence)], free[len(new[2].sentence) :]
        new_state, new_memory, new_book = new if K == 1 else _started(new, K, nbest)
        rows = _rows_of(taken, K)
        state, memory = _put(state, rows, new_state), _put(memory, rows, new_memory)
        book = _put_book(book, taken, new_book)
    if len(free):
        live = np.setdiff1d(np.arange(len(done)), free)
        state, memory = _rows(state, _rows_of(live, K)), _rows(memory, _rows_of(live, K))
        book = _select_book(book, live)
    return state, memory, book


def _rows_of(sentences: np.ndarray, K: int) -> np.ndarray:
    """(n,) sentences -> (n * K,) their rows, sentence-major."""
    return (sentences[:, None] * K + np.arange(K)).reshape(-1)


def _rows(fields: Fields, index: np.ndarray) -> Fields:
    return {name: value[index] for name, value in fields.items()}


def _put(fields: Fields, index: np.ndarray, new: Fields) -> Fields:
    """`fields` with rows `index` overwritten, in place, by `new`'s (both padded alike along
    the source first where they differ): the search's arrays are its own."""
    out = {}
    for name, value in fields.items():
        value, given = _same_dim1(value, new[name])
        value[index] = given
        out[name] = value
    return out


def _put_book(book, index: np.ndarray, new):
    """Bookkeeping (a NamedTuple of (S, ...) arrays, possibly nested) with rows replaced."""
    parts = []
    for old, given in zip(book, new, strict=True):
        if isinstance(old, tuple):
            parts.append(_put_book(old, index, given))
        else:
            old = old.copy()
            old[index] = given
            parts.append(old)
    return type(book)(*parts)


def _select_book(book, index: np.ndarray):
    return type(book)(*(_select_book(x, index) if isinstance(x, tuple) else x[index] for x in book))


def _joined(fields: Fields, more: Fields) -> Fields:
    """The rows of `more` after those of `fields` (empty: none yet)."""
    if not fields:
        return dict(more)
    return {name: np.concatenate(_same_dim1(fields[name], more[name])) for name in fields}


def _split(fields: Fields, count: int) -> tuple[Fields, Fields]:
    return {n: v[:count] for n, v in fields.items()}, {n: v[count:] for n, v in fields.items()}


def _same_dim1(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x and y zero-padded to the longer second dimension, where both have one that
    differs (a field along the source)."""
    if x.ndim < 2 or x.shape[1] == y.shape[1]:
        return x, y
    size = max(x.shape[1], y.shape[1])
    return _pad_dim1(x, size), _pad_dim1(y, size)


def _pad_dim1(x: np.ndarray, size: int) -> np.ndarray:
    if x.shape[1] == size:
        return x
    widths = [(0, 0), (0, size - x.shape[1])] + [(0, 0)] * (x.ndim - 2)
    return np.pad(x, widths)
