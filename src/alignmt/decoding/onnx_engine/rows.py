"""The rows the onnxruntime engine's searches decode: sentences encoded a batch at a time
and handed out as rows, and `refill`, the continuous-batching step between two decoder
steps that greedy and beam search share (the torch engine's rows.py, in NumPy).

A state or a memory is a dict of (N, ...) arrays by field name, as the graphs name them;
memories of batches whose sources differ in length are joined by zero-padding the shorter
along the source, which the mask reads as padding. The search's arrays are its own, so
rows are overwritten in place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from alignmt.decoding.beams import Rows
from alignmt.decoding.engine import Call
from alignmt.decoding.onnx_engine.model import OnnxModel
from alignmt.decoding.rules import max_output_len

Fields = dict[str, np.ndarray]
# newly taken sentences (state, memory, Rows) -> what the search keeps of them
Start = Callable[[tuple[Fields, Fields, Any]], tuple[Fields, Fields, Any]]


class Pending:
    """The sentences of a group waiting to be searched: encoded `width` at a time, only when
    needed, and handed out a few at a time."""

    def __init__(self, model: OnnxModel, sentences: list[list[int]], how: Call) -> None:
        self.batches = _encoded(model, sentences, how)
        self.state: Fields = {}
        self.memory: Fields = {}
        self.limit = np.zeros(0, np.int64)
        self.taken = 0  # sentences handed out so far
        self.bos_id = model.bos_id

    def take(self, n: int) -> tuple[Fields, Fields, Rows] | None:
        """The next n sentences (fewer if the group runs out); None when none is left."""
        while len(self.limit) < n:
            more = next(self.batches, None)
            if more is None:
                break
            self.state = _joined(self.state, more[0])
            self.memory = _joined(self.memory, more[1])
            self.limit = np.concatenate([self.limit, more[2]])
        count = min(n, len(self.limit))
        if count == 0:
            return None
        state, self.state = _split(self.state, count)
        memory, self.memory = _split(self.memory, count)
        limit, self.limit = self.limit[:count], self.limit[count:]
        sentence = np.arange(self.taken, self.taken + count)
        self.taken += count
        prev = np.full(count, self.bos_id, np.int64)
        return state, memory, Rows(sentence, np.zeros(count, np.int64), limit, prev)


def _encoded(model: OnnxModel, sentences: list[list[int]], how: Call) -> Iterator[tuple]:
    """Each batch of `how.width` sentences encoded: (state, memory, length limits)."""
    s = how.search
    for start in range(0, len(sentences), how.width):
        batch = sentences[start : start + how.width]
        state, memory = model.encode_ids(batch)
        lengths = [len(ids) for ids in batch]
        yield state, memory, max_output_len(lengths, s.max_len_ratio, s.max_len_offset)


def refill(
    done: np.ndarray,
    pending: Pending,
    state: Fields,
    memory: Fields,
    book: Any,
    K: int = 1,
    start: Start | None = None,
) -> tuple[Fields, Fields, Any]:
    """Continuous batching between two steps: the rows of the sentences that are `done` go
    to the next sentences waiting; once none waits, the batch shrinks to the rest.

    Args:
        done: (S,) bool, the sentences that stopped at this step.
        book: the sentences' bookkeeping, a NamedTuple of (S, ...) arrays (nested ones too).
        K: each sentence's rows (its beams), sentence-major (row s * K + k).
        start: what the search keeps of newly taken sentences; None: as taken.
    """
    free = np.flatnonzero(done)
    if len(free) == 0:
        return state, memory, book
    new = pending.take(len(free))
    if new is not None:
        taken, free = free[: len(new[2].sentence)], free[len(new[2].sentence) :]
        new_state, new_memory, new_book = new if start is None else start(new)
        rows = _rows_of(taken, K)
        state, memory = _put(state, rows, new_state), _put(memory, rows, new_memory)
        book = _put_book(book, taken, new_book)
    if len(free):
        live = np.setdiff1d(np.arange(len(done)), free)
        state, memory = select(state, _rows_of(live, K)), select(memory, _rows_of(live, K))
        book = _select_book(book, live)
    return state, memory, book


def _rows_of(sentences: np.ndarray, K: int) -> np.ndarray:
    """(n,) sentences -> (n * K,) their rows, sentence-major."""
    return (sentences[:, None] * K + np.arange(K)).reshape(-1)


def select(fields: Fields, index: np.ndarray) -> Fields:
    return {name: value[index] for name, value in fields.items()}


def _put(fields: Fields, index: np.ndarray, new: Fields) -> Fields:
    """`fields` with rows `index` overwritten, in place, by `new`'s (both padded alike along
    the source first where they differ): the search's arrays are its own."""
    out = {}
    for name, value in fields.items():
        value, given = _same_dim1(value, new[name])
        value[index] = given
        out[name] = value
    return out


def _put_book(book, index: np.ndarray, new):
    """Bookkeeping (a NamedTuple of (S, ...) arrays, possibly nested) with rows replaced."""
    parts = []
    for old, given in zip(book, new, strict=True):
        if isinstance(old, tuple):
            parts.append(_put_book(old, index, given))
        else:
            old = old.copy()
            old[index] = given
            parts.append(old)
    return type(book)(*parts)


def _select_book(book, index: np.ndarray):
    return type(book)(*(_select_book(x, index) if isinstance(x, tuple) else x[index] for x in book))


def _joined(fields: Fields, more: Fields) -> Fields:
    """The rows of `more` after those of `fields` (empty: none yet)."""
    if not fields:
        return dict(more)
    return {name: np.concatenate(_same_dim1(fields[name], more[name])) for name in fields}


def _split(fields: Fields, count: int) -> tuple[Fields, Fields]:
    return {n: v[:count] for n, v in fields.items()}, {n: v[count:] for n, v in fields.items()}


def _same_dim1(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x and y zero-padded to the longer second dimension, where both have one that
    differs (a field along the source)."""
    if x.ndim < 2 or x.shape[1] == y.shape[1]:
        return x, y
    size = max(x.shape[1], y.shape[1])
    return pad_dim1(x, size), pad_dim1(y, size)


def pad_dim1(x: np.ndarray, size: int) -> np.ndarray:
    if x.shape[1] == size:
        return x
    widths = [(0, 0), (0, size - x.shape[1])] + [(0, 0)] * (x.ndim - 2)
    return np.pad(x, widths)
