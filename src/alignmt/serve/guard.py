"""The ASGI middleware in front of every route: what a request must pass before any route
sees it, and the one log line each request leaves.

- A body over `max_body_bytes` is refused with 413 before anything parses it.
- A body that has not arrived by the request's read deadline is refused with 408. The
  deadline counts from the request's first byte when the server is `server.run_server`,
  whose protocol notes when that was (`READ_BY`), and otherwise from when the headers came.
- Both refusals close the connection: the rest of the body is never read, so the next bytes
  on it could not be told from a new request.
- HEAD is answered as GET would be, without the body (RFC 9110, section 9.3.2).
- A client gone before its body is complete is not answered, and no route sees a cut body.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from fastapi.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from alignmt.answers.limits import Limits, RequestError, over_limit, read_timeout

log = logging.getLogger("alignmt.serve")

# The ASGI extension in which the server says by when the request must have arrived whole:
# scope["extensions"][READ_BY] = {"by": a time.monotonic()}.
READ_BY = "alignmt.read_by"
GONE = 499  # logged for a client that left before its request was whole (nginx's code)


def json_error(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Response:
    # ensure_ascii: a lone surrogate echoed from the request must not break the answer
    return Response(json.dumps(body), status, headers, media_type="application/json")


class RequestGuard:
    """See the module docstring. The log line holds method, path, status, sentences and
    milliseconds, never the request's text."""

    def __init__(self, app: ASGIApp, limits: Limits) -> None:
        self.app, self.limits = app, limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), [500]
        scope["state"] = dict(scope.get("state") or {})
        head = scope["method"] == "HEAD"

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            elif head and message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        try:
            if not await self._guard(scope, receive, watch):
                status[0] = GONE
        finally:
            ms = (time.perf_counter() - start) * 1000
            sentences = scope["state"].get("sentences", 0)
            line = "%s %s %d sentences=%s ms=%.1f"
            log.info(line, scope["method"], scope["path"], status[0], sentences, ms)

    async def _guard(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Pass the request on, or refuse it; False if the client left before it was whole."""
        try:
            body = await self._read(scope, receive)
        except RequestError as error:
            close = {"connection": "close"}
            await json_error(error.status, error.body(), close)(scope, receive, send)
            return True
        if body is None:
            return False
        if scope["method"] == "HEAD":  # the same dict of state: a route's notes reach the log
            scope = {**scope, "method": "GET"}
        await self.app(scope, _replay(body, receive), send)
        return True

    async def _read(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body, or None if the client went away first.

        Raises:
            RequestError: 413 past max_body_bytes (declared or read), 408 past the deadline.
        """
        limit = self.limits.max_body_bytes
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > limit:
            raise over_limit("max_body_bytes", int(declared), limit, "body bytes", 413)
        noted = (scope.get("extensions") or {}).get(READ_BY)
        by = noted["by"] if noted else time.monotonic() + self.limits.read_deadline
        try:
            return await asyncio.wait_for(_chunks(receive, limit), by - time.monotonic())
        except asyncio.TimeoutError:
            raise read_timeout(self.limits) from None


async def _chunks(receive: Receive, limit: int) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:  # as far as read: one past the limit at least
            raise over_limit("max_body_bytes", size, limit, "body bytes", 413)
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
