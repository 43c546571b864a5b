"""Greedy and beam search over token ids, through one door: `search(model, batches, how)`.

Knows nothing about words, files or checkpoints. `how` is one `plan.SearchPlan` value (built
from the config's `SearchConfig` by `SearchPlan.from_config`) that says which search runs and
everything it reads. Below the door, `greedy_search` and `beam_search` run any step function
`step(prev, state, memory) -> (log_probs, state, alpha)` over a stream of encoded batches.
State and memory are tuples of batch-first tensors (or None), so with the row operations of
rows.py both searches hand the rows of an ended sentence to the next one waiting and drop
rows once none waits (continuous batching: `refill`, one step shared by both). The
searches live beside this module: what both make of a step in steps.py, greedy search (and
its sampling form, with sample.py's token choice) in greedy.py, beam search's candidates
and back-trace in beam.py; the length limit, GNMT's length normalisation (Wu et al. 2016,
eq. 14) and the stopping rule are rules.py's, which the Flax search shares. On the CPU the
step runs as speed.py's `fast_step` puts it: packed or int8 matmuls, and a shortlist when
asked. `decode` and `beam_decode` are short names for users with one padded batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from functools import partial

import torch
from torch import Tensor

from alignmt.decoding.results import Hypothesis
from alignmt.decoding.rules import cannot_improve, length_penalty, max_output_len
from alignmt.decoding.torch_engine.beam import (
    Beams,
    BeamStep,
    Covering,
    advance,
    backtrack,
    candidates,
    coverage_penalty,
    parent_rows,
    start_beams,
)
from alignmt.decoding.torch_engine.constraints import MISSING, Table
from alignmt.decoding.torch_engine.greedy import greedy_search
from alignmt.decoding.torch_engine.plan import SearchPlan
from alignmt.decoding.torch_engine.rows import Encoded, Pending, refill, select_rows
from alignmt.decoding.torch_engine.speed import Join, fast_step
from alignmt.decoding.torch_engine.steps import StepFn, as_array, full_precision
from alignmt.model.distribution import LogProbs
from alignmt.model.seq2seq import Seq2Seq

Source = tuple[Tensor, Tensor]  # src (B, T_src) int64 ending in </s> and padded, src_len (B,)


@torch.no_grad()
def search(model: Seq2Seq, batches: Sequence[Source], how: SearchPlan) -> list[list[Hypothesis]]:
    """Translate source batches with the search `how` describes: greedy search (or sampling,
    with `how.pick`) when `how.greedy`, else beam search; `how.width` sentences search at a
    time, and a sentence that ends hands its rows to the next. On the CPU, the decoder's
    float32 Linears run on weights packed once (see packed.py), or in int8.

    Args:
        model: a Seq2Seq or an Ensemble (put in eval mode by the caller).
        batches: (src, src_len) pairs, each encoded only when its first sentence is about to
            decode.
        how: the search.

    Returns:
        For each sentence, in input order, its hypotheses best first: one for greedy search
        and sampling, up to `how.nbest` for beam search (fewer only if fewer outputs have a
        nonzero probability). Attention is cut to the sentence's source length and on the
        CPU.
    """
    src_lens = [n for _, src_len in batches for n in src_len.tolist()]
    ids = dict(bos_id=model.bos_id, eos_id=model.eos_id)
    with fast_step(model, how.speed, how.rows) as (step, join):
        encoded = _encoded(model, batches, how, join)
        if how.greedy:
            return _greedy_hypotheses(greedy_search(step, encoded, how, **ids), src_lens)
        # beam_search's two lines, one call fewer between a request and the decoder
        history, count = beam_steps(step, encoded, how, **ids)
        return backtrack(history, count, how.nbest, src_lens) if history else []


@torch.no_grad()
def decode(model: Seq2Seq, src: Tensor, src_len: Tensor, **settings) -> list[Hypothesis]:
    """Greedy translations of one padded source batch: `search` with `SearchPlan(**settings)`
    (e.g. max_len_ratio, max_len_offset), one `Hypothesis` per sentence.

    Args:
        model: a Seq2Seq (put in eval mode by the caller).
        src: (B, T_src) int64 source ids ending in </s>, padded.
        src_len: (B,) int64 real lengths.
    """
    how = SearchPlan(width=max(len(src_len), 1), **settings)
    return [hyps[0] for hyps in search(model, [(src, src_len)], how)]


@torch.no_grad()
def beam_decode(
    model: Seq2Seq, src: Tensor, src_len: Tensor, *, beam_size: int = 5, **settings
) -> list[list[Hypothesis]]:
    """Beam-search translations of one padded source batch: `search` with
    `SearchPlan(beam_size=beam_size, **settings)` (nbest, length_penalty, coverage_penalty,
    max_len_ratio, max_len_offset), each sentence's hypotheses best first. A beam of one
    with nbest 1 and no coverage penalty is greedy search, which gives the same output.
    """
    how = SearchPlan(beam_size=beam_size, width=max(len(src_len), 1), **settings)
    return search(model, [(src, src_len)], how)


def _greedy_hypotheses(out: tuple, src_lens: list[int]) -> list[list[Hypothesis]]:
    """`greedy_search`'s tensors as one `Hypothesis` per sentence, its attention cut to its
    source length."""
    tokens, lengths, scores, token_scores, attention = out
    rows, scores, token_scores = tokens.tolist(), scores.tolist(), token_scores.tolist()
    return [
        [
            Hypothesis(
                tokens=rows[b][:n],
                score=scores[b],
                attention=None if attention is None else as_array(attention[b, :n], src_lens[b]),
                token_scores=token_scores[b][:n],
            )
        ]
        for b, n in enumerate(lengths.tolist())
    ]


def _encoded(
    model: Seq2Seq, batches: Iterable[Source], how: SearchPlan, join: Join = None
) -> Iterator[Encoded]:
    """Encode each (src, src_len) batch when search asks for it, with its sentences' length
    limits; `join(src, memory)` adds what a step wrapper reads."""
    for src, src_len in batches:
        memory, state = model.encode(src, src_len)
        if join is not None:
            memory = join(src, memory)
        limit = max_output_len(src_len.tolist(), how.max_len_ratio, how.max_len_offset)
        yield state, memory, torch.from_numpy(limit).to(src_len.device)


@torch.no_grad()
def beam_search(
    step: StepFn, batches: Iterable[Encoded], how: SearchPlan, *, bos_id: int, eos_id: int
) -> list[list[Hypothesis]]:
    """Keep the K = `how.beam_size` best partial outputs of each sentence, for at most
    `how.width` sentences at once.

    The B_t sentences' beams run as one batch of N = B_t * K rows, sentence-major (row
    b * K + k). Each step extends every live beam by every token and keeps, per sentence,
    the 2K best extensions by summed log-probability. Of these, the K best that are not
    </s> stay live; a </s> among the K best ends a hypothesis, ranked by score /
    `length_penalty`. A sentence stops when

    - K of its hypotheses have ended, or
    - its nbest-th best ended hypothesis ranks at least as high as its best live beam could
      still reach (`rules.cannot_improve`), or
    - it reaches its length limit, where its K best candidates end, </s> or not.

    Its K rows then go to the next sentence waiting (continuous batching, as in
    `greedy_search`); once none waits, stopped sentences leave the batch.

    Args:
        step: (prev (N,), state, memory) -> (log p (N, V), new state, alpha (N, T_src) or
            None); see `StepFn` and `Seq2Seq.decode_step`.
        batches: `Encoded` batches of one row per sentence, taken lazily (see
            `greedy_search`, also for memories of different source lengths).
        how: reads beam_size (K >= 1; 1 gives greedy search's output), nbest,
            length_penalty (alpha; 0 ranks by summed log-probability), coverage_penalty
            (beta > 0: ended hypotheses are ranked by score / lp + `coverage_penalty`, which
            needs attention; the stopping rule stays exact, as cp <= 0 can only lower a live
            beam's future rank), width, check (called before every step) and constraints
            (`constraints.Table`: the K live beams are chosen round the banks of include
            tokens met; an output the limit ends before it met them ranks below every one
            that did).
        bos_id, eos_id: start and end symbols.

    Returns:
        For each sentence, in input order, its nbest best hypotheses, best first (fewer only
        if fewer than nbest outputs have a nonzero probability). `score` is the summed
        log-probability; `attention` is (len(tokens), T_src) over the padded source, or None.
    """
    history, count = beam_steps(step, batches, how, bos_id=bos_id, eos_id=eos_id)
    return backtrack(history, count, how.nbest) if history else []


@torch.no_grad()
def beam_steps(
    step: StepFn, batches: Iterable[Encoded], how: SearchPlan, *, bos_id: int, eos_id: int
) -> tuple[list[BeamStep], int]:
    """`beam_search` without the back-trace, with `beam_search`'s arguments.

    Returns:
        Every step's candidates, and how many sentences were searched.
    """
    K, alpha, beta = how.beam_size, how.length_penalty, how.coverage_penalty
    pending = Pending(batches, bos_id)
    start = pending.take(how.width)
    if start is None:
        return [], 0
    table = how.constraints
    begin = partial(start_beams, beam_size=K, nbest=how.nbest, table=table)
    if beta:
        step = Covering(step)
        begin = step.wrap(begin)
    state, memory, beams = begin(start)
    offsets = torch.arange(K, device=beams.limit.device)  # (K,) a sentence's rows
    history = []
    while len(beams.sentence):
        if how.check is not None:
            how.check()
        log_probs, state, weights = step(beams.prev.flatten(), state, memory)  # (N, V), (N, T_src)
        weights = full_precision(weights)
        cand, parents, tokens, rank, progress = _candidates(beams, log_probs.float(), table, eos_id)
        length = beams.position + 1  # (B_t,) the candidates' lengths
        at_limit = length >= beams.limit
        # Of the K best, </s> ends a hypothesis, and at the limit all do; -inf ones extend
        # beams not yet live.
        ends = (rank < K) & cand.isfinite() & ((tokens == eos_id) | at_limit[:, None])
        lengths = length.to(cand.dtype)
        missing = None if table is None else table.missing(beams.sentence, progress)
        ranked = _ranked(cand, lengths, parents, state[-1] if beta else None, missing, how)
        ended = ranked.masked_fill(~ends, float("-inf"))  # (B_t, 2K)
        if weights is not None:
            weights = weights.unflatten(0, (-1, K))  # (B_t, K, T_src)
        history.append(
            BeamStep(beams.sentence, beams.position, tokens, parents, cand, ended, weights)
        )
        beams = advance(beams, length, cand, tokens, ends, ended, progress)
        # (B_t,) each sentence's best live beam (round the banks, not always in slot 0)
        best = beams.scores.max(dim=1).values
        hopeless = cannot_improve(
            beams.best_ended[:, -1], best, lengths, beams.limit.to(best), alpha
        )
        done = at_limit | (beams.ended >= K) | hopeless  # (B_t,)
        state = select_rows(state, parent_rows(parents[:, :K]))  # each live beam's parent's
        state, memory, beams = refill(done, pending, state, memory, beams, begin, offsets)
    return history, pending.taken


def _candidates(beams: Beams, log_probs: LogProbs, table: Table | None, eos_id: int) -> tuple:
    """beam.candidates, or dynamic beam allocation over the constraints' banks: scores,
    parents, tokens and rank, (B_t, 2K) each, and the candidates' progress (None without
    constraints). `log_probs` is (B_t * K, V)."""
    scores = beams.scores.to(log_probs.scores)
    if table is None:
        return (*candidates(scores, log_probs, eos_id), None)
    return table.candidates(scores, log_probs, beams.progress, beams.sentence, eos_id)


def _ranked(
    cand: Tensor,
    lengths: Tensor,
    parents: Tensor,
    covered: Tensor | None,
    missing: Tensor | None,
    how: SearchPlan,
) -> Tensor:
    """(B_t, 2K) each candidate's rank were it to end: score / lp, plus the coverage penalty
    of its parent's attention after this step (`covered`, (N, T_src), where beta > 0), less
    MISSING per constraint token it has not met (`missing`, where constrained): the limit
    ends what has not met its constraints, and it ranks last."""
    ranked = cand / length_penalty(lengths, how.length_penalty)[:, None]
    if covered is not None:
        cp = coverage_penalty(covered, how.coverage_penalty).unflatten(0, (-1, how.beam_size))
        ranked = ranked + cp.gather(1, parents).to(ranked)  # (B_t, K) -> (B_t, 2K)
    if missing is not None:
        ranked = ranked - MISSING * missing.to(ranked)
    return ranked
