"""Ensembles of exported models on ONNX Runtime: several `OnnxModel`s decoding as one, by the
mean of their log-probabilities at each step, as the torch engine's ensembles do
(torch_engine/ensemble.py says why, and what the mean attention is and is not).

An `OnnxEnsemble` looks like one `OnnxModel` to the searches (search.py, rows.py and
decoding/sample.py): `encode_ids` and `step` over dicts of batch-first arrays, each member's
fields under its number (`0/hidden`, `1/hidden`, ...), so that rows move together for every
member without the searches knowing there are several. The members must read the same
source ids and write the same target vocabulary: the door checks their vocabularies and
tokenizers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from alignmt.decoding.onnx_engine.model import OnnxModel

Fields = dict[str, np.ndarray]


class OnnxEnsemble:
    """Exported models with one source and one target vocabulary, searched as one model."""

    def __init__(self, members: Sequence[OnnxModel], names: Sequence[str]) -> None:
        first = members[0]
        for name, model in zip(names[1:], members[1:], strict=True):
            if model.copies != first.copies:
                raise ValueError(
                    f"{name}: it {'copies' if model.copies else 'does not copy'} source words "
                    f"(model.copy) and {names[0]} {'does' if first.copies else 'does not'}: "
                    "their outputs' vocabularies differ"
                )
        self.members = list(members)
        self.header = first.header
        self.pad_id, self.bos_id, self.eos_id = first.pad_id, first.bos_id, first.eos_id
        self.copies = first.copies
        self.has_attention = any(model.has_attention for model in members)
        self.parameters = sum(model.parameters for model in members)

    def encode_ids(
        self, sentences: list[list[int]], erased: int | None = None
    ) -> tuple[Fields, Fields]:
        """Every member's first state and memory, joined under the members' numbers."""
        encoded = [model.encode_ids(sentences, erased) for model in self.members]
        return _join([s for s, _ in encoded]), _join([m for _, m in encoded])

    def step(
        self, prev: np.ndarray, state: Fields, memory: Fields, steer: np.ndarray | None = None
    ) -> tuple[np.ndarray, Fields, np.ndarray | None]:
        """One step of every member (each steered by `steer` where it attends): log p (N, V)
        of the mean of their log-probabilities (a normalised geometric mean), the joined new
        state, and the mean alpha (N, T_src) of the members that attend, or None."""
        parts = zip(self.members, _split(state, len(self)), _split(memory, len(self)), strict=True)
        steps = [
            model.step(prev, s, m, steer if model.has_attention else None) for model, s, m in parts
        ]
        mean = np.mean([log_probs for log_probs, _, _ in steps], axis=0)  # (N, V)
        top = mean.max(axis=-1, keepdims=True)
        log_p = mean - top - np.log(np.exp(mean - top).sum(axis=-1, keepdims=True))
        alphas = [alpha for _, _, alpha in steps if alpha is not None]
        alpha = np.mean(alphas, axis=0) if alphas else None
        return log_p.astype(np.float32), _join([s for _, s, _ in steps]), alpha

    def __len__(self) -> int:
        return len(self.members)


def _join(parts: list[Fields]) -> Fields:
    return {f"{i}/{name}": value for i, part in enumerate(parts) for name, value in part.items()}


def _split(fields: Fields, count: int) -> list[Fields]:
    """`_join`'s inverse: each member's own fields, by their names."""
    parts: list[Fields] = [{} for _ in range(count)]
    for key, value in fields.items():
        member, name = key.split("/", 1)
        parts[int(member)][name] = value
    return parts
