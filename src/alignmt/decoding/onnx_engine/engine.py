"""The onnxruntime engine: an exported model (model.py) as the translator drives it, with
neither PyTorch nor JAX. It searches greedy or with a beam (search.py), or samples
(decoding/sample.py, over its step), on the CPU, in float32 or on the int8 graphs; it steps
through one sentence and traces its beam over its step (decoding/walk.py). The engine table
(decoding/engine.py) says what it leaves to the torch engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from alignmt.decoding.constraint import Constraint
from alignmt.decoding.engine import Call, Engine, Method, Searcher
from alignmt.decoding.onnx_engine.ensemble import OnnxEnsemble
from alignmt.decoding.onnx_engine.model import OnnxModel
from alignmt.decoding.onnx_engine.rows import select
from alignmt.decoding.onnx_engine.search import search
from alignmt.decoding.onnx_engine.shortlisted import OnnxShortlisted
from alignmt.decoding.results import Hypothesis, shown_value
from alignmt.decoding.sample import sampler
from alignmt.text.shortlist import Shortlist


class OnnxEngine(Engine):
    """An exported model's graphs on ONNX Runtime."""

    name = "onnxruntime"

    def __init__(self, model: OnnxModel | OnnxEnsemble, shortlist: Shortlist | None = None) -> None:
        """`shortlist`: the words each sentence may output (already cut to search.shortlist)."""
        self._ensemble = isinstance(model, OnnxEnsemble)
        self.model = model if shortlist is None else OnnxShortlisted(model, shortlist)
        self.has_attention = model.has_attention
        self.copies = model.copies
        self.parameters = model.parameters
        self.bos_id, self.eos_id = model.bos_id, model.eos_id

    @property
    def ensemble(self) -> bool:
        return self._ensemble

    def searcher(self, call: Call) -> Searcher:
        if call.sampling is not None:
            return sampler(self, call, self.model.bos_id, self.model.eos_id, select)

        def searched(
            sentences: list[list[int]], constraints: Sequence[Constraint | None] | None
        ) -> list[list[Hypothesis]]:
            return search(self.model, sentences, call, constraints)

        return searched

    def encode(self, sentences: list[list[int]]) -> tuple[Any, Any]:
        return self.model.encode_ids(sentences)

    def step(
        self, prev: np.ndarray, state: Any, memory: Any, steer: np.ndarray | None = None
    ) -> tuple[np.ndarray, Any, Any]:
        return self.model.step(np.asarray(prev, np.int64), state, memory, steer)

    def encode_erased(self, sentences: list[list[int]], erased: int) -> tuple[Any, Any]:
        return self.model.encode_ids(sentences, erased)

    def check_method(self, method: Method) -> None:
        if method == "erasure" and not self.ensemble:  # forward passes only: it does that one
            return
        super().check_method(method)

    def select(self, fields: Any, rows: np.ndarray) -> Any:
        return select(fields, rows)

    def shown(self, state: Any) -> dict[str, float | list[list[float]]]:
        if self.ensemble:
            return {}
        return {
            s["slot"]: shown_value(state[s["slot"]][0], s["kind"]) for s in self.model.names.shown
        }
