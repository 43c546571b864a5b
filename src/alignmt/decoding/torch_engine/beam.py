"""Beam search's parts: its bookkeeping, one step's candidates, when a sentence stops, and
the back-trace through the parents at the end. `beam_search` in search.py runs them.

A sentence's K beams run as K rows, sentence-major (row b * K + k). Each step keeps the
2K best one-token extensions of a sentence's beams, those ending in </s> last; hypotheses
are ranked by score / lp, GNMT's length penalty (Wu et al. 2016, eq. 14; rules.py), plus
its `coverage_penalty` when asked, for which `Covering` keeps each row's summed attention.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

from alignmt.decoding.results import Hypothesis
from alignmt.decoding.torch_engine.constraints import Table
from alignmt.decoding.torch_engine.rows import Taken, pad_dim1, select_rows
from alignmt.decoding.torch_engine.steps import as_array
from alignmt.model.distribution import LogProbs


class BeamStep(NamedTuple):
    """What one beam step keeps for the back-trace at the end (and for trace.py's view of
    the search), for the B_t sentences it searched. Its 2K candidates sit in slots
    0..2K-1, the K live beams first."""

    sentences: Tensor  # (B_t,) int64 each row's sentence (its place in the input order)
    positions: Tensor  # (B_t,) int64 the output position each sentence's candidates fill
    tokens: Tensor  # (B_t, 2K) int64 each candidate's last token
    parents: Tensor  # (B_t, 2K) int64 the beam (slot 0..K-1 of the step before) it extends
    scores: Tensor  # (B_t, 2K) summed log-probabilities
    ended: Tensor  # (B_t, 2K) score / lp where the candidate ends a hypothesis, else -inf
    attention: Tensor | None  # (B_t, K, T_src) alpha of each beam fed to this step


class Beams(NamedTuple):
    """Beam search's bookkeeping of the B_t sentences it is searching."""

    sentence: Tensor  # (B_t,) int64 its place in the input order
    position: Tensor  # (B_t,) int64 the output position its next candidates fill
    limit: Tensor  # (B_t,) int64 its length limit
    scores: Tensor  # (B_t, K) the live beams' summed log-probabilities, best first
    prev: Tensor  # (B_t, K) int64 their last tokens
    ended: Tensor  # (B_t,) int64 how many hypotheses have ended
    best_ended: Tensor  # (B_t, nbest) the best ended hypotheses' score / lp, best first
    progress: Tensor  # (B_t, K, F) int64 the live beams' way through their lexical
    # constraints (constraints.Table); F = 0 without


def coverage_penalty(covered: Tensor, beta: float) -> Tensor:
    """GNMT's coverage penalty cp = beta * sum_j log(min(sum_i alpha_ij, 1)) (Wu et al. 2016,
    eq. 14): 0 once every source word has had a whole unit of attention, and ever more
    negative as words are left with less.

    Args:
        covered: (N, T_src) each row's attention summed over its steps so far.
        beta: the penalty's weight, >= 0.

    Returns:
        (N,) cp, <= 0. Positions with no attention at all are padding (masked softmax gives
        padding exactly 0; a real word gets exactly 0 only if its weight underflows, and then
        it is left out too): a sentence's padding grows when a longer one joins the batch,
        and must not change its ranking.
    """
    real = covered > 0
    logs = covered.clamp(max=1.0).where(real, 1.0).log()  # log 1 = 0 at padding
    return beta * logs.sum(dim=1)


class Covering:
    """A step function whose state also carries each row's attention summed so far (the
    coverage penalty's), as one more batch-first field, so that the search's row operations
    move it with the rest. Starts as (N, 0) and is zero-padded to each step's T_src."""

    def __init__(self, step: Any) -> None:
        self.step = step
        self.kind: Any = None  # the wrapped state's type, to rebuild it for the step

    def wrap(self, begin: Callable[[Taken], tuple[Any, Any, Beams]]):
        """`begin` (what search keeps of newly taken sentences), with nothing covered yet
        in their rows' states."""

        def started(taken: Taken) -> tuple[tuple, Any, Beams]:
            state, memory, beams = begin(taken)
            self.kind = type(state)
            nothing = torch.zeros(beams.scores.numel(), 0, device=beams.limit.device)
            return (*state, nothing), memory, beams

        return started

    def __call__(self, prev: Tensor, state: tuple, memory: Any):
        *fields, covered = state
        inner = self.kind._make(fields) if hasattr(self.kind, "_make") else self.kind(fields)
        log_probs, inner, alpha = self.step(prev, inner, memory)
        if alpha is None:
            raise ValueError("search.coverage_penalty sums attention, and this model has none")
        covered = pad_dim1(covered, alpha.size(1)) + alpha.float()  # (N, T_src)
        return log_probs, (*inner, covered), alpha


def start_beams(
    taken: Taken, beam_size: int, nbest: int, table: Table | None = None
) -> tuple[Any, Any, Beams]:
    """The state and memory of newly taken sentences repeated per beam, and their
    bookkeeping. Only beam 0 is live at first, or all K beams would extend <s> the same way.

    Args:
        taken: B_t sentences, one row each.
        beam_size: K.
        nbest: how many ended hypotheses to keep track of.
        table: the lexical constraints of every sentence, or None.

    Returns:
        state and memory of B_t * K rows (row b * K + k), and the `Beams` of B_t sentences.
    """
    rows, count = taken.rows, len(taken.rows.sentence)
    repeat = torch.arange(count, device=rows.limit.device).repeat_interleave(beam_size)
    state, memory = select_rows(taken.state, repeat), select_rows(taken.memory, repeat)
    scores = torch.full((count, beam_size), float("-inf"), device=rows.limit.device)
    scores[:, 0] = 0.0
    beams = Beams(
        sentence=rows.sentence,
        position=rows.position,
        limit=rows.limit,
        scores=scores,
        prev=rows.prev[:, None].expand(count, beam_size).contiguous(),
        ended=torch.zeros_like(rows.limit),
        best_ended=scores.new_full((count, nbest), float("-inf")),
        progress=rows.limit.new_zeros(count, beam_size, 0)
        if table is None
        else table.start(count, beam_size),
    )
    return state, memory, beams


def candidates(
    scores: Tensor, log_probs: LogProbs, eos_id: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The 2K best one-token extensions of a sentence's K beams, those ending in </s> last.

    Args:
        scores: (B_t, K) each beam's summed log-probability.
        log_probs: (B_t * K, V) each beam's next-token log p, sentence-major.
        eos_id: the end symbol.

    Returns:
        scores, parents (the beam each extends), tokens, and rank (the candidate's place in
        best-first order, before </s> went last), each (B_t, 2K). Each beam has one </s>
        extension, so at most K of the 2K end in </s>, and slots 0..K-1 never do (V >= 2).
    """
    batch, beams = scores.shape
    width = min(2 * beams, log_probs.scores.size(-1))
    # A sentence's 2K best extensions are among each beam's own 2K best: only those K * 2K
    # candidates get a log-probability, which spares a log_softmax and an addition over all
    # K * V where the step hands out logits.
    total, token = log_probs.top(width, base=scores.reshape(-1, 1))  # (B_t * K, 2K) each
    total, token = total.view(batch, -1), token.view(batch, -1)  # (B_t, K * 2K)
    best, index = total.topk(min(2 * beams, total.size(1)), dim=1)  # (B_t, 2K) best first
    tokens = token.gather(1, index)
    rank = torch.sort((tokens == eos_id).int(), dim=1, stable=True).indices  # </s> last
    return best.gather(1, rank), (index // width).gather(1, rank), tokens.gather(1, rank), rank


def advance(
    beams: Beams,
    length: Tensor,
    cand: Tensor,
    tokens: Tensor,
    ends: Tensor,
    ended: Tensor,
    progress: Tensor | None = None,
) -> Beams:
    """The bookkeeping after a step: the K best candidates (slots 0..K-1, none of them
    </s>) live on, and the ended ones count and compete for the n-best.

    Args:
        beams: the bookkeeping before the step.
        length: (B_t,) the candidates' lengths, the next step's position.
        cand, tokens: (B_t, 2K) the candidates' scores and last tokens.
        ends: (B_t, 2K) bool, the candidates that end a hypothesis.
        ended: (B_t, 2K) their score / lp, -inf where they do not end.
        progress: (B_t, 2K, F) the candidates' way through their constraints, or None
            without constraints.

    Returns:
        The `Beams` of the next step.
    """
    K, nbest = beams.scores.size(1), beams.best_ended.size(1)
    best_ended = torch.cat([beams.best_ended.to(ended), ended], dim=1).topk(nbest, dim=1)[0]
    return beams._replace(
        position=length,
        scores=cand[:, :K],
        prev=tokens[:, :K],
        ended=beams.ended + ends.sum(dim=1),
        best_ended=best_ended,
        progress=beams.progress if progress is None else progress[:, :K],
    )


def parent_rows(parents: Tensor) -> Tensor:
    """(B_t, K) the beam each kept candidate extends -> (B_t * K,) the rows of their states."""
    sentences = torch.arange(len(parents), device=parents.device)[:, None]  # (B_t, 1)
    return (sentences * parents.size(1) + parents).flatten()


def backtrack(
    history: list[BeamStep], batch: int, nbest: int, src_lens: Sequence[int] | None = None
) -> list[list[Hypothesis]]:
    """Each sentence's nbest best ended hypotheses, traced back through the parents.

    Args:
        history: every step of the search, in order.
        batch: B, how many sentences were searched.
        nbest: how many hypotheses per sentence.
        src_lens: each sentence's source length, to cut its attention to; None: the padded
            source's.

    Returns:
        `beam_search`'s output: each sentence's hypotheses, best first.
    """
    steps = 1 + int(torch.cat([step.positions for step in history]).max())
    ended = _stack(history, "ended", batch, steps, float("-inf"))  # (B, T, 2K)
    tokens, parents = (_stack(history, f, batch, steps, 0) for f in ("tokens", "parents"))
    attention = _stack(history, "attention", batch, steps, 0.0)  # (B, T, K, T_src) | None
    best, where = ended.flatten(1).topk(nbest, dim=1)  # (B, nbest) over every (step, slot)
    sums = _stack(history, "scores", batch, steps, 0.0)  # (B, T, 2K)
    scores = sums.flatten(1).gather(1, where)
    last, slot = where // ended.size(2), where % ended.size(2)  # (B, nbest) step, slot
    trace, weights, path_sums = _follow(tokens, parents, attention, sums, last, slot)
    # a token's log-probability: its candidate's summed score less its parent's
    token_scores = torch.diff(path_sums, dim=2, prepend=path_sums.new_zeros(*slot.shape, 1))
    found, lengths, scores = (best > float("-inf")).tolist(), (last + 1).tolist(), scores.tolist()
    token_scores = token_scores.tolist()
    return [
        [
            Hypothesis(
                tokens=trace[i][n][: lengths[i][n]],
                score=scores[i][n],
                attention=None
                if weights is None
                else as_array(weights[i, n, : lengths[i][n]], src_lens and src_lens[i]),
                token_scores=token_scores[i][n][: lengths[i][n]],
            )
            for n in range(nbest)
            if found[i][n]
        ]
        for i in range(batch)
    ]


def _stack(
    history: list[BeamStep], field: str, batch: int, steps: int, fill: float
) -> Tensor | None:
    """One `BeamStep` field of every step as (B, steps, ...), each sentence's at its own
    positions; positions a sentence never reached hold `fill`. Attention is padded to the
    longest source."""
    values = [getattr(step, field) for step in history]
    if values[0] is None:
        return None
    if field == "attention":  # (B_t, K, T_src): sentences joined with longer sources
        src_len = max(v.size(2) for v in values)
        values = [torch.nn.functional.pad(v, (0, src_len - v.size(2))) for v in values]
    out = values[0].new_full((batch, steps, *values[0].shape[1:]), fill)
    for step, value in zip(history, values, strict=True):
        out[step.sentences, step.positions] = value
    return out


def _follow(
    tokens: Tensor,
    parents: Tensor,
    attention: Tensor | None,
    sums: Tensor,
    last: Tensor,
    slot: Tensor,
) -> tuple[list, Tensor | None, Tensor]:
    """Back from each hypothesis' last step and slot through the parents.

    Args:
        tokens, parents, sums: (B, T, 2K) every step's, as `_stack` lays them out.
        attention: (B, T, K, T_src) or None.
        last, slot: (B, nbest) each hypothesis' last step and its slot there.

    Returns:
        the tokens (B, nbest, T) as lists, the attention (B, nbest, T, T_src) or None and
        the summed scores (B, nbest, T) along each path; entries past a hypothesis' last
        step are to be cut.
    """
    sentence = torch.arange(len(slot), device=slot.device)[:, None]  # (B, 1)
    trace, weights, path = [], [], []
    for t in reversed(range(tokens.size(1))):
        trace.append(tokens[sentence, t, slot])  # (B, nbest)
        path.append(sums[sentence, t, slot])
        parent = parents[sentence, t, slot]  # (B, nbest)
        if attention is not None:
            weights.append(attention[sentence, t, parent])  # (B, nbest, T_src)
        slot = torch.where(t <= last, parent, slot)
    trace = torch.stack(trace[::-1], dim=2).tolist()  # (B, nbest, T)
    alpha = torch.stack(weights[::-1], dim=2) if weights else None
    return trace, alpha, torch.stack(path[::-1], dim=2)
