"""Clients that never finish their request: a real server (`run_server`'s, in a thread on
127.0.0.1) answers 408 and closes once `read_deadline` has passed, whether the stall is in
the headers (the protocol's deadline) or in the body (the guard's), and goes on serving
everyone else meanwhile; the guard alone keeps the body's deadline under any ASGI server."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from alignmt.answers.limits import Limits
from alignmt.answers.registry import load_models
from alignmt.serve.app import create_app
from alignmt.serve.guard import READ_BY, RequestGuard
from alignmt.serve.server import build_server

DEADLINE = 1.0
SLACK = 1.0  # for a loaded 2-core machine: the answer is due at DEADLINE, well before this
LIMITS = Limits(read_deadline=DEADLINE)
HEAD = b"POST /v1/translate HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
BODY = json.dumps({"sentences": ["a cat"]}).encode()


@contextmanager
def serving(limits: Limits, run_dir) -> Iterator[int]:
    """A server as `run_server` builds it, on a free port of 127.0.0.1; yields the port."""
    app = create_app(load_models([run_dir]), limits)
    server = build_server(app, host="127.0.0.1", port=0, limits=limits)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    give_up = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < give_up, "the server did not start"
        time.sleep(0.02)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def port(toy_run) -> Iterator[int]:
    with serving(LIMITS, toy_run) as port:
        yield port


def stall(port: int, sent: bytes, then: bytes = b"", pause: float = 0.0) -> tuple[float, bytes]:
    """Send `sent`, after `pause` seconds `then`, then nothing: the seconds from the first
    byte until the server closed, and what it said."""
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.settimeout(DEADLINE + SLACK + 2)
        start = time.monotonic()
        client.sendall(sent)
        time.sleep(pause)
        client.sendall(then)
        answer = b""
        try:
            while chunk := client.recv(65_536):
                answer += chunk
        except TimeoutError:
            return math.inf, answer
        return time.monotonic() - start, answer


def read_answer(client: socket.socket) -> tuple[bytes, bytes]:
    """One HTTP answer's head and body (by its Content-Length)."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += client.recv(65_536) or _closed()
    head, _, body = answer.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += client.recv(65_536) or _closed()
    return head, body


def _closed() -> bytes:
    raise AssertionError("the server closed the connection mid-answer")


def translate(port: int) -> tuple[int, dict]:
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.settimeout(10)
        client.sendall(HEAD + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY)
        head, body = read_answer(client)
    return int(head.split()[1]), json.loads(body)


STALLS = {
    "half of the headers": HEAD[:40],
    "all but the blank line": HEAD + b"Content-Length: 30",
    "the headers and half of the body": HEAD + b"Content-Length: 30\r\n\r\n" + BODY[:10],
}


@pytest.mark.parametrize("sent", STALLS.values(), ids=STALLS.keys())
def test_a_client_that_stalls_gets_a_408_at_the_deadline_while_others_are_served(port, sent):
    result: list[tuple[float, bytes]] = []
    stalled = threading.Thread(target=lambda: result.append(stall(port, sent)))
    stalled.start()
    served = [translate(port) for _ in range(3)]  # while it stalls
    stalled.join()
    assert [status for status, _ in served] == [200] * 3
    assert served[0][1]["translations"][0]["hypotheses"][0]["text"]
    seconds, answer = result[0]
    assert DEADLINE - 0.05 <= seconds < DEADLINE + SLACK
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ") and b"connection: close" in head.lower()
    error = json.loads(body)["error"]
    assert (error["code"], error["limit"], error["max"]) == ("timeout", "read_deadline", DEADLINE)


def test_the_headers_and_the_body_share_one_deadline(port):
    late = DEADLINE * 0.8  # the headers take most of it; the body's stall the rest
    seconds, answer = stall(port, HEAD[:20], HEAD[20:] + b"Content-Length: 30\r\n\r\n{", late)
    assert answer.startswith(b"HTTP/1.1 408 ") and seconds < DEADLINE + 0.6 < DEADLINE + late


def test_a_connection_that_sends_nothing_is_closed_at_the_deadline(port):
    seconds, answer = stall(port, b"")
    assert DEADLINE - 0.05 <= seconds < DEADLINE + SLACK and answer == b""


def test_each_request_on_a_kept_alive_connection_has_its_own_deadline(port):
    request = HEAD + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.settimeout(DEADLINE + SLACK + 2)
        for _ in range(2):  # the second starts later than the first's deadline
            client.sendall(request)
            assert read_answer(client)[0].startswith(b"HTTP/1.1 200 ")
            time.sleep(DEADLINE * 0.7)
        client.sendall(request[:50])
        start = time.monotonic()
        assert read_answer(client)[0].startswith(b"HTTP/1.1 408 ")
        assert time.monotonic() - start < DEADLINE + SLACK
    seconds, answer = stall(port, request + request[:50])  # sent behind the first one
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.count(b"HTTP/1.1 408 ") == 1
    assert seconds < DEADLINE + SLACK


# --- the guard alone, as under any ASGI server --------------------------------------------


def guarded(limits: Limits, scope_extra: dict, messages: list[dict]) -> tuple[list, list]:
    """Run one request through RequestGuard: `messages` are what the client sends, then it
    stalls. Returns what the guard sent and the bodies the app behind it got."""
    sent, seen = [], []

    async def app(scope, receive, send):
        seen.append((await receive())["body"])

    async def receive():
        if messages:
            return messages.pop(0)
        await asyncio.sleep(5)  # a stall, then a client that gives up
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/translate", "headers": []}
    asyncio.run(RequestGuard(app, limits)({**scope, **scope_extra}, receive, send))
    return sent, seen


def test_the_guard_answers_408_to_a_body_that_stalls_past_the_deadline(caplog):
    limits = Limits(read_deadline=0.2)
    start = time.monotonic()
    with caplog.at_level(logging.INFO, logger="alignmt.serve"):
        sent, seen = guarded(
            limits, {}, [{"type": "http.request", "body": b"{", "more_body": True}]
        )
    assert 0.2 <= time.monotonic() - start < 0.2 + SLACK and seen == []
    assert sent[0]["status"] == 408 and (b"connection", b"close") in sent[0]["headers"]
    assert json.loads(sent[1]["body"])["error"]["limit"] == "read_deadline"
    assert caplog.records[-1].getMessage().startswith("POST /v1/translate 408 ")


def test_the_guard_counts_the_time_the_headers_took():
    past = {"extensions": {READ_BY: {"by": time.monotonic() - 0.1}}}  # the headers took it all
    sent, _ = guarded(Limits(read_deadline=60), past, [])
    assert sent[0]["status"] == 408


def test_a_client_gone_midway_is_not_answered_and_no_route_sees_its_cut_body(caplog):
    messages = [
        {"type": "http.request", "body": b'{"sentences": ["a"]}', "more_body": True},
        {"type": "http.disconnect"},
    ]
    with caplog.at_level(logging.INFO, logger="alignmt.serve"):
        sent, seen = guarded(Limits(), {}, messages)
    assert sent == [] and seen == []
    assert caplog.records[-1].getMessage().startswith("POST /v1/translate 499 ")
