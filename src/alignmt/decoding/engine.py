"""What an engine is to the translator: the few things that must be written in a framework's
own ops, and a declaration of what else it can do.

An engine (PyTorch's in torch_engine/, Flax's in flax_engine/, ONNX Runtime's in
onnx_engine/) encodes source ids, runs one decoder step, and searches a group of sentences
with its own candidate selection and back-trace; the translator (translator.py) does the
rest once for all of them. What an engine cannot do is data, in `FEATURES`: the translator
and the door (door.py) check a request against it and refuse with one message shape,
`Unavailable`, before any work. Nothing here imports a framework.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from alignmt.config import SearchConfig
from alignmt.decoding import forced, walk
from alignmt.decoding.constraint import Constraint
from alignmt.decoding.results import BeamTrace, DecoderStep, Hypothesis
from alignmt.decoding.rules import Sampling

# browser: the explorer's Web Worker, which runs an exported folder's graphs in a page
# (answers/static/web/worker.js); a row of the table, so that the page refuses as it says
EngineName = Literal["torch", "flax", "onnxruntime", "browser"]
Feature = Literal[
    "sampling",
    "constrained search",
    "the coverage penalty",
    "int8",
    "a shortlist",
    "an ensemble",
    "bfloat16",
    "a GPU",
    "stepping through the decoder",
    "teacher-forced attention",
    "attribution",
]
EVERY: frozenset[Feature] = frozenset(Feature.__args__)  # type: ignore[attr-defined]

# How much each source token moved each output token, teacher-forced (`Engine.relevance`;
# the torch engine's torch_engine/relevance.py says what each is): attention as it is or one
# step on, or an attribution
Method = Literal["attention", "shift", "gradient", "integrated", "erasure"]
METHODS: tuple[Method, ...] = Method.__args__  # type: ignore[attr-defined]
# (source ids, output ids) sentence pairs, encoded without specials
Pairs = Sequence[tuple[Sequence[int], Sequence[int]]]


def needs(method: Method) -> Feature:
    """The feature of the engine table that a relevance `method` asks for."""
    return "teacher-forced attention" if method in ("attention", "shift") else "attribution"


# What every engine does through the code written once over its step (walk.py, forced.py,
# banks.py, shortlisted.py, sample.py, and the searches' ensembles and coverage penalty)
OVER_THE_STEP: frozenset[Feature] = frozenset(
    {
        "sampling",
        "an ensemble",
        "the coverage penalty",
        "constrained search",
        "a shortlist",
        "stepping through the decoder",
        "teacher-forced attention",
    }
)
# What each engine can do beyond greedy and beam search (n-best, the length penalty, token
# probabilities and attention, which all of them do), and what a user who needs more does.
FEATURES: dict[EngineName, frozenset[Feature]] = {
    "torch": EVERY,
    "flax": OVER_THE_STEP | {"a GPU", "bfloat16", "attribution"},
    "onnxruntime": OVER_THE_STEP | {"int8"},
    "browser": frozenset({"int8", "stepping through the decoder"}),
}
# Why the flax and onnxruntime engines lack what they lack, one line each
WHY: dict[tuple[EngineName, Feature], str] = {
    ("flax", "int8"): "JAX has no dynamic int8 quantisation of a trained model's matmuls, "
    "which PyTorch and ONNX Runtime have",
    ("onnxruntime", "a GPU"): "alignmt installs ONNX Runtime's CPU build (onnxruntime), and "
    "its GPU build is another package",
    ("onnxruntime", "bfloat16"): "the exported graphs are float32 (or int8), and ONNX "
    "Runtime's CPU recurrent operators have no bfloat16 kernels",
    ("onnxruntime", "attribution"): "ONNX Runtime runs the graphs forward only, without the "
    "gradients that gradient x input and integrated gradients take (erasure it does)",
}
# what an ensemble of any engine cannot do: its attention is a mean that no member computed
INSIDE: frozenset[Feature] = frozenset({"stepping through the decoder", "teacher-forced attention"})
INSTEAD: dict[EngineName, str] = {
    "torch": "",
    "flax": "use the torch engine (--engine torch) for it",
    "onnxruntime": "translate or serve the run folder it was exported from (the torch engine)",
    "browser": "serve the run folder it was exported from (`alignmt serve RUN_DIR`)",
}

# Called before every decoder step; it stops the search by raising (a server's deadline).
Check = Callable[[], None]


class Unavailable(ValueError):
    """What an engine cannot do, asked of it: "X is not available with the Y engine: Z",
    and why, where the table says (`WHY`)."""

    def __init__(self, feature: Feature, label: str, instead: str, why: str = "") -> None:
        super().__init__(f"{feature} is not available with {label}: {instead}{why and '; '}{why}")
        self.feature = feature

    @classmethod
    def of(cls, feature: Feature, engine: EngineName) -> Unavailable:
        """The refusal of `feature` by an engine of the table."""
        return cls(feature, f"the {engine} engine", INSTEAD[engine], WHY.get((engine, feature), ""))


@dataclass(frozen=True)
class Call:
    """What one translate call asks of an engine's search, beyond the sentences."""

    search: SearchConfig  # beam size, penalties, length limit (its beam_size is this call's)
    nbest: int = 1  # hypotheses per sentence, at most the beam size
    width: int = 64  # the most sentences searched at once
    sampling: Sampling | None = None  # draw one output per sentence instead of searching
    check: Check | None = None


# A call's search of one group of sentences (source ids ending in </s>, sorted by length)
# under their constraints (one `Constraint` or None each; None: unconstrained search): each
# sentence's hypotheses, best first, attention cut to its source length.
Searcher = Callable[[list[list[int]], Sequence[Constraint | None] | None], list[list[Hypothesis]]]


class Engine(ABC):
    """A model in one framework, as the translator drives it.

    Subclasses set `name`, `has_attention`, `parameters` and the special ids, and implement
    `searcher`, `encode`, `step` and `select`. Stepping through the decoder and beam search
    as a tree are written once over these (walk.py); an engine overrides them only with its
    own of the same answers.
    """

    name: ClassVar[EngineName]
    has_attention: bool
    # whether the model copies source words (the pointer-generator): it reads a source word
    # its vocabulary lacks by an extended id, and may write one (alignmt.text.copy)
    copies: bool = False
    parameters: int  # of the model, for what a server says of it
    bos_id: int
    eos_id: int

    @property
    def ensemble(self) -> bool:
        """Whether it decodes several models as one."""
        return False

    @property
    def features(self) -> frozenset[Feature]:
        if self.ensemble:  # its attention is a mean no member computed
            return FEATURES[self.name] - INSIDE
        return FEATURES[self.name]

    @property
    def label(self) -> str:
        """How a refusal names it."""
        return "an ensemble" if self.ensemble else f"the {self.name} engine"

    @property
    def instead(self) -> str:
        return "ask one of its members" if self.ensemble else INSTEAD[self.name]

    def require(self, asked: Iterable[Feature]) -> None:
        """Raise `Unavailable` for the first feature asked that this engine lacks."""
        for feature in asked:
            if feature not in self.features:
                why = "" if self.ensemble else WHY.get((self.name, feature), "")
                raise Unavailable(feature, self.label, self.instead, why)

    @abstractmethod
    def searcher(self, call: Call) -> Searcher:
        """The search of one translate call, made once for all its groups of sentences (so
        that, say, one random generator draws all its samples): `call.nbest` hypotheses per
        sentence (one with sampling; fewer only where fewer have a nonzero probability)."""

    @abstractmethod
    def encode(self, sentences: list[list[int]]) -> tuple[Any, Any]:
        """The first decoder state and the memory of the sentences, one row each."""

    @abstractmethod
    def step(
        self, prev: np.ndarray, state: Any, memory: Any, steer: np.ndarray | None = None
    ) -> tuple[np.ndarray, Any, Any]:
        """One decoder step over N rows: prev (N,) int64 -> log-probabilities (N, V) float32
        in NumPy, the new state, and alpha (N, T) in NumPy or None, T at least the longest
        source (an engine may pad it). `steer` (N, T_src): weights that replace alpha in the
        rows where they are not all zero (the explorer's attention override), zero-padded to
        T by the engine; a model without attention takes none."""

    def encode_erased(self, sentences: list[list[int]], erased: int) -> tuple[Any, Any]:
        """`encode` with every sentence's source position `erased` read as a zero embedding:
        erasure's attribution where the engine has no way of its own (forced.py)."""
        raise Unavailable.of("attribution", self.name)

    def check_method(self, method: Method) -> None:
        """Raise `Unavailable` unless the engine answers `relevance` by `method`."""
        self.require([needs(method)])

    @abstractmethod
    def select(self, fields: Any, rows: np.ndarray) -> Any:
        """A state or a memory of the rows `rows` (int64 indices, repeats allowed), in order."""

    def shown(self, state: Any) -> dict[str, float | list[list[float]]]:
        """The values the explorer shows beside attention after a step, of the state's first
        row, by slot name (`DecoderStep.shown`); none where the engine cannot read them."""
        return {}

    def step_through(
        self,
        src: list[int],
        *,
        max_len: int,
        prefix: Sequence[int],
        override: dict[int, int] | None,
        top_k: int,
        beam_size: int,
        search: SearchConfig,
        check: Check | None,
    ) -> list[DecoderStep]:
        """The decoder over one sentence, step by step: a prefix forced, attention steered
        by `override`, then greedy or beam search (walk.py)."""
        self.require(["stepping through the decoder"])
        return walk.step_through(
            self,
            src,
            max_len=max_len,
            prefix=prefix,
            override=override,
            top_k=top_k,
            beam_size=beam_size,
            search=search,
            check=check,
        )

    def beam_trace(
        self,
        src: list[int],
        *,
        max_len: int,
        beam_size: int,
        search: SearchConfig,
        check: Check | None,
        constraint: Constraint | None,
    ) -> BeamTrace:
        """Every candidate beam search weighs for one sentence, as a tree (walk.py)."""
        self.require(["stepping through the decoder"])
        if constraint is not None:
            self.require(["constrained search"])
        return walk.beam_trace(
            self,
            src,
            max_len=max_len,
            beam_size=beam_size,
            search=search,
            check=check,
            constraint=constraint,
        )

    def relevance(self, pairs: Pairs, method: Method, *, batch_size: int = 64) -> list[np.ndarray]:
        """The analyses' teacher-forced entry point: for each (source ids, output ids) pair
        (without specials), how much each source token moved each output token by `method`,
        (len(output) + 1, len(source) + 1), </s> last on both sides. Pairs go through
        `batch_size` at a time. Attention, as it is or shifted, is read over the engine's
        step (forced.py), and so is erasure where the engine erases (`encode_erased`); the
        gradients need the framework (the torch and flax engines' relevance.py)."""
        self.check_method(method)
        if method == "erasure":
            return forced.pair_erasure(self, pairs, batch_size=batch_size)
        if method not in ("attention", "shift"):
            raise Unavailable(needs(method), self.label, self.instead)
        return forced.pair_attention(self, pairs, shift=method == "shift", batch_size=batch_size)

    def flips(self, pairs: Pairs, *, batch_size: int = 64) -> tuple[int, int]:
        """The explorer's what-if over teacher-forced pairs: how many output steps write
        another token once their attention is moved to the source word it ranks second, of
        how many steps tried (forced.py)."""
        self.require(["teacher-forced attention"])
        return forced.pair_flips(self, pairs, batch_size=batch_size)
