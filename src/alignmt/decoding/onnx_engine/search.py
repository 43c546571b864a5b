"""Greedy and beam search over an exported model's graphs, in NumPy.

The torch engine's searches (torch_engine/search.py), written again in NumPy's ops: the
same rows, candidates and stopping rule (beam search's step is decoding/beams.py's), and
back-trace, so that a sentence gets the same
output on either engine but for rounding. Sentences are encoded a batch of `width` at a
time, when the first of them is needed, and their rows are refilled: when a sentence ends,
the next one takes over its rows at the next step (continuous batching), so that every
step runs the step graph over a full batch until the input runs out (rows.py). The length
limit, GNMT's length normalisation and coverage penalty (Wu et al. 2016, eq. 14) and the
stopping rule are rules.py's; for the coverage penalty each row's attention summed so far
rides in the state as one more field, `covered`, which the step graph does not read.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np

from alignmt.decoding.banks import Table
from alignmt.decoding.beams import Beams, Step, beam_step, first_beams
from alignmt.decoding.constraint import Constraint
from alignmt.decoding.engine import Call
from alignmt.decoding.onnx_engine.model import OnnxModel
from alignmt.decoding.onnx_engine.rows import Fields, Pending, pad_dim1, refill, select
from alignmt.decoding.results import Hypothesis, stack_rows, summed
from alignmt.decoding.rules import coverage_penalty

COVERED = "covered"  # the state's field of each row's attention summed so far


def search(
    model: OnnxModel,
    sentences: list[list[int]],
    how: Call,
    constraints: Sequence[Constraint | None] | None = None,
) -> list[list[Hypothesis]]:
    """Greedy search (a beam of one, one hypothesis) or beam search over a group of
    sentences (source ids ending in </s>), under their lexical constraints where given
    (beam search, even with a beam of one); see `Engine.searcher`."""
    src_lens = [len(ids) for ids in sentences]
    pending = Pending(model, sentences, how)
    if how.search.beam_size == 1 and how.nbest == 1 and constraints is None:
        return _greedy(model, pending, how, src_lens)
    table = None if constraints is None else Table.of(constraints)
    return _beam(model, pending, how, src_lens, table)


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


def _beam(
    model: OnnxModel, pending: Pending, how: Call, src_lens: list[int], table: Table | None
) -> list[list[Hypothesis]]:
    """Keep the K best partial outputs of each sentence (see `torch_engine.search.beam_search`
    for the rule), round the banks of `table`'s constraints where given: a sentence's K
    beams run as K rows, sentence-major (row s * K + k)."""
    K, alpha, beta = how.search.beam_size, how.search.length_penalty, how.search.coverage_penalty
    start = pending.take(how.width)
    if start is None:
        return []
    begin = partial(_started, K=K, nbest=how.nbest, covering=bool(beta), table=table)
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
        step, beams, done = beam_step(beams, log_probs, weights, model.eos_id, alpha, cp, table)
        history.append(step)
        sentences = np.arange(len(step.parents))[:, None]  # (S, 1)
        parents = (sentences * K + step.parents[:, :K]).reshape(-1)  # (S * K,) their rows
        state = select(state, parents)  # each live beam's parent's
        state, memory, beams = refill(done, pending, state, memory, beams, K, begin)
    return _backtrack(history, len(src_lens), how.nbest, src_lens)


def _started(
    taken: tuple, K: int, nbest: int, covering: bool, table: Table | None
) -> tuple[Fields, Fields, Beams]:
    """Newly taken sentences' states and memories repeated per beam, and their beams
    (`first_beams`). `covering`: their rows' attention summed so far (none yet) joins the
    state."""
    state, memory, rows = taken
    if covering:
        state = state | {COVERED: np.zeros((len(rows.sentence), 0), np.float32)}
    repeat = np.repeat(np.arange(len(rows.sentence)), K)
    beams = first_beams(rows, K, nbest, table)
    return select(state, repeat), select(memory, repeat), beams


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
