"""ONNX export: the encoder and decoder-step graphs, run by ONNX Runtime on batches of other
sizes and lengths than they were traced on, give PyTorch's memory, states, log-probabilities
and attention, step after step, for each kind of model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from alignmt.checkpoint.format import parse_header
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.decoding.export import ENCODER, FORMAT, MANIFEST, STEP, export_onnx
from alignmt.model.batch import source_batch
from tests.conftest import untrained_twin

ort = pytest.importorskip("onnxruntime", reason="the [runtime] extra installs ONNX Runtime")

# each cell, direction and depth; each decoder order and score; readouts, the bridge and
# zeros, coverage, and both vanilla decoders
MODELS = {
    "gru-bi-additive-bahdanau": {},
    "lstm-uni-L2-general-luong": dict(rnn="lstm", bidirectional=False, enc_layers=2,
                                      dec_layers=2, attention="general", order="luong"),
    "gru-bi-L2-dot-luong": dict(enc_layers=2, dec_layers=2, attention="dot", order="luong"),
    "lstm-bi-concat-maxout": dict(rnn="lstm", attention="concat", readout="maxout"),
    "gru-bi-scaled_dot-tanh-zeros": dict(attention="scaled_dot", readout="tanh", init="zeros"),
    "gru-bi-cgru": dict(order="cgru"),
    "lstm-bi-L2-cgru": dict(rnn="lstm", enc_layers=2, dec_layers=2, order="cgru"),
    "gru-bi-coverage-sum": dict(coverage="sum"),
    "lstm-bi-coverage-fertility": dict(rnn="lstm", coverage="fertility"),
    "gru-bi-vanilla": dict(attention="none"),
    "lstm-uni-L2-vanilla-init_only": dict(rnn="lstm", bidirectional=False, enc_layers=2,
                                          dec_layers=2, attention="none", context="init_only",
                                          init="bridge"),
}  # fmt: skip
LINES = ["the big dog sleeps now", "a cat", "the small red cat runs", "dog"]


@pytest.mark.parametrize("changes", MODELS.values(), ids=MODELS.keys())
def test_the_graphs_step_as_pytorch_does(toy_run, tmp_path, changes):
    ckpt = load_checkpoint(untrained_twin(toy_run, tmp_path / "run", **changes))
    model = ckpt.model
    manifest = export_onnx(ckpt, tmp_path / "onnx")
    encoder = ort.InferenceSession(str(tmp_path / "onnx" / ENCODER))
    step = ort.InferenceSession(str(tmp_path / "onnx" / STEP))
    # the graph takes what the step reads (vanilla's reads neither states nor mask)
    takes = [i.name for i in step.get_inputs()]
    assert takes == [name for name in manifest.step_inputs if name in takes]
    assert takes[0] == "prev" and all(f"{name}" in takes for name in manifest.state)

    # four sentences of up to 6 tokens, where the graphs were traced on two of up to 4
    src, src_len = source_batch([ckpt.src_tokenizer.encode(line) for line in LINES], ckpt.src_vocab)
    with torch.no_grad():
        memory, state = model.encode(src, src_len)
    outputs = encoder.run(None, {"src": src.numpy(), "src_len": src_len.numpy()})
    got = dict(zip([o.name for o in encoder.get_outputs()], outputs, strict=True))
    for name in manifest.memory:
        close(got[name], getattr(memory, name))
    for name in manifest.state:
        close(got[f"first_{name}"], getattr(state, name))

    onnx_state = {name: got[f"first_{name}"] for name in manifest.state}
    onnx_memory = {name: got[name] for name in manifest.memory}
    prev = torch.full((len(LINES),), model.bos_id)
    for _ in range(4):
        with torch.no_grad():
            logits, state, alpha = model.decode_step(prev, state, memory)
        given = {"prev": prev.numpy(), **onnx_state, **onnx_memory}
        feed = {name: given[name] for name in takes}
        out = dict(zip(manifest.step_outputs, step.run(None, feed), strict=True))
        close(out["log_probs"], logits.log_softmax(-1))
        assert ("alpha" in out) == (alpha is not None)
        if alpha is not None:
            close(out["alpha"], alpha)
        onnx_state = {name: out[f"next_{name}"] for name in manifest.state}
        for name in manifest.state:
            close(onnx_state[name], getattr(state, name))
        prev = logits.argmax(-1)


def close(got: np.ndarray, want: torch.Tensor) -> None:
    """Equal to within 1e-4 (float32, summed in another order), and of the same shape."""
    want = want.numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want.astype(got.dtype), rtol=0, atol=1e-4)


def test_the_manifest_says_what_the_checkpoint_says(toy_run, tmp_path):
    ckpt = load_checkpoint(toy_run)
    export_onnx(ckpt, tmp_path)
    body = json.loads((tmp_path / MANIFEST).read_text())
    assert body["format"] == FORMAT and body["attention"] is True
    assert body["state"] == ["hidden"] and body["memory"] == ["states", "mask", "keys"]
    assert (body["pad_id"], body["bos_id"], body["eos_id"]) == (0, 1, 2)
    header = parse_header(tmp_path / MANIFEST, {k: str(v) for k, v in body.items()})
    assert header.config == ckpt.config and header.tgt_vocab == ckpt.tgt_vocab
    assert header.src_tokenizer.to_json() == ckpt.src_tokenizer.to_json()


def test_the_command_writes_the_folder_and_names_a_missing_run(toy_run, tmp_path, capsys):
    from alignmt.cli import main

    assert main(["export", str(toy_run), "--out", str(tmp_path / "onnx")]) == 0
    assert "decoder state: hidden" in capsys.readouterr().out
    assert {p.name for p in (tmp_path / "onnx").iterdir()} == {MANIFEST, ENCODER, STEP}
    assert main(["export", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x")]) == 2
    assert "nowhere" in capsys.readouterr().err
