"""The FastAPI app: routes, the checks every request passes, and errors as JSON.

Routes validate what is cheap and needs no model (counts, lengths, beam sizes, model names)
and hand the rest to the decoding thread (batcher.py, decoding.py). Every error, whatever
raised it, is answered as `{"error": {"code", "message", ...}}` with a 4xx status that
says whose fault it was; a 500 means a bug, and its traceback goes to the log, never to
the client.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from alignmt.serve import decoding, page
from alignmt.serve.batcher import Batcher
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
    app.add_middleware(RequestGuard, max_body_bytes=limits.max_body_bytes)
    _add_error_handlers(app)
    app.mount("/static", StaticFiles(directory=page.STATIC), name="static")

    @app.get("/", include_in_schema=False)
    async def explorer() -> FileResponse:
        return FileResponse(page.PAGE, media_type="text/html")

    def served(name: str | None) -> ServedModel:
        if name is None:
            return next(iter(models.values()))
        if name not in models:
            raise RequestError(404, "not_found", f"no model named {cut(name)!r}; served: "
                               f"{', '.join(models)}", value=cut(name))  # fmt: skip
        return models[name]

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
        request.state.sentences = len(body.sentences)
        if len(body.sentences) > limits.max_sentences:
            raise over_limit("max_sentences", len(body.sentences), limits.max_sentences,
                             "sentences")  # fmt: skip
        for i, sentence in enumerate(body.sentences):
            check_sentence(sentence, f"sentences[{i}]", limits)
        beam = check_beam(body.beam_size, model)
        if body.nbest > beam:
            raise invalid("nbest", f"{body.nbest} is more than the beam size {beam}", body.nbest)
        body = body.model_copy(update={"beam_size": beam})
        run = partial(decoding.translate_batch, model, limits)
        key = (model.name, "translate", beam, body.nbest)
        return await submit(request, key, run, body, len(body.sentences))

    @app.post("/v1/step", response_model=StepResponse, responses=ERRORS)
    async def step(body: StepRequest, request: Request) -> Response:
        """The decoder one step at a time: attention, top-k and the token taken at each,
        with a forced prefix and attention overrides."""
        model = served(body.model)
        request.state.sentences = 1
        check_sentence(body.sentence, "sentence", limits)
        check_beam(body.beam_size, model)
        run = partial(_alone, decoding.step, model, limits)
        return await submit(request, None, run, body, 1)

    @app.post("/v1/beam", response_model=BeamResponse, responses=ERRORS)
    async def beam(body: BeamRequest, request: Request) -> Response:
        """Beam search's whole tree: every hypothesis weighed, its parent and its fate."""
        model = served(body.model)
        request.state.sentences = 1
        check_sentence(body.sentence, "sentence", limits)
        body = body.model_copy(update={"beam_size": check_beam(body.beam_size, model)})
        run = partial(_alone, decoding.beam, model, limits)
        return await submit(request, None, run, body, 1)

    @app.post("/v1/snapshots", response_model=SnapshotsResponse, responses=ERRORS)
    async def snapshots(body: SnapshotsRequest, request: Request) -> Response:
        """How one sentence's attention formed: the run's snapshots, oldest first, each
        reading the served model's greedy output."""
        model = served(body.model)
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


def _error(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    # ensure_ascii: a lone surrogate echoed from the request must not break the answer
    return Response(json.dumps(body), status, headers, media_type="application/json")


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestError)
    async def refused(request: Request, error: RequestError) -> Response:
        retry = error.details.get("retry_after")
        return _error(error.status, error.body(), {"Retry-After": str(retry)} if retry else None)

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, error: RequestValidationError) -> Response:
        problems = [_problem(e) for e in error.errors()]
        first = problems[0]
        message = f"{first['field']}: {first['message']}"
        body = {"code": "invalid", "message": message, "field": first["field"],
                "value": first["value"], "errors": problems}  # fmt: skip
        return _error(422, {"error": body})

    @app.exception_handler(HTTPException)
    async def http(request: Request, error: HTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "invalid")
        body = {"error": {"code": code, "message": str(error.detail)}}
        return _error(error.status_code, body, error.headers)

    @app.exception_handler(Exception)
    async def bug(request: Request, error: Exception) -> Response:
        log.exception("internal error on %s %s", request.method, request.url.path)
        return _error(500, {"error": {"code": "error", "message": "internal server error"}})


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


class RequestGuard:
    """ASGI middleware: refuses a body over `max_body_bytes` with 413 before anything parses
    it, and logs one line per request (method, path, status, sentences, milliseconds),
    never its text."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app, self.max_body_bytes = app, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), [500]
        scope["state"] = dict(scope.get("state") or {})

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            declared = dict(scope["headers"]).get(b"content-length", b"0")
            size = int(declared) if declared.isdigit() else 0
            body = None if size > self.max_body_bytes else await self._read(receive)
            if body is None:
                sent = max(size, self.max_body_bytes + 1)  # declared, or as far as read
                error = over_limit("max_body_bytes", sent, self.max_body_bytes, "body bytes", 413)
                await _error(413, error.body())(scope, receive, watch)
                return
            await self.app(scope, _replay(body, receive), watch)
        finally:
            ms = (time.perf_counter() - start) * 1000
            log.info("%s %s %d sentences=%s ms=%.1f", scope["method"], scope["path"], status[0],
                     scope["state"].get("sentences", 0), ms)  # fmt: skip

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, or None once it passes the limit."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return b"".join(chunks)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the app the body read already, then the client's later messages."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
