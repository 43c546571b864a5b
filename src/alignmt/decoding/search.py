"""Greedy and beam search over token ids.

Knows nothing about words, files or checkpoints. `greedy_search` and `beam_search` run any
step function `step(prev, state, memory) -> (logits, state, alpha)` over a stream of
encoded batches; `decode`, `beam_decode` and their `_batches` forms bind them to a Seq2Seq.
State and memory are tuples of batch-first tensors (or None), so with the row operations of
rows.py both searches hand the rows of an ended sentence to the next one waiting and drop
rows once none waits (continuous batching: `refill`, one step shared by both). The
searches live beside this module: what both make of a step in steps.py, greedy search (and
its sampling form, with sample.py's token choice) in greedy.py, beam search's candidates,
stopping rule and back-trace in beam.py, with length normalisation GNMT's (Wu et al.
2016, eq. 14). On the CPU their step runs as speed.py's `fast_step` puts it: packed or int8
matmuls, and a shortlist when asked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import TypeVar

import torch
from torch import Tensor

from alignmt.decoding.beam import (
    BeamStep,
    Covering,
    advance,
    backtrack,
    candidates,
    cannot_improve,
    check_beam_args,
    coverage_penalty,
    length_penalty,
    parent_rows,
    start_beams,
)
from alignmt.decoding.greedy import Pick, greedy_search, most_probable
from alignmt.decoding.rows import Encoded, Pending, refill, select_rows
from alignmt.decoding.speed import Join, Speed, fast_step
from alignmt.decoding.steps import Hypothesis, StepFn, full_precision
from alignmt.model.seq2seq import Seq2Seq

R = TypeVar("R")


def max_output_len(src_len: Tensor, ratio: float, offset: int) -> Tensor:
    """The most tokens (</s> included) each sentence may produce: ratio * |x| + offset,
    and at least one.

    Args:
        src_len: (B,) int64 source lengths.
        ratio, offset: the limit's slope and intercept.

    Returns:
        (B,) int64.
    """
    return ((src_len.float() * ratio).long() + offset).clamp(min=1)


@dataclass(frozen=True)
class _Options:
    """The public wrappers' arguments, gathered once and passed on whole."""

    width: int  # the most sentences searched in one step
    max_len_ratio: float  # the length limit, see `max_output_len`
    max_len_offset: int
    beam_size: int = 1  # beam search's K, nbest and alpha; see `beam_search`
    nbest: int = 1
    alpha: float = 0.0
    beta: float = 0.0  # the coverage penalty's weight; 0: none
    speed: Speed | None = None  # int8 matmuls and a shortlist; None: neither


@torch.no_grad()
def decode(
    model: Seq2Seq,
    src: Tensor,
    src_len: Tensor,
    *,
    max_len_ratio: float = 2.0,
    max_len_offset: int = 10,
) -> list[Hypothesis]:
    """Greedy translations of a padded source batch, one `Hypothesis` per sentence.

    Args:
        model: a Seq2Seq (put in eval mode by the caller).
        src: (B, T_src) int64 source ids ending in </s>, padded.
        src_len: (B,) int64 real lengths.
        max_len_ratio, max_len_offset: the length limit, see `max_output_len`.
    """
    options = _Options(max(len(src_len), 1), max_len_ratio, max_len_offset)
    return _greedy(model, [(src, src_len)], options)


@torch.no_grad()
def decode_batches(
    model: Seq2Seq,
    batches: Iterable[tuple[Tensor, Tensor]],
    *,
    width: int,
    max_len_ratio: float = 2.0,
    max_len_offset: int = 10,
    pick: Pick = most_probable,
    speed: Speed | None = None,
) -> list[Hypothesis]:
    """Greedy translations of many source batches, `width` sentences decoding at a time
    (see `greedy_search`: a sentence that ends hands its row to the next one). On the CPU,
    the decoder's float32 Linears run on weights packed once (see packed.py), or in int8.

    Args:
        model: a Seq2Seq (put in eval mode by the caller).
        batches: (src (B, T_src) int64 ending in </s> and padded, src_len (B,)) pairs,
            each encoded only when its first sentence is about to decode.
        width: the most sentences decoded in one step.
        max_len_ratio, max_len_offset: the length limit, see `max_output_len`.
        pick: each step's token choice: the most probable, or `sample.sampler`'s draw.
        speed: int8 matmuls and a shortlist (see `Speed`); None: neither.

    Returns:
        One `Hypothesis` per sentence, in input order; attention is cut to the sentence's
        source length and on the CPU.
    """
    options = _Options(width, max_len_ratio, max_len_offset, speed=speed)
    return _greedy(model, batches, options, pick)


@torch.no_grad()
def beam_search(
    step: StepFn,
    batches: Iterable[Encoded],
    *,
    beam_size: int,
    bos_id: int,
    eos_id: int,
    width: int,
    alpha: float = 0.0,
    nbest: int = 1,
    beta: float = 0.0,
) -> list[list[Hypothesis]]:
    """Keep the `beam_size` (K) best partial outputs of each sentence, for at most `width`
    sentences at once.

    The B_t sentences' beams run as one batch of N = B_t * K rows, sentence-major (row
    b * K + k). Each step extends every live beam by every token and keeps, per sentence,
    the 2K best extensions by summed log-probability. Of these, the K best that are not
    </s> stay live; a </s> among the K best ends a hypothesis, ranked by score /
    `length_penalty`. A sentence stops when

    - K of its hypotheses have ended, or
    - its nbest-th best ended hypothesis ranks at least as high as its best live beam could
      still reach (score / lp, with the score that can only fall and the largest lp it
      could reach), or
    - it reaches its length limit, where its K best candidates end, </s> or not.

    Its K rows then go to the next sentence waiting (continuous batching, as in
    `greedy_search`); once none waits, stopped sentences leave the batch.

    Args:
        step: (prev (N,), state, memory) -> (logits (N, V), new state, alpha (N, T_src) or
            None); see `StepFn` and `Seq2Seq.decode_step`.
        batches: `Encoded` batches of one row per sentence, taken lazily (see
            `greedy_search`, also for memories of different source lengths).
        beam_size: K >= 1; 1 gives greedy search's output.
        bos_id, eos_id: start and end symbols.
        width: the most sentences searched in one step, >= 1.
        alpha: the length penalty's exponent; 0 ranks by summed log-probability.
        nbest: how many hypotheses to return per sentence, 1 <= nbest <= K.
        beta: > 0: ended hypotheses are ranked by score / lp + `coverage_penalty` (needs
            attention). The stopping rule stays exact, as cp <= 0 can only lower a live
            beam's future rank.

    Returns:
        For each sentence, in input order, its nbest best hypotheses, best first (fewer only
        if fewer than nbest outputs have a nonzero probability). `score` is the summed
        log-probability; `attention` is (len(tokens), T_src) over the padded source, or None.
    """
    history, count = beam_steps(
        step,
        batches,
        beam_size=beam_size,
        bos_id=bos_id,
        eos_id=eos_id,
        width=width,
        alpha=alpha,
        nbest=nbest,
        beta=beta,
    )
    return backtrack(history, count, nbest) if history else []


@torch.no_grad()
def beam_steps(
    step: StepFn,
    batches: Iterable[Encoded],
    *,
    beam_size: int,
    bos_id: int,
    eos_id: int,
    width: int,
    alpha: float = 0.0,
    nbest: int = 1,
    beta: float = 0.0,
) -> tuple[list[BeamStep], int]:
    """`beam_search` without the back-trace, with `beam_search`'s arguments.

    Returns:
        Every step's candidates, and how many sentences were searched.
    """
    check_beam_args(beam_size, nbest, width)
    K, pending = beam_size, Pending(batches, bos_id)
    start = pending.take(width)
    if start is None:
        return [], 0
    begin = partial(start_beams, beam_size=K, nbest=nbest)
    if beta:
        step = Covering(step)
        begin = step.wrap(begin)
    state, memory, beams = begin(start)
    offsets = torch.arange(K, device=beams.limit.device)  # (K,) a sentence's rows
    history = []
    while len(beams.sentence):
        logits, state, weights = step(beams.prev.flatten(), state, memory)  # (N, V), (N, T_src)
        logits = full_precision(logits).unflatten(0, (-1, K))  # (B_t, K, V)
        weights = full_precision(weights)
        cand, parents, tokens, rank = candidates(beams.scores.to(logits), logits, eos_id)
        length = beams.position + 1  # (B_t,) the candidates' lengths
        at_limit = length >= beams.limit
        # Of the K best, </s> ends a hypothesis, and at the limit all do; -inf ones extend
        # beams not yet live.
        ends = (rank < K) & cand.isfinite() & ((tokens == eos_id) | at_limit[:, None])
        lp = length_penalty(length.to(cand.dtype), alpha)  # (B_t,)
        ranked = cand / lp[:, None]  # (B_t, 2K)
        if beta:  # each candidate's cp is its parent's coverage after this step's attention
            cp = coverage_penalty(state[-1], beta).unflatten(0, (-1, K))  # (B_t, K)
            ranked = ranked + cp.gather(1, parents).to(ranked)
        ended = ranked.masked_fill(~ends, float("-inf"))  # (B_t, 2K)
        if weights is not None:
            weights = weights.unflatten(0, (-1, K))  # (B_t, K, T_src)
        history.append(
            BeamStep(beams.sentence, beams.position, tokens, parents, cand, ended, weights)
        )
        beams = advance(beams, length, cand, tokens, ends, ended)
        done = at_limit | (beams.ended >= K) | cannot_improve(beams, lp, alpha)  # (B_t,)
        state = select_rows(state, parent_rows(parents[:, :K]))  # each live beam's parent's
        state, memory, beams = refill(done, pending, state, memory, beams, begin, offsets)
    return history, pending.taken


@torch.no_grad()
def beam_decode(
    model: Seq2Seq,
    src: Tensor,
    src_len: Tensor,
    *,
    beam_size: int = 5,
    nbest: int = 1,
    alpha: float = 0.0,
    beta: float = 0.0,
    max_len_ratio: float = 2.0,
    max_len_offset: int = 10,
) -> list[list[Hypothesis]]:
    """Beam-search translations of a padded source batch: each sentence's nbest hypotheses.

    Args:
        model: a Seq2Seq (put in eval mode by the caller).
        src: (B, T_src) int64 source ids ending in </s>, padded.
        src_len: (B,) int64 real lengths.
        beam_size, nbest, alpha, beta: see `beam_search`.
        max_len_ratio, max_len_offset: the length limit, see `max_output_len`.

    Returns:
        For each sentence, its hypotheses best first; attention is cut to the real source
        length and on the CPU, as `decode` returns it.
    """
    width = max(len(src_len), 1)
    options = _Options(width, max_len_ratio, max_len_offset, beam_size, nbest, alpha, beta)
    return _beam(model, [(src, src_len)], options)


@torch.no_grad()
def beam_decode_batches(
    model: Seq2Seq,
    batches: Iterable[tuple[Tensor, Tensor]],
    *,
    width: int,
    beam_size: int = 5,
    nbest: int = 1,
    alpha: float = 0.0,
    beta: float = 0.0,
    max_len_ratio: float = 2.0,
    max_len_offset: int = 10,
    speed: Speed | None = None,
) -> list[list[Hypothesis]]:
    """Beam-search translations of many source batches, `width` sentences searching at a
    time (a sentence that stops hands its rows to the next one; see `beam_search`).

    Args:
        model, batches, width, max_len_ratio, max_len_offset, speed: as in `decode_batches`.
        beam_size, nbest, alpha, beta: see `beam_search`.

    Returns:
        For each sentence, in input order, its hypotheses best first; attention is cut to
        the sentence's source length and on the CPU.
    """
    options = _Options(width, max_len_ratio, max_len_offset, beam_size, nbest, alpha, beta, speed)
    return _beam(model, batches, options)


def _greedy(
    model: Seq2Seq,
    batches: Iterable[tuple[Tensor, Tensor]],
    options: _Options,
    pick: Pick = most_probable,
) -> list[Hypothesis]:
    """`decode_batches` with its arguments in `options`."""
    out, src_lens = _run(model, batches, options, partial(greedy_search, pick=pick))
    tokens, lengths, scores, token_scores, attention = out
    rows, scores, token_scores = tokens.tolist(), scores.tolist(), token_scores.tolist()
    return [
        Hypothesis(
            tokens=rows[b][:n],
            score=scores[b],
            attention=None if attention is None else attention[b, :n, : src_lens[b]].cpu(),
            token_scores=token_scores[b][:n],
        )
        for b, n in enumerate(lengths.tolist())
    ]


def _beam(
    model: Seq2Seq, batches: Iterable[tuple[Tensor, Tensor]], options: _Options
) -> list[list[Hypothesis]]:
    """`beam_decode_batches` with its arguments in `options`."""
    search = partial(
        beam_search,
        beam_size=options.beam_size,
        alpha=options.alpha,
        nbest=options.nbest,
        beta=options.beta,
    )
    beams, src_lens = _run(model, batches, options, search)
    return [
        [
            replace(h, attention=None if h.attention is None else h.attention[:, :n].cpu())
            for h in hypotheses
        ]
        for hypotheses, n in zip(beams, src_lens, strict=True)
    ]


def _run(
    model: Seq2Seq,
    batches: Iterable[tuple[Tensor, Tensor]],
    options: _Options,
    search: Callable[..., R],
) -> tuple[R, list[int]]:
    """`search` (`greedy_search`, or `beam_search` with its own arguments bound) over
    `model`'s decoder, encoding the batches as it takes them. On the CPU the decoder's
    float32 Linears run in int8 when asked, the others on weights packed once for a full
    step's rows (see packed.py); with a shortlist, the projection scores its words only.

    Returns:
        What `search` returns, and each sentence's source length, in input order.
    """
    src_lens: list[int] = []
    rows = options.width * options.beam_size
    with fast_step(model, options.speed or Speed(), rows) as (step, join):
        encoded = _encode(model, batches, src_lens, options, join)
        out = search(step, encoded, bos_id=model.bos_id, eos_id=model.eos_id, width=options.width)
    return out, src_lens


def _encode(
    model: Seq2Seq,
    batches: Iterable[tuple[Tensor, Tensor]],
    src_lens: list[int],
    options: _Options,
    join: Join = None,
) -> Iterator[Encoded]:
    """Encode each (src, src_len) batch when search asks for it, appending the sentences'
    source lengths to `src_lens`; `join(src, memory)` adds what a step wrapper reads."""
    for src, src_len in batches:
        memory, state = model.encode(src, src_len)
        if join is not None:
            memory = join(src, memory)
        src_lens.extend(src_len.tolist())
        yield state, memory, max_output_len(src_len, options.max_len_ratio, options.max_len_offset)
