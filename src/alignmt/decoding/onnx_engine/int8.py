"""int8 copies of an exported model's graphs: ONNX Runtime's dynamic quantization, which
stores each matrix product's weights in int8 (one scale per output column) and quantizes
its input to uint8 at every call, from that call's range (Jacob et al. 2018). No
calibration data is needed, so an exported folder is all it reads. An encoder's GRU stays
float32 (ONNX Runtime has no int8 GRU; it runs once per sentence).

ONNX Runtime quantizes MatMul but not Gemm, and PyTorch's exporter writes a linear layer
on a (rows, features) input as Gemm, which in the decoder step is most of the work (the
output layer, over the whole vocabulary). Each Gemm with constant weights is first
rewritten as the MatMul and Add it computes."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

from alignmt.decoding.exported import ENCODER, STEP, int8_name
from alignmt.decoding.onnx_engine.model import OnnxModel

# How far int8 weights may move any next-token probability from float32's for `alignmt
# export --web` to ship them (stored_int8.py): well under the gap between a greedy choice and
# the runner-up on the models tested, where a moved argmax would change a translation.
INT8_TOLERANCE = 0.02


def write_int8(folder: str | Path) -> list[Path]:
    """Write the int8 copy of `folder`'s encoder and step graphs beside them.

    Returns:
        The files written.
    """
    folder, written = Path(folder), []
    for name in (ENCODER, STEP):
        graph = onnx.load(folder / name)
        gemm_as_matmul(graph)
        with tempfile.TemporaryDirectory() as scratch:
            # quantize_dynamic reads a file: a model over 2 GB could not go in memory
            plain = Path(scratch) / name
            onnx.save(graph, plain)
            target = folder / int8_name(name)
            with _without_preprocessing_advice():
                quantize_dynamic(
                    plain,
                    target,
                    per_channel=True,
                    weight_type=QuantType.QInt8,
                    # 7-bit weights: x86 CPUs without VNNI add uint8 x int8 products in
                    # pairs into int16, which saturates at 8 bits (val BLEU -0.4; 0.0 with this)
                    reduce_range=True,
                    nodes_to_exclude=narrow_products(graph),
                )
        written.append(target)
    return written


class _NoPreprocessingAdvice(logging.Filter):
    """Drops ONNX Runtime's advice, logged on every graph, to run its quantization
    pre-processing (symbolic shape inference and graph optimisations, which help static
    quantization find activations' shapes). Dynamic quantization of products with constant
    weights needs only the weights' shapes, which the graph holds, and how far int8 moves
    the output is measured after (`drift`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


@contextmanager
def _without_preprocessing_advice() -> Iterator[None]:
    """The block with `_NoPreprocessingAdvice` on the root logger, where ONNX Runtime logs."""
    advice, root = _NoPreprocessingAdvice(), logging.getLogger()
    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)


def drift(plain: OnnxModel, int8: OnnxModel, sentences: int = 32, seed: int = 0) -> float:
    """The most `int8` moves any next-token probability from `plain`, the same model's
    float32 graphs, over greedy decoding of random sources (1 to 20 ids each), both fed
    float32's choices: an exported folder holds no data, and random ids reach every row of
    the embeddings.

    Returns:
        max |p_float32 - p_int8| over the steps before each source's float32 output ends.
    """
    rng = np.random.default_rng(seed)
    first, words = 4, len(plain.header.src_vocab)  # past the specials <pad> <s> </s> <unk>
    sources = [
        [*rng.integers(first, words, rng.integers(1, 21)), plain.eos_id] for _ in range(sentences)
    ]
    (state, memory), (state8, memory8) = plain.encode_ids(sources), int8.encode_ids(sources)
    prev = np.full(sentences, plain.bos_id, np.int64)
    alive, most = np.ones(sentences, bool), 0.0
    for _ in range(2 * max(map(len, sources)) + 10):
        (want, state, _), (got, state8, _) = (
            plain.step(prev, state, memory),
            int8.step(prev, state8, memory8),
        )
        most = max(most, float(np.abs(np.exp(want) - np.exp(got))[alive].max()))
        prev = want.argmax(axis=1)
        alive &= prev != plain.eos_id
        if not alive.any():
            break
    return most


def gemm_as_matmul(model: onnx.ModelProto) -> int:
    """Rewrite, in place, each Gemm whose weights are constant (alpha = beta = 1, A not
    transposed) as MatMul by the weights as stored for it, then Add of the bias.

    Returns:
        How many were rewritten.
    """
    graph = model.graph
    constants = {t.name: t for t in graph.initializer}
    nodes, rewritten = [], 0
    for node in graph.node:
        if not _plain_gemm(node, constants):
            nodes.append(node)
            continue
        weights = numpy_helper.to_array(constants[node.input[1]])
        if _attributes(node).get("transB", 0):
            weights = weights.T
        name = f"{node.input[1]}/for_matmul"
        graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(weights), name))
        biased = len(node.input) > 2 and node.input[2]
        product = f"{node.output[0]}/product" if biased else node.output[0]
        nodes.append(helper.make_node("MatMul", [node.input[0], name], [product], node.name))
        if biased:
            add = helper.make_node("Add", [product, node.input[2]], [node.output[0]])
            add.name = f"{node.name}/bias"
            nodes.append(add)
        rewritten += 1
    graph.ClearField("node")
    graph.node.extend(nodes)
    _drop_unused(graph)
    return rewritten


def narrow_products(model: onnx.ModelProto, least: int = 16) -> list[str]:
    """The MatMuls by constant weights with fewer than `least` outputs, kept in float32 as
    the PyTorch int8 path keeps them: the additive score's v (A -> 1) reads every source
    position, and one scale for all of its inputs blurred the scores (val BLEU -0.4)."""
    widths = {t.name: t.dims[-1] for t in model.graph.initializer if len(t.dims) == 2}
    return [
        n.name
        for n in model.graph.node
        if n.op_type == "MatMul" and widths.get(n.input[1], least) < least
    ]


def _plain_gemm(node: onnx.NodeProto, constants: dict) -> bool:
    if node.op_type != "Gemm" or node.input[1] not in constants:
        return False
    a = _attributes(node)
    return not a.get("transA", 0) and a.get("alpha", 1.0) == 1.0 and a.get("beta", 1.0) == 1.0


def _attributes(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _drop_unused(graph: onnx.GraphProto) -> None:
    """Remove the constants no node reads any more (the Gemms' weights as they were)."""
    read = {name for node in graph.node for name in node.input}
    kept = [t for t in graph.initializer if t.name in read]
    graph.ClearField("initializer")
    graph.initializer.extend(kept)
