"""Weights stored in int8, arithmetic in float32 (`onnx_engine/stored_int8.py`): which weights
are stored, how close they come back, and the site `alignmt export --web` writes with them
where float32 would weigh too much, run in the page as ONNX Runtime runs it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from alignmt.cli import main
from alignmt.decoding.exported import FOLD_STORED_INT8
from alignmt.decoding.onnx_engine.stored_int8 import store_int8
from tests.conftest import held_out_toy_lines
from tests.test_web import ask_worker, assert_same, server_answers


def small_graph(rng: np.random.Generator) -> onnx.ModelProto:
    """ids (N,) -> Gather(E (100, 64)) @ W (64, 128) + b (128,) @ v (128, 1): a large
    embedding and product, a bias and a product too small to store."""
    tensors = {
        "E": rng.normal(size=(100, 64)),
        "W": rng.normal(size=(64, 128)) * np.linspace(0.01, 3, 128),  # a scale per column
        "b": rng.normal(size=128),
        "v": rng.normal(size=(128, 1)),
    }
    nodes = [
        helper.make_node("Gather", ["E", "ids"], ["x"]),
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["hb"]),
        helper.make_node("MatMul", ["hb", "v"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])],
        [numpy_helper.from_array(t.astype(np.float32), n) for n, t in tensors.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run(model: onnx.ModelProto, ids: np.ndarray, fold: bool = True) -> np.ndarray:
    options = ort.SessionOptions()
    if fold:
        options.add_session_config_entry(*FOLD_STORED_INT8)
    session = ort.InferenceSession(model.SerializeToString(), options)
    return session.run(None, {"ids": ids})[0]


def test_large_weights_are_stored_in_int8_a_scale_per_output_channel():
    rng = np.random.default_rng(0)
    plain = small_graph(rng)
    stored = small_graph(np.random.default_rng(0))
    assert store_int8(stored) == 2  # E and W; b and v are too small to matter
    kept = {t.name: numpy_helper.to_array(t) for t in stored.graph.initializer}
    assert kept["E/int8"].dtype == np.int8 and kept["E/scale"].shape == (100,)  # a row a token
    assert kept["W/int8"].dtype == np.int8 and kept["W/scale"].shape == (128,)  # a column each
    assert "b" in kept and "v" in kept and "W" not in kept
    original = {t.name: numpy_helper.to_array(t) for t in plain.graph.initializer}
    back = kept["W/int8"] * kept["W/scale"]
    # each weight within half a step of its column's grid, and the columns' steps differ
    assert np.all(np.abs(back - original["W"]) <= kept["W/scale"] / 2 + 1e-7)
    assert kept["W/scale"].max() > 50 * kept["W/scale"].min()
    ids = np.arange(100, dtype=np.int64)
    want, got = run(plain, ids), run(stored, ids)
    assert 0 < np.abs(got - want).max() < 0.02 * np.abs(want).max()
    # folded, it computes what float32 computes with the weights as stored
    rounded = small_graph(np.random.default_rng(0))
    for tensor in rounded.graph.initializer:
        if tensor.name in ("E", "W"):
            q, scale = kept[f"{tensor.name}/int8"], kept[f"{tensor.name}/scale"]
            axis = 1 if tensor.name == "E" else 0  # the axis each scale does not run along
            tensor.CopyFrom(numpy_helper.from_array(q * np.expand_dims(scale, axis), tensor.name))
    np.testing.assert_allclose(got, run(rounded, ids), rtol=1e-5, atol=1e-4)
    # unfolded, ONNX Runtime would run the product in its int8 kernels, input quantized too
    assert np.abs(run(stored, ids, fold=False) - got).max() > 0.1


def dequantized(graph: Path) -> int:
    """How many of `graph`'s weights are stored in int8 (DequantizeLinear nodes)."""
    return sum(node.op_type == "DequantizeLinear" for node in onnx.load(graph).graph.node)


def export_web(run: Path, out: Path, *flags: str) -> Path:
    assert main(["export", str(run), "--out", str(out), "--web", *flags]) == 0
    return out


@pytest.mark.slow
def test_int8_stored_graphs_run_in_the_page_as_onnx_runtime_runs_them(
    toy_run, browser, host, tmp_path, monkeypatch
):
    from alignmt.answers import site as web

    monkeypatch.setattr(web, "SITE_BUDGET", 0)  # every site too big: int8 weights
    site = export_web(toy_run, tmp_path / toy_run.name)  # the server names it so
    assert dequantized(site / "step.onnx") > 0
    sentences = held_out_toy_lines(tmp_path / "held")[:12]
    requests = [
        {"what": "translate", "body": {"sentences": batch, "beam_size": b, "attention": True}}
        for batch in (sentences, sentences[:1])
        for b in (1, 3)
    ]
    got = ask_worker(browser, host(site) + "index.html", requests)
    for asked, page, native in zip(requests, got, server_answers(site, requests), strict=True):
        assert "answer" in page, f"{asked}: the page says {page.get('error')}"
        # both fold the int8 weights into the same float32 constants: float32's agreement
        assert_same(page["answer"], native, f"{asked['body']}")


@pytest.mark.slow
@pytest.mark.parametrize(("tolerance", "stored"), [(0.0, False), (1.0, True)])
def test_the_site_stores_int8_weights_only_when_too_big_and_within_the_tolerance(
    tolerance, stored, toy_run, tmp_path, monkeypatch, capsys
):
    """Too big (a budget of 0 MB; a site within it keeps float32 unprobed, as every other
    site the tests export does)."""
    from alignmt.answers import site as web
    from alignmt.decoding.door import open_translator
    from alignmt.decoding.onnx_engine import int8

    monkeypatch.setattr(web, "SITE_BUDGET", 0)
    monkeypatch.setattr(int8, "INT8_TOLERANCE", tolerance)
    float32 = export_web(toy_run, tmp_path / "float32", "--float32")
    site = export_web(toy_run, tmp_path / "site")
    said = capsys.readouterr().out
    assert "weighs over 0 MB with float32 weights" in said
    assert ("keep their weights in int8, computing in float32" in said) == stored
    assert sorted(p.name for p in site.glob("*.onnx")) == ["encoder.onnx", "step.onnx"]
    assert (dequantized(site / "step.onnx") > 0) == stored
    smaller = (site / "step.onnx").stat().st_size < (float32 / "step.onnx").stat().st_size
    assert smaller == stored  # the toy's few large weights; Multi30k's: docs/benchmarks.md
    site_json = json.loads((site / "site.json").read_text())
    assert site_json["graphs"] == {"encoder": "encoder.onnx", "step": "step.onnx"}
    assert site_json["info"]["weights"] == "float32"
    sentence = held_out_toy_lines(tmp_path / "held")[0]
    # `alignmt translate DIR` runs what the page runs; int8 weights move a word rarely
    (best, *_), *_ = open_translator(site).translate([sentence])
    (plain, *_), *_ = open_translator(float32).translate([sentence])
    assert best.tokens == plain.tokens
