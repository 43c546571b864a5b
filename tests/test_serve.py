"""The HTTP service through FastAPI's TestClient: every endpoint, hostile input, HEAD,
start-up, the request log; and a load test against a real uvicorn process. The queue and
its thread are test_batcher.py's, slow clients test_serve_slow_clients.py's."""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from benchmarks.load import free_port
from fastapi.testclient import TestClient
from pydantic import ValidationError
from starlette.requests import Request

from alignmt.answers.limits import RequestError
from alignmt.answers.schemas import StepRequest, TranslateRequest
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.decoding.door import open_translator
from alignmt.serve import routes
from alignmt.serve.app import create_app
from tests.conftest import SERVE_LIMITS as LIMITS
from tests.conftest import SHARED, chromium, needs_shared_data, post, serving, untrained_twin

SENTENCE = "the big dog sleeps now"


@pytest.fixture(scope="module")
def translator(toy_run):
    return open_translator(load_checkpoint(toy_run))


def test_models_describe_what_is_served(client, toy_run):
    assert client.get("/healthz").json() == {"status": "ok", "models": ["run", "vanilla"]}
    models = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
    run, vanilla = models["run"], models["vanilla"]
    ckpt = load_checkpoint(toy_run)
    assert (run["attention"], run["order"], run["cell"]) == ("additive", "bahdanau", "gru")
    assert run["mechanisms"] == [
        "additive score (Bahdanau et al. 2015), A = 24",
        "softmax (Bahdanau et al. 2015)",
    ]
    assert run["shown"] == [] and vanilla["mechanisms"] == []
    assert run["parameters"] == sum(p.numel() for p in ckpt.model.parameters())
    assert run["training_step"] == ckpt.step and run["beam_size"] == 3
    assert run["validation_bleu"] is not None and run["target_vocabulary"] == len(ckpt.tgt_vocab)
    assert vanilla["attention"] == "none" and vanilla["validation_bleu"] is None


def test_translate_answers_what_the_translator_computes(client, translator):
    status, body = post(
        client,
        "/v1/translate",
        {"sentences": [SENTENCE, "a cat"], "beam_size": 3, "nbest": 2, "attention": True},
    )
    assert status == 200 and body["model"] == "run" and body["beam_size"] == 3
    split = [translator.source_tokens(line) for line in (SENTENCE, "a cat")]
    expected = translator.translate_tokens(split, nbest=2, beam_size=3)
    for got, hyps in zip(body["translations"], expected, strict=True):
        assert got["source_tokens"] == hyps[0].src_tokens
        for h, t in zip(got["hypotheses"], hyps, strict=True):
            assert (h["text"], h["tokens"], h["alignment"]) == (t.text, t.tokens, t.alignment)
            assert math.isclose(h["score"], t.score, rel_tol=1e-6)
            np.testing.assert_allclose(h["attention"], t.attention, atol=1e-5)
            assert h["probabilities"] == pytest.approx(t.probabilities, abs=1e-5)
    # The alignment is each output token's argmax source position, </s> aside on both sides.
    hyp = body["translations"][0]["hypotheses"][0]
    pairs = [tuple(map(int, p.split("-"))) for p in hyp["alignment"].split()]
    attention = torch.tensor(hyp["attention"])
    assert [i for _, i in pairs] == list(range(len(hyp["tokens"]) - 1))
    assert [j for j, _ in pairs] == attention[:-1, :-1].argmax(dim=1).tolist()


def test_attention_is_left_out_unless_asked_for(client):
    _, body = post(client, "/v1/translate", {"sentences": ["a cat"]})
    hyp = body["translations"][0]["hypotheses"][0]
    assert hyp["attention"] is None and hyp["alignment"]


def test_stepping_with_no_prefix_or_override_is_translate_with_beam_one(client):
    _, translated = post(
        client, "/v1/translate", {"sentences": [SENTENCE], "beam_size": 1, "attention": True}
    )
    status, stepped = post(client, "/v1/step", {"sentence": SENTENCE, "top_k": 3})
    assert status == 200
    hyp = translated["translations"][0]["hypotheses"][0]
    assert stepped["tokens"] == hyp["tokens"] and stepped["text"] == hyp["text"]
    assert [s["token"] for s in stepped["steps"]] == hyp["tokens"]
    assert torch.allclose(
        torch.tensor([s["attention"] for s in stepped["steps"]]),
        torch.tensor(hyp["attention"]),
        atol=2e-5,
    )
    for s in stepped["steps"]:
        assert len(s["top_k"]) == 3 and s["top_k"][0]["token"] == s["token"]
        assert not s["forced"] and not s["overridden"]


def test_a_forced_prefix_starts_the_output(client):
    _, free = post(client, "/v1/step", {"sentence": SENTENCE})
    prefix = ["der", "kleiner"]
    assert free["tokens"][:2] != prefix
    for beam in (1, 3):
        status, body = post(
            client, "/v1/step", {"sentence": SENTENCE, "prefix": prefix, "beam_size": beam}
        )
        assert status == 200 and body["tokens"][:2] == prefix
        assert [s["forced"] for s in body["steps"][:3]] == [True, True, False]


def test_an_override_moves_that_steps_attention_to_one_source_word(client):
    status, body = post(client, "/v1/step", {"sentence": SENTENCE, "override": {"2": 0}})
    assert status == 200
    step = body["steps"][2]
    assert step["overridden"] and step["attention"] == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert not any(s["overridden"] for i, s in enumerate(body["steps"]) if i != 2)


def test_the_beam_trees_finished_hypotheses_are_translates_nbest(client):
    for sentence in (SENTENCE, "a cat", "the small red cat runs now"):
        _, tree = post(client, "/v1/beam", {"sentence": sentence, "beam_size": 4})
        assert tree["coverage_penalty"] == 0.0
        _, translated = post(
            client, "/v1/translate", {"sentences": [sentence], "beam_size": 4, "nbest": 4}
        )
        nbest = translated["translations"][0]["hypotheses"]
        finished = tree["finished"][: len(nbest)]
        assert [h["tokens"] for h in finished] == [h["tokens"] for h in nbest]
        assert [h["text"] for h in finished] == [h["text"] for h in nbest]
        nodes = tree["nodes"]
        for node in nodes:
            assert node["parent"] is None or nodes[node["parent"]]["status"] == "live"
        assert {nodes[i]["status"] for i in tree["finished_nodes"]} == {"finished"}
        assert {"live", "pruned", "finished"} <= {n["status"] for n in nodes}


def test_a_conditional_gru_model_steps_overrides_and_opens_its_beam(toy_run, tmp_path):
    """The explorer's routes on the conditional GRU order: what stepping, an override and
    the beam tree show agree with translate, as for the other orders."""
    cgru = untrained_twin(toy_run, tmp_path / "cgru", order="cgru", readout="tanh")
    with serving(cgru, limits=LIMITS) as client:
        assert client.get("/v1/models").json()["models"][0]["order"] == "cgru"
        _, translated = post(
            client, "/v1/translate", {"sentences": ["a cat"], "beam_size": 1, "nbest": 1}
        )
        status, stepped = post(client, "/v1/step", {"sentence": "a cat"})
        assert status == 200
        assert stepped["tokens"] == translated["translations"][0]["hypotheses"][0]["tokens"]
        _, moved = post(client, "/v1/step", {"sentence": "a cat", "override": {"0": 1}})
        assert moved["steps"][0]["attention"] == [0.0, 1.0, 0.0]
        _, tree = post(client, "/v1/beam", {"sentence": "a cat", "beam_size": 3})
        _, nbest = post(
            client, "/v1/translate", {"sentences": ["a cat"], "beam_size": 3, "nbest": 3}
        )
        hypotheses = nbest["translations"][0]["hypotheses"]
        assert [h["tokens"] for h in tree["finished"][:3]] == [h["tokens"] for h in hypotheses]


def test_a_vanilla_model_has_no_attention_to_show_or_override(client):
    request = {"model": "vanilla", "sentences": ["a cat"], "attention": True}
    status, body = post(client, "/v1/translate", request)
    hyp = body["translations"][0]["hypotheses"][0]
    assert status == 200 and hyp["attention"] is None and hyp["alignment"] is None
    status, body = post(
        client, "/v1/step", {"model": "vanilla", "sentence": "a cat", "override": {"0": 1}}
    )
    assert status == 422 and "no attention" in body["error"]["message"]


def test_an_answer_with_more_attention_weights_than_the_limit_is_refused(served, translator):
    tokens = translator.source_tokens(SENTENCE)
    cells = translator.output_limit(tokens) * (len(tokens) + 1)  # the most of one hypothesis
    request = {"sentences": [SENTENCE] * 2, "beam_size": 2, "nbest": 2, "attention": True}
    with TestClient(create_app(served, replace(LIMITS, max_attention_cells=3 * cells))) as client:
        status, body = post(client, "/v1/translate", request)
        error = body["error"]
        assert status == 422 and error["limit"] == "max_attention_cells"
        assert (error["value"], error["max"]) == (4 * cells, 3 * cells)
        assert f"nbest 2 x {2 * cells} output-by-source cells over 2 sentences" in error["message"]
        for smaller in ({"attention": False}, {"nbest": 1}, {"model": "vanilla"}):
            assert post(client, "/v1/translate", {**request, **smaller})[0] == 200


GET_ROUTES = [
    "/",
    "/healthz",
    "/v1/models",
    "/openapi.json",
    "/docs",
]


def test_every_get_route_is_listed(client):
    routes = {route.path for route in client.app.routes if "GET" in getattr(route, "methods", ())}
    assert routes <= set(GET_ROUTES)


@pytest.mark.parametrize("path", [*GET_ROUTES, "/static/explorer.js"])
def test_head_is_answered_as_get_would_be_without_the_body(client, path):
    got, head = client.get(path), client.head(path)
    assert head.status_code == got.status_code == 200
    assert head.headers == got.headers and int(got.headers["content-length"]) == len(got.content)
    assert head.content == b""


def test_the_api_reference_is_served_from_alignmts_own_files(client):
    page = client.get("/docs").text
    assert "/static/docs/swagger-ui-bundle.js" in page and "/openapi.json" in page
    assert "http" not in page.replace("http-equiv", "")  # no URL outside the server
    for name in ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"):
        assert client.get(f"/static/docs/{name}").status_code == 200


@pytest.mark.slow
def test_the_api_reference_renders_with_only_127_0_0_1_reachable(toy_run):
    """Swagger UI draws every route from the schema in Chromium with every other host
    unresolvable, as on a machine with no network."""
    from benchmarks.browser import LOCAL_ONLY
    from benchmarks.load import local_server
    from selenium.webdriver.support.ui import WebDriverWait

    paths = "return [...document.querySelectorAll('.opblock-summary-path')]" + (
        ".map((e) => e.textContent)"
    )
    for browser in chromium(*LOCAL_ONLY):
        port = free_port()
        with local_server([toy_run], port):
            browser.get(f"http://127.0.0.1:{port}/docs")
            WebDriverWait(browser, 30).until(lambda b: b.execute_script(paths))
            shown = set(browser.execute_script(paths))
            fetched = browser.execute_script(
                "return performance.getEntriesByType('resource').map((e) => e.name)"
            )
        assert {"/v1/translate", "/v1/step", "/v1/models"} <= {p.strip() for p in shown}
        assert fetched and all(url.startswith(f"http://127.0.0.1:{port}/") for url in fetched)


def test_an_app_can_be_started_again_after_it_stopped(served):
    app = create_app(served, LIMITS)
    for _ in range(2):
        with TestClient(app) as client:
            assert post(client, "/v1/translate", {"sentences": ["a cat"]})[0] == 200
    unstarted = TestClient(app)  # no lifespan: no decoding thread
    status, body = post(unstarted, "/v1/translate", {"sentences": ["a cat"]})
    assert status == 503 and body["error"]["code"] == "busy"
    assert unstarted.get("/healthz").status_code == 503


def test_a_body_over_the_limit_is_refused_before_it_is_read(client):
    response = client.post("/v1/translate", json={"sentences": ["a" * 1_000_000]})
    error = response.json()["error"]
    assert response.status_code == 413 and response.headers["connection"] == "close"
    assert error["limit"] == "max_body_bytes" and error["value"] > error["max"] == 1_000_000


def test_each_request_is_logged_in_one_line_without_its_text(client, caplog):
    with caplog.at_level(logging.INFO, logger="alignmt.serve"):
        post(client, "/v1/translate", {"sentences": ["a red dog", "the cat sleeps"]})
        post(client, "/v1/translate", {"sentences": ["secret words"], "beam_size": 0})
    lines = [r.getMessage() for r in caplog.records if r.name == "alignmt.serve"]
    assert len(lines) == 2
    assert lines[0].startswith("POST /v1/translate 200 sentences=2 ms=")
    assert lines[1].startswith("POST /v1/translate 422 ")
    assert not any(word in line for line in lines for word in ("dog", "cat", "secret"))


@pytest.mark.parametrize(
    ("body", "field", "message", "value"),
    [
        ({"sentences": ["a cat"], "beam_size": 2, "nbest": 3}, "nbest", "3 is more than", 3),
        (
            {"sentences": ["a cat"], "nbest": 2, "sample": {}},
            "nbest",
            "sampling draws outputs",
            2,
        ),
        ({"sentences": ["a cat", "a\x1bcat"]}, "sentences[1]", "a control character", "U+001B"),
        ({"sentences": ["a cat", " "]}, "sentences[1]", "the sentence is empty", " "),
    ],
)
def test_rules_that_need_no_model_refuse_a_request_in_validation(
    client, body, field, message, value
):
    with pytest.raises(ValidationError):
        TranslateRequest.model_validate(body)
    status, answer = post(client, "/v1/translate", body)
    error = answer["error"]
    assert status == 422 and (error["code"], error["field"]) == ("invalid", field)
    assert error["message"].startswith(f"{field}: {message}") and error["value"] == value
    said = error["message"].removeprefix(f"{field}: ")  # said as it is: no "Value error, "
    assert error["errors"] == [{"field": field, "message": said, "value": value}]


def test_a_request_without_a_beam_size_is_held_to_the_models_beam(client):
    # the run searches with a beam of 3: nbest 4 cannot be met, nor a max_beam of 2
    status, answer = post(client, "/v1/translate", {"sentences": ["a cat"], "nbest": 4})
    assert status == 422 and answer["error"]["field"] == "nbest"
    assert answer["error"]["message"] == "nbest: 4 is more than the beam size 3"
    request = TranslateRequest(sentences=["a cat"])
    with pytest.raises(RequestError, match="max_beam"):
        request.with_default_beam(3).check_limits(replace(LIMITS, max_beam=2))


class _Queue:
    """A stand-in for the decoding thread: notes what a route queues, answers `{}`."""

    def __init__(self):
        self.jobs = []

    async def submit(self, key, run, payload, sentences):
        self.jobs.append((key, payload, sentences))
        return b"{}"


def _call(route, body, served, limits=LIMITS):
    queue, request = _Queue(), Request({"type": "http", "state": {}})
    response = asyncio.run(route(body, request, served, limits, queue))
    return response, request.state.sentences, queue.jobs


def test_a_route_runs_on_its_own_given_its_dependencies(served):
    response, sentences, jobs = _call(
        routes.translate, TranslateRequest(sentences=["a cat", "a dog"], nbest=2), served
    )
    assert response.body == b"{}" and sentences == 2
    [(key, queued, count)] = jobs
    assert key == ("run", "translate", 3, 2) and queued.beam_size == 3 and count == 2
    sampled = TranslateRequest(sentences=["a cat", "a dog"], sample={"samples": 3})
    [(key, _, count)] = _call(routes.translate, sampled, served)[2]
    assert key is None and count == 6  # alone, so that its seed alone decides its draws
    with pytest.raises(RequestError) as refused:
        _call(routes.translate, TranslateRequest(sentences=["a cat"] * 9), served)
    assert refused.value.details["limit"] == "max_sentences"
    with pytest.raises(RequestError) as refused:
        _call(routes.step, StepRequest(sentence="a cat", model="nope"), served)
    assert refused.value.status == 404


@pytest.mark.slow
@needs_shared_data
def test_a_real_server_under_32_concurrent_clients_answers_all_with_flat_memory(toy_run):
    from benchmarks.load import local_server, run_load

    from alignmt.text.corpus import read_lines

    sentences = read_lines(str(SHARED / "data/multi30k/test_2016_flickr.en.gz"))
    port = free_port()
    with local_server([toy_run], port) as server:
        result = run_load(
            "127.0.0.1",
            port,
            sentences,
            clients=32,
            requests=1_200,
            server_pid=server.pid,
            rss_every=200,
            timeout=30,
        )
    rss = ", ".join(f"{n}: {b / 2**20:.0f} MiB" for n, b in result.rss.items())
    latency = ", ".join(f"p{p} {result.percentile(p):.0f} ms" for p in (50, 95, 99))
    print(
        f"\n{len(result.latencies)} requests in {result.seconds:.1f} s: "
        f"{result.throughput:.0f}/s, {latency}; RSS {rss}"
    )
    assert result.errors == []
    assert len(result.latencies) == 1_200
    assert result.rss[1_200] <= 1.10 * result.rss[200]


def test_a_server_that_cannot_start_is_reported_not_waited_for(tmp_path):
    from benchmarks.load import local_server

    server = local_server([tmp_path / "no_run"], free_port())
    with pytest.raises(RuntimeError, match=r"exited at start-up with status 2: .*no_run"), server:
        pass
