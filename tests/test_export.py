"""ONNX export: the encoder and decoder-step graphs, run by ONNX Runtime on batches of other
sizes and lengths than they were traced on, give PyTorch's memory, states, log-probabilities
and attention, step after step, for each kind of model."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch

from alignmt.checkpoint.format import parse_header
from alignmt.checkpoint.shortlist_io import SHORTLIST
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.decoding.exported import ENCODER, FORMAT, MANIFEST, STEP
from alignmt.decoding.torch_engine.export import export_onnx
from alignmt.model.batch import source_batch
from alignmt.model.decoder import flat_fields
from tests.conftest import untrained_twin

# each cell, direction and depth; each decoder order and score; readouts, the bridge and
# zeros, coverage, sparse weights, and both vanilla decoders
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
    "gru-bi-sparsemax": dict(attention_fn="sparsemax"),
    "lstm-bi-general-luong-entmax15": dict(rnn="lstm", attention="general", order="luong",
                                           attention_fn="entmax15"),
    "gru-bi-scaled_general-luong-local_p": dict(attention="scaled_general", order="luong",
                                                attention_window="local_p", window=2),
    "lstm-bi-additive-local_m": dict(rnn="lstm", attention_window="local_m", window=1),
    "gru-bi-location-luong": dict(attention="location", order="luong", positions=12),
    "gru-bi-vanilla": dict(attention="none"),
    "lstm-uni-L2-vanilla-init_only": dict(rnn="lstm", bidirectional=False, enc_layers=2,
                                          dec_layers=2, attention="none", context="init_only",
                                          init="bridge"),
}  # fmt: skip
LINES = ["the big dog sleeps now", "a cat", "the small red cat runs", "dog"]


def cases(names, fast: int) -> list:
    """`names` as parameters, all but the first `fast` in the slow set."""
    return [
        pytest.param(name, marks=() if i < fast else pytest.mark.slow, id=name)
        for i, name in enumerate(names)
    ]


@pytest.mark.parametrize("name", cases(MODELS, fast=2))
def test_the_graphs_step_as_pytorch_does(toy_run, tmp_path, name):
    ckpt = load_checkpoint(untrained_twin(toy_run, tmp_path / "run", **MODELS[name]))
    model = ckpt.model
    manifest = export_onnx(ckpt, tmp_path / "onnx")
    encoder = ort.InferenceSession(str(tmp_path / "onnx" / ENCODER))
    step = ort.InferenceSession(str(tmp_path / "onnx" / STEP))
    # the graph takes what the step reads (vanilla's reads neither states nor mask; what a
    # mechanism shows, such as a local window's centre p_i, is written for the explorer and
    # never read)
    takes = [i.name for i in step.get_inputs()]
    assert takes == [name for name in manifest.step_inputs if name in takes]
    shown = {s["slot"] for s in manifest.shown}
    read = [name for name in manifest.state if name not in shown]
    assert takes[0] == "prev" and all(name in takes for name in read)
    # every field's axes are the model's declaration, and its source axis is free
    assert set(manifest.axes) == {*manifest.state, *manifest.memory}
    for given in step.get_inputs()[1:]:  # a graph input's shape is what export declared
        axes = manifest.axes_of(given.name)  # the steer too
        assert [isinstance(d, str) for d in given.shape] == [a != "units" for a in axes]

    # four sentences of up to 6 tokens, where the graphs were traced on two of up to 4
    src, src_len = source_batch([ckpt.src_tokenizer.encode(line) for line in LINES], ckpt.src_vocab)
    with torch.no_grad():
        memory, state = model.encode(src, src_len)
    keep = np.ones(src.shape, np.float32)  # every source embedding read
    outputs = encoder.run(None, {"src": src.numpy(), "src_len": src_len.numpy(), "keep": keep})
    got = dict(zip([o.name for o in encoder.get_outputs()], outputs, strict=True))
    for name, value in flat_fields(memory).items():
        close(got[name], value)
    for name, value in flat_fields(state).items():
        close(got[f"first_{name}"], value)

    onnx_state = {name: got[f"first_{name}"] for name in manifest.state}
    onnx_memory = {name: got[name] for name in manifest.memory}
    prev = torch.full((len(LINES),), model.bos_id)
    for _ in range(4):
        with torch.no_grad():
            log_probs, state, alpha = model.decode_step(prev, state, memory)
        unsteered = np.zeros(src.shape, np.float32)  # all zero: no row steered
        given = {"prev": prev.numpy(), **onnx_state, **onnx_memory, "steer": unsteered}
        feed = {name: given[name] for name in takes}
        out = dict(zip(manifest.step_outputs, step.run(None, feed), strict=True))
        close(out["log_probs"], log_probs.full())
        assert ("alpha" in out) == (alpha is not None)
        if alpha is not None:
            close(out["alpha"], alpha)
        onnx_state = {name: out[f"next_{name}"] for name in manifest.state}
        for name, value in flat_fields(state).items():
            close(onnx_state[name], value)
        prev = log_probs.best()[0]


def test_a_steering_graph_steers_only_the_rows_it_is_asked_to(toy_run, tmp_path):
    from alignmt.decoding.onnx_engine.model import OnnxModel

    ckpt = load_checkpoint(toy_run)
    manifest = export_onnx(ckpt, tmp_path / "web")
    export_onnx(ckpt, tmp_path / "plain", steer=False)
    assert manifest.step_inputs[-1] == "steer"
    web, plain = OnnxModel(tmp_path / "web"), OnnxModel(tmp_path / "plain")
    assert web.steers and not plain.steers
    src, src_len = source_batch([ckpt.src_tokenizer.encode(line) for line in LINES], ckpt.src_vocab)
    state, memory = web.encode(src.numpy(), src_len.numpy())
    prev = np.full(len(LINES), ckpt.model.bos_id)
    want = plain.step(prev, state, memory)
    got = web.step(prev, state, memory)  # OnnxModel steers no row
    for g, w in ((got[0], want[0]), (got[2], want[2])):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6)
    steer = np.zeros(memory["mask"].shape, np.float32)
    steer[2, 1] = 1.0  # row 2 onto its second word
    feed = {"prev": prev, **state, **memory, "steer": steer}
    log_probs, *_, alpha = web.step_graph.run(None, {n: feed[n] for n in web.takes})
    assert alpha[2].tolist() == steer[2].tolist()
    others = [0, 1, 3]
    np.testing.assert_allclose(alpha[others], want[2][others], rtol=0, atol=1e-6)
    np.testing.assert_allclose(log_probs[others], want[0][others], rtol=0, atol=1e-6)
    assert not np.allclose(log_probs[2], want[0][2], atol=1e-3)


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
    # the toy run built its shortlist when it trained, and the folder carries it
    assert (toy_run / SHORTLIST).is_file()
    written = {p.name for p in (tmp_path / "onnx").iterdir()}
    assert written == {MANIFEST, ENCODER, STEP, SHORTLIST}
    assert main(["export", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x")]) == 2
    assert "nowhere" in capsys.readouterr().err


# --- translating with the exported graphs, without PyTorch -----------------------------------

RUNTIME = [
    "gru-bi-additive-bahdanau", "lstm-uni-L2-general-luong", "gru-bi-L2-dot-luong",
    "lstm-bi-concat-maxout", "gru-bi-cgru", "lstm-bi-coverage-fertility", "gru-bi-vanilla",
]  # fmt: skip
SENTENCES = [
    "the big dog sleeps now", "a cat", "the small red cat runs", "dog", "", "a big dog runs now",
    "the cat sleeps", "small red dog", "the small big red cat sleeps now",
]  # fmt: skip


@pytest.mark.parametrize("name", cases(RUNTIME, fast=1))
@pytest.mark.parametrize(("beam", "nbest"), [(1, 1), (4, 3)], ids=["greedy", "beam 4"])
def test_the_runtime_translates_as_pytorch_does(toy_run, tmp_path, name, beam, nbest):
    from alignmt.decoding.door import open_translator

    run = (
        toy_run if name == RUNTIME[0] else untrained_twin(toy_run, tmp_path / "run", **MODELS[name])
    )
    search = dict(beam_size=beam, length_penalty=0.6)
    want = open_translator(run, **search).translate(SENTENCES, nbest=nbest, batch_size=4)
    export_onnx(load_checkpoint(run), tmp_path / "onnx")
    got = open_translator(tmp_path / "onnx", **search).translate(
        SENTENCES, nbest=nbest, batch_size=4
    )
    for hyps, expected in zip(got, want, strict=True):
        assert [h.tokens for h in hyps] == [w.tokens for w in expected]
        for h, w in zip(hyps, expected, strict=True):
            assert (h.text, h.src_tokens, h.alignment) == (w.text, w.src_tokens, w.alignment)
            assert h.score == pytest.approx(w.score, abs=1e-4)
            assert h.probabilities == pytest.approx(w.probabilities, abs=1e-4)
            if w.attention is not None:
                np.testing.assert_allclose(h.attention, w.attention, atol=1e-4)


def test_translate_reads_an_exported_folder_without_torch(toy_run, tmp_path):
    import subprocess
    import sys

    from alignmt.decoding.door import open_translator

    export_onnx(load_checkpoint(toy_run), tmp_path / "onnx")
    # torch and jax made unimportable: the command must not need them
    script = (
        "import sys; sys.modules['torch'] = sys.modules['jax'] = None; "
        "from alignmt.cli import main; "
        "sys.exit(main(sys.argv[1:]))"
    )
    argv = [sys.executable, "-c", script, "translate", str(tmp_path / "onnx"), "--beam", "3"]
    done = subprocess.run(
        [*argv, "--nbest", "2", "--alignment"], input="a cat\n\nthe big dog\n", text=True,
        capture_output=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    want = open_translator(toy_run).translate(["a cat", "", "the big dog"], nbest=2, beam_size=3)
    assert rows[1] == ["", "", "", ""]
    for row, hyps in zip((rows[0], rows[2]), (want[0], want[2]), strict=True):
        assert row == [x for h in hyps for x in (h.text, h.alignment)]


def test_a_broken_exported_folder_is_named_not_traced(toy_run, tmp_path, capsys):
    from alignmt.cli import main

    folder = tmp_path / "onnx"
    export_onnx(load_checkpoint(toy_run), folder)

    def refused(said: str) -> None:
        import io
        import sys

        sys.stdin = io.TextIOWrapper(io.BytesIO(b"a cat\n"))
        try:
            assert main(["translate", str(folder)]) == 2
        finally:
            sys.stdin = sys.__stdin__
        assert said in capsys.readouterr().err

    body = json.loads((folder / MANIFEST).read_text())
    vocab = json.loads(body["tgt_vocab"])  # one word short of what the graph scores
    words = len(vocab["itos"])
    short = json.dumps({**vocab, "itos": vocab["itos"][:-1]})
    (folder / MANIFEST).write_text(json.dumps({**body, "tgt_vocab": short}))
    refused(f"{folder / STEP}: scores {words} target tokens, but the vocabulary of {folder}")
    (folder / MANIFEST).write_text(json.dumps(body))
    assert main(["translate", str(folder), "--precision", "bfloat16"]) == 2
    said = capsys.readouterr().err
    assert "bfloat16 is not available with the onnxruntime engine" in said
    (folder / STEP).write_bytes(b"not a graph")
    refused(f"{folder / STEP}: not a readable ONNX graph")
    (folder / STEP).unlink()
    refused(f"{folder / STEP}: not found")
    (folder / MANIFEST).write_text(json.dumps({**body, "format": 99}))
    refused("export format 99, but this alignmt reads format 1")
    (folder / MANIFEST).write_text("{")
    refused(f"{folder / MANIFEST}: not a readable manifest")


# --- int8 --------------------------------------------------------------------------------


def test_int8_copies_quantize_the_products_and_stay_close_to_float32(toy_run, tmp_path, capfd):
    import onnx

    from alignmt.cli import main
    from alignmt.decoding.door import open_translator
    from alignmt.decoding.onnx_engine.model import OnnxModel

    folder = tmp_path / "onnx"
    assert main(["export", str(toy_run), "--out", str(folder), "--int8"]) == 0
    said = capfd.readouterr()  # the file descriptors, where the exporter's C++ side writes
    assert "encoder.int8.onnx, step.int8.onnx" in said.out
    # the known-harmless notes of the exporter and of quantization are not passed on
    for note in ("prim::PackPadded", "prim::PadPacked", "pre-processing before quantization"):
        assert note not in said.err
    step = onnx.load(folder / "step.int8.onnx").graph
    ops = [n.op_type for n in step.node]
    # every product by weights with >= 16 outputs, the hidden layer's Gemm included, is int8;
    # the additive score's v (A -> 1) and the toy's output layer (10 words) stay float32,
    # as does alpha's product with the states (no constant weights)
    assert "Gemm" not in ops and ops.count("MatMulInteger") == 4
    floats = {n.name for n in step.node if n.op_type == "MatMul"}
    assert floats == {"/attention/score/v/MatMul", "/proj/MatMul", "/attention/MatMul"}
    plain, int8 = OnnxModel(folder), OnnxModel(folder, int8=True)
    src = np.array([[3, 4, 5, 2], [6, 2, 0, 0]], dtype=np.int64)
    src_len = np.array([4, 2], dtype=np.int64)
    prev = np.array([1, 1], dtype=np.int64)
    (want, *_), (got, *_) = (m.step(prev, *m.encode(src, src_len)) for m in (plain, int8))
    np.testing.assert_allclose(np.exp(got), np.exp(want), atol=0.02)
    assert not np.allclose(got, want, atol=1e-6)  # the copies are not float32
    same = open_translator(folder, weights="int8").translate(SENTENCES)
    assert [h[0].tokens for h in same] == [h[0].tokens for h in open_translator(folder).translate(
        SENTENCES
    )]  # fmt: skip


def test_weights_int8_needs_the_int8_copies(toy_run, tmp_path, capsys):
    import io
    import sys

    from alignmt.cli import main

    export_onnx(load_checkpoint(toy_run), tmp_path / "onnx")
    sys.stdin = io.TextIOWrapper(io.BytesIO(b"a cat\n"))
    try:
        assert main(["translate", str(tmp_path / "onnx"), "--weights", "int8"]) == 2
    finally:
        sys.stdin = sys.__stdin__
    want = f"{tmp_path / 'onnx' / 'step.int8.onnx'}: not found; export with --int8"
    assert want in capsys.readouterr().err


def test_without_onnx_runtime_the_command_names_the_extra(toy_run, tmp_path, monkeypatch, capsys):
    import io
    import sys

    from alignmt.cli import main

    export_onnx(load_checkpoint(toy_run), tmp_path / "onnx")
    for module in ("alignmt.decoding.onnx_engine.model", "alignmt.decoding.onnx_engine.int8"):
        monkeypatch.delitem(sys.modules, module, raising=False)  # so that they import anew
    for module in [m for m in sys.modules if m.split(".")[0] == "onnxruntime"]:
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a cat\n")))
    assert main(["translate", str(tmp_path / "onnx")]) == 2
    want = "needs onnxruntime, which this environment lacks: pip install 'alignmt[runtime]'"
    assert want in capsys.readouterr().err
    assert main(["export", str(toy_run), "--out", str(tmp_path / "again"), "--int8"]) == 2
    assert want in capsys.readouterr().err
