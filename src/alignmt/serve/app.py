"""The FastAPI app: the routes (routes.py) behind the guard (guard.py), the explorer's
static files, the API reference at /docs, the decoding thread's start and stop, and errors as
JSON.

Every error, whatever raised it, is answered as `{"error": {"code", "message", ...}}` with a
4xx status that says whose fault it was; a 500 means a bug, and its traceback goes to the
log, never to the client.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from alignmt.answers import page
from alignmt.answers.limits import Limits, RequestError, cut
from alignmt.answers.registry import ServedModel
from alignmt.answers.schemas import REFUSED
from alignmt.serve import routes
from alignmt.serve.batcher import Batcher
from alignmt.serve.guard import RequestGuard, json_error

log = logging.getLogger("alignmt.serve")


def create_app(models: dict[str, ServedModel], limits: Limits | None = None) -> FastAPI:
    """The service for `models` (name -> model; the first is the default)."""
    app = FastAPI(
        title="alignmt",
        summary="Attention-based RNN translation, with what the decoder saw at every step.",
        lifespan=_lifespan,
        docs_url=None,  # FastAPI's own page loads Swagger UI from a CDN: ours is below
        redoc_url=None,
    )
    app.state.models, app.state.limits = models, limits or Limits()
    app.add_middleware(RequestGuard, limits=app.state.limits)
    _add_error_handlers(app)
    app.mount("/static", StaticFiles(directory=page.STATIC), name="static")
    app.include_router(routes.router)
    _add_reference(app)
    return app


def _add_reference(app: FastAPI) -> None:
    """The API reference at /docs: Swagger UI over the OpenAPI schema, from the files alignmt
    ships (answers/static/docs, vendored by web/vendor), so it works with no network."""

    @app.get("/docs", include_in_schema=False)
    async def reference(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        static = f"{root}/static/docs"
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title="alignmt: the HTTP API",
            swagger_js_url=f"{static}/swagger-ui-bundle.js",
            swagger_css_url=f"{static}/swagger-ui.css",
            swagger_favicon_url=f"{static}/favicon-32x32.png",
            # Swagger UI would otherwise ask validator.swagger.io about the schema
            swagger_ui_parameters={"validatorUrl": None},
        )


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    # A decoding thread per start-up: an app may be started (and stopped) again.
    app.state.batcher = Batcher(app.state.limits)
    app.state.batcher.start()
    yield
    app.state.batcher.stop()


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
    # schemas.py's validators name the value to echo: the code of a control character, say
    ctx = error.get("ctx") or {}
    value = ctx["value"] if error.get("type") == REFUSED else error.get("input")
    return {"field": field, "message": error.get("msg", "invalid"), "value": cut(value)}
