"""Drill: the server under attack. A real `alignmt serve` (started with `local_server`, default
limits) gets `requests` fuzzed requests (drill_requests.py: `case(seed, n)` is request n, on a
connection of its own) from several concurrent raw-socket clients, plus `slow_clients` that
send a valid request a byte a second, while a prober sends a well-formed translate request
every 0.2 s.

Slow clients each send SLOW_BYTES bytes of a valid translate request a second apart (after
a fast start of random length), then the rest at once (even-numbered) or close (odd).

Every fuzzed request is owed an HTTP status, except the truncated ones: their client broke
the framing (the server cannot know where the request ends, and uvicorn closes a connection
whose client has shut its side), so for them closing without an answer is right too. A
request "held" when the server kept its side: it answered within ANSWER_BOUND_S where an
answer was owed, with no 5xx but the documented 503 (queue full) and 504 (deadline), and,
for the kinds whose answer is known, with that status (oversize 413, garbage 400,
short_length 422, utf8 400 or 422, a wrong method 405). A slow client held when it got a 200
with a translation (if it finished its request) or no 5xx (if it abandoned it midway). Every
probe must get a 200 translation within PROBE_BOUND_S, and the server must answer /healthz
and a translation at the end. Sending stops at TIME_LIMIT_S (a failure); 10,000 requests
took about a minute on 2 cores that other work shared.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import math
import random
import socket
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.drill_common import Tally
from benchmarks.drill_requests import SENTENCE, Case, case, raw_request
from benchmarks.load import free_port, local_server

from alignmt.answers.limits import Limits

FUZZ_CLIENTS = 8
ANSWER_BOUND_S = Limits().deadline + 10  # a 504 is due at the deadline
PROBE_EVERY_S = 0.2
PROBE_BOUND_S = 10.0  # a probe may queue behind the decoding of a few fuzzed requests
CLOSED_BOUND_S = 5.0  # for the server to close a connection whose client broke the framing
SLOW_BYTES = 4  # bytes each slow client sends a second apart, between a fast start and end
TIME_LIMIT_S = 240.0  # for sending the fuzzed requests; past it the drill stops and says so
PROBE = json.dumps({"sentences": [SENTENCE], "beam_size": 1}).encode()


@dataclass
class ServerTally(Tally):
    """A `Tally` that also keeps what the clients saw: the statuses, the requests closed
    without one, and how long each probe took."""

    statuses: Counter = field(default_factory=Counter)
    unanswered: int = 0
    probe_ms: list[float] = field(default_factory=list)

    def record(self, what: str, status: int | None, failure: str | None) -> None:
        """One request or slow client tried: `status` it got (None: none), and why it did
        not hold (None: it held)."""
        with self.lock:
            self.unanswered += status is None
            if status is not None:
                self.statuses[status] += 1
            self.add([] if failure is None else [failure], what)

    def probed(self, ms: float, failure: str | None) -> None:
        with self.lock:
            self.probe_ms.append(ms)
            if failure is None and ms > PROBE_BOUND_S * 1000:
                failure = f"answered in {ms:.0f} ms"
            if failure is not None:
                self.fail(f"probe {len(self.probe_ms)}: {failure}")


def server(
    run_dir: Path, requests: int, slow_clients: int, seed: int = 0, port: int | None = None
) -> dict[str, Any]:
    """Attack a real server on `run_dir` (see the module docstring) and report.

    Returns:
        tried: fuzzed requests sent plus slow clients; held: those the server kept its side
        of; failures: one line each (see `drill_common.Tally`);
        statuses: HTTP status -> count over tried; probes: probes sent; probe_p95_ms;
        unanswered: those closed without a status (if all held: truncated requests and
        abandoning slow clients only);
        seconds: the whole drill, server start-up included.
    """
    start, port = time.monotonic(), port or free_port()
    tally = ServerTally()
    with local_server([str(run_dir)], port) as process:
        _attack(port, requests, slow_clients, seed, tally)
        _check_alive(process, port, tally)
    probes = tally.probe_ms
    p95 = statistics.quantiles(probes, n=20)[-1] if len(probes) > 1 else sum(probes)
    return tally.result(
        statuses=dict(sorted(tally.statuses.items())),
        probes=len(probes),
        probe_p95_ms=round(p95, 1),
        unanswered=tally.unanswered,
        seconds=round(time.monotonic() - start, 1),
    )


def _attack(port: int, requests: int, slow_clients: int, seed: int, tally: ServerTally) -> None:
    """Fuzzing clients, slow clients and the prober at once, until all of them are done."""
    numbers, stop = itertools.count(), threading.Event()
    until = time.monotonic() + TIME_LIMIT_S

    def fuzzer() -> None:
        while (n := next(numbers)) < requests and time.monotonic() < until:
            try:
                sent = case(seed, n)
                status, failure = send(sent, port)
            except Exception as error:  # the drill's own bug: say so, and go on
                tally.record(f"request #{n}", None, f"the drill failed: {error!r}")
                continue
            tally.record(f"request #{n} ({sent.kind}, {sent.raw[:60]!r})", status, failure)

    prober = threading.Thread(target=_probe, args=(port, stop, tally), daemon=True)
    prober.start()
    clients = [threading.Thread(target=fuzzer, daemon=True) for _ in range(FUZZ_CLIENTS)]
    clients += [
        threading.Thread(target=_slow, args=(port, seed, i, tally), daemon=True)
        for i in range(slow_clients)
    ]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    stop.set()
    prober.join()
    fuzzed = tally.tried - slow_clients  # each slow client counts once, whatever happened
    if fuzzed < requests:
        tally.fail(f"time limit of {TIME_LIMIT_S:.0f} s: sent {fuzzed} of {requests} requests")


def send(sent: Case, port: int) -> tuple[int | None, str | None]:
    """Send one case on a new connection: (the status or None, why it failed or None)."""
    timeout = ANSWER_BOUND_S if sent.owed else CLOSED_BOUND_S
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except OSError as error:
        return None, f"no connection ({type(error).__name__}: {error})"
    with sock:
        try:
            sock.sendall(sent.raw)
            if sent.half_close:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may answer and close before reading all: read what it said
        try:
            response = http.client.HTTPResponse(sock, method=sent.method)
            response.begin()
            response.read()
        except (OSError, http.client.HTTPException) as error:
            return None, f"no answer ({type(error).__name__}: {error})" if sent.owed else None
    status = response.status
    if status >= 500 and status not in (503, 504):
        return status, f"status {status}"
    if sent.expect and status not in sent.expect:
        return status, f"status {status}, not {' or '.join(map(str, sent.expect))}"
    return status, None


# --- slow clients, the prober, the end --------------------------------------------------------


def _slow(port: int, seed: int, number: int, tally: ServerTally) -> None:
    """Client `number`: a valid translate request sent fast up to a random point, then
    SLOW_BYTES bytes a second apart, then (even numbers) the rest at once, or (odd) nothing:
    it abandons the request midway."""
    rng = random.Random(f"{seed}:slow:{number}")
    time.sleep(number * 0.25)  # spread over the drill's first seconds
    raw = raw_request(body=PROBE)
    cut = rng.randrange(len(raw) - SLOW_BYTES)
    finish = number % 2 == 0
    what = f"slow client {number} ({'finishing' if finish else 'abandoning'} at byte {cut})"
    status, failure = None, None
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_BOUND_S) as sock:
            sock.sendall(raw[:cut])
            for i in range(cut, cut + SLOW_BYTES):
                time.sleep(1.0)
                sock.sendall(raw[i : i + 1])
            if finish:
                sock.sendall(raw[cut + SLOW_BYTES :])
                status, failure = _translation(sock)
    except OSError as error:
        failure = f"{type(error).__name__}: {error}"
    tally.record(what, status, failure)


def _translation(sock: socket.socket) -> tuple[int | None, str | None]:
    """Read a translate answer for PROBE: (status, why it is wrong or None)."""
    try:
        response = http.client.HTTPResponse(sock, method="POST")
        response.begin()
        body = response.read()
    except (OSError, http.client.HTTPException) as error:
        return None, f"no answer ({type(error).__name__}: {error})"
    if response.status != 200:
        return response.status, f"status {response.status}: {body[:200]!r}"
    return 200, None if _is_translation(body) else f"a 200 of the wrong shape: {body[:200]!r}"


def _is_translation(body: bytes) -> bool:
    """A translate response of one sentence, its hypotheses texts with finite scores."""
    try:
        answer = json.loads(body)
        (sentence,) = answer["translations"]
        hypotheses = sentence["hypotheses"]
        return (
            isinstance(answer["model"], str)
            and answer["beam_size"] == 1
            and len(hypotheses) == 1
            and all(isinstance(t, str) for t in sentence["source_tokens"])
            and all(isinstance(h["text"], str) and math.isfinite(h["score"]) for h in hypotheses)
        )
    except (ValueError, KeyError, TypeError):
        return False


def _probe(port: int, stop: threading.Event, tally: ServerTally) -> None:
    """A well-formed translate request every PROBE_EVERY_S until `stop`."""
    while not stop.is_set():
        start = time.monotonic()
        try:
            failure = _ask(port)
        except OSError as error:
            failure = f"{type(error).__name__}: {error}"
        tally.probed((time.monotonic() - start) * 1000, failure)
        stop.wait(max(0.0, PROBE_EVERY_S - (time.monotonic() - start)))


def _ask(port: int) -> str | None:
    """Send PROBE on a connection of its own: why its answer is wrong, or None."""
    with socket.create_connection(("127.0.0.1", port), timeout=PROBE_BOUND_S) as sock:
        sock.sendall(raw_request(body=PROBE))
        return _translation(sock)[1]


def _check_alive(process: Any, port: int, tally: ServerTally) -> None:
    """The server process runs and answers /healthz and a translation."""
    if process.poll() is not None:
        tally.fail(f"the server exited with status {process.returncode}")
        return
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PROBE_BOUND_S)
    try:
        with contextlib.closing(connection):
            connection.request("GET", "/healthz")
            health = connection.getresponse()
            health.read()
        failure = _ask(port)
    except (OSError, http.client.HTTPException) as error:
        health, failure = None, f"{type(error).__name__}: {error}"
    if health is None or health.status != 200 or failure:
        tally.fail(f"at the end: /healthz {getattr(health, 'status', None)}, translate {failure}")
