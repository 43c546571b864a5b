"""The HTTP routes, at module level, and the dependencies they take: the served models, the
server's limits (both on `app.state`, set by `app.create_app`) and the running decoding
thread.

A route refuses what it can before any decoding: validation (schemas.py) first, then the
model's name, the model's default beam and the request's `check_limits`. The rest (source
tokens, vocabulary, attention) needs the model's tokenizer and goes with the request to the
decoding thread (batcher.py; answers/translate.py, answers/inside.py).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, Response

from alignmt.answers import inside, page
from alignmt.answers.limits import Limits, RequestError
from alignmt.answers.registry import ServedModel, one_model, served
from alignmt.answers.schemas import (
    BeamRequest,
    BeamResponse,
    ErrorResponse,
    Health,
    ModelsResponse,
    SnapshotsRequest,
    SnapshotsResponse,
    StepRequest,
    StepResponse,
    TranslateRequest,
    TranslateResponse,
)
from alignmt.answers.translate import translate_batch
from alignmt.decoding.engine import Check
from alignmt.serve.batcher import Batcher

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": what}
    for status, what in [
        (404, "no model of that name"),
        (408, "the request did not arrive whole within read_deadline"),
        (413, "the body is over max_body_bytes"),
        (422, "an invalid field, or a value past a limit"),
        (503, "the queue is full (retry after Retry-After seconds), or the decoder is not running"),
        (504, "no answer within the deadline"),
    ]
}


def served_models(request: Request) -> dict[str, ServedModel]:
    """The models the app serves, by name, the default first."""
    return request.app.state.models


def server_limits(request: Request) -> Limits:
    return request.app.state.limits


def running(request: Request) -> Batcher:
    """The app's decoding thread; a 503 when it is not running (no start-up, or stopped)."""
    batcher = getattr(request.app.state, "batcher", None)
    if batcher is None or not batcher.alive:
        raise RequestError(503, "busy", "the decoder is not running")
    return batcher


Models = Annotated[dict[str, ServedModel], Depends(served_models)]
ServerLimits = Annotated[Limits, Depends(server_limits)]
Running = Annotated[Batcher, Depends(running)]

router = APIRouter()


@router.get("/", include_in_schema=False)
async def explorer() -> FileResponse:
    return FileResponse(page.PAGE, media_type="text/html")


@router.get(
    "/healthz", response_model=Health, responses={503: ERRORS[503]}, dependencies=[Depends(running)]
)
async def healthz(models: Models) -> Health:
    """Whether the server answers: 200 with the served models' names while the decoder runs."""
    return Health(status="ok", models=list(models))


@router.get("/v1/models", response_model=ModelsResponse)
async def list_models(models: Models) -> ModelsResponse:
    """The served models: languages, tokenizer, architecture, weights and shortlist."""
    return ModelsResponse(models=[m.info for m in models.values()])


@router.post("/v1/translate", response_model=TranslateResponse, responses=ERRORS)
async def translate(
    body: TranslateRequest,
    request: Request,
    models: Models,
    limits: ServerLimits,
    batcher: Running,
) -> Response:
    """Translate sentences: n-best hypotheses with scores, alignments and attention."""
    model = served(models, body.model)
    request.state.sentences = len(body.sentences)
    body = body.with_default_beam(model.translator.search.beam_size)
    body.check_limits(limits)
    run = partial(translate_batch, model, limits)
    # a sampled request decodes alone, so that its seed alone decides its draws
    key = None if body.sample else (model.name, "translate", body.beam_size, body.nbest)
    return _json(await batcher.submit(key, run, body, body.drawn))


@router.post("/v1/step", response_model=StepResponse, responses=ERRORS)
async def step(
    body: StepRequest,
    request: Request,
    models: Models,
    limits: ServerLimits,
    batcher: Running,
) -> Response:
    """The decoder one step at a time: attention, top-k and the token taken at each,
    with a forced prefix and attention overrides."""
    model = one_model(models, body.model, "/v1/step")
    request.state.sentences = 1
    body.check_limits(limits)
    return await _alone(batcher, inside.step, model, limits, body)


@router.post("/v1/beam", response_model=BeamResponse, responses=ERRORS)
async def beam(
    body: BeamRequest,
    request: Request,
    models: Models,
    limits: ServerLimits,
    batcher: Running,
) -> Response:
    """Beam search's whole tree: every hypothesis weighed, its parent and its fate."""
    model = one_model(models, body.model, "/v1/beam")
    request.state.sentences = 1
    body = body.with_default_beam(model.translator.search.beam_size)
    body.check_limits(limits)
    return await _alone(batcher, inside.beam, model, limits, body)


@router.post("/v1/snapshots", response_model=SnapshotsResponse, responses=ERRORS)
async def snapshots(
    body: SnapshotsRequest,
    request: Request,
    models: Models,
    limits: ServerLimits,
    batcher: Running,
) -> Response:
    """How one sentence's attention formed: the run's snapshots, oldest first, each
    reading the served model's greedy output."""
    model = one_model(models, body.model, "/v1/snapshots")
    request.state.sentences = 1
    body.check_limits(limits)
    return await _alone(batcher, inside.snapshots, model, limits, body)


async def _alone(
    batcher: Batcher, fn: Callable[..., bytes], model: ServedModel, limits: Limits, body: Any
) -> Response:
    """Queue a one-sentence job: its key is None, so it is alone in its call."""
    return _json(await batcher.submit(None, partial(_one, fn, model, limits), body, 1))


def _one(
    fn: Callable[..., bytes], model: ServedModel, limits: Limits, payloads: list[Any], check: Check
) -> list[bytes]:
    # alone in its call, the job gets whatever `fn` raises (batcher.Batcher._run)
    return [fn(model, limits, payloads[0], check)]


def _json(content: bytes) -> Response:
    return Response(content, media_type="application/json")
