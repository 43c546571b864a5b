"""The flax engine's batches on the host: source ids padded to a few bucketed shapes, so that
XLA compiles a search once per bucket, and a compiled search's outputs read back as
hypotheses (search.py runs what lies between)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from alignmt.decoding.results import Hypothesis

MIN_SRC = 8  # the narrowest source bucket: shorter sources share one compiled shape


def bucket(n: int, floor: int = 1) -> int:
    """The power of two at or above n, and at least `floor`: a padded size."""
    return max(floor, 1 << max(n - 1, 0).bit_length())


def pad_batch(sources: Sequence[Sequence[int]], rows: int, model: Any) -> tuple:
    """Source ids as a padded batch: src (rows, T_src) and src_len (rows,) int32, T_src the
    bucket of the longest source, >= MIN_SRC. Rows past the sources hold a bare </s>, a
    source that the encoder reads without NaNs."""
    cols = bucket(max(map(len, sources)), MIN_SRC)
    src = np.full((rows, cols), model.pad_id, np.int32)
    src[:, 0] = model.eos_id
    src_len = np.ones(rows, np.int32)
    for b, ids in enumerate(sources):
        src[b, : len(ids)], src_len[b] = ids, len(ids)
    return src, src_len


def hypotheses(out: Any, src_len: np.ndarray) -> list[list[Hypothesis]]:
    """The found hypotheses of the first len(src_len) rows of a search's `Output` (on the
    host), cut to their lengths."""
    result = []
    for b, n_src in enumerate(src_len.tolist()):
        hyps = []
        for j in np.flatnonzero(out.found[b]):
            n = int(out.length[b, j])
            alpha = None if out.attention is None else np.array(out.attention[b, j, :n, :n_src])
            scores = out.token_scores[b, j, :n].tolist()
            hyps.append(
                Hypothesis(out.tokens[b, j, :n].tolist(), float(out.score[b, j]), alpha, scores)
            )
        result.append(hyps)
    return result
