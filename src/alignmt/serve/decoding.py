"""The work behind each endpoint, run on the decoding thread (batcher.py): tokenise, check
what only the model can check (source tokens, vocabulary, attention), decode, and turn the
result into the response's JSON.

Each function returns the JSON bytes of its response, or the `RequestError` a request
gets; serialising here keeps that work off the event loop too. Each passes the call's
`check` (batcher.py) on to the translator, which calls it between decoder steps.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from alignmt.decoding.rules import Sampling
from alignmt.serve.batcher import Check
from alignmt.serve.limits import Limits, RequestError, invalid, over_limit
from alignmt.serve.registry import ServedModel
from alignmt.serve.schemas import (
    BeamNode,
    BeamRequest,
    BeamResponse,
    Candidate,
    Constraints,
    Hypothesis,
    SentenceTranslation,
    Snapshot,
    SnapshotsRequest,
    SnapshotsResponse,
    Step,
    StepRequest,
    StepResponse,
    TranslateRequest,
    TranslateResponse,
)

if TYPE_CHECKING:
    from alignmt.decoding.constraints import Constraint
    from alignmt.decoding.onnx_runtime import OnnxTranslator, RuntimeTranslation
    from alignmt.decoding.translator import Translation, Translator

DECIMALS = 5  # of attention weights and probabilities in responses


def translate_batch(
    served: ServedModel,
    limits: Limits,
    requests: list[TranslateRequest],
    check: Check | None = None,
) -> list[bytes | RequestError]:
    """Translate the sentences of several requests that share a beam size (None: the
    model's) and n-best, in one call: they share decoder steps."""
    first, translator = requests[0], served.translator
    beam_size = first.beam_size or translator.search.beam_size
    results: list[bytes | RequestError] = []
    tokens, todo = [], []
    constraints: list[Constraint | None] = []
    for request in requests:
        try:
            _check_runtime(served, request)
            split = [_source_tokens(translator, s, limits) for s in request.sentences]
            _check_attention_cells(translator, request, split, limits)
            wanted = _constraints(translator, request.constraints, len(split))
        except RequestError as error:
            results.append(error)
            continue
        results.append(b"")
        todo.append((len(results) - 1, len(tokens), len(split)))
        tokens += split
        constraints += wanted
    if not todo:
        return results
    asked: dict[str, Any] = {}  # what only PyTorch's search does (`_check_runtime`)
    if first.sample is not None:
        asked["sampling"] = Sampling(**first.sample.model_dump())
    if any(constraints):
        asked["constraints"] = constraints
    translations = translator.translate_tokens(
        tokens,
        nbest=first.nbest,
        batch_size=limits.batch_width,
        warn=False,
        beam_size=beam_size,
        check=check,
        **asked,
    )
    for index, start, count in todo:
        request = requests[index]
        response = TranslateResponse(
            model=served.name,
            beam_size=beam_size,
            translations=[
                SentenceTranslation(
                    source_tokens=hyps[0].src_tokens,
                    hypotheses=[
                        hypothesis(t, request.attention, _met(translator, t, wanted)) for t in hyps
                    ],
                )
                for hyps, wanted in zip(
                    translations[start : start + count],
                    constraints[start : start + count],
                    strict=True,
                )
            ],
        )
        results[index] = response.model_dump_json().encode()
    return results


def _check_runtime(served: ServedModel, request: TranslateRequest) -> None:
    """An exported model searches greedy or with a beam: sampling and constraints are the
    run folder's, served by PyTorch."""
    if not served.exported:
        return
    for name, given in (("sample", request.sample), ("constraints", request.constraints)):
        if given:
            message = (
                f"model {served.name!r} is an exported model (ONNX Runtime), which searches "
                f"greedy or with a beam; serve its run folder to use {name}"
            )
            raise invalid(name, message)


def _constraints(
    translator: Translator, given: list[Constraints | None] | None, count: int
) -> list[Constraint | None]:
    """Each sentence's constraints as target ids (None: none); a phrase the model cannot
    write is the request's 422, naming it."""
    out: list[Constraint | None] = []
    for i, phrases in enumerate(given or [None] * count):
        out.append(_constraint(translator, phrases, f"constraints[{i}]"))
    return out


def _constraint(
    translator: Translator, phrases: Constraints | None, field: str
) -> Constraint | None:
    if phrases is None or not (phrases.include or phrases.exclude):
        return None
    try:
        return translator.constraint(phrases.include, phrases.exclude)
    except ValueError as error:
        raise invalid(field, str(error), phrases.model_dump()) from None


def _met(
    translator: Translator, translation: Translation, constraint: Constraint | None
) -> list[bool] | None:
    return None if constraint is None else translator.met(translation, constraint)


def _check_attention_cells(
    translator: Translator | OnnxTranslator,
    request: TranslateRequest,
    split: list[list[str]],
    limits: Limits,
) -> None:
    """Refuse, before decoding, a request whose attention matrices could pass the limit: each
    hypothesis' matrix is at most (the sentence's output limit x its source tokens and </s>).
    A weight takes about 8 bytes of JSON: 8 sentences of 200 tokens with nbest 16 made an
    answer of 79 MB (9.9 million weights, against a bound of 10.6 million)."""
    if not (request.attention and translator.model.has_attention):
        return
    per_hypothesis = sum(translator.output_limit(tokens) * (len(tokens) + 1) for tokens in split)
    cells, most = request.outputs * per_hypothesis, limits.max_attention_cells
    if cells > most:
        what = (
            f"attention weights ({'samples' if request.sample else 'nbest'} {request.outputs} "
            f"x {per_hypothesis} output-by-source "
            f"cells over {len(split)} sentences)"
        )
        raise over_limit("max_attention_cells", cells, most, what)


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
    if request.override and not translator.model.has_attention:
        raise invalid("override", f"model {served.name!r} has no attention to override")
    _check_forcing(request, translator.output_limit(src_tokens), len(src_tokens))
    try:
        translator.target_ids(request.prefix)
    except ValueError as error:
        raise invalid("prefix", str(error).removeprefix("prefix: "), request.prefix) from None
    stepped = translator.step_through(
        request.sentence,
        prefix=request.prefix,
        override=request.override,
        top_k=request.top_k,
        beam_size=request.beam_size,
        check=check,
    )
    out = stepped.translation
    steps = [
        Step(
            token=vocab.itos[s.token],
            probability=_probability(s.log_prob),
            forced=s.forced,
            overridden=position in request.override,
            attention=_rounded(s.attention),
            top_k=[
                Candidate(token=vocab.itos[t], probability=_probability(p))
                for t, p in zip(s.top_tokens, s.top_log_probs, strict=True)
            ],
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


def _check_forcing(request: StepRequest, limit: int, source_tokens: int) -> None:
    """The prefix fits in the output limit; each override names a step within it and a source
    position within the source, whose </s> is at `source_tokens`."""
    if len(request.prefix) > limit:
        message = f"{len(request.prefix)} tokens, more than this sentence's output limit of {limit}"
        raise invalid("prefix", message, len(request.prefix))
    for position, source in request.override.items():
        if position >= limit:
            message = f"step {position} is past this sentence's output limit of {limit} steps"
            raise invalid("override", message, position)
        if source > source_tokens:
            message = (
                f"step {position}: source position {source} is past the source's last token "
                f"(</s>, at {source_tokens})"
            )
            raise invalid("override", message, source)


def beam(
    served: ServedModel, limits: Limits, request: BeamRequest, check: Check | None = None
) -> bytes:
    """Beam search's whole tree for one sentence (see `Translator.beam_trace`)."""
    translator = served.translator
    k = request.beam_size or translator.search.beam_size
    _one_source(translator, request.sentence, limits)
    constraint = _constraint(translator, request.constraints, "constraints")
    src_tokens, trace = translator.beam_trace(
        request.sentence, beam_size=k, check=check, constraint=constraint
    )
    vocab = translator.tgt_vocab
    nodes = [
        BeamNode(
            id=i,
            step=n.step,
            parent=n.parent,
            token=vocab.itos[n.token],
            score=n.score,
            status=n.status,
            final_score=n.final_score,
            attention=_rounded(n.attention),
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
    if not served.translator.model.has_attention:
        raise invalid("model", f"model {served.name!r} has no attention to follow")
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
        attention = _rounded(read.translation.attention)
        kept.append(Snapshot(step=step, attention=attention, text=own.text, tokens=own.tokens))
    response = SnapshotsResponse(
        model=served.name, source_tokens=final.src_tokens, tokens=final.tokens, snapshots=kept
    )
    return response.model_dump_json().encode()


def hypothesis(
    t: Translation | RuntimeTranslation, attention: bool, met: list[bool] | None = None
) -> Hypothesis:
    return Hypothesis(
        text=t.text,
        tokens=t.tokens,
        score=t.score,
        probabilities=[round(p, DECIMALS) for p in t.probabilities],
        attention=_rounded(t.attention) if attention else None,
        alignment=t.alignment,
        met=met,
    )


def _source_tokens(
    translator: Translator | OnnxTranslator, sentence: str, limits: Limits
) -> list[str]:
    tokens = translator.source_tokens(sentence)
    if len(tokens) > limits.max_source_tokens:
        raise over_limit(
            "max_source_tokens", len(tokens), limits.max_source_tokens, "source tokens"
        )
    return tokens


def _one_source(translator: Translator, sentence: str, limits: Limits) -> list[str]:
    """The tokens of the one sentence that /v1/step and /v1/beam decode; none is an error
    (translate gives such a sentence an empty translation instead)."""
    tokens = _source_tokens(translator, sentence, limits)
    if not tokens:
        raise invalid("sentence", "the source tokenizer finds no tokens in it", sentence)
    return tokens


def _probability(log_prob: float) -> float:
    return round(math.exp(log_prob), DECIMALS)


def _rounded(weights: Any) -> list | None:
    """Attention (a CPU tensor, or a NumPy array from ONNX Runtime) as JSON-ready lists:
    float64 first, so that 0.12346 prints as such."""
    if weights is None:
        return None
    return np.round(np.asarray(weights, dtype=np.float64), DECIMALS).tolist()
