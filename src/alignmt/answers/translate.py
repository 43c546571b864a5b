"""The answer to /v1/translate, on the decoding thread (serve/batcher.py): tokenise, check
what only the model can check (source tokens, vocabulary, attention, what its engine can
do), translate the sentences of several requests in one call, and turn the result into
the response's JSON.

Each function returns the JSON bytes of its response, or the `RequestError` a request
gets; serialising here keeps that work off the event loop too. The call's `check`
(batcher.py) goes on to the translator, which calls it between decoder steps.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from alignmt.answers.limits import Limits, RequestError, invalid, over_limit
from alignmt.answers.registry import ServedModel
from alignmt.answers.schemas import (
    Constraints,
    Hypothesis,
    SentenceTranslation,
    TranslateRequest,
    TranslateResponse,
)
from alignmt.decoding.engine import Check, Feature, Unavailable
from alignmt.decoding.rules import Sampling

if TYPE_CHECKING:
    from alignmt.decoding.constraint import Constraint
    from alignmt.decoding.results import Translation
    from alignmt.decoding.translator import Translator

DECIMALS = 5  # of attention weights and probabilities in responses


def translate_batch(
    served: ServedModel,
    limits: Limits,
    requests: list[TranslateRequest],
    check: Check | None = None,
) -> list[bytes | RequestError]:
    """Translate the sentences of several requests that share a beam size (None: the
    model's) and n-best, in one call: they share decoder steps. A request refused (a
    sentence over a limit, a phrase the model cannot write, what its engine cannot do)
    gets its error and takes no part."""
    first, translator = requests[0], served.translator
    beam_size = first.beam_size or translator.search.beam_size
    results: list[bytes | RequestError] = []
    tokens: list[list[str]] = []
    constraints: list[Constraint | None] = []
    todo = []  # (request index, its first sentence, its sentences)
    for request in requests:
        try:
            split, wanted = _prepared(served, limits, request)
        except RequestError as error:
            results.append(error)
            continue
        results.append(b"")
        todo.append((len(results) - 1, len(tokens), len(split)))
        tokens += split
        constraints += wanted
    if not todo:
        return results
    asked: dict[str, Any] = {}
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
        found = translations[start : start + count]
        wanted = constraints[start : start + count]
        results[index] = _response(served, requests[index], beam_size, found, wanted)
    return results


def _prepared(
    served: ServedModel, limits: Limits, request: TranslateRequest
) -> tuple[list[list[str]], list[Constraint | None]]:
    """A request's sentences as source tokens and its constraints as target ids, or the
    `RequestError` that refuses it."""
    translator = served.translator
    _check_engine(served, request)
    split = [source_tokens(translator, s, limits) for s in request.sentences]
    _check_attention_cells(translator, request, split, limits)
    return split, _constraints(translator, request.constraints, len(split))


def _check_engine(served: ServedModel, request: TranslateRequest) -> None:
    """What the request asks of the model's engine (sampling, lexical constraints), by the
    engine's table: a 422 naming the field it cannot answer."""
    asked: list[tuple[str, Feature]] = []
    if request.sample:
        asked.append(("sample", "sampling"))
    if request.constraints:
        asked.append(("constraints", "constrained search"))
    for name, feature in asked:
        try:
            served.translator.engine.require([feature])
        except Unavailable as refusal:
            raise invalid(name, f"model {served.name!r}: {refusal}") from None


def _response(
    served: ServedModel,
    request: TranslateRequest,
    beam_size: int,
    found: list[list[Translation]],
    constraints: list[Constraint | None],
) -> bytes:
    """One request's response body: each sentence's hypotheses."""
    translator = served.translator
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
            for hyps, wanted in zip(found, constraints, strict=True)
        ],
    )
    return response.model_dump_json().encode()


def _constraints(
    translator: Translator, given: list[Constraints | None] | None, count: int
) -> list[Constraint | None]:
    """Each sentence's constraints as target ids (None: none); a phrase the model cannot
    write is the request's 422, naming it."""
    out: list[Constraint | None] = []
    for i, phrases in enumerate(given or [None] * count):
        out.append(constraint_of(translator, phrases, f"constraints[{i}]"))
    return out


def constraint_of(
    translator: Translator, phrases: Constraints | None, field: str
) -> Constraint | None:
    if phrases is None or not (phrases.include or phrases.exclude):
        return None
    try:
        translator.engine.require(["constrained search"])
    except Unavailable as refusal:
        raise invalid(field, str(refusal), phrases.model_dump()) from None
    try:
        return translator.constraint(phrases.include, phrases.exclude)
    except ValueError as error:
        raise invalid(field, str(error), phrases.model_dump()) from None


def _met(
    translator: Translator, translation: Translation, constraint: Constraint | None
) -> list[bool] | None:
    return None if constraint is None else translator.met(translation, constraint)


def _check_attention_cells(
    translator: Translator,
    request: TranslateRequest,
    split: list[list[str]],
    limits: Limits,
) -> None:
    """Refuse, before decoding, a request whose attention matrices could pass the limit: each
    hypothesis' matrix is at most (the sentence's output limit x its source tokens and </s>).
    A weight takes about 8 bytes of JSON: 8 sentences of 200 tokens with nbest 16 made an
    answer of 79 MB (9.9 million weights, against a bound of 10.6 million)."""
    if not (request.attention and translator.has_attention):
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


def hypothesis(t: Translation, attention: bool, met: list[bool] | None = None) -> Hypothesis:
    return Hypothesis(
        text=t.text,
        tokens=t.tokens,
        score=t.score,
        probabilities=[round(p, DECIMALS) for p in t.probabilities],
        attention=rounded(t.attention) if attention else None,
        alignment=t.alignment,
        met=met,
    )


def source_tokens(translator: Translator, sentence: str, limits: Limits) -> list[str]:
    tokens = translator.source_tokens(sentence)
    if len(tokens) > limits.max_source_tokens:
        raise over_limit(
            "max_source_tokens", len(tokens), limits.max_source_tokens, "source tokens"
        )
    return tokens


def probability(log_prob: float) -> float:
    return round(math.exp(log_prob), DECIMALS)


def rounded(weights: Any) -> list | None:
    """Attention (NumPy, every engine's) as JSON-ready lists: float64 first, so that
    0.12346 prints as such."""
    if weights is None:
        return None
    return np.round(np.asarray(weights, dtype=np.float64), DECIMALS).tolist()
