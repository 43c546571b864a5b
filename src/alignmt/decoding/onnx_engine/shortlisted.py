"""An exported model (or ensemble) decoding over a lexical shortlist on ONNX Runtime: each
sentence's allowed words (decoding/shortlisted.py) ride in its memory as one more (B, V)
bool field, `allowed`, which the step graph does not read, so that the searches' row moves
(beams repeated, rows refilled, rows dropped) carry it with the rest; each step's
log-probabilities are renormalised over each row's own words. The graph still computes the
whole vocabulary: the same outputs as the torch engine's shortlist, not its saving.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from alignmt.decoding.shortlisted import allowed_words, restricted
from alignmt.text.shortlist import Shortlist

Fields = dict[str, np.ndarray]
ALLOWED = "allowed"  # the memory's field of each row's allowed words


class OnnxShortlisted:
    """`model` (an OnnxModel or OnnxEnsemble) whose outputs keep to `shortlist`; it looks
    like `model` to the searches."""

    def __init__(self, model: Any, shortlist: Shortlist) -> None:
        self.model, self.shortlist = model, shortlist
        self.vocab = len(model.header.tgt_vocab)

    def __getattr__(self, name: str) -> Any:  # everything else is the model's
        return getattr(self.model, name)

    def encode_ids(
        self, sentences: list[list[int]], erased: int | None = None
    ) -> tuple[Fields, Fields]:
        state, memory = self.model.encode_ids(sentences, erased)
        return state, memory | {ALLOWED: allowed_words(self.shortlist, sentences, self.vocab)}

    def step(
        self, prev: np.ndarray, state: Fields, memory: Fields, steer: np.ndarray | None = None
    ) -> tuple[np.ndarray, Fields, np.ndarray | None]:
        inner = {name: value for name, value in memory.items() if name != ALLOWED}
        log_probs, state, alpha = self.model.step(prev, state, inner, steer)
        return restricted(log_probs, memory[ALLOWED]), state, alpha
