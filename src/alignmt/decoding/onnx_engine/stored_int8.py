"""Weights stored in int8, arithmetic in float32: an exported graph whose large weight
matrices are written as int8 with one scale per output row or column, each read through a
DequantizeLinear node. ONNX Runtime folds those nodes into float32 constants when it opens
the graph (with `exported.FOLD_STORED_INT8` among its session's settings), so the graph runs exactly
as the float32 one whose weights were rounded to 255 levels per channel, at float32's speed,
from a file a quarter the size.

This is what `alignmt export --web` ships when the float32 graphs would make the site too
big to send: in the browser, ONNX Runtime Web's WebAssembly multiplies float32 faster than
int8 (the int8 kernels of `int8.py` pay for quantizing every input), so the page wants
float32 arithmetic and the network wants int8 bytes."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from alignmt.decoding.exported import ENCODER, MANIFEST, STEP

# Fewer elements than this stay float32: biases, the additive score's v, small layers,
# whose bytes do not matter and whose rounding would
LEAST = 4096
# the weight inputs worth storing, by operator: input index -> the axis of its output
# channels, the axis that gets a scale of its own
_WEIGHTS = {
    "MatMul": {1: 1},  # x (.., K) @ W (K, N)
    "Gather": {0: 0},  # the embeddings (V, E), a row a token
    "GRU": {1: 1, 2: 1},  # W, R (directions, gates x hidden, inputs)
    "LSTM": {1: 1, 2: 1},
}


def write_stored_int8(folder: str | Path, tolerance: float) -> float:
    """Store the weights of `folder`'s encoder and step graphs in int8, in place, if that moves
    no next-token probability by more than `tolerance` (`int8.drift`, against the float32
    graphs); else leave them.

    Returns:
        The most a probability moved.
    """
    from alignmt.decoding.onnx_engine.int8 import drift
    from alignmt.decoding.onnx_engine.model import OnnxModel

    folder = Path(folder)
    with tempfile.TemporaryDirectory() as scratch:
        stored = Path(scratch)
        shutil.copy(folder / MANIFEST, stored / MANIFEST)
        for name in (ENCODER, STEP):
            graph = onnx.load(folder / name)
            store_int8(graph)
            onnx.save(graph, stored / name)
        moved = drift(OnnxModel(folder), OnnxModel(stored))
        if moved <= tolerance:
            for name in (ENCODER, STEP):
                shutil.move(stored / name, folder / name)
    return moved


def store_int8(model: onnx.ModelProto) -> int:
    """Rewrite `model` in place: each float32 initializer of at least LEAST elements that only
    weight inputs read becomes int8 (symmetric, one scale per output channel) and a
    DequantizeLinear that gives it back, under its own name, in float32.

    Returns:
        How many were rewritten.
    """
    graph = model.graph
    axes = _channel_axes(graph)
    kept, dequantize = [], []
    for tensor in graph.initializer:
        weights = numpy_helper.to_array(tensor)
        axis = axes.get(tensor.name)
        if axis is None or weights.dtype != np.float32 or weights.size < LEAST:
            kept.append(tensor)
            continue
        q, scale = _quantize(weights, axis)
        kept += [
            numpy_helper.from_array(q, f"{tensor.name}/int8"),
            numpy_helper.from_array(scale, f"{tensor.name}/scale"),
        ]
        dequantize.append(
            helper.make_node(
                "DequantizeLinear",
                [f"{tensor.name}/int8", f"{tensor.name}/scale"],
                [tensor.name],
                name=f"{tensor.name}/dequantize",
                axis=axis,
            )
        )
    nodes = [*dequantize, *graph.node]
    graph.ClearField("initializer")
    graph.initializer.extend(kept)
    graph.ClearField("node")
    graph.node.extend(nodes)
    return len(dequantize)


def _channel_axes(graph: onnx.GraphProto) -> dict[str, int]:
    """Initializer name -> its output channels' axis, for those that only weight inputs read,
    all at the same axis."""
    found: dict[str, set[int | None]] = {}
    for node in graph.node:
        weights = _WEIGHTS.get(node.op_type, {})
        if node.op_type == "Gemm":  # B is (K, N), or (N, K) with transB
            trans = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            weights = {1: 0 if trans.get("transB", 0) else 1}
        for index, name in enumerate(node.input):
            found.setdefault(name, set()).add(weights.get(index))
    return {name: next(iter(a)) for name, a in found.items() if len(a) == 1 and None not in a}


def _quantize(weights: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(int8 weights, float32 scale per index of `axis`): symmetric, the channel's largest
    magnitude at 127."""
    others = tuple(i for i in range(weights.ndim) if i != axis)
    largest = np.abs(weights).max(axis=others)
    scale = np.where(largest > 0, largest / 127, 1).astype(np.float32)
    shape = [1] * weights.ndim
    shape[axis] = -1
    q = np.clip(np.rint(weights / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale
