"""Inside one sentence's decoding: the decoder step by step, and beam search as a tree.

`step_through` runs the decoder over one sentence and records, at every output position,
the attention, the most probable next tokens and the token taken. The caller can force a
prefix of the output ("what would it say after this?") and put all of a step's attention
on one source position ("what would it say had it looked here?"). `beam_trace` keeps
every candidate beam search weighed, with its parent, so that the search can be drawn as
a tree. Both work on token ids over `Seq2Seq.decode_step`, the step function that search
runs, so what they show is what `decode` and `beam_decode` compute; words are the
translator's (decoding/translator.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from alignmt.decoding.constraint import Constraint
from alignmt.decoding.engine import Check
from alignmt.decoding.results import BeamTrace, DecoderStep, shown_value
from alignmt.decoding.torch_engine.beam import BeamStep
from alignmt.decoding.torch_engine.constraints import Table
from alignmt.decoding.torch_engine.packed import packed_linears
from alignmt.decoding.torch_engine.plan import SearchPlan
from alignmt.decoding.torch_engine.search import beam_steps
from alignmt.decoding.torch_engine.steps import StepFn, full_precision
from alignmt.decoding.walk import tree
from alignmt.model.cell import DecoderState
from alignmt.model.decoder import Memory
from alignmt.model.distribution import LogProbs
from alignmt.model.seq2seq import Seq2Seq


@torch.no_grad()
def step_through(
    model: Seq2Seq,
    src: Tensor,
    *,
    max_len: int,
    prefix: Sequence[int] = (),
    override: Mapping[int, int] | None = None,
    top_k: int = 5,
    beam_size: int = 1,
    alpha: float = 0.0,
    beta: float = 0.0,
    check: Check | None = None,
) -> list[DecoderStep]:
    """Decode one sentence, recording every step; force `prefix`, then go on greedily or
    with a beam of `beam_size` to </s> or `max_len` tokens.

    Args:
        model: a Seq2Seq in eval mode.
        src: (T_src,) int64 source ids ending in </s>.
        max_len: the most output tokens (</s> included), at least len(prefix).
        prefix: output ids to take at positions 0, 1, ... whatever the model prefers.
        override: output position -> source position that gets all of that step's
            attention (the memory's steer puts weight 1 there in place of the step's
            alpha); the model must have attention.
        top_k: candidates recorded per step.
        beam_size, alpha, beta: with beam_size > 1 the continuation after the prefix is
            beam search's best (score / length_penalty(alpha), plus the coverage penalty
            with beta), and its steps are recorded by replaying it.
        check: called before every decoder step; it stops the decoding by raising.

    Returns:
        One `DecoderStep` per output token, in order.
    """
    override = dict(override or {})
    if override and not model.has_attention:
        raise ValueError("this model has no attention to override")
    if any(not 0 <= j < len(src) for j in override.values()):
        raise ValueError(f"override positions must lie in [0, {len(src)}), got {override}")
    if len(prefix) > max_len:
        raise ValueError(f"the prefix ({len(prefix)} tokens) is longer than max_len = {max_len}")
    memory, state = model.encode(src[None], torch.tensor([len(src)], device=src.device))
    step = _Steered(model.decode_step, override)
    follow = list(prefix)
    with packed_linears(model.decoder, rows=beam_size):
        if beam_size > 1:
            how = SearchPlan(
                beam_size=beam_size,
                length_penalty=alpha,
                coverage_penalty=beta,
                width=1,
                check=check,
            )
            follow = _beam_best(model, step, state, memory, follow, max_len, how)
        return _walk(model, step, state, memory, follow, len(prefix), max_len, top_k, check)


def _walk(
    model: Seq2Seq,
    step: _Steered,
    state: DecoderState,
    memory: Memory,
    follow: list[int],
    forced: int,
    max_len: int,
    top_k: int,
    check: Check | None,
) -> list[DecoderStep]:
    """Take `follow`'s tokens, then the most probable, until </s> or `max_len`; record each
    step. The first `forced` tokens are marked as forced; `check` runs before each step."""
    steps: list[DecoderStep] = []
    shown = list(model.composition.shown) if model.composition else []
    prev = torch.tensor([model.bos_id], device=memory.states.device)
    while len(steps) < max_len and (not steps or steps[-1].token != model.eos_id):
        position = len(steps)
        if check is not None:
            check()
        dist, state, alpha = step(prev, state, memory, position)  # (1, V), (1, T_src)
        alpha = full_precision(alpha)
        log_probs = dist.float().full()[0]  # (V,)
        top = log_probs.topk(min(top_k, len(log_probs)))
        token = follow[position] if position < len(follow) else int(top.indices[0])
        steps.append(
            DecoderStep(
                token=token,
                log_prob=float(log_probs[token]),
                forced=position < forced,
                attention=None if alpha is None else alpha[0].cpu().numpy(),
                top_tokens=top.indices.tolist(),
                top_log_probs=top.values.tolist(),
                shown={s.slot: _shown(state.slots[s.slot][0], s.kind) for s in shown},
            )
        )
        prev = torch.tensor([token], device=prev.device)
    return steps


def _shown(value: Tensor, kind: str) -> float | list[list[float]]:
    """A declared value of one row as the answers give it (`results.shown_value`)."""
    return shown_value(full_precision(value).cpu().numpy(), kind)


class _Steered:
    """A step function for one sentence that puts all attention where `override` says, at
    the output positions it names."""

    def __init__(self, step: StepFn, override: dict[int, int]) -> None:
        self.step, self.override = step, override

    def __call__(
        self, prev: Tensor, state: DecoderState, memory: Memory, position: int
    ) -> tuple[LogProbs, DecoderState, Tensor | None]:
        if position in self.override:
            # all of the weight on one position, whatever the scores (or a local window) say
            steer = torch.zeros_like(memory.mask, dtype=memory.states.dtype)  # (N, T_src)
            steer[:, self.override[position]] = 1.0
            memory = memory._replace(steer=steer)
        return self.step(prev, state, memory)


def _beam_best(
    model: Seq2Seq,
    step: _Steered,
    state: DecoderState,
    memory: Memory,
    prefix: list[int],
    max_len: int,
    how: SearchPlan,
) -> list[int]:
    """Beam search's best output that starts with `prefix`: at the prefix's positions every
    other token is ruled out, so the beams grow from the prefix and are ranked with its
    length. (Their scores then leave out the prefix's log-probabilities, which are the
    same for every beam; `_walk` recomputes the real ones.)"""
    calls = 0  # one sentence: every row of a call is at the same position

    def forced_step(prev: Tensor, state: DecoderState, memory: Memory):
        nonlocal calls
        log_probs, state, weights = step(prev, state, memory, calls)  # (K, V), state, (K, T_src)
        if calls < len(prefix):
            log_probs = log_probs.forced(prefix[calls])
        calls += 1
        return log_probs, state, weights

    history = _sentence_steps(model, forced_step, state, memory, max_len, how)
    trace = _trace(history, how.beam_size)
    return trace.tokens(trace.finished[0]) if trace.finished else prefix


@torch.no_grad()
def beam_trace(
    model: Seq2Seq,
    src: Tensor,
    *,
    max_len: int,
    beam_size: int,
    alpha: float = 0.0,
    beta: float = 0.0,
    check: Check | None = None,
    constraint: Constraint | None = None,
) -> BeamTrace:
    """Beam search over one sentence, keeping every candidate it weighed (see `beam_search`).

    The search runs as `beam_search` with nbest = beam_size: it stops only once K
    hypotheses have ended or none left could beat the K-th best. The steps up to any
    smaller nbest's stop are the same, and what ends later cannot outrank that search's
    n-best, so for every n the first n finished nodes, ranked, are `beam_search`'s n-best.

    Args:
        model: a Seq2Seq in eval mode.
        src: (T_src,) int64 source ids ending in </s>.
        max_len: the most output tokens (</s> included).
        beam_size, alpha, beta: K and the length and coverage penalties' weights (see
            `beam_search`).
        check: called before every decoder step; it stops the search by raising.
        constraint: lexical constraints on the output (`constraints.Constraint`), or None.
    """
    memory, state = model.encode(src[None], torch.tensor([len(src)], device=src.device))
    how = SearchPlan(
        beam_size=beam_size,
        nbest=beam_size,
        length_penalty=alpha,
        coverage_penalty=beta,
        width=1,
        check=check,
        constraints=None if constraint is None else Table.of([constraint], src.device),
    )
    with packed_linears(model.decoder, rows=beam_size):
        history = _sentence_steps(model, model.decode_step, state, memory, max_len, how)
    return _trace(history, beam_size)


def _sentence_steps(
    model: Seq2Seq,
    step: StepFn,
    state: DecoderState,
    memory: Memory,
    max_len: int,
    how: SearchPlan,
) -> list[BeamStep]:
    """`beam_steps` over one sentence that `model` encoded, to at most `max_len` tokens."""
    limit = torch.tensor([max_len], device=memory.states.device)
    ids = dict(bos_id=model.bos_id, eos_id=model.eos_id)
    history, _ = beam_steps(step, [(state, memory, limit)], how, **ids)
    return history


def _trace(history: list[BeamStep], beam_size: int) -> BeamTrace:
    """The tree of a one-sentence search from its steps, moved to the CPU (walk.py's)."""
    on_cpu = [BeamStep(*(_numpy(x) for x in entry)) for entry in history]
    return tree(on_cpu, beam_size)


def _numpy(tensor: Tensor | None) -> np.ndarray | None:
    """A step's record on the CPU: ids as they are, bfloat16 scores and attention in float32."""
    if tensor is None:
        return None
    return (tensor if not tensor.is_floating_point() else full_precision(tensor)).cpu().numpy()
