"""The rows a search decodes: sentences taken from a stream of encoded batches, the row
operations on a search's state and memory, and `refill`, the continuous-batching step that
greedy and beam search share.

State and memory are tuples (named or not) of batch-first tensors, or None, and may hold
dicts of them (the attention mechanisms' slots). Each operation applies one `index_select`,
`cat` or `index_copy_` per tensor, so search never needs to know what the fields are.
Memories of batches with different source lengths (the second dimension) are joined by
zero-padding the shorter, which the memory's mask reads as padding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import torch
from torch import Tensor

# A batch of encoded sentences for search: the initial state, the memory, and each
# sentence's length limit, (B,) int64 with </s> included.
Encoded = tuple[Any, Any, Tensor]


class Rows(NamedTuple):
    """The bookkeeping of W_t sentences being searched, one row each (greedy search's rows;
    beam search keeps its own per sentence from these)."""

    sentence: Tensor  # (W_t,) int64 the sentence in each row (its place in the input order)
    position: Tensor  # (W_t,) int64 the output position it is at
    limit: Tensor  # (W_t,) int64 its length limit
    prev: Tensor  # (W_t,) int64 its last output token (<s> before the first)


class Taken(NamedTuple):
    """Sentences taken from the stream to start searching."""

    state: Any  # the sentences' initial states
    memory: Any
    rows: Rows  # their bookkeeping, at position 0


# Newly taken sentences -> their state, memory and bookkeeping as a search keeps them.
Start = Callable[[Taken], tuple[Any, Any, Any]]


class Pending:
    """Sentences waiting to be searched: `Encoded` batches, pulled from their iterable only
    when needed and handed out a few rows at a time."""

    def __init__(self, batches: Iterable[Encoded], bos_id: int) -> None:
        self._batches = iter(batches)
        self._batch: Encoded | None = None  # the batch being handed out
        self._next = 0  # its first row not yet handed out
        self._bos_id = bos_id
        self.taken = 0  # sentences handed out so far

    def take(self, n: int) -> Taken | None:
        """The next n sentences (fewer if the batches run out), joined across batches;
        None when none is left."""
        parts = []
        while n > 0:
            if self._batch is None or self._next == len(self._batch[2]):
                self._batch, self._next = next(self._batches, None), 0
                if self._batch is None:
                    break
                continue
            state, memory, max_len = self._batch
            stop = min(self._next + n, len(max_len))
            index = torch.arange(self._next, stop, device=max_len.device)
            parts.append((select_rows(state, index), select_rows(memory, index), max_len[index]))
            self._next, n = stop, n - len(index)
        if not parts:
            return None
        state, memory, limit = parts[0]
        for more in parts[1:]:
            state, memory = concat_rows(state, more[0]), concat_rows(memory, more[1])
            limit = torch.cat([limit, more[2]])
        sentence = torch.arange(self.taken, self.taken + len(limit), device=limit.device)
        self.taken += len(limit)
        rows = Rows(sentence, torch.zeros_like(limit), limit, torch.full_like(limit, self._bos_id))
        return Taken(state, memory, rows)


def refill(
    done: Tensor,
    pending: Pending,
    state: Any,
    memory: Any,
    book: Any,
    start: Start | None = None,
    offsets: Tensor | None = None,
) -> tuple[Any, Any, Any]:
    """Continuous batching between two steps: the rows of the sentences that are `done` go
    to the next sentences waiting, and once none waits, the batch shrinks to the rest.

    Greedy search runs one row per sentence; beam search runs K, sentence-major (row
    b * K + k), and passes `offsets` = arange(K) so that a sentence's rows move together.

    Args:
        done: (B_t,) bool, the sentences that stopped at this step.
        pending: the sentences waiting.
        state, memory: the batch's rows, K per sentence (see `select_rows`).
        book: the sentences' bookkeeping, a NamedTuple of (B_t, ...) tensors.
        start: what the search keeps of newly taken sentences (K rows each); None keeps
            them as taken, one row each with `Rows` for bookkeeping.
        offsets: (K,) int64 arange(K); None for one row per sentence.

    Returns:
        The next step's state, memory and bookkeeping: the sentences taken, in input order,
        in the places of the first stopped ones; the other stopped ones removed; the rest
        where they were. Bookkeeping is cast to the batch's dtypes (a new sentence's beam
        scores start in float32 while the live ones are in the step's dtype).
    """
    free = done.nonzero().squeeze(1)  # the step's one host sync
    if len(free) == 0:
        return state, memory, book
    new = pending.take(len(free))
    if new is not None:  # the next sentences take over the stopped ones' rows
        taken, free = free[: len(new.rows.sentence)], free[len(new.rows.sentence) :]
        new_state, new_memory, new_book = new if start is None else start(new)
        rows = _rows_of(taken, offsets)
        state, memory = put_rows(state, rows, new_state), put_rows(memory, rows, new_memory)
        book = book._make(  # new tensors, not in place: the search's history keeps the old ones
            x.index_put((taken,), y.to(x.dtype)) for x, y in zip(book, new_book, strict=True)
        )
    if len(free):  # no sentence is left to take over the rest: the batch shrinks
        live = torch.ones_like(done).index_fill_(0, free, False).nonzero().squeeze(1)
        rows = _rows_of(live, offsets)
        state, memory = select_rows(state, rows), select_rows(memory, rows)
        book = select_rows(book, live)
    return state, memory, book


def _rows_of(sentences: Tensor, offsets: Tensor | None) -> Tensor:
    """(n,) sentence indices -> (n * K,) their rows, sentence-major."""
    if offsets is None:
        return sentences
    return (sentences[:, None] * len(offsets) + offsets).flatten()


def select_rows(fields: Any, index: Tensor) -> Any:
    """`fields` (a NamedTuple, tuple or dict, nested as a state's slots are) with
    `index_select(0, index)` applied to every tensor: the rows of each beam or sentence
    kept. None fields stay None."""
    return _map_fields(lambda x, _: x.index_select(0, index), fields, fields)


def concat_rows(fields: Any, more: Any) -> Any:
    """The rows of `more` (shaped like `fields`) appended to those of `fields`; see
    `pad_dim1` for fields whose second dimensions differ."""
    return _map_fields(lambda x, y: torch.cat(_same_dim1(x, y)), fields, more)


def put_rows(fields: Any, index: Tensor, new: Any) -> Any:
    """`fields` with its rows `index` overwritten, in place, by the rows of `new` (cast to
    the dtype of `fields`)."""
    return _map_fields(lambda x, y: _pair_put(*_same_dim1(x, y), index), fields, new)


def _pair_put(x: Tensor, y: Tensor, index: Tensor) -> Tensor:
    # Under autocast a state's dtype can change with its first step (float32 zeros in,
    # bfloat16 out of the step's matmuls), and index_copy_ refuses mixed dtypes.
    return x.index_copy_(0, index, y.to(x.dtype))


def _map_fields(fn: Callable, fields: Any, other: Any) -> Any:
    """`fn(x, y)` over the tensors of `fields` and the same places of `other`, keeping the
    structure: tuples (named or not) and dicts, None and non-tensors as they are."""
    if isinstance(fields, Tensor):
        return fn(fields, other)
    if isinstance(fields, dict):
        return {name: _map_fields(fn, x, other[name]) for name, x in fields.items()}
    if isinstance(fields, tuple):
        rows = [_map_fields(fn, x, y) for x, y in zip(fields, other, strict=True)]
        return fields._make(rows) if hasattr(fields, "_make") else type(fields)(rows)
    return fields


def _same_dim1(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """x and y with the longer second dimension, when both have one (a memory field's
    source length differs between batches)."""
    if x.dim() < 2 or x.size(1) == y.size(1):
        return x, y
    size = max(x.size(1), y.size(1))
    return pad_dim1(x, size), pad_dim1(y, size)


def pad_dim1(x: Tensor, size: int) -> Tensor:
    """(B, T, ...) -> (B, size, ...), zeros (False) after position T."""
    if x.size(1) == size:
        return x
    return torch.cat([x, x.new_zeros(x.size(0), size - x.size(1), *x.shape[2:])], dim=1)
