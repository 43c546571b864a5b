"""What an attention mechanism declares, in plain Python: which entry of the room builds it
and with what settings, the state it carries from step to step and the memory it makes once
per sentence (each a named slot with its axes), the per-step values the explorer shows,
and where its weights were stored before the room.

The code outside the room reads these declarations and never a mechanism's name: the
searches move every slot as rows, the exporter frees a graph input's source axis where its
slot has one, the manifest lists the slots and what the explorer shows, and the explorer
and the browser worker show the declared values. Nothing here imports a framework.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# rows: the batch (sentences, or a beam's rows); source: the source positions (T_src);
# units: any other axis, fixed by the model's sizes
Axis = Literal["rows", "source", "units"]


@dataclass(frozen=True)
class Slot:
    """A tensor a mechanism keeps in the decoder state or the memory, by name and axes."""

    name: str
    axes: tuple[Axis, ...]  # the first is always "rows"


@dataclass(frozen=True)
class Shown:
    """A per-step value of the decoder state that the explorer shows beside attention: a
    position on the source axis, marked with `label`, and the positions within `reach` of
    it shaded (0: the mark alone); a probability, written beside the step; or weights over
    the source (a slot (rows, source, N): N rows of them, one per head), drawn under alpha."""

    slot: str
    label: str  # the symbol at the mark, "p_i"
    about: str  # what the value means, one sentence
    reach: float = 0.0
    kind: Literal["position", "probability", "weights"] = "position"


@dataclass(frozen=True)
class Spec:
    """One mechanism as a model uses it: what builds it and what it declares.

    `entry` is the room's package that holds the mechanism's float64 reference, PyTorch
    module and Flax twin (`reference.py`, `torch.py`, `flax.py`); each framework builds
    `kind` from `settings` and the model's sizes.
    """

    entry: str  # the entry's package, alignmt.model.attention.<name>
    kind: str  # the variant the config chose ("additive", "sparsemax", "fertility", ...)
    about: str  # how a model's description names it
    settings: Mapping[str, Any] = field(default_factory=dict)
    state: tuple[Slot, ...] = ()  # carried from step to step
    memory: tuple[Slot, ...] = ()  # made once per sentence
    shown: tuple[Shown, ...] = ()
    # For a score: whether a modifier may add a term inside its hidden layer (Tu et al.
    # 2016's V C_{i-1,j}). For a modifier: whether it adds one.
    hidden_term: bool = False
    # For a mapping: whether the decoder's output is a mixture over source positions,
    # p(y_i) = sum_j alpha_ij p(y_i | s_i, h_j), as hard attention's is, in place of one
    # output from the context c_i (whose recurrence then reads no context)
    mixture: bool = False
    off: str = ""  # for a modifier, the setting that leaves it out ("coverage=none")
    # (today's, before) prefixes of the run-folder tensor names, relative to the decoder, of
    # weights stored elsewhere before the room: a checkpoint written then loads as it was
    former: tuple[tuple[str, str], ...] = ()
    # Whether those moves changed the order of the model's parameters too: PyTorch's
    # optimiser moments of a run saved before the room, stored in that order, then no longer
    # line up, and the run cannot be resumed (its weights still load)
    reordered: bool = False

    @property
    def name(self) -> str:
        """The entry's own name, which names its weights in a run folder ("local")."""
        return self.entry.rsplit(".", 1)[1]

    def build(self, framework: str, **sizes: int) -> Any:
        """The part this declares, built by the entry's `framework` module ("torch" or
        "flax": torch.py's or flax.py's `build`) with the model's `sizes` (an attention's
        query_dim and key_dim; an output's features and vocab_size)."""
        module = importlib.import_module(f"{self.entry}.{framework}")
        return module.build(self, **sizes)


@dataclass(frozen=True)
class Composition:
    """The mechanisms of one model's attention: a score, a mapping from scores to weights,
    and modifiers (a window, coverage) around them, in the order they act; or, with `heads`,
    the score and the mapping in each of several heads; and, with `output`, a mechanism that
    makes the output distribution from the attention (the pointer-generator's copying)."""

    score: Spec
    mapping: Spec
    modifiers: tuple[Spec, ...] = ()
    heads: Spec | None = None
    output: Spec | None = None

    def __iter__(self) -> Iterator[Spec]:
        yield self.score
        yield self.mapping
        yield from self.modifiers
        if self.heads is not None:
            yield self.heads
        if self.output is not None:
            yield self.output

    @property
    def state(self) -> tuple[Slot, ...]:
        return tuple(slot for spec in self for slot in spec.state)

    @property
    def memory(self) -> tuple[Slot, ...]:
        return tuple(slot for spec in self for slot in spec.memory)

    @property
    def shown(self) -> tuple[Shown, ...]:
        return tuple(shown for spec in self for shown in spec.shown)

    @property
    def mixture(self) -> bool:
        """Whether the decoder emits from each source position in turn (`Spec.mixture`)."""
        return any(spec.mixture for spec in self)

    @property
    def weights(self) -> tuple[Shown, ...]:
        """What is shown as weights over the source (multi-head attention's heads, the
        pointer-generator's copying)."""
        return tuple(shown for shown in self.shown if shown.kind == "weights")

    @property
    def about(self) -> list[str]:
        return [spec.about for spec in self]
