"""Inside one sentence's decoding, on any engine: the decoder step by step, and beam search
as a tree.

`step_through` runs the decoder over one sentence and records, at every output position,
the attention, the most probable next tokens and the token taken. The caller can force a
prefix of the output ("what would it say after this?") and put all of a step's attention
on one source position ("what would it say had it looked here?"). `beam_trace` keeps every
candidate beam search weighed, with its parent, so that the search can be drawn as a tree.

Both are written once, in NumPy, over an engine's `encode`, `step` (which takes the
override as `steer`) and `select`, with beam search's step from beams.py and its rules from
rules.py: what they show is what the engine's own searches compute, on PyTorch, Flax or
ONNX Runtime alike. Words are the translator's (translator.py). Nothing here imports a
framework.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from alignmt.decoding.banks import Table
from alignmt.decoding.beams import Rows, Step, beam_step, first_beams
from alignmt.decoding.constraint import Constraint
from alignmt.decoding.results import BeamNode, BeamStatus, BeamTrace, DecoderStep, Hypothesis
from alignmt.decoding.rules import coverage_penalty, sentence_limit

if TYPE_CHECKING:
    from alignmt.config import SearchConfig
    from alignmt.decoding.engine import Call, Check, Engine


def step_through(
    engine: Engine,
    src: list[int],
    *,
    max_len: int,
    prefix: Sequence[int] = (),
    override: Mapping[int, int] | None = None,
    top_k: int = 5,
    beam_size: int = 1,
    search: SearchConfig,
    check: Check | None = None,
) -> list[DecoderStep]:
    """Decode one sentence, recording every step; force `prefix`, then go on greedily or
    with a beam of `beam_size` to </s> or `max_len` tokens.

    Args:
        engine: the model's engine.
        src: source ids ending in </s>.
        max_len: the most output tokens (</s> included), at least len(prefix).
        prefix: output ids to take at positions 0, 1, ... whatever the model prefers.
        override: output position -> source position that gets all of that step's
            attention (the step's steer puts weight 1 there in place of its alpha); the
            model must have attention.
        top_k: candidates recorded per step.
        beam_size: with more than 1, the continuation after the prefix is beam search's
            best under `search`'s length and coverage penalties, and its steps are recorded
            by replaying it.
        check: called before every decoder step; it stops the decoding by raising.

    Returns:
        One `DecoderStep` per output token, in order.
    """
    override = dict(override or {})
    if override and not engine.has_attention:
        raise ValueError("this model has no attention to override")
    if any(not 0 <= j < len(src) for j in override.values()):
        raise ValueError(f"override positions must lie in [0, {len(src)}), got {override}")
    if len(prefix) > max_len:
        raise ValueError(f"the prefix ({len(prefix)} tokens) is longer than max_len = {max_len}")
    follow = list(prefix)
    if beam_size > 1:
        history = _sentence_beam(
            engine, src, max_len, beam_size, 1, search, check, override=override, prefix=follow
        )
        trace = tree(history, beam_size)
        follow = trace.tokens(trace.finished[0]) if trace.finished else follow
    return _walk(engine, src, follow, len(prefix), max_len, top_k, check, override)


def _walk(
    engine: Engine,
    src: list[int],
    follow: list[int],
    forced: int,
    max_len: int,
    top_k: int,
    check: Check | None,
    override: dict[int, int],
) -> list[DecoderStep]:
    """Take `follow`'s tokens, then the most probable, until </s> or `max_len`; record each
    step. The first `forced` tokens are marked as forced; `check` runs before each step."""
    state, memory = engine.encode([src])
    steps: list[DecoderStep] = []
    prev = np.array([engine.bos_id], np.int64)
    while len(steps) < max_len and (not steps or steps[-1].token != engine.eos_id):
        position = len(steps)
        if check is not None:
            check()
        steer = _steer(override.get(position), 1, len(src))
        log_probs, state, alpha = engine.step(prev, state, memory, steer)  # (1, V), (1, T)
        alpha = None if alpha is None else alpha[:, : len(src)]  # an engine may pad T_src
        row = log_probs[0]
        top = np.argsort(-row, kind="stable")[:top_k]  # best first; ties: the lower id
        token = follow[position] if position < len(follow) else int(top[0])
        steps.append(
            DecoderStep(
                token=token,
                log_prob=float(row[token]),
                forced=position < forced,
                attention=None if alpha is None else alpha[0],
                top_tokens=top.tolist(),
                top_log_probs=row[top].tolist(),
                shown=_cut(engine.shown(state), len(src)),
            )
        )
        prev = np.array([token], np.int64)
    return steps


def _cut(shown: dict, length: int) -> dict:
    """Shown values with their weights (N rows over the source) cut to the source's length."""
    return {k: [row[:length] for row in v] if isinstance(v, list) else v for k, v in shown.items()}


def _steer(column: int | None, rows: int, length: int) -> np.ndarray | None:
    """(rows, length) all of every row's weight on source position `column`; None: none."""
    if column is None:
        return None
    steer = np.zeros((rows, length), np.float32)
    steer[:, column] = 1.0
    return steer


def beam_trace(
    engine: Engine,
    src: list[int],
    *,
    max_len: int,
    beam_size: int,
    search: SearchConfig,
    check: Check | None = None,
    constraint: Constraint | None = None,
) -> BeamTrace:
    """Beam search over one sentence, keeping every candidate it weighed.

    The search runs as the engines' beam search with nbest = beam_size: it stops only once
    K hypotheses have ended or none left could beat the K-th best. The steps up to any
    smaller nbest's stop are the same, and what ends later cannot outrank that search's
    n-best, so for every n the first n finished nodes, ranked, are beam search's n-best.

    Args:
        engine: the model's engine.
        src: source ids ending in </s>.
        max_len: the most output tokens (</s> included).
        beam_size: K.
        search: the length and coverage penalties' weights.
        check: called before every decoder step; it stops the search by raising.
        constraint: lexical constraints on the output, or None.
    """
    history = _sentence_beam(
        engine, src, max_len, beam_size, beam_size, search, check, constraint=constraint
    )
    return tree(history, beam_size)


def _sentence_beam(
    engine: Engine,
    src: list[int],
    max_len: int,
    K: int,
    nbest: int,
    search: SearchConfig,
    check: Check | None,
    *,
    override: Mapping[int, int] | None = None,
    prefix: Sequence[int] = (),
    constraint: Constraint | None = None,
) -> list[Step]:
    """Beam search's steps over one sentence, its K beams as K rows, round the banks of
    `constraint` where given. At the positions of `prefix` every other token is ruled out,
    so the beams grow from the prefix (their scores then leave out its log-probabilities,
    the same for every beam); `override` steers every row's attention at the positions it
    names."""
    alpha, beta = search.length_penalty, search.coverage_penalty
    state, memory = engine.encode([src])
    first = np.zeros(K, np.int64)
    state, memory = engine.select(state, first), engine.select(memory, first)
    one = np.zeros(1, np.int64)
    rows = Rows(one, one, np.array([max_len]), np.full(1, engine.bos_id, np.int64))
    table = None if constraint is None else Table.of([constraint])
    beams = first_beams(rows, K, nbest, table)
    covered = np.zeros((K, len(src)), np.float32)  # each row's attention summed so far
    history: list[Step] = []
    while True:
        if check is not None:
            check()
        position = int(beams.rows.position[0])
        steer = _steer((override or {}).get(position), K, len(src))
        log_probs, state, weights = engine.step(beams.rows.prev.reshape(-1), state, memory, steer)
        weights = None if weights is None else weights[:, : len(src)]  # (K, T_src)
        if position < len(prefix):
            log_probs = _forced(log_probs, prefix[position])
        cp = None
        if beta:
            if weights is None:
                raise ValueError("search.coverage_penalty sums attention, and this model has none")
            covered = covered + weights
            cp = coverage_penalty(covered, beta).reshape(1, K)
        step, beams, done = beam_step(beams, log_probs, weights, engine.eos_id, alpha, cp, table)
        history.append(step)
        if done[0]:
            return history
        parents = step.parents[0, :K]  # each live beam's parent row
        state, covered = engine.select(state, parents), covered[parents]


def sentence_search(
    engine: Engine,
    sentences: list[list[int]],
    constraints: Sequence[Constraint | None],
    call: Call,
) -> list[list[Hypothesis]]:
    """Constrained beam search over an engine's step, one sentence at a time (an engine
    whose own search is compiled for plain beam search runs its constraints here): each
    sentence's `call.nbest` best hypotheses, as the engines' beam search ranks them."""
    search = call.search
    found = []
    for src, constraint in zip(sentences, constraints, strict=True):
        limit = sentence_limit(len(src) - 1, search)
        history = _sentence_beam(
            engine, src, limit, search.beam_size, call.nbest, search, call.check,
            constraint=constraint,
        )  # fmt: skip
        trace = tree(history, search.beam_size)
        found.append([trace.hypothesis(node) for node in trace.finished[: call.nbest]])
    return found


def _forced(log_probs: np.ndarray, token: int) -> np.ndarray:
    """(N, V) log-probabilities with every token but `token` ruled out: log p(token) = 0."""
    out = np.full_like(log_probs, -np.inf)
    out[:, token] = 0.0
    return out


def tree(history: Sequence[Step], beam_size: int) -> BeamTrace:
    """The tree of a one-sentence search from its steps (NumPy arrays: beams.py's `Step`,
    or the torch engine's steps moved to the CPU)."""
    nodes: list[BeamNode] = []
    live: list[int | None] = [None] * beam_size  # the node in each live slot
    for t, entry in enumerate(history):
        slots = _step_nodes(entry, t, live, last=t == len(history) - 1)
        live = [None] * beam_size
        for slot, node in slots:
            if node.status == "live":
                live[slot] = len(nodes)
            nodes.append(node)
    finished = [i for i, n in enumerate(nodes) if n.status == "finished"]
    finished.sort(key=lambda i: -nodes[i].final_score)
    return BeamTrace(nodes, finished)


def _step_nodes(
    entry: Step, t: int, live: list[int | None], last: bool
) -> list[tuple[int, BeamNode]]:
    """The candidates of one step of a one-sentence search, as (slot, node)."""
    beam_size = len(live)
    tokens, parents = entry.tokens[0].tolist(), entry.parents[0].tolist()
    scores, ended = entry.scores[0].tolist(), entry.ended[0].tolist()
    out = []
    for slot, (token, parent, score, end) in enumerate(
        zip(tokens, parents, scores, ended, strict=True)
    ):
        if score == float("-inf"):
            continue  # an extension of a beam not yet live (only beam 0 is, at first)
        if end > float("-inf"):
            status: BeamStatus = "finished"
        elif slot < beam_size:
            status = "stopped" if last else "live"
        else:
            status = "pruned"
        node = BeamNode(
            step=t,
            slot=slot,
            parent=live[parent] if t else None,
            token=token,
            score=score,
            status=status,
            final_score=end if status == "finished" else None,
            attention=None if entry.attention is None else entry.attention[0, parent],
        )
        out.append((slot, node))
    return out
