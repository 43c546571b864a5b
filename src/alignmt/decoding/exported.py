"""What an exported model's folder holds and how its graphs' inputs and outputs are named:
read by the exporter (torch_engine/export.py, with torch) and the onnxruntime engine
(onnx_engine/model.py, without).
Nothing here imports torch or ONNX Runtime."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = 1  # of the exported folder; a reader refuses another
MANIFEST, ENCODER, STEP = "manifest.json", "encoder.onnx", "step.onnx"
# The session setting under which ONNX Runtime folds a DequantizeLinear of a constant into a
# float32 constant: the weights `onnx_engine/stored_int8.py` stores in int8 (by default it
# keeps the node, for int8 kernels to fuse with, and dequantizes at every call)
FOLD_STORED_INT8 = ("session.disable_quant_qdq", "1")


def int8_name(graph: str) -> str:
    """The file of a graph's int8 copy (`alignmt export --int8`): step.onnx -> step.int8.onnx."""
    return graph.replace(".onnx", ".int8.onnx")


def has_int8(folder: str | Path) -> bool:
    """Whether `alignmt export --int8` wrote the int8 copies of the folder's graphs."""
    return (Path(folder) / int8_name(STEP)).is_file()


def is_exported(folder: str | Path) -> bool:
    """Whether `folder` holds an exported model rather than a run."""
    return (Path(folder) / MANIFEST).is_file()


# The axes of the graphs' own inputs and outputs (the state's and memory's fields declare
# theirs): rows, the batch or a beam's rows; source, the source positions; units, the rest
GRAPH_AXES: dict[str, tuple[str, ...]] = {
    "src": ("rows", "source"),
    "src_len": ("rows",),
    "prev": ("rows",),
    "log_probs": ("rows", "units"),  # a copying model's: ("rows", "extended")
    "alpha": ("rows", "source"),
    "steer": ("rows", "source"),
    "keep": ("rows", "source"),
}


@dataclass(frozen=True)
class Manifest:
    """The graphs' inputs and outputs, by name and in order."""

    state: tuple[str, ...]  # the decoder state's fields that the model has, slots included
    memory: tuple[str, ...]  # the memory's fields that the model has, slots included
    attention: bool  # whether the step returns alpha
    # whether the step takes `steer` (N, T_src): weights that replace alpha in the rows where
    # they are not all zero, the explorer's attention override (every export of a model with
    # attention; not those written before alignmt stepped through exports)
    steer: bool = False
    # whether the encoder takes `keep` (B, T_src): 1 where a source token's embedding is
    # read, 0 where it is erased, for erasure's attribution (every export; not those written
    # before alignmt attributed on ONNX Runtime)
    keep: bool = False
    # each state and memory field's axes, as the model declares them (empty in a folder
    # exported before they were written down)
    axes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # the per-step values the explorer shows, as the attention mechanisms declare them
    # (attention/spec.py's `Shown`, as dicts)
    shown: tuple[Mapping[str, object], ...] = ()
    # whether the model copies source words (the pointer-generator): its log_probs are over
    # the vocabulary extended by the source positions, V + T_src wide (alignmt.text.copy)
    copies: bool = False

    def axes_of(self, name: str) -> tuple[str, ...]:
        """The axes of a graph input or output: `next_hidden` and `first_hidden` are
        `hidden`'s."""
        if name == "log_probs" and self.copies:
            return ("rows", "extended")
        base = name.removeprefix("next_").removeprefix("first_")
        return GRAPH_AXES.get(base) or self.axes[base]

    @property
    def encoder_outputs(self) -> tuple[str, ...]:
        """The memory's fields, then the first state's (`first_hidden`, ...)."""
        return (*self.memory, *(f"first_{n}" for n in self.state))

    @property
    def encoder_inputs(self) -> tuple[str, ...]:
        return ("src", "src_len", *self.keep * ("keep",))

    @property
    def step_inputs(self) -> tuple[str, ...]:
        return ("prev", *self.state, *self.memory, *self.steer * ("steer",))

    @property
    def step_outputs(self) -> tuple[str, ...]:
        """log_probs, the new state's fields (`next_hidden`, ...), and alpha if attending."""
        return ("log_probs", *(f"next_{n}" for n in self.state), *self.attention * ("alpha",))
