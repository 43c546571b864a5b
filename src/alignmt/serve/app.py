"""The FastAPI app: routes, the checks every request passes, and errors as JSON.

Routes validate what is cheap and needs no model (counts, lengths, beam sizes, model names)
and hand the rest to the decoding thread (batcher.py, decoding.py). Every error, whatever
raised it, is answered as `{"error": {"code", "message", ...}}` with a 4xx status that
says whose fault it was; a 500 means a bug, and its traceback goes to the log, never to
the client.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from alignmt.serve import decoding, page
from alignmt.serve.batcher import Batcher
from alignmt.serve.guard import RequestGuard, json_error
from alignmt.serve.limits import Limits, RequestError, check_sentence, cut, invalid, over_limit
from alignmt.serve.registry import ServedModel
from alignmt.serve.schemas import (
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

log = logging.getLogger("alignmt.serve")

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


def create_app(models: dict[str, ServedModel], limits: Limits | None = None) -> FastAPI:
    """The service for `models` (name -> model; the first is the default)."""
    limits = limits or Limits()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # A decoding thread per start-up: an app may be started (and stopped) again.
        app.state.batcher = Batcher(limits)
        app.state.batcher.start()
        yield
        app.state.batcher.stop()

    async def submit(request: Request, key: Any, run: Any, body: Any, sentences: int) -> Response:
        return _json(await _running(request).submit(key, run, body, sentences))

    app = FastAPI(
        title="alignmt",
        summary="Attention-based RNN translation, with what the decoder saw at every step.",
        lifespan=lifespan,
    )
    app.add_middleware(RequestGuard, limits=limits)
    _add_error_handlers(app)
    app.mount("/static", StaticFiles(directory=page.STATIC), name="static")

    @app.get("/", include_in_schema=False)
    async def explorer() -> FileResponse:
        return FileResponse(page.PAGE, media_type="text/html")

    def served(name: str | None) -> ServedModel:
        if name is None:
            return next(iter(models.values()))
        if name not in models:
            message = f"no model named {cut(name)!r}; served: {', '.join(models)}"
            raise RequestError(404, "not_found", message, value=cut(name))
        return models[name]

    def one_model(name: str | None, path: str) -> ServedModel:
        """A served model that follows one decoder: not an ensemble."""
        model = served(name)
        if model.info.ensemble:
            message = (
                f"model {model.name!r} is an ensemble, which {path} cannot follow step by step; "
                f"ask one of its members ({', '.join(model.info.ensemble)})"
            )
            raise invalid("model", message, model.name)
        return model

    def check_beam(beam_size: int | None, model: ServedModel) -> int:
        beam = beam_size or model.translator.search.beam_size
        if beam > limits.max_beam:
            raise over_limit("max_beam", beam, limits.max_beam, "beam_size")
        return beam

    @app.get("/healthz", response_model=Health, responses={503: ERRORS[503]})
    async def healthz(request: Request) -> Health:
        _running(request)
        return Health(status="ok", models=list(models))

    @app.get("/v1/models", response_model=ModelsResponse)
    async def list_models() -> ModelsResponse:
        return ModelsResponse(models=[m.info for m in models.values()])

    @app.post("/v1/translate", response_model=TranslateResponse, responses=ERRORS)
    async def translate(body: TranslateRequest, request: Request) -> Response:
        """Translate sentences: n-best hypotheses with scores, alignments and attention."""
        model = served(body.model)
        request.state.sentences = count = len(body.sentences)
        if count > limits.max_sentences:
            raise over_limit("max_sentences", count, limits.max_sentences, "sentences")
        if body.sample and body.nbest > 1:
            raise invalid("nbest", "sampling draws outputs: ask for sample.samples", body.nbest)
        if body.sample and count * body.sample.samples > limits.max_sentences:
            total = count * body.sample.samples
            raise over_limit("max_sentences", total, limits.max_sentences, "samples in all")
        for i, sentence in enumerate(body.sentences):
            check_sentence(sentence, f"sentences[{i}]", limits)
        beam = check_beam(body.beam_size, model)
        if body.nbest > beam:
            raise invalid("nbest", f"{body.nbest} is more than the beam size {beam}", body.nbest)
        body = body.model_copy(update={"beam_size": beam})
        run = partial(decoding.translate_batch, model, limits)
        # a sampled request decodes alone, so that its seed alone decides its draws
        key = None if body.sample else (model.name, "translate", beam, body.nbest)
        drawn = count * body.sample.samples if body.sample else count
        return await submit(request, key, run, body, drawn)

    @app.post("/v1/step", response_model=StepResponse, responses=ERRORS)
    async def step(body: StepRequest, request: Request) -> Response:
        """The decoder one step at a time: attention, top-k and the token taken at each,
        with a forced prefix and attention overrides."""
        model = one_model(body.model, "/v1/step")
        request.state.sentences = 1
        check_sentence(body.sentence, "sentence", limits)
        check_beam(body.beam_size, model)
        run = partial(_alone, decoding.step, model, limits)
        return await submit(request, None, run, body, 1)

    @app.post("/v1/beam", response_model=BeamResponse, responses=ERRORS)
    async def beam(body: BeamRequest, request: Request) -> Response:
        """Beam search's whole tree: every hypothesis weighed, its parent and its fate."""
        model = one_model(body.model, "/v1/beam")
        request.state.sentences = 1
        check_sentence(body.sentence, "sentence", limits)
        body = body.model_copy(update={"beam_size": check_beam(body.beam_size, model)})
        run = partial(_alone, decoding.beam, model, limits)
        return await submit(request, None, run, body, 1)

    @app.post("/v1/snapshots", response_model=SnapshotsResponse, responses=ERRORS)
    async def snapshots(body: SnapshotsRequest, request: Request) -> Response:
        """How one sentence's attention formed: the run's snapshots, oldest first, each
        reading the served model's greedy output."""
        model = one_model(body.model, "/v1/snapshots")
        request.state.sentences = 1
        check_sentence(body.sentence, "sentence", limits)
        run = partial(_alone, decoding.snapshots, model, limits)
        return await submit(request, None, run, body, 1)

    return app


def _running(request: Request) -> Batcher:
    """The app's decoding thread; a 503 when it is not running (no start-up, or stopped)."""
    batcher = getattr(request.app.state, "batcher", None)
    if batcher is None or not batcher.alive:
        raise RequestError(503, "busy", "the decoder is not running")
    return batcher


def _alone(fn: Any, model: ServedModel, limits: Limits, payloads: list[Any]) -> list[Any]:
    """Run a one-sentence job (its key is None, so it is alone in its batch)."""
    try:
        return [fn(model, limits, payloads[0])]
    except RequestError as error:
        return [error]


def _json(content: bytes) -> Response:
    return Response(content, media_type="application/json")


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestError)
    async def refused(request: Request, error: RequestError) -> Response:
        retry = error.details.get("retry_after")
        headers = {"Retry-After": str(retry)} if retry else None
        return json_error(error.status, error.body(), headers)

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, error: RequestValidationError) -> Response:
        return _invalid([_problem(e) for e in error.errors()])

    @app.exception_handler(HTTPException)
    async def http(request: Request, error: HTTPException) -> Response:
        if error.status_code == 400:  # FastAPI's only 400: a body it could not parse
            return _invalid([_unparsed(error)])
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "invalid")
        body = {"error": {"code": code, "message": str(error.detail)}}
        return json_error(error.status_code, body, error.headers)

    @app.exception_handler(Exception)
    async def bug(request: Request, error: Exception) -> Response:
        log.exception("internal error on %s %s", request.method, request.url.path)
        return json_error(500, {"error": {"code": "error", "message": "internal server error"}})


def _invalid(problems: list[dict[str, Any]]) -> Response:
    """The 422 of a request that is not what its route takes: the first problem, and all."""
    first = problems[0]
    message = f"{first['field']}: {first['message']}"
    body = {"code": "invalid", "message": message, "field": first["field"], "value": first["value"]}
    body["errors"] = problems
    return json_error(422, {"error": body})


def _unparsed(error: HTTPException) -> dict[str, Any]:
    """FastAPI's 400 for a body it could not parse, as a problem of the body; the cause is
    what `json.loads` raised: bytes that are not UTF-8 (nor UTF-16 or 32) or, past Python's
    recursion limit, nesting too deep."""
    cause = error.__cause__
    if isinstance(cause, UnicodeDecodeError):
        byte = cause.object[cause.start : cause.start + 1].hex()
        encoding = cause.encoding.upper()
        message = f"not valid {encoding}: byte 0x{byte} at byte {cause.start} ({cause.reason})"
    elif isinstance(cause, RecursionError):
        message = "not valid JSON: nested too deeply to parse"
    else:
        message = f"not valid JSON: {error.detail}"
    return {"field": "body", "message": message, "value": None}


def _problem(error: dict[str, Any]) -> dict[str, Any]:
    """One pydantic error as {field, message, value}: the field as `sentences[2]` ("body"
    for the body as a whole), long values cut."""
    loc = error.get("loc", ())[1:]  # after "body"
    if error.get("type") == "json_invalid":
        where = f" at character {loc[0]}" if loc else ""
        message = f"not valid JSON: {error.get('ctx', {}).get('error', 'decode error')}{where}"
        return {"field": "body", "message": message, "value": None}
    field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)
    field = field.replace(".[", "[").lstrip(".") or "body"
    message, value = error.get("msg", "invalid"), cut(error.get("input"))
    return {"field": field, "message": message, "value": value}
