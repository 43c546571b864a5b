"""The server-under-attack drill (benchmarks/drill_server.py) at small counts, and the serve
fixes it led to: a call past its deadline stops decoding, and limits refuse NaN and
infinity before any work."""

from __future__ import annotations

import asyncio
import math
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from benchmarks.drill_requests import Case, case
from benchmarks.drill_server import send, server

from alignmt.answers import inside
from alignmt.answers.limits import Limits, RequestError
from alignmt.answers.registry import ServedModel, load_models
from alignmt.answers.schemas import BeamRequest, SnapshotsRequest, StepRequest, TranslateRequest
from alignmt.answers.translate import translate_batch
from alignmt.cli import main
from alignmt.serve.batcher import Batcher


@pytest.mark.slow  # a drill: a real server process under 300 requests
def test_a_real_server_answers_300_fuzzed_requests_and_every_probe(toy_run):
    report = server(toy_run, requests=300, slow_clients=2, seed=0)
    assert report["failures"] == []
    assert report["tried"] == report["held"] == 302
    assert report["probes"] > 0 and math.isfinite(report["probe_p95_ms"])
    statuses = report["statuses"]
    assert not [s for s in statuses if s >= 500 and s not in (503, 504)]
    # it reached every layer: parsing (400), routing (404, 405), the body limit (413),
    # validation (422) and the decoder (200)
    assert {200, 400, 404, 405, 413, 422} <= set(statuses)
    # only clients that broke the framing (or abandoned a slow request) went unanswered
    broke = sum(not case(0, n).owed for n in range(300)) + 1  # slow client 1 abandons
    assert report["unanswered"] <= broke


class _Broken(BaseHTTPRequestHandler):
    """A server with the faults the drill looks for: /500 and /404 answer with those, and
    anything else gets no answer."""

    def do_POST(self):
        if self.path in ("/500", "/404"):
            self.send_error(int(self.path[1:]))
        else:
            self.connection.shutdown(socket.SHUT_RDWR)

    def log_message(self, *args):
        pass


def test_the_drill_counts_a_500_a_dropped_answer_and_a_wrong_status_as_failures():
    with ThreadingHTTPServer(("127.0.0.1", 0), _Broken) as broken:
        threading.Thread(target=broken.serve_forever, daemon=True).start()
        port = broken.server_address[1]
        raw = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        assert send(Case("json", raw % b"/500"), port) == (500, "status 500")
        status, failure = send(Case("json", raw % b"/drop"), port)
        assert status is None and failure.startswith("no answer")
        assert send(Case("truncated", raw % b"/drop", owed=False), port) == (None, None)
        _, failure = send(Case("oversize", raw % b"/404", expect=(413,)), port)
        assert failure == "status 404, not 413"
        broken.shutdown()


def _submit_past_deadline(run, deadline: float = 1.0):
    """Run `run` as a job on a started Batcher whose deadline is `deadline` s; the job's
    own client gets its 504 from the queue whatever `run` does."""

    async def scenario():
        batcher = Batcher(Limits(deadline=deadline, batch_wait=0.001))
        batcher.start()
        try:
            with pytest.raises(RequestError) as late:
                await batcher.submit(None, run, None, 1)
            assert late.value.status == 504
        finally:
            batcher.stop()  # waits for the call to end, stopped or not

    asyncio.run(scenario())


def test_a_call_past_its_deadline_stops_at_its_next_check():
    calls, outcome = [0], []

    def run(payloads, check):
        try:
            for _ in range(100):  # 10 s in all: long past the 1 s deadline
                check()  # as the search does before each decoder step
                calls[0] += 1
                time.sleep(0.1)
            outcome.append("finished")
        except RequestError as error:
            outcome.append(error.status)
            raise
        return payloads

    _submit_past_deadline(run)
    assert outcome == [504] and 0 < calls[0] < 100


def test_served_models_stop_decoding_once_nobody_waits(toy_run):
    served = load_models([toy_run])["run"]
    request = TranslateRequest(sentences=["a cat"])
    outcome = []

    def run(payloads, check):
        time.sleep(1.5)  # the 1 s deadline passes; then the model is asked to decode
        try:
            translate_batch(served, Limits(), [request], check)
            outcome.append("finished")
        except RequestError as error:
            outcome.append(error.status)
        return payloads

    _submit_past_deadline(run)
    assert outcome == [504]
    assert served.translator.translate_tokens([["a", "cat"]], warn=False)  # elsewhere: none


class _Spy:
    """A translator that notes the `check` each decoding call is handed."""

    def __init__(self, translator):
        self.translator, self.checks = translator, []

    def __getattr__(self, name):
        attr = getattr(self.translator, name)
        if name not in ("translate_tokens", "step_through", "beam_trace"):
            return attr

        def noted(*args, **kwargs):
            self.checks.append(kwargs.get("check"))
            return attr(*args, **kwargs)

        return noted


@pytest.mark.parametrize(
    ("fn", "body", "decodes"),
    [
        (translate_batch, [TranslateRequest(sentences=["a cat", "a dog"])], 1),
        (inside.step, StepRequest(sentence="a cat", beam_size=2), 1),
        (inside.beam, BeamRequest(sentence="a cat"), 1),
        (inside.snapshots, SnapshotsRequest(sentence="a cat"), 1 + 2 * 2),  # 2 snapshots
    ],
)
def test_every_endpoints_decoding_hands_the_calls_check_to_each_search(toy_run, fn, body, decodes):
    run = load_models([toy_run])["run"]
    spy = _Spy(run.translator)
    info = run.info.model_copy(update={"snapshots": [100, 200]})
    served = ServedModel(run.name, spy, info)
    served.snapshot = lambda step: spy  # each snapshot searches as the model does

    def check():
        pass

    fn(served, Limits(), body, check)
    assert spy.checks == [check] * decodes


@pytest.mark.parametrize("field", ["deadline", "batch_wait"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_limits_refuse_values_that_are_not_finite(field, value):
    with pytest.raises(ValueError, match=f"{field} must be positive and finite"):
        Limits(**{field: value})


def test_serve_refuses_a_nan_deadline_before_loading_any_model(tmp_path, capsys):
    # the folder holds no checkpoint: an error about it would mean loading came first
    try:
        status = main(["serve", str(tmp_path / "none"), "--deadline", "nan"])
    except SystemExit as refused:  # by argparse, if the flag's type checks it
        status = refused.code
    err = capsys.readouterr().err
    assert status == 2 and "deadline" in err and "nan" in err and "checkpoint" not in err
