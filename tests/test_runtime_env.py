"""The torch-free environment, `pip install 'alignmt[runtime]'`: NumPy, ONNX Runtime and the
tokenizers, without PyTorch or JAX. CI builds it beside the main one (.ci/run) and names
its Python in ALIGNMT_RUNTIME_PYTHON; the model is exported here, then translated and
served there, and the outputs are PyTorch's."""

from __future__ import annotations

import http.client
import json
import os
import subprocess

import pytest
from benchmarks.load import free_port, local_server

from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.decoding.door import open_translator

SENTENCES = ["a cat", "the big dog sleeps now", "small red dog"]


@pytest.fixture(scope="module")
def runtime_python() -> str:
    python = os.environ.get("ALIGNMT_RUNTIME_PYTHON")
    if not python:
        if os.environ.get("CI"):  # .ci/run builds it: missing there is a failure
            pytest.fail("ALIGNMT_RUNTIME_PYTHON is unset: .ci/run builds the torch-free env")
        pytest.skip(
            "no torch-free environment: make one with `python3 -m venv .venv-runtime && "
            ".venv-runtime/bin/pip install -e '.[runtime]'` and set ALIGNMT_RUNTIME_PYTHON "
            "to its bin/python"
        )
    return python


@pytest.fixture(scope="module")
def exported(toy_exported):
    return toy_exported


@pytest.fixture(scope="module")
def expected(toy_run) -> list:
    """PyTorch's beam-3 2-best of SENTENCES."""
    return open_translator(load_checkpoint(toy_run)).translate(SENTENCES, nbest=2, beam_size=3)


def test_the_environment_has_neither_torch_nor_jax(runtime_python):
    for name in ("torch", "jax", "matplotlib"):
        done = subprocess.run([runtime_python, "-c", f"import {name}"], capture_output=True)
        assert done.returncode != 0, f"{name} is importable in {runtime_python}"


def test_translate_there_gives_pytorchs_outputs(runtime_python, exported, expected, toy_run):
    command = [runtime_python, "-m", "alignmt", "translate", str(exported), "--beam", "3"]
    done = subprocess.run(
        [*command, "--nbest", "2", "--alignment"], input="\n".join(SENTENCES) + "\n",
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    assert rows == [[x for h in hyps for x in (h.text, h.alignment)] for hyps in expected]
    # a run folder there is refused with what to install, not a traceback
    refused = subprocess.run(
        [runtime_python, "-m", "alignmt", "translate", str(toy_run)], input="a cat\n",
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "needs torch, which this environment lacks: pip install 'alignmt[torch]'" in (
        refused.stderr
    )


@pytest.mark.parametrize("weights", ["float32", "int8"])
def test_serve_there_answers_as_pytorch(runtime_python, exported, expected, weights):
    port = free_port()
    with local_server([exported], port, "--weights", weights, python=runtime_python):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        body = json.dumps({"sentences": SENTENCES, "beam_size": 3, "nbest": 2})
        connection.request("POST", "/v1/translate", body, {"content-type": "application/json"})
        answer = json.loads(connection.getresponse().read())
        connection.request("GET", "/v1/models")
        (model,) = json.loads(connection.getresponse().read())["models"]
    assert (model["engine"], model["weights"]) == ("onnxruntime", weights)
    texts = [[h["text"] for h in t["hypotheses"]] for t in answer["translations"]]
    assert texts == [[h.text for h in hyps] for hyps in expected]
