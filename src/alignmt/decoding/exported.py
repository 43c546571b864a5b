"""What an exported model's folder holds and how its graphs' inputs and outputs are named:
read by the exporter (torch_engine/export.py, with torch) and the onnxruntime engine
(onnx_engine/model.py, without).
Nothing here imports torch or ONNX Runtime."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FORMAT = 1  # of the exported folder; a reader refuses another
MANIFEST, ENCODER, STEP = "manifest.json", "encoder.onnx", "step.onnx"


def int8_name(graph: str) -> str:
    """The file of a graph's int8 copy (`alignmt export --int8`): step.onnx -> step.int8.onnx."""
    return graph.replace(".onnx", ".int8.onnx")


def has_int8(folder: str | Path) -> bool:
    """Whether `alignmt export --int8` wrote the int8 copies of the folder's graphs."""
    return (Path(folder) / int8_name(STEP)).is_file()


def is_exported(folder: str | Path) -> bool:
    """Whether `folder` holds an exported model rather than a run."""
    return (Path(folder) / MANIFEST).is_file()


@dataclass(frozen=True)
class Manifest:
    """The graphs' inputs and outputs, by name and in order."""

    state: tuple[str, ...]  # DecoderState's fields that the model has
    memory: tuple[str, ...]  # Memory's fields that the model has
    attention: bool  # whether the step returns alpha
    # whether the step takes `steer` (N, T_src): weights that replace alpha in the rows where
    # they are not all zero, the explorer's attention override (`alignmt export --web`)
    steer: bool = False

    @property
    def encoder_outputs(self) -> tuple[str, ...]:
        """The memory's fields, then the first state's (`first_hidden`, ...)."""
        return (*self.memory, *(f"first_{n}" for n in self.state))

    @property
    def step_inputs(self) -> tuple[str, ...]:
        return ("prev", *self.state, *self.memory, *self.steer * ("steer",))

    @property
    def step_outputs(self) -> tuple[str, ...]:
        """log_probs, the new state's fields (`next_hidden`, ...), and alpha if attending."""
        return ("log_probs", *(f"next_{n}" for n in self.state), *self.attention * ("alpha",))
