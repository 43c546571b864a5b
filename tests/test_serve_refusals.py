"""What the HTTP service refuses, and how it says so: hostile requests, bodies that are not
valid JSON, error bodies that echo no more than a short value, answers past the limits, a
wrong method or content type. What it answers is test_serve.py's."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from alignmt.serve.app import create_app
from tests.conftest import SERVE_LIMITS as LIMITS
from tests.conftest import post, post_raw

HOSTILE = [
    ("/v1/translate", {"sentences": [""]}, 422, "sentences[0]"),
    ("/v1/translate", {"sentences": ["a cat", "  \t "]}, 422, "sentences[1]"),
    ("/v1/translate", {"sentences": []}, 422, "sentences"),
    ("/v1/translate", {"sentences": ["a\x00cat"]}, 422, "sentences[0]"),
    ("/v1/translate", {"sentences": ["a\x1b[31mcat"]}, 422, "sentences[0]"),
    ("/v1/translate", {"sentences": [5]}, 422, "sentences[0]"),
    ("/v1/translate", {"sentences": "a cat"}, 422, "sentences"),
    ("/v1/translate", {"sentences": [["a", ["cat"]]]}, 422, "sentences[0]"),
    ("/v1/translate", {"sentences": ["a cat"], "beam_size": -1}, 422, "beam_size"),
    ("/v1/translate", {"sentences": ["a cat"], "beam_size": "3"}, 422, "beam_size"),
    ("/v1/translate", {"sentences": ["a cat"], "beam_size": 10**12}, 422, "max_beam"),
    ("/v1/translate", {"sentences": ["a cat"], "beam_size": 2, "nbest": 3}, 422, "nbest"),
    ("/v1/translate", {"sentences": ["a cat"], "attention": "yes"}, 422, "attention"),
    ("/v1/translate", {"sentences": ["a cat"], "bogus": 1}, 422, "bogus"),
    ("/v1/translate", {"sentences": ["a cat"] * 9}, 422, "max_sentences"),
    ("/v1/translate", {"sentences": ["cat " * 13]}, 422, "max_source_tokens"),
    ("/v1/translate", {"sentences": ["a" * 2001]}, 422, "max_chars"),
    ("/v1/translate", {"sentences": ["a cat"], "model": "nope"}, 404, None),
    ("/v1/translate", {"sentences": ["a cat"], "model": 3}, 422, "model"),
    ("/v1/step", {"sentence": "a cat", "top_k": 11}, 422, "max_top_k"),
    ("/v1/step", {"sentence": "a cat", "top_k": 0}, 422, "top_k"),
    ("/v1/step", {"sentence": "a cat", "prefix": ["der", "zebra"]}, 422, "prefix"),
    ("/v1/step", {"sentence": "a cat", "prefix": ["</s>", "der"]}, 422, "prefix"),
    ("/v1/step", {"sentence": "a cat", "prefix": ["<s>"]}, 422, "prefix"),
    ("/v1/step", {"sentence": "a cat", "override": {"1": 3}}, 422, "override"),
    ("/v1/step", {"sentence": "a cat", "override": {"1": -1}}, 422, "override[1]"),
    ("/v1/step", {"sentence": "a cat", "override": {"one": 1}}, 422, "override"),
    ("/v1/step", {"sentence": "a cat", "override": [1, 2]}, 422, "override"),
    ("/v1/step", {"sentence": "a cat", "override": {" 1": 0}}, 422, "override"),
    ("/v1/step", {"sentence": "a cat", "override": {"1": 0, "01": 1}}, 422, "override"),
    ("/v1/step", {"sentence": "a cat", "override": {"16": 0}}, 422, "override"),  # limit 16
    ("/v1/step", {"sentence": "a cat", "prefix": ["der"] * 17}, 422, "prefix"),
    ("/v1/step", {"sentence": "a cat", "top_k": 10**400}, 422, "max_top_k"),
    ("/v1/step", {"sentence": "a cat", "beam_size": 7}, 422, "max_beam"),
    ("/v1/step", {"sentence": None}, 422, "sentence"),
    ("/v1/beam", {"sentence": "a cat", "beam_size": 0}, 422, "beam_size"),
    ("/v1/beam", {}, 422, "sentence"),
]


@pytest.mark.parametrize(("path", "body", "status", "names"), HOSTILE)
def test_hostile_requests_get_a_4xx_that_says_what_is_wrong(client, path, body, status, names):
    got, answer = post(client, path, body)
    error = answer["error"]
    assert got == status and error["message"]
    if error["code"] == "limit":
        assert error["limit"] == names and error["value"] is not None and error["max"]
    elif names is not None:
        assert error["field"] == names


NESTED = b'{"sentences": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"  # past the recursion limit
NOT_UTF8 = b'{"sentences": ["a \xff cat"]}'


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b'{"sentences": ["\\ud800 a cat"]}', 422),  # a lone surrogate
        (b'{"sentences": ["a cat"', 422),  # truncated JSON
        (b"not json at all", 422),
        (b"[" * 200_000 + b"]" * 200_000, 413),  # nested past the body limit
        (NESTED, 422),
        (b"\xff\xfe\x00 binary", 422),
        (NOT_UTF8, 422),
    ],
)
def test_bodies_that_are_not_valid_json_requests_get_a_4xx(served, raw, status):
    limits = replace(LIMITS, max_body_bytes=300_000)
    with TestClient(create_app(served, limits)) as small:
        response = post_raw(small, raw)
    assert response.status_code == status
    assert response.json()["error"]["message"]


def test_invalid_utf8_and_deep_nesting_get_the_422_of_any_body_that_is_not_json(client):
    shape = post_raw(client, b"not json").json()["error"]
    cases = [
        (NOT_UTF8, "body: not valid UTF-8: byte 0xff at byte 18"),
        (NESTED, "body: not valid JSON: nested too deeply"),
    ]
    for raw, said in cases:
        response = post_raw(client, raw)
        error = response.json()["error"]
        assert response.status_code == 422 and error.keys() == shape.keys()
        assert (error["code"], error["field"]) == ("invalid", "body")
        assert error["message"].startswith(said) and error["errors"][0]["field"] == "body"


def test_error_bodies_are_strict_json_and_echo_no_more_than_a_short_value(client):
    cases = [
        b'{"sentences": ["a cat"], "beam_size": NaN}',
        b'{"sentences": ["a cat"], "beam_size": 1e400}',
        b'{"sentences": ["a cat"], "beam_size": ' + b"9" * 4000 + b"}",
        b'{"sentences": ["' + b" " * 200_000 + b'"]}',
        b'{"sentences": ["a cat"], "model": "' + b"m" * 100_000 + b'"}',
    ]
    for raw in cases:
        response = post_raw(client, raw)
        assert 400 <= response.status_code < 500
        assert len(response.content) < 2_000
        json.loads(response.content, parse_constant=_refuse)  # no NaN or Infinity


def _refuse(constant):
    raise ValueError(f"{constant} is not JSON")


def test_top_k_past_the_target_vocabulary_is_refused(served):
    with TestClient(create_app(served, replace(LIMITS, max_top_k=50))) as client:
        status, body = post(client, "/v1/step", {"sentence": "a cat", "top_k": 16})
        assert status == 422 and body["error"]["field"] == "top_k"
        assert "15 target tokens" in body["error"]["message"]
        assert post(client, "/v1/step", {"sentence": "a cat", "top_k": 15})[0] == 200


def test_a_wrong_method_or_content_type_says_so(client):
    response = client.get("/v1/translate")
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    assert response.json()["error"]["code"] == "method_not_allowed"
    head = client.head("/v1/translate")
    assert (head.status_code, head.headers["allow"], head.content) == (405, "POST", b"")
    response = client.post(
        "/v1/translate",
        content=b"sentences=a",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    error = response.json()["error"]
    assert response.status_code == 422 and error["field"] == "body"
