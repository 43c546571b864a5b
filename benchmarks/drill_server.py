"""Drill: the server under attack. A real `alignmt serve` (started with `local_server`, default
limits) gets `requests` fuzzed requests from several concurrent raw-socket clients, plus
`slow_clients` that send a valid request a byte a second, while a prober sends a well-formed
translate request every 0.2 s.

What it sends (each request on a connection of its own, request n drawn from its own seeded
generator, so that `case(seed, n)` rebuilds it alone):
- json: a random JSON value (wrong types, unknown keys, huge and negative numbers, NaN,
  Infinity, 1e400, 5,000-digit integers, unicode, control characters, lone surrogates, nesting)
  to a random route;
- mutant: a valid body for a route with one to three fields dropped, added or replaced by
  such values (sentence counts, lengths and beam sizes on either side of the limits);
- bytes / utf8: random bytes, or a valid body with invalid UTF-8 inside a sentence;
- content_type / method / path: a valid body under a wrong or odd content type; a wrong
  method (HEAD, PUT, OPTIONS, an invented one); unknown, malformed and traversal paths;
- short_length: a Content-Length shorter than the body (the rest reads as a bad next request);
- headers / garbage: protocol errors: a missing Host, bad or conflicting Content-Length or
  Transfer-Encoding, oversized or broken headers, bad chunked bodies, bad HTTP versions, bad
  Range headers on the explorer's files, random bytes or a TLS hello where a request line
  should be;
- oversize: a body over max_body_bytes, declared (only its start sent) or sent whole, with a
  Content-Length or chunked;
- truncated: fewer body bytes than declared (or no last chunk, a chunk size past what is
  sent, garbage with no blank line), then the client shuts its writing side.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.load import local_server

from alignmt.serve.limits import Limits

SENTENCE = "the big dog sleeps now"
FUZZ_CLIENTS = 8
ANSWER_BOUND_S = Limits().deadline + 10  # a 504 is due at the deadline
PROBE_EVERY_S = 0.2
PROBE_BOUND_S = 10.0  # a probe may queue behind the decoding of a few fuzzed requests
CLOSED_BOUND_S = 5.0  # for the server to close a connection whose client broke the framing
SLOW_BYTES = 4  # bytes each slow client sends a second apart, between a fast start and end
TIME_LIMIT_S = 240.0  # for sending the fuzzed requests; past it the drill stops and says so
MAX_FAILURES = 20
LIMIT = Limits().max_body_bytes
ROUTES = ["/v1/translate", "/v1/step", "/v1/beam", "/v1/snapshots"]
# Cheap to decode (two words, small beams): the drill is about the server's edges, and
# fuzzed requests that pass every check still reach the decoder.
VALID: dict[str, dict[str, Any]] = {
    "/v1/translate": {"sentences": ["a cat", "a dog"], "beam_size": 2, "nbest": 2,
                      "attention": True},
    "/v1/step": {"sentence": "a cat", "prefix": ["ein"], "override": {"1": 0}, "top_k": 3},
    "/v1/beam": {"sentence": "a cat", "beam_size": 2},
    "/v1/snapshots": {"sentence": "a cat"},
}  # fmt: skip
PROBE = json.dumps({"sentences": [SENTENCE], "beam_size": 1}).encode()


class Raw(str):
    """JSON text sent as it is: NaN, 1e400, a 5,000-digit integer, a raw control character."""


@dataclass
class Case:
    kind: str  # which family of requests (see the module docstring)
    raw: bytes  # everything sent, request line to body
    method: str = "POST"  # a HEAD answer has no body to read
    owed: bool = True  # False: the client broke the framing, so no answer is owed
    expect: tuple[int, ...] = ()  # the statuses that fit, where only a few do (else any)
    half_close: bool = False  # shut the writing side once sent


@dataclass
class Tally:
    """What the clients saw, shared between their threads."""

    tried: int = 0
    held: int = 0
    unanswered: int = 0
    statuses: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    probe_ms: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, what: str, status: int | None, failure: str | None) -> None:
        with self.lock:
            self.tried += 1
            self.held += failure is None
            self.unanswered += status is None
            if status is not None:
                self.statuses[status] += 1
            if failure is not None:
                self.failures.append(f"{what}: {failure}")

    def probed(self, ms: float, failure: str | None) -> None:
        with self.lock:
            self.probe_ms.append(ms)
            if failure is None and ms > PROBE_BOUND_S * 1000:
                failure = f"answered in {ms:.0f} ms"
            if failure is not None:
                self.failures.append(f"probe {len(self.probe_ms)}: {failure}")

    def fail(self, line: str) -> None:
        with self.lock:
            self.failures.append(line)


def server(
    run_dir: Path, requests: int, slow_clients: int, seed: int = 0, port: int | None = None
) -> dict[str, Any]:
    """Attack a real server on `run_dir` (see the module docstring) and report.

    Returns:
        tried: fuzzed requests sent plus slow clients; held: those the server kept its side
        of; failures: one line each (at most 20, the last then counting the rest);
        statuses: HTTP status -> count over tried; probes: probes sent; probe_p95_ms;
        unanswered: those closed without a status (if all held: truncated requests and
        abandoning slow clients only);
        seconds: the whole drill, server start-up included.
    """
    start, port = time.monotonic(), port or _free_port()
    tally = Tally()
    with local_server([str(run_dir)], port) as process:
        _attack(port, requests, slow_clients, seed, tally)
        _check_alive(process, port, tally)
    failures = tally.failures[: MAX_FAILURES - 1]
    if len(tally.failures) >= MAX_FAILURES:
        rest = len(tally.failures) - len(failures)
        failures.append(f"... and {rest} more" if rest > 1 else tally.failures[-1])
    probes = tally.probe_ms
    p95 = statistics.quantiles(probes, n=20)[-1] if len(probes) > 1 else sum(probes)
    return {
        "tried": tally.tried, "held": tally.held, "failures": failures,
        "statuses": dict(sorted(tally.statuses.items())), "probes": len(probes),
        "probe_p95_ms": round(p95, 1), "unanswered": tally.unanswered,
        "seconds": round(time.monotonic() - start, 1),
    }  # fmt: skip


def _attack(port: int, requests: int, slow_clients: int, seed: int, tally: Tally) -> None:
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


def case(seed: int, n: int) -> Case:
    """Fuzzed request number `n` of the drill with `seed`."""
    rng = random.Random(f"{seed}:{n}")
    kinds, weights = zip(*KINDS, strict=True)
    return rng.choices(kinds, weights)[0](rng)


# --- what the fuzzing clients send ---------------------------------------------------------


def _http(
    method: str = "POST",
    path: str = "/v1/translate",
    body: bytes = b"",
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),),
    length: int | None = None,
    version: str = "HTTP/1.1",
) -> bytes:
    """A request's bytes; Content-Length is the body's unless `length` (-1: none) says."""
    length = len(body) if length is None else length
    fields = [("Host", "127.0.0.1"), *headers]
    if length >= 0 and (body or method not in ("GET", "HEAD")):
        fields.append(("Content-Length", str(length)))
    head = "".join(f"{name}: {value}\r\n" for name, value in fields)
    return f"{method} {path} {version}\r\n{head}\r\n".encode("latin-1") + body


def _dump(value: Any, rng: random.Random) -> str:
    """JSON text of `value`, Raw parts as they are; strings ASCII-escaped or not at random."""
    if isinstance(value, Raw):
        return value
    if isinstance(value, dict):
        items = (f"{_dump(str(k), rng)}: {_dump(v, rng)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_dump(v, rng) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=rng.random() < 0.5)
    return json.dumps(value)


def _encode(text: str) -> bytes:
    # surrogatepass: an unescaped lone surrogate goes out as the invalid UTF-8 it makes
    return text.encode("utf-8", "surrogatepass")


KEYS = ["sentences", "sentence", "beam_size", "nbest", "attention", "model", "prefix",
        "override", "top_k", "", "ß", "__proto__", "sentences ", "Sentences", "0"]  # fmt: skip
TEXTS = [SENTENCE, "a cat", "", "  \t ", "Größe über", "猫が走る", "🐶 runs 🐱", "\u202eevil",
         "e\u0301", "a\x00cat", "a\x1b[31mcat", "\ud800 a dog", "a \udfff", "\x85", "a\u2028b",
         "\ufeffthe cat", "cat " * 40, "cat " * 250, "<s> </s> <unk> <pad>"]  # fmt: skip
LITERALS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1E2", "0x10", "01", "+1", ".5",
            "tru", "nul", "'a'"]  # fmt: skip
SCALARS: list[Callable[[random.Random], Any]] = [
    lambda rng: None,
    lambda rng: rng.random() < 0.5,
    lambda rng: rng.choice([0, 1, 2, 3, -1, 16, 17, 64, 65, 2**31, 2**63, -(2**63) - 1]),
    lambda rng: Raw("9" * rng.randint(19, 5000)),
    lambda rng: rng.choice([0.5, -0.0, 1.0, 3.0, 1e308, 5e-324]),
    lambda rng: Raw(rng.choice(LITERALS)),
    lambda rng: rng.choice(TEXTS),
    lambda rng: "a" * rng.choice([1999, 2000, 2001, 20_000]),
    lambda rng: Raw('"a' + chr(rng.randrange(32)) + 'b"'),  # unescaped: not JSON
    lambda rng: Raw("[" * (n := rng.choice([50, 1000, 100_000])) + "]" * n),
]


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth < 3 and roll < 0.2:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if depth < 3 and roll < 0.35:
        return {rng.choice(KEYS): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return rng.choice(SCALARS)(rng)


def _json(rng: random.Random) -> Case:
    body = _encode(_dump(_value(rng), rng))
    return Case("json", _http(path=rng.choice(ROUTES), body=body))


def _mutant(rng: random.Random) -> Case:
    path = rng.choice(ROUTES)
    body = dict(VALID[path])
    for _ in range(rng.randint(1, 3)):
        name = rng.choice([*body, *KEYS]) if body else rng.choice(KEYS)
        roll = rng.random()
        if roll < 0.2:
            body.pop(name, None)
        elif roll < 0.45 and name == "sentences":
            body[name] = [rng.choice(TEXTS)] * rng.choice([1, 8, 64, 65, 300])
        elif roll < 0.6:
            body[name] = rng.choice(SCALARS)(rng)
        else:
            body[name] = _value(rng, depth=1)
    text = _dump(body, rng)
    if rng.random() < 0.05:
        text = rng.choice(["[", '{"x": ']) + text + rng.choice(["]", "}"])
    return Case("mutant", _http(path=path, body=_encode(text)))


def _bytes(rng: random.Random) -> Case:
    body = rng.randbytes(rng.choice([1, 10, 100, 10_000]))
    return Case("bytes", _http(path=rng.choice(ROUTES), body=body))


def _utf8(rng: random.Random) -> Case:
    bad = rng.choice([b"\xff", b"\xfe\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\x80", b"\xe2\x82"])
    body = b'{"sentences": ["the ' + bad + b' dog"]}'
    return Case("utf8", _http(body=body), expect=(400, 422))


def _content_type(rng: random.Random) -> Case:
    path = rng.choice(ROUTES)
    body = json.dumps(VALID[path]).encode()
    kind = rng.choice([
        "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
        "multipart/form-data", "application/json; charset=utf-16", "application/json; x",
        "application/vnd.api+json", "application/jsonx", "*/*", "", "application/", ";;;",
        "application/json; charset=latin-1", "image/png", "\xff\xfe",
    ])  # fmt: skip
    if rng.random() < 0.2:
        body = rng.choice([b"\xef\xbb\xbf" + body, json.dumps(VALID[path]).encode("utf-16")])
    headers = () if rng.random() < 0.2 else (("Content-Type", kind),)
    return Case("content_type", _http(path=path, body=body, headers=headers))


def _method(rng: random.Random) -> Case:
    method = rng.choice(["GET", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "FOO"])
    path = rng.choice([*ROUTES, "/healthz", "/v1/models", "/", "/static/x", "/docs"])
    body = json.dumps(VALID["/v1/beam"]).encode() if rng.random() < 0.5 else b""
    if path in ROUTES or method not in ("GET", "HEAD"):
        expect: tuple[int, ...] = (405,)
    elif path == "/static/x":
        expect = (404,)
    else:  # FastAPI's GET routes answer HEAD with 405
        expect = (200, 405) if method == "HEAD" else (200,)
    return Case("method", _http(method, path, body), method=method, expect=expect)


def _path(rng: random.Random) -> Case:
    path = rng.choice([
        "/v1/translat", "/v2/translate", "/v1/translate/", "/v1//translate", "/v1/TRANSLATE",
        "/static/%00", "/static/..%2f..%2fetc%2fpasswd", "/static/../../etc/passwd", "/%ff",
        "/static/" + "a" * 300, "/static/" + "a" * 5000, "/" + "x/" * 2000, "/v1/translate?" +
        "q=1&" * 500, "/static/", "/static", "/static/%2e%2e", "/openapi.json", "/docs",
        "/v1/models?limit=-1", "/healthz#x", "/" + "".join(rng.choices("abc%/.?=", k=20)),
    ])  # fmt: skip
    method = rng.choice(["GET", "POST"])
    body = json.dumps(VALID["/v1/beam"]).encode() if method == "POST" else b""
    return Case("path", _http(method, path, body), method=method)


def _short_length(rng: random.Random) -> Case:
    body = json.dumps(VALID["/v1/translate"]).encode()
    # every proper prefix of a JSON object is invalid JSON
    return Case("short_length", _http(body=body, length=rng.randrange(len(body))), expect=(422,))


def _headers(rng: random.Random) -> Case:
    body = json.dumps(VALID["/v1/beam"]).encode()
    beam = lambda **kw: _http(path="/v1/beam", body=body, **kw)  # noqa: E731
    json_type, chunked = ("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")
    pick = rng.choice
    options = [
        lambda: beam().replace(b"Host: 127.0.0.1\r\n", b""),
        lambda: beam(length=-1, headers=(json_type, ("Content-Length", pick(BAD_LENGTHS)))),
        lambda: beam(headers=(json_type, ("Content-Length", "3"))),  # two, different
        lambda: beam(headers=(json_type, ("Transfer-Encoding", pick(BAD_CODINGS)))),
        lambda: _chunks([body], (json_type, chunked, ("Content-Length", str(len(body))))),
        lambda: beam(headers=(json_type, ("X-Big", "a" * pick([8_000, 20_000, 70_000])))),
        lambda: beam(headers=tuple((f"X-{i}", "y") for i in range(pick([100, 2000])))),
        lambda: beam(headers=(json_type, (pick(["Bad Name", "Bad:", "\xff", ""]), "v"))),
        lambda: beam(headers=(json_type, ("X-Bytes", pick(["a\x00b", "\xff\xfe", "\x7f"])))),
        lambda: beam(headers=(json_type, ("Expect", pick(["100-continue", "teapot"])))),
        lambda: beam(headers=(json_type, ("Upgrade", "websocket"), ("Connection", "Upgrade"))),
        lambda: beam(headers=(json_type, ("Connection", pick(["close", "keep-alive, x"])))),
        lambda: beam(version=pick(VERSIONS)),
        lambda: _chunks([body[:10], body[10:]], (json_type, chunked)),
        lambda: _chunks([body], (json_type, chunked), size=pick(["zz", "-1", "1;ext=1", ""])),
        lambda: b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
        lambda: _http("POST", "http://127.0.0.1/v1/beam", body),
        lambda: _http("post", "/v1/beam", body),
        lambda: _http("P\x00ST", "/v1/beam", body),
        lambda: _http("POST", "/v1/beam\t/x", body),
        lambda: _http(
            "GET", pick(["/", "/static/explorer.js"]), headers=(("Range", pick(RANGES)),)
        ),
    ]
    return Case("headers", pick(options)())


BAD_LENGTHS = ["abc", "-1", "1e3", " 5", "5 ", "+5", "9" * 30, "9" * 5000, "0x10", ""]
BAD_CODINGS = ["gzip", "chunked, chunked", "identity", "chunked;q=1"]
RANGES = ["bytes=abc", "bytes=5-1", "bytes=0-1,2-3", "bytes=99999999-", "bytes=-0", "pages=1-2",
          "bytes=" + "0-0," * 3000, "bytes=0-" + "9" * 5000, "bytes=1-2,,,", "bytes="]  # fmt: skip
VERSIONS = ["HTTP/1.0", "HTTP/2.0", "HTTP/1.2", "HTTP/1", "http/1.1", "HTTP/1.1 x", "HTTP/9.9"]


def _chunks(parts: list[bytes], headers: tuple, size: str | None = None, end: bool = True) -> bytes:
    """A chunked request to /v1/beam: `parts` as chunks (the first with size line `size`),
    and the last chunk if `end`."""
    sizes = [f"{len(part):x}" for part in parts]
    if size is not None:
        sizes[0] = size
    chunks = zip(sizes, parts, strict=True)
    body = b"".join(f"{n}\r\n".encode() + part + b"\r\n" for n, part in chunks)
    return _http(path="/v1/beam", headers=headers, length=-1) + body + b"0\r\n\r\n" * end


def _garbage(rng: random.Random) -> Case:
    start = rng.choice([
        rng.randbytes(rng.randint(1, 2000)),
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + rng.randbytes(40),  # a TLS hello
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"GET / HTTP/1.1\r\n" + rng.randbytes(100),
        b"\r\n" * 10 + b"GET / HTTP/1.1\r\nHost: x",
    ])  # fmt: skip
    # the blank line ends the request's head: past it, the server must answer
    return Case("garbage", start.replace(b"\r\n\r\n", b"\r\n") + b"\r\n\r\n", expect=(400,))


CHUNKED_JSON = (("Content-Type", "application/json"), ("Transfer-Encoding", "chunked"))


def _oversize(rng: random.Random) -> Case:
    start, end = b'{"sentences": ["', b'"]}'
    if rng.random() < 0.3:  # sent whole
        text = start + b"a" * (LIMIT + rng.choice([1, 1000, LIMIT])) + end
        if rng.random() < 0.5:  # chunked: the server learns the size only by reading
            parts = [text[i : i + 65_536] for i in range(0, len(text), 65_536)]
            return Case("oversize", _chunks(parts, CHUNKED_JSON), expect=(413,))
        return Case("oversize", _http(body=text), expect=(413,))
    # declared: the server may refuse it before reading, so only the start is sent
    body = (start + b"a" * 60_000)[: rng.choice([0, 100, 60_000])]
    return Case("oversize", _http(body=body, length=rng.choice([LIMIT + 1, 10**12])), expect=(413,))


def _truncated(rng: random.Random) -> Case:
    body = json.dumps(VALID["/v1/translate"]).encode()
    raw = rng.choice([
        _http(body=body[: rng.randrange(len(body))], length=len(body)),
        _http(body=body, length=len(body) + rng.choice([1, 100, 10**9])),
        _chunks([body], CHUNKED_JSON, size=rng.choice([None, "ffffffffffffffff"]), end=False),
        rng.randbytes(rng.randint(1, 500)).replace(b"\r\n\r\n", b""),
        b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Length: 5",
    ])  # fmt: skip
    return Case("truncated", raw, owed=False, half_close=True)


KINDS: list[tuple[Callable[[random.Random], Case], float]] = [
    (_json, 15), (_mutant, 25), (_bytes, 6), (_utf8, 4), (_content_type, 7), (_method, 6),
    (_path, 7), (_short_length, 4), (_headers, 12), (_garbage, 4), (_oversize, 4),
    (_truncated, 6),
]  # fmt: skip


# --- slow clients, the prober, the end ------------------------------------------------------


def _slow(port: int, seed: int, number: int, tally: Tally) -> None:
    """Client `number`: a valid translate request sent fast up to a random point, then
    SLOW_BYTES bytes a second apart, then (even numbers) the rest at once, or (odd) nothing:
    it abandons the request midway."""
    rng = random.Random(f"{seed}:slow:{number}")
    time.sleep(number * 0.25)  # spread over the drill's first seconds
    raw = _http(body=PROBE)
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
            isinstance(answer["model"], str) and answer["beam_size"] == 1 and len(hypotheses) == 1
            and all(isinstance(t, str) for t in sentence["source_tokens"])
            and all(isinstance(h["text"], str) and math.isfinite(h["score"]) for h in hypotheses)
        )  # fmt: skip
    except (ValueError, KeyError, TypeError):
        return False


def _probe(port: int, stop: threading.Event, tally: Tally) -> None:
    """A well-formed translate request every PROBE_EVERY_S until `stop`."""
    while not stop.is_set():
        start = time.monotonic()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=PROBE_BOUND_S) as sock:
                sock.sendall(_http(body=PROBE))
                _, failure = _translation(sock)
        except OSError as error:
            failure = f"{type(error).__name__}: {error}"
        tally.probed((time.monotonic() - start) * 1000, failure)
        stop.wait(max(0.0, PROBE_EVERY_S - (time.monotonic() - start)))


def _check_alive(process: Any, port: int, tally: Tally) -> None:
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
        with socket.create_connection(("127.0.0.1", port), timeout=PROBE_BOUND_S) as sock:
            sock.sendall(_http(body=PROBE))
            _, failure = _translation(sock)
    except (OSError, http.client.HTTPException) as error:
        health, failure = None, f"{type(error).__name__}: {error}"
    if health is None or health.status != 200 or failure:
        tally.fail(f"at the end: /healthz {getattr(health, 'status', None)}, translate {failure}")


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
