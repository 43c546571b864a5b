"""The answers that look inside one sentence's decoding, on the decoding thread: the
decoder step by step (/v1/step), beam search's tree (/v1/beam) and attention over training
(/v1/snapshots). The explorer asks them of a server, of a notebook's kernel, or of the
answers stored in its offline page (page.py); each returns its response's JSON bytes.
"""

from __future__ import annotations

import numpy as np

from alignmt.answers.limits import Limits, invalid
from alignmt.answers.registry import ServedModel
from alignmt.answers.schemas import (
    BeamNode,
    BeamRequest,
    BeamResponse,
    Candidate,
    Snapshot,
    SnapshotsRequest,
    SnapshotsResponse,
    Step,
    StepRequest,
    StepResponse,
)
from alignmt.answers.translate import (
    constraint_of,
    hypothesis,
    probability,
    rounded,
    source_tokens,
)
from alignmt.decoding.engine import Check, Unavailable
from alignmt.decoding.results import Stepped
from alignmt.decoding.translator import Translator


def step(
    served: ServedModel, limits: Limits, request: StepRequest, check: Check | None = None
) -> bytes:
    """The decoder step by step over one sentence (see `Translator.step_through`)."""
    translator = served.translator
    src_tokens = _one_source(translator, request.sentence, limits)
    vocab = translator.tgt_vocab
    if request.top_k > len(vocab):  # max_top_k is checked with the other limits
        message = f"{request.top_k} is more than the {len(vocab)} target tokens"
        raise invalid("top_k", message, request.top_k)
    if request.override and not translator.has_attention:
        raise invalid("override", f"model {served.name!r} has no attention to override")
    _check_forcing(request, translator.output_limit(src_tokens), len(src_tokens))
    try:
        translator.target_ids(request.prefix, src_tokens)
    except ValueError as error:
        raise invalid("prefix", str(error).removeprefix("prefix: "), request.prefix) from None
    if request.attribution and request.override:
        message = "explains the model's own decoding; ask for it without an override"
        raise invalid("attribution", message, request.attribution)
    stepped = translator.step_through(
        request.sentence,
        prefix=request.prefix,
        override=request.override,
        top_k=request.top_k,
        beam_size=request.beam_size,
        check=check,
    )
    out = stepped.translation
    relevance = _attribution(translator, src_tokens, stepped, request.attribution)
    steps = [
        Step(
            token=translator.token_text(s.token, src_tokens),
            probability=probability(s.log_prob),
            forced=s.forced,
            overridden=position in request.override,
            attention=rounded(s.attention),
            top_k=[
                Candidate(token=translator.token_text(t, src_tokens), probability=probability(p))
                for t, p in zip(s.top_tokens, s.top_log_probs, strict=True)
            ],
            shown=s.shown,
            attribution=None if relevance is None else rounded(relevance[position]),
        )
        for position, s in enumerate(stepped.steps)
    ]
    response = StepResponse(
        model=served.name,
        source_tokens=out.src_tokens,
        steps=steps,
        text=out.text,
        tokens=out.tokens,
        score=out.score,
    )
    return response.model_dump_json().encode()


def _attribution(
    translator: Translator, src_tokens: list[str], stepped: Stepped, method: str | None
) -> np.ndarray | None:
    """(steps, T_src) relevance of each source token for each step's token, or None."""
    if method is None:
        return None
    if method == "shift" and not translator.has_attention:
        raise invalid("attribution", "shift reads attention, and this model has none", method)
    try:
        translator.engine.check_method(method)
    except Unavailable as refused:
        raise invalid("attribution", str(refused), method) from None
    # imported here: the analyses load SciPy, which a server that is not asked for them spares
    from alignmt.analysis.attribution import translation_relevance

    src = translator.source_ids(src_tokens)
    return translation_relevance(translator, src, [s.token for s in stepped.steps], method)


def _check_forcing(request: StepRequest, limit: int, source_length: int) -> None:
    """The prefix fits in the output limit; each override names a step within it and a source
    position within the source, whose </s> is at `source_length`."""
    if len(request.prefix) > limit:
        message = f"{len(request.prefix)} tokens, more than this sentence's output limit of {limit}"
        raise invalid("prefix", message, len(request.prefix))
    for position, source in request.override.items():
        if position >= limit:
            message = f"step {position} is past this sentence's output limit of {limit} steps"
            raise invalid("override", message, position)
        if source > source_length:
            message = (
                f"step {position}: source position {source} is past the source's last token "
                f"(</s>, at {source_length})"
            )
            raise invalid("override", message, source)


def beam(
    served: ServedModel, limits: Limits, request: BeamRequest, check: Check | None = None
) -> bytes:
    """Beam search's whole tree for one sentence (see `Translator.beam_trace`)."""
    translator = served.translator
    k = request.beam_size or translator.search.beam_size
    _one_source(translator, request.sentence, limits)
    constraint = constraint_of(translator, request.constraints, "constraints")
    src_tokens, trace = translator.beam_trace(
        request.sentence, beam_size=k, check=check, constraint=constraint
    )
    nodes = [
        BeamNode(
            id=i,
            step=n.step,
            parent=n.parent,
            token=translator.token_text(n.token, src_tokens),
            score=n.score,
            status=n.status,
            final_score=n.final_score,
            attention=rounded(n.attention),
            met=None if constraint is None else constraint.met(trace.tokens(i)),
        )
        for i, n in enumerate(trace.nodes)
    ]
    finished = [
        hypothesis(
            translator.hypothesis(src_tokens, trace, node),
            attention=True,
            met=None if constraint is None else constraint.met(trace.tokens(node)),
        )
        for node in trace.finished
    ]
    response = BeamResponse(
        model=served.name,
        source_tokens=translator.source_as_read(src_tokens),
        beam_size=k,
        length_penalty=translator.search.length_penalty,
        coverage_penalty=translator.search.coverage_penalty,
        nodes=nodes,
        finished=finished,
        finished_nodes=trace.finished,
        constraints=request.constraints if constraint is not None else None,
    )
    return response.model_dump_json().encode()


def snapshots(
    served: ServedModel, limits: Limits, request: SnapshotsRequest, check: Check | None = None
) -> bytes:
    """How one sentence's attention formed over training: each snapshot reads the served
    model's greedy output (teacher-forced, so every matrix has the same shape) and says
    what it would have output itself."""
    if not served.translator.has_attention:
        raise invalid("model", f"model {served.name!r} has no attention to follow")
    engine = served.translator.engine
    if engine.name != "torch" or engine.ensemble:  # snapshots reopen one run on PyTorch
        message = f"model {served.name!r}: its run's snapshots are not available with "
        raise invalid("model", f"{message}{engine.label}: {engine.instead}")
    if not served.info.snapshots:
        raise invalid("model", f"run {served.name!r} kept no snapshots (train.snapshot_every)")
    _one_source(served.translator, request.sentence, limits)
    sentence = request.sentence
    final = served.translator.step_through(sentence, top_k=1, check=check).translation
    kept = []
    for step in served.info.snapshots:
        snapshot = served.snapshot(step)
        read = snapshot.step_through(sentence, prefix=final.tokens, top_k=1, check=check)
        own = snapshot.step_through(sentence, top_k=1, check=check).translation
        attention = rounded(read.translation.attention)
        kept.append(Snapshot(step=step, attention=attention, text=own.text, tokens=own.tokens))
    response = SnapshotsResponse(
        model=served.name, source_tokens=final.src_tokens, tokens=final.tokens, snapshots=kept
    )
    return response.model_dump_json().encode()


def _one_source(translator: Translator, sentence: str, limits: Limits) -> list[str]:
    """The tokens of the one sentence that /v1/step and /v1/beam decode; none is an error
    (translate gives such a sentence an empty translation instead)."""
    tokens = source_tokens(translator, sentence, limits)
    if not tokens:
        raise invalid("sentence", "the source tokenizer finds no tokens in it", sentence)
    return tokens
