"""`alignmt serve` on an exported folder: ONNX Runtime answers /v1/translate as the PyTorch
server answers for the run folder it came from, refuses what only PyTorch's search does,
and the whole server runs where torch and jax cannot be imported."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from alignmt.answers.limits import Limits
from alignmt.answers.registry import load_models
from alignmt.serve.app import create_app

SENTENCES = ["the big dog sleeps now", "a cat", "dog", "the small red cat runs"]
ASK = {"sentences": SENTENCES, "beam_size": 3, "nbest": 2, "attention": True}


@pytest.fixture(scope="module")
def exported(toy_exported):
    return toy_exported


@pytest.fixture(scope="module")
def clients(toy_run, exported):
    """The PyTorch server of the run and the ONNX Runtime server of its export."""
    with (
        TestClient(create_app(load_models([toy_run]), Limits())) as torch_client,
        TestClient(create_app(load_models([exported]), Limits())) as runtime_client,
    ):
        yield torch_client, runtime_client


def test_translate_answers_as_the_pytorch_server_does(clients):
    torch_client, runtime_client = clients
    want = torch_client.post("/v1/translate", json=ASK).json()
    response = runtime_client.post("/v1/translate", json=ASK)
    assert response.status_code == 200, response.text
    got = response.json()
    assert got["beam_size"] == 3 and got["model"] == "onnx"
    for mine, theirs in zip(got["translations"], want["translations"], strict=True):
        assert mine["source_tokens"] == theirs["source_tokens"]
        for h, w in zip(mine["hypotheses"], theirs["hypotheses"], strict=True):
            assert (h["text"], h["tokens"], h["alignment"]) == (
                w["text"],
                w["tokens"],
                w["alignment"],
            )
            assert h["score"] == pytest.approx(w["score"], abs=1e-4)
            assert h["probabilities"] == pytest.approx(w["probabilities"], abs=1e-4)
            if w["attention"] is not None:
                for row, wanted in zip(h["attention"], w["attention"], strict=True):
                    assert row == pytest.approx(wanted, abs=1e-4)


def test_models_say_what_runs_each(clients, toy_run):
    torch_client, runtime_client = clients
    (run,) = torch_client.get("/v1/models").json()["models"]
    (onnx,) = runtime_client.get("/v1/models").json()["models"]
    assert run["engine"] == "torch" and onnx["engine"] == "onnxruntime"
    same = ("attention", "order", "cell", "parameters", "training_step", "target_vocabulary")
    assert {k: onnx[k] for k in same} == {k: run[k] for k in same}
    assert onnx["snapshots"] == [] and onnx["validation_bleu"] is None


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/step", {"sentence": "a cat", "attribution": "gradient"}, "attribution"),
        ("/v1/snapshots", {"sentence": "a cat"}, "model"),
    ],
)  # fmt: skip
def test_what_only_pytorch_does_is_refused_naming_the_exported_model(clients, path, body, field):
    response = clients[1].post(path, json=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (
        error["field"] == field and "not available with the onnxruntime engine" in error["message"]
    )
    assert "translate or serve the run folder it was exported from" in error["message"]


def test_an_exported_model_samples_the_same_outputs_for_the_same_seed(clients):
    asked = {"sentences": ["a cat", "a dog"], "sample": {"seed": 3, "temperature": 2.0}}
    first, again = (clients[1].post("/v1/translate", json=asked) for _ in range(2))
    assert first.status_code == again.status_code == 200, first.text
    assert first.json()["translations"] == again.json()["translations"]


def test_an_exported_folder_is_not_served_on_a_gpu_nor_ensembled_with_a_run(toy_run, exported):
    with pytest.raises(ValueError, match=r"a GPU is not available with the onnxruntime engine"):
        load_models([exported], device="cuda")
    with pytest.raises(ValueError, match="an exported model ensembles with exported models"):
        load_models([f"{exported}+{toy_run}"])
    (model,) = load_models([f"{exported}+{exported}"]).values()  # exported ones ensemble
    assert model.translator.engine.name == "onnxruntime"


SERVE_WITHOUT_TORCH = """
import json, sys
sys.modules["torch"] = sys.modules["jax"] = None  # neither can be imported
from fastapi.testclient import TestClient
from alignmt.serve.app import create_app
from alignmt.answers.limits import Limits
from alignmt.answers.registry import load_models
folder, ask = sys.argv[1], json.loads(sys.argv[2])
with TestClient(create_app(load_models([folder], weights=sys.argv[3]), Limits())) as client:
    models = client.get("/v1/models").json()["models"]
    print(json.dumps([models[0]["weights"], client.post("/v1/translate", json=ask).json()]))
"""


@pytest.mark.parametrize("weights", ["float32", "int8"])
def test_the_server_runs_without_torch_or_jax(clients, tmp_path, toy_run, weights):
    from alignmt.cli import main

    folder = tmp_path / "onnx"
    assert main(["export", str(toy_run), "--out", str(folder), "--int8"]) == 0
    ask = {"sentences": SENTENCES, "beam_size": 3}
    argv = [sys.executable, "-c", SERVE_WITHOUT_TORCH, str(folder), json.dumps(ask), weights]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    said, got = json.loads(done.stdout.splitlines()[-1])
    want = clients[0].post("/v1/translate", json=ask).json()
    assert said == weights
    texts = [[h["text"] for h in t["hypotheses"]] for t in got["translations"]]
    assert texts == [[h["text"] for h in t["hypotheses"]] for t in want["translations"]]
