"""The fuzzed requests of the server drill (drill_server.py): `case(seed, n)` is request n,
drawn from a generator of its own, so that it can be rebuilt alone. Its `kind` is one of:
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

A case says which statuses fit where only a few do (`Case.expect`), and whether an answer is
owed at all (not to a truncated request: the client broke the framing).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from alignmt.answers.limits import Limits

SENTENCE = "the big dog sleeps now"
LIMIT = Limits().max_body_bytes
ROUTES = ["/v1/translate", "/v1/step", "/v1/beam", "/v1/snapshots"]
# Cheap to decode (two words, small beams): the drill is about the server's edges, and
# fuzzed requests that pass every check still reach the decoder.
VALID: dict[str, dict[str, Any]] = {
    "/v1/translate": {
        "sentences": ["a cat", "a dog"],
        "beam_size": 2,
        "nbest": 2,
        "attention": True,
    },
    "/v1/step": {"sentence": "a cat", "prefix": ["ein"], "override": {"1": 0}, "top_k": 3},
    "/v1/beam": {"sentence": "a cat", "beam_size": 2},
    "/v1/snapshots": {"sentence": "a cat"},
}


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


def case(seed: int, n: int) -> Case:
    """Fuzzed request number `n` of the drill with `seed`."""
    rng = random.Random(f"{seed}:{n}")
    kinds, weights = zip(*KINDS, strict=True)
    return rng.choices(kinds, weights)[0](rng)


# --- what each kind sends ---------------------------------------------------------------------


def raw_request(
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


KEYS = [
    "sentences",
    "sentence",
    "beam_size",
    "nbest",
    "attention",
    "model",
    "prefix",
    "override",
    "top_k",
    "",
    "ß",
    "__proto__",
    "sentences ",
    "Sentences",
    "0",
]
TEXTS = [
    SENTENCE,
    "a cat",
    "",
    "  \t ",
    "Größe über",
    "猫が走る",
    "🐶 runs 🐱",
    "\u202eevil",
    "e\u0301",
    "a\x00cat",
    "a\x1b[31mcat",
    "\ud800 a dog",
    "a \udfff",
    "\x85",
    "a\u2028b",
    "\ufeffthe cat",
    "cat " * 40,
    "cat " * 250,
    "<s> </s> <unk> <pad>",
]
LITERALS = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-1e400",
    "1E2",
    "0x10",
    "01",
    "+1",
    ".5",
    "tru",
    "nul",
    "'a'",
]
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
    return Case("json", raw_request(path=rng.choice(ROUTES), body=body))


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
    return Case("mutant", raw_request(path=path, body=_encode(text)))


def _bytes(rng: random.Random) -> Case:
    body = rng.randbytes(rng.choice([1, 10, 100, 10_000]))
    return Case("bytes", raw_request(path=rng.choice(ROUTES), body=body))


def _utf8(rng: random.Random) -> Case:
    bad = rng.choice([b"\xff", b"\xfe\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\x80", b"\xe2\x82"])
    body = b'{"sentences": ["the ' + bad + b' dog"]}'
    return Case("utf8", raw_request(body=body), expect=(400, 422))


def _content_type(rng: random.Random) -> Case:
    path = rng.choice(ROUTES)
    body = json.dumps(VALID[path]).encode()
    kind = rng.choice(
        [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "multipart/form-data",
            "application/json; charset=utf-16",
            "application/json; x",
            "application/vnd.api+json",
            "application/jsonx",
            "*/*",
            "",
            "application/",
            ";;;",
            "application/json; charset=latin-1",
            "image/png",
            "\xff\xfe",
        ]
    )
    if rng.random() < 0.2:
        body = rng.choice([b"\xef\xbb\xbf" + body, json.dumps(VALID[path]).encode("utf-16")])
    headers = () if rng.random() < 0.2 else (("Content-Type", kind),)
    return Case("content_type", raw_request(path=path, body=body, headers=headers))


def _method(rng: random.Random) -> Case:
    method = rng.choice(["GET", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "FOO"])
    path = rng.choice([*ROUTES, "/healthz", "/v1/models", "/", "/static/x", "/docs"])
    body = json.dumps(VALID["/v1/beam"]).encode() if rng.random() < 0.5 else b""
    if path in ROUTES or method not in ("GET", "HEAD"):
        expect: tuple[int, ...] = (405,)
    elif path == "/static/x":
        expect = (404,)
    else:  # HEAD on a GET route: answered as GET is, or refused with 405
        expect = (200, 405) if method == "HEAD" else (200,)
    return Case("method", raw_request(method, path, body), method=method, expect=expect)


def _path(rng: random.Random) -> Case:
    path = rng.choice(
        [
            "/v1/translat",
            "/v2/translate",
            "/v1/translate/",
            "/v1//translate",
            "/v1/TRANSLATE",
            "/static/%00",
            "/static/..%2f..%2fetc%2fpasswd",
            "/static/../../etc/passwd",
            "/%ff",
            "/static/" + "a" * 300,
            "/static/" + "a" * 5000,
            "/" + "x/" * 2000,
            "/v1/translate?" + "q=1&" * 500,
            "/static/",
            "/static",
            "/static/%2e%2e",
            "/openapi.json",
            "/docs",
            "/v1/models?limit=-1",
            "/healthz#x",
            "/" + "".join(rng.choices("abc%/.?=", k=20)),
        ]
    )
    method = rng.choice(["GET", "POST"])
    body = json.dumps(VALID["/v1/beam"]).encode() if method == "POST" else b""
    return Case("path", raw_request(method, path, body), method=method)


def _short_length(rng: random.Random) -> Case:
    body = json.dumps(VALID["/v1/translate"]).encode()
    # every proper prefix of a JSON object is invalid JSON
    raw = raw_request(body=body, length=rng.randrange(len(body)))
    return Case("short_length", raw, expect=(422,))


def _headers(rng: random.Random) -> Case:
    body = json.dumps(VALID["/v1/beam"]).encode()
    beam = lambda **kw: raw_request(path="/v1/beam", body=body, **kw)  # noqa: E731
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
        lambda: raw_request("POST", "http://127.0.0.1/v1/beam", body),
        lambda: raw_request("post", "/v1/beam", body),
        lambda: raw_request("P\x00ST", "/v1/beam", body),
        lambda: raw_request("POST", "/v1/beam\t/x", body),
        lambda: raw_request(
            "GET", pick(["/", "/static/explorer.js"]), headers=(("Range", pick(RANGES)),)
        ),
    ]
    return Case("headers", pick(options)())


BAD_LENGTHS = ["abc", "-1", "1e3", " 5", "5 ", "+5", "9" * 30, "9" * 5000, "0x10", ""]
BAD_CODINGS = ["gzip", "chunked, chunked", "identity", "chunked;q=1"]
RANGES = [
    "bytes=abc",
    "bytes=5-1",
    "bytes=0-1,2-3",
    "bytes=99999999-",
    "bytes=-0",
    "pages=1-2",
    "bytes=" + "0-0," * 3000,
    "bytes=0-" + "9" * 5000,
    "bytes=1-2,,,",
    "bytes=",
]
VERSIONS = ["HTTP/1.0", "HTTP/2.0", "HTTP/1.2", "HTTP/1", "http/1.1", "HTTP/1.1 x", "HTTP/9.9"]


def _chunks(parts: list[bytes], headers: tuple, size: str | None = None, end: bool = True) -> bytes:
    """A chunked request to /v1/beam: `parts` as chunks (the first with size line `size`),
    and the last chunk if `end`."""
    sizes = [f"{len(part):x}" for part in parts]
    if size is not None:
        sizes[0] = size
    chunks = zip(sizes, parts, strict=True)
    body = b"".join(f"{n}\r\n".encode() + part + b"\r\n" for n, part in chunks)
    return raw_request(path="/v1/beam", headers=headers, length=-1) + body + b"0\r\n\r\n" * end


def _garbage(rng: random.Random) -> Case:
    start = rng.choice(
        [
            rng.randbytes(rng.randint(1, 2000)),
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + rng.randbytes(40),  # a TLS hello
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            b"GET / HTTP/1.1\r\n" + rng.randbytes(100),
            b"\r\n" * 10 + b"GET / HTTP/1.1\r\nHost: x",
        ]
    )
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
        return Case("oversize", raw_request(body=text), expect=(413,))
    # declared: the server may refuse it before reading, so only the start is sent
    body = (start + b"a" * 60_000)[: rng.choice([0, 100, 60_000])]
    raw = raw_request(body=body, length=rng.choice([LIMIT + 1, 10**12]))
    return Case("oversize", raw, expect=(413,))


def _truncated(rng: random.Random) -> Case:
    body = json.dumps(VALID["/v1/translate"]).encode()
    raw = rng.choice(
        [
            raw_request(body=body[: rng.randrange(len(body))], length=len(body)),
            raw_request(body=body, length=len(body) + rng.choice([1, 100, 10**9])),
            _chunks([body], CHUNKED_JSON, size=rng.choice([None, "ffffffffffffffff"]), end=False),
            rng.randbytes(rng.randint(1, 500)).replace(b"\r\n\r\n", b""),
            b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Length: 5",
        ]
    )
    return Case("truncated", raw, owed=False, half_close=True)


KINDS: list[tuple[Callable[[random.Random], Case], float]] = [
    (_json, 15),
    (_mutant, 25),
    (_bytes, 6),
    (_utf8, 4),
    (_content_type, 7),
    (_method, 6),
    (_path, 7),
    (_short_length, 4),
    (_headers, 12),
    (_garbage, 4),
    (_oversize, 4),
    (_truncated, 6),
]
