"""Greedy and beam search over a `FlaxSeq2Seq`, compiled by XLA, and sampling in greedy
search's loop (sample.py).

The torch engine's searches (torch_engine/search.py) in JAX: a batch runs as one
`jax.lax.while_loop` over output steps in `jax.jit`, until all its sentences stop or its
length bound. XLA compiles per shape, so stopped sentences' rows idle to the batch's end
(the torch engine hands them to the next sentence), and `FlaxSearch` pads batches to a few
bucketed shapes and counts compilations. A sentence gets the torch engine's output: the
same candidates and back-trace (torch_engine/beam.py), and the length limit, ranking and
stopping rule of decoding/rules.py, which every engine reads (GNMT's length normalisation,
Wu et al. 2016, eq. 14); only rounding differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from alignmt.config import SearchConfig
from alignmt.decoding.engine import Check
from alignmt.decoding.flax_engine.batch import bucket, hypotheses, pad_batch
from alignmt.decoding.flax_engine.sample import Sampling, drawn, uniform_rows
from alignmt.decoding.results import Hypothesis
from alignmt.decoding.rules import cannot_improve, check_search_args, length_penalty, max_output_len
from alignmt.model.flax_distribution import LogProbs
from alignmt.model.flax_seq2seq import FlaxSeq2Seq

Array = jax.Array
Params = Any  # FlaxSeq2Seq's parameter tree


class Output(NamedTuple):
    """A batch's n best hypotheses per sentence (n = 1 for greedy); L = max_len."""

    tokens: Array  # (B, n, L) int32, </s> included; positions past `length` are to be cut
    length: Array  # (B, n) int32 output length, </s> included when produced
    score: Array  # (B, n) float32 summed log-probabilities
    token_scores: Array  # (B, n, L) float32 each token's log-probability
    found: Array  # (B, n) bool: False for a padding row, or where fewer than n outputs exist
    attention: Array | None  # (B, n, L, T_src) each step's alpha; None without attention
    steps: Array  # (B,) int32 the steps each sentence's search ran before it stopped


class Greedy(NamedTuple):
    """Greedy search's loop carry: B sentences, one row each; L = max_len."""

    step: Array  # () int32 the output position this step fills
    prev: Array  # (B,) int32 each row's last token, <s> before the first
    state: Any  # the DecoderState, (B, ...) fields
    done: Array  # (B,) bool: ended with </s>, at its length limit, or a padding row
    length: Array  # (B,) int32 tokens output, </s> included
    score: Array  # (B,) float32 summed log-probabilities
    tokens: Array  # (L, B) int32 each step's choice
    token_scores: Array  # (L, B) float32 each step's log-probability (0 once stopped)
    attention: Array | None  # (L, B, T_src) each step's alpha


class Beam(NamedTuple):
    """Beam search's loop carry: B sentences of K beams in N = B * K rows (row b * K + k),
    2K candidates per sentence and step, the n best ended hypotheses; L = max_len."""

    step: Array  # () int32 the output position the candidates fill
    prev: Array  # (B, K) int32 the live beams' last tokens
    scores: Array  # (B, K) float32 their summed log-probabilities, best first
    state: Any  # the DecoderState, (N, ...) fields
    done: Array  # (B,) bool: stopped, or a padding row
    stopped: Array  # (B,) int32 the steps it ran while not done
    ended: Array  # (B,) int32 how many hypotheses have ended
    best: Array  # (B, n) float32 the best ended hypotheses' score / lp, best first
    best_score: Array  # (B, n) float32 their summed log-probabilities
    best_end: Array  # (B, n) int32 where they end: step * 2K + slot
    tokens: Array  # (L, B, 2K) int32 every step's candidates' last tokens
    sums: Array  # (L, B, 2K) float32 their summed log-probabilities
    parents: Array  # (L, B, 2K) int32 the live beam (0..K-1) each candidate extends
    attention: Array | None  # (L, B, K, T_src) each live beam's alpha at each step
    covered: Array | None  # (N, T_src) each row's alpha summed so far; None without coverage


def apply_method(model: FlaxSeq2Seq, params: Params, method: str, *args: Any) -> Any:
    """`model.encode` or `model.decode_step` (`method`) on `args`, with float32 `params`."""
    return model.apply({"params": params}, *args, method=method)


def _running(max_len: int, carry: Greedy | Beam) -> Array:
    """The loop's condition: steps left, and a sentence not yet stopped."""
    return (carry.step < max_len) & ~carry.done.all()


def _repeat(fields: Any, times: int) -> Any:
    """Each row of every batch-first array (None fields kept) `times` times: one per beam."""
    return jax.tree_util.tree_map(lambda x: jnp.repeat(x, times, axis=0), fields)


def greedy_search(
    model: FlaxSeq2Seq,
    params: Params,
    src: Array,
    src_len: Array,
    limit: Array,
    uniform: Array | None = None,
    *,
    max_len: int,
    sampling: Sampling | None = None,
) -> Output:
    """The most probable token at every step, as the torch engine's greedy search picks it, or
    with `sampling` a token drawn (sample.py): an `Output` with n = 1.

    Args:
        model, params: the model and its parameters.
        src: (B, T_src) int32 source ids ending in </s>, padded; src_len: (B,) int32 >= 1.
        limit: (B,) int32 each sentence's length limit (`max_output_len`); 0: padding.
        uniform: (max_len, B) with `sampling`: each position's uniform number, per row.
        max_len: static: at least limit.max(), the length of the output arrays.
        sampling: static: how to reshape each step's distribution; None: greedy search.
    """
    memory, state = apply_method(model, params, "encode", src, src_len)
    eos = model.eos_id

    def body(g: Greedy) -> Greedy:
        dist, state, alpha = apply_method(model, params, "decode_step", g.prev, g.state, memory)
        if sampling is None:
            best, best_log_prob = dist.best()  # (B,) each
        else:
            best, best_log_prob = drawn(dist, sampling, uniform[g.step])
        live = ~g.done  # stopped rows run on, but their outputs no longer change
        token = jnp.where(live, best.astype(jnp.int32), eos)
        length = jnp.where(live, g.step + 1, g.length)
        log_prob = jnp.where(live, best_log_prob, 0.0)
        return Greedy(
            step=g.step + 1,
            prev=token,
            state=state,
            done=g.done | (token == eos) | (length >= limit),
            length=length,
            score=g.score + log_prob,
            tokens=g.tokens.at[g.step].set(token),
            token_scores=g.token_scores.at[g.step].set(log_prob),
            attention=None if alpha is None else g.attention.at[g.step].set(alpha),
        )

    carry = _first_greedy(model, state, src.shape, limit, max_len)
    g = jax.lax.while_loop(partial(_running, max_len), body, carry)
    attention = None if g.attention is None else g.attention.transpose(1, 0, 2)[:, None]
    found = (limit > 0)[:, None]
    scores = g.token_scores.T[:, None]
    return Output(
        g.tokens.T[:, None], g.length[:, None], g.score[:, None], scores, found, attention, g.length
    )


def _first_greedy(model: FlaxSeq2Seq, state: Any, shape: tuple, limit: Array, max_len: int):
    """The carry before the first step, for a source batch of `shape` (B, T_src)."""
    batch = shape[0]
    return Greedy(
        step=jnp.int32(0),
        prev=jnp.full((batch,), model.bos_id, jnp.int32),
        state=state,
        done=limit <= 0,
        length=jnp.zeros((batch,), jnp.int32),
        score=jnp.zeros((batch,), jnp.float32),
        tokens=jnp.full((max_len, batch), model.eos_id, jnp.int32),
        token_scores=jnp.zeros((max_len, batch), jnp.float32),
        attention=jnp.zeros((max_len, *shape)) if model.has_attention else None,
    )


def beam_search(
    model: FlaxSeq2Seq,
    params: Params,
    src: Array,
    src_len: Array,
    limit: Array,
    alpha: Array | float,
    *,
    beam_size: int,
    max_len: int,
    nbest: int = 1,
    beta: Array | float = 0.0,
    covering: bool = False,
) -> Output:
    """The K = beam_size best partial outputs of each sentence, as the torch engine's beam
    search keeps them; an `Output` with n = nbest, best first. Every step keeps a sentence's 2K best
    one-token extensions: the K best that are not </s> live on, and a </s> among the K best
    ends a hypothesis, ranked by score / `length_penalty` (plus, `covering`, GNMT's coverage
    penalty of its beam's attention, `rules.coverage_penalty`). A sentence stops once K have
    ended, once its nbest-th best ended one ranks at least as high as its best live beam
    ever could, or at its length limit, where its K best candidates end, </s> or not.

    Args:
        model, params, src, src_len, limit, max_len: as for `greedy_search`.
        alpha: the length penalty's exponent; 0 ranks by summed log-probability.
        beam_size, nbest: static: K >= 1, and hypotheses per sentence, 1 <= nbest <= K.
        beta, covering: the coverage penalty's weight, and (static) whether it ranks.
    """
    memory, state = apply_method(model, params, "encode", src, src_len)
    beam = _first_beam(model, state, limit, src.shape[1], beam_size, max_len, nbest)
    if covering:
        beam = beam._replace(covered=jnp.zeros((src.shape[0] * beam_size, src.shape[1])))
    body = partial(_beam_step, model, params, _repeat(memory, beam_size), limit, alpha, beta)
    return _backtrack(jax.lax.while_loop(partial(_running, max_len), body, beam))


def _first_beam(
    model: FlaxSeq2Seq, state: Any, limit: Array, t_src: int, k: int, max_len: int, nbest: int
) -> Beam:
    """The carry before the first step: only beam 0 live, or all K would extend <s> alike."""
    batch = limit.shape[0]
    return Beam(
        step=jnp.int32(0),
        prev=jnp.full((batch, k), model.bos_id, jnp.int32),
        scores=jnp.full((batch, k), -jnp.inf).at[:, 0].set(0.0),
        state=_repeat(state, k),
        done=limit <= 0,
        stopped=jnp.zeros((batch,), jnp.int32),
        ended=jnp.zeros((batch,), jnp.int32),
        best=jnp.full((batch, nbest), -jnp.inf),
        best_score=jnp.zeros((batch, nbest)),
        best_end=jnp.zeros((batch, nbest), jnp.int32),
        tokens=jnp.zeros((max_len, batch, 2 * k), jnp.int32),
        sums=jnp.zeros((max_len, batch, 2 * k), jnp.float32),
        parents=jnp.zeros((max_len, batch, 2 * k), jnp.int32),
        attention=jnp.zeros((max_len, batch, k, t_src)) if model.has_attention else None,
        covered=None,
    )


def _beam_step(
    model: FlaxSeq2Seq,
    params: Params,
    memory: Any,
    limit: Array,
    alpha: Any,
    beta: Any,
    beam: Beam,
) -> Beam:
    """One step of every sentence's beams: the loop body of `beam_search`."""
    batch, k = beam.scores.shape
    prev = beam.prev.reshape(-1)
    dist, state, weights = apply_method(model, params, "decode_step", prev, beam.state, memory)
    dist = LogProbs(*(None if t is None else t.reshape(batch, k, -1) for t in dist))
    cand, parents, tokens, rank = _candidates(beam.scores, dist, model.eos_id)
    length = beam.step + 1  # the candidates' length
    at_limit = length >= limit  # (B,)
    # Of the K best, </s> ends a hypothesis (at the limit all do); -inf ones are not live yet
    ends = (rank < k) & jnp.isfinite(cand) & ((tokens == model.eos_id) | at_limit[:, None])
    lengths = length.astype(jnp.float32)
    lp = length_penalty(lengths, alpha)
    ranked = cand / lp
    covered = None if beam.covered is None else beam.covered + weights  # (N, T_src)
    if covered is not None:  # each candidate's parent's penalty after this step
        cp = _coverage_penalty(covered, beta).reshape(batch, k)
        ranked = ranked + jnp.take_along_axis(cp, parents, axis=1)
    ended = jnp.where(ends, ranked, -jnp.inf)  # (B, 2K)
    live = ~beam.done  # stopped sentences run on, but their results no longer change
    best, best_score, best_end = _merge_ended(beam, ended, cand, live)
    count = beam.ended + jnp.where(live, ends.sum(axis=1), 0)
    hopeless = cannot_improve(best[:, -1], cand[:, 0], lengths, limit.astype(jnp.float32), alpha)
    rows = (jnp.arange(batch)[:, None] * k + parents[:, :k]).reshape(-1)  # each beam's parent
    return Beam(
        step=length,
        prev=tokens[:, :k],
        scores=cand[:, :k],
        state=jax.tree_util.tree_map(lambda x: x[rows], state),
        done=beam.done | at_limit | (count >= k) | hopeless,
        stopped=jnp.where(live, length, beam.stopped),
        ended=count,
        best=best,
        best_score=best_score,
        best_end=best_end,
        tokens=beam.tokens.at[beam.step].set(tokens),
        sums=beam.sums.at[beam.step].set(cand),
        parents=beam.parents.at[beam.step].set(parents),
        attention=None
        if weights is None
        else beam.attention.at[beam.step].set(weights.reshape(batch, k, -1)),
        covered=None if covered is None else covered[rows],
    )


def _coverage_penalty(covered: Array, beta: Array) -> Array:
    """rules.coverage_penalty in JAX: (N,) beta * sum_j log(min(covered_j, 1)), padding (0)
    left out."""
    return beta * jnp.log(jnp.where(covered > 0, jnp.minimum(covered, 1.0), 1.0)).sum(axis=1)


def _candidates(
    scores: Array, log_probs: LogProbs, eos_id: int
) -> tuple[Array, Array, Array, Array]:
    """The 2K best one-token extensions of a sentence's K beams, those ending in </s> last
    (beam.candidates): from scores (B, K) and log p (B, K, V), their scores, parents,
    tokens and rank (place in best-first order before </s> went last), each (B, 2K)."""
    batch, k, vocab = log_probs.scores.shape
    width = min(2 * k, vocab)
    # A sentence's 2K best extensions are among each beam's own 2K best: only K * 2K
    # candidates need a log-probability.
    total, token = log_probs.top(width, base=scores[..., None])  # (B, K, W)
    best, index = jax.lax.top_k(total.reshape(batch, k * width), 2 * k)  # best first
    tokens = jnp.take_along_axis(token.reshape(batch, k * width), index, axis=1)
    rank = jnp.argsort((tokens == eos_id).astype(jnp.int32), axis=1, stable=True)
    take = partial(jnp.take_along_axis, indices=rank, axis=1)
    return take(best), take(index // width), take(tokens), rank


def _merge_ended(beam: Beam, ended: Array, cand: Array, live: Array) -> tuple[Array, ...]:
    """`Beam.best`, `best_score` and `best_end` after a step, for `live` (B,) sentences: the
    n best of those kept and the step's `ended` (B, 2K) (score / lp or -inf), older first."""
    slots = ended.shape[1]
    end = jnp.broadcast_to(beam.step * slots + jnp.arange(slots), ended.shape)
    old = (beam.best, beam.best_score, beam.best_end)
    merged = [jnp.concatenate(pair, axis=1) for pair in zip(old, (ended, cand, end), strict=True)]
    _, index = jax.lax.top_k(merged[0], beam.best.shape[1])
    new = [jnp.take_along_axis(x, index, axis=1) for x in merged]
    return tuple(jnp.where(live[:, None], n, o) for n, o in zip(new, old, strict=True))


def _backtrack(beam: Beam) -> Output:
    """Each sentence's n best ended hypotheses, traced back through the parents (as
    torch_engine/beam.py does)."""
    last, slot = jnp.divmod(beam.best_end, beam.tokens.shape[2])  # (B, n) each

    def back(slot: Array, step: tuple) -> tuple[Array, tuple]:
        t, tokens, sums, parents, attention = step  # (), (B, 2K) x 3, (B, K, T_src) | None
        token = jnp.take_along_axis(tokens, slot, axis=1)  # (B, n)
        summed = jnp.take_along_axis(sums, slot, axis=1)
        parent = jnp.take_along_axis(parents, slot, axis=1)
        alpha = None if attention is None else jnp.take_along_axis(attention, parent[..., None], 1)
        return jnp.where(t <= last, parent, slot), (token, summed, alpha)  # past its end: stay

    steps = (jnp.arange(beam.tokens.shape[0]), beam.tokens, beam.sums, beam.parents)
    _, (tokens, sums, alpha) = jax.lax.scan(back, slot, (*steps, beam.attention), reverse=True)
    attention = None if alpha is None else alpha.transpose(1, 2, 0, 3)  # (B, n, L, T_src)
    sums = sums.transpose(1, 2, 0)  # (B, n, L) along each path
    # a token's log-probability: its candidate's summed score less its parent's
    token_scores = jnp.diff(sums, axis=2, prepend=jnp.zeros_like(sums[..., :1]))
    found = beam.best > -jnp.inf  # False: fewer than n outputs have a nonzero probability
    tokens = tokens.transpose(1, 2, 0)
    steps = beam.stopped
    return Output(tokens, last + 1, beam.best_score, token_scores, found, attention, steps)


class FlaxSearch:
    """Greedy (beam_size 1) or beam search of one model over lists of source ids,
    jit-compiled once per padded batch shape.

    Sentences go in sorted by length, `batch_size` at a time, each batch padded to B rows
    and T_src columns, the powers of two at or above its size (at most `batch_size`) and
    its longest source (at least `MIN_SRC`). A run compiles once per (B, T_src) bucket:
    about once per source bucket, as sorted input fills every batch but the last.
    """

    def __init__(
        self,
        model: FlaxSeq2Seq,
        params: Params,
        search: SearchConfig,
        *,
        nbest: int = 1,
        batch_size: int = 64,
        sampling: Sampling | None = None,
    ) -> None:
        """`search`: beam_size, length_penalty and the length limit; nbest <= beam_size;
        `sampling` (with beam_size 1): draw each token instead; its seed is not read (each
        call is given its generator), so give it seed 0 to share one compiled program."""
        check_search_args(search.beam_size, nbest, batch_size)
        self.model, self.params, self.alpha = model, params, search.length_penalty
        self.limits = (search.max_len_ratio, search.max_len_offset)
        self.batch_size, self.static = batch_size, dict(beam_size=search.beam_size, nbest=nbest)
        self.beta = search.coverage_penalty
        if self.beta and not model.has_attention:
            raise ValueError("search.coverage_penalty sums attention, and this model has none")
        if self.beta:  # static: the carry holds the summed attention only where it ranks
            self.static["covering"] = True
        if sampling is not None:  # static: one program for every seed of these settings
            self.static["sampling"] = sampling
        self.shapes: list[tuple[int, int]] = []  # (B, T_src) of each trace, i.e. compilation
        static = ("beam_size", "max_len", "nbest", "sampling", "covering")
        self._search = jax.jit(self._traced, static_argnames=static)

    @property
    def compilations(self) -> int:
        """How many times the search has been traced and compiled."""
        return len(self.shapes)

    def __call__(
        self,
        sources: Sequence[Sequence[int]],
        check: Check | None = None,
        rng: np.random.Generator | None = None,
    ) -> list[list[Hypothesis]]:
        """Search each source (ids ending in </s>); returns each sentence's nbest
        hypotheses, best first (fewer only where fewer have a nonzero probability). `check`
        is called before each batch (a compiled loop cannot stop between its steps); `rng`
        gives a sampling search's uniform numbers, a block a batch."""
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        out: list[list[Hypothesis]] = [[] for _ in sources]
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            if check is not None:
                check()
            found = self._batch([sources[i] for i in rows], rng)
            for i, hyps in zip(rows, found, strict=True):
                out[i] = hyps
        return out

    def _traced(
        self,
        params,
        src,
        src_len,
        limit,
        alpha,
        beta,
        uniform,
        *,
        beam_size,
        max_len,
        nbest,
        sampling=None,
        covering=False,
    ):
        self.shapes.append(src.shape)  # Python runs only while jax traces a new shape
        args = (self.model, params, src, src_len, limit)
        if beam_size == 1:
            return greedy_search(*args, uniform, max_len=max_len, sampling=sampling)
        sizes = dict(beam_size=beam_size, max_len=max_len, nbest=nbest)
        return beam_search(*args, alpha, **sizes, beta=beta, covering=covering)

    def _batch(
        self, sources: list[Sequence[int]], rng: np.random.Generator | None
    ) -> list[list[Hypothesis]]:
        """One batch padded to its bucket, searched."""
        src, src_len = pad_batch(sources, min(bucket(len(sources)), self.batch_size), self.model)
        limit = max_output_len(src_len, *self.limits).astype(np.int32)
        limit[len(sources) :] = 0
        max_len = int(max_output_len([src.shape[1]], *self.limits)[0])
        sampled = "sampling" in self.static
        uniform = uniform_rows(rng, limit, len(sources), max_len) if sampled else None
        # full float32 matmuls, not TF32 or bfloat16 passes: candidates rank as in PyTorch
        with jax.default_matmul_precision("highest"):
            weights = (np.float32(self.alpha), np.float32(self.beta))
            args = (self.params, src, src_len, limit, *weights, uniform)
            out = self._search(*args, max_len=max_len, **self.static)
        return hypotheses(jax.device_get(out), src_len[: len(sources)])
