"""Running the service: uvicorn, with a deadline on reading each request.

uvicorn keeps no clock while it reads a request: a client that sends half of its headers,
or connects and sends nothing, holds its connection (and a file descriptor) for as long as
it likes, and a few thousand such clients exhaust a server. The body is read by the ASGI
app, whose guard keeps its deadline (guard.py); the headers arrive before any app is
called, so their deadline is kept here, in uvicorn's HTTP/1.1 protocol (h11), which every
uvicorn release has (httptools, the faster one, is an optional extra).

The clock starts when the connection opens, and again at the first byte of each later
request on a kept-alive connection, or when the answer to the request before it is out if it
was sent behind that one (between requests, uvicorn's keep-alive timeout applies). If the
headers are not in by `Limits.read_deadline`, the client gets a 408 (or, if it sent nothing
at all, just the close); otherwise the deadline goes with the request to the guard, so that
headers and body share one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from http import HTTPStatus
from typing import Any, ClassVar

import h11
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from alignmt.answers.limits import Limits, RequestError, read_timeout
from alignmt.serve.guard import READ_BY

log = logging.getLogger("alignmt.serve")
STARTUP_FAILURE = 3  # uvicorn.run's exit status when the server did not start


def run_server(app: ASGIApp, *, host: str, port: int, limits: Limits) -> None:
    """Serve `app` on host:port until SIGINT or SIGTERM, as `uvicorn.run` would (no access
    log: the guard logs each request), with `limits.read_deadline` on every request."""
    server = build_server(app, host=host, port=port, limits=limits)
    server.run()
    if not server.started:
        raise SystemExit(STARTUP_FAILURE)


def build_server(app: ASGIApp, *, host: str, port: int, limits: Limits) -> uvicorn.Server:
    """The server `run_server` runs; `server.run()` starts it, `server.should_exit` stops it."""
    protocol = type("ReadDeadlineProtocol", (ReadDeadlineProtocol,), {"limits": limits})
    config = uvicorn.Config(app, host=host, port=port, access_log=False, http=protocol)
    return uvicorn.Server(config)


class ReadDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's headers (module docstring)."""

    limits: ClassVar[Limits] = Limits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._read_by = 0.0  # the time.monotonic() by which the request must be whole
        self._begun = False  # whether the request being waited for has sent a byte

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._timer is None and self.conn.their_state is h11.IDLE:
            self._arm()  # the first byte of a request on a kept-alive connection
        self._begun = True
        super().data_received(data)

    def handle_events(self) -> None:
        cycle, timed = self.cycle, self._timer is not None
        super().handle_events()
        if self.cycle is not cycle and self.cycle is not None and timed:
            # a request went to the app, whose task runs once this returns: give it the
            # deadline (a request that was waiting whole behind another is not timed)
            scope: dict[str, Any] = self.cycle.scope  # type: ignore[assignment]
            scope.setdefault("extensions", {})[READ_BY] = {"by": self._read_by}
        if self.conn.their_state is not h11.IDLE:  # the headers are in
            self._disarm()
        elif self._timer is None and self.conn.trailing_data[0]:
            self._arm()  # part of a request that came behind the one just answered
            self._begun = True

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._begun = False
        seconds = self.limits.read_deadline
        self._read_by = time.monotonic() + seconds  # the guard's clock (uvloop's may differ)
        self._timer = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if self._begun:  # a client that sent nothing gets the close alone, as on keep-alive
            self.transport.write(_answer(read_timeout(self.limits)))
            log.info("- - 408 sentences=0 ms=%.1f", self.limits.read_deadline * 1000)
        self.transport.close()


def _answer(error: RequestError) -> bytes:
    """An HTTP/1.1 response that closes the connection, its body JSON as every error's."""
    body = json.dumps(error.body()).encode()
    head = (
        f"HTTP/1.1 {error.status} {HTTPStatus(error.status).phrase}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body
