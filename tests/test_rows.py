"""The rows of a continuously refilled batch: sentences taken from a stream of batches,
and `refill`, which hands a stopped sentence's rows to the next one or shrinks the batch."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from alignmt.decoding.torch_engine.rows import Pending, Taken, refill, select_rows

BOS = 1


def stream(ids: list[int], sizes: list[int]):
    """`Encoded` batches of the sentences `ids`, `sizes` at a time: each sentence's state is
    its id, its memory a row (id, id), its length limit 10 + id."""
    out, at = [], 0
    for size in sizes:
        part = torch.tensor(ids[at : at + size])
        out.append(((part * 1.0,), (torch.stack([part, part], dim=1),), 10 + part))
        at += size
    return out


def test_pending_hands_out_sentences_across_batches_in_order():
    pending = Pending(stream([5, 6, 7, 8, 9], [2, 3]), BOS)
    first, second = pending.take(3), pending.take(3)
    assert first.state[0].tolist() == [5.0, 6.0, 7.0]  # joined across the two batches
    # sentence (place in the input), position, length limit, previous token
    assert [x.tolist() for x in first.rows] == [[0, 1, 2], [0] * 3, [15, 16, 17], [BOS] * 3]
    assert second.rows.sentence.tolist() == [3, 4] and second.memory[0][:, 0].tolist() == [8, 9]
    assert pending.take(1) is None and pending.taken == 5


def start_greedy(ids: list[int], waiting: list[int]):
    """A greedy batch of the sentences `ids` and a `Pending` of those `waiting`."""
    pending = Pending(
        stream(ids + waiting, [len(ids), len(waiting)] if waiting else [len(ids)]), BOS
    )
    return pending, pending.take(len(ids))


def test_a_waiting_sentence_takes_over_a_stopped_row_and_the_rest_shrink_away():
    pending, (state, memory, rows) = start_greedy([5, 6, 7, 8], [9])
    before = rows
    done = torch.tensor([False, True, False, True])
    state, memory, rows = refill(done, pending, state, memory, rows)
    # sentence 4 (id 9) in row 1, the first stopped; row 3 has no one to take it and goes
    assert state[0].tolist() == [5.0, 9.0, 7.0]
    assert memory[0][:, 0].tolist() == [5, 9, 7]
    assert rows.sentence.tolist() == [0, 4, 2] and rows.limit.tolist() == [15, 19, 17]
    # the bookkeeping is new tensors: a search's history keeps the old ones as they were
    assert before.sentence.tolist() == [0, 1, 2, 3]


def test_no_stopped_sentence_leaves_the_batch_as_it_is():
    pending, (state, memory, rows) = start_greedy([5, 6], [7])
    out = refill(torch.tensor([False, False]), pending, state, memory, rows)
    assert all(a is b for a, b in zip(out, (state, memory, rows), strict=True))
    assert pending.taken == 2


def test_once_nothing_waits_stopped_sentences_leave_until_none_is_left():
    pending, (state, memory, rows) = start_greedy([5, 6, 7], [])
    state, memory, rows = refill(torch.tensor([True, False, True]), pending, state, memory, rows)
    assert rows.sentence.tolist() == [1] and state[0].tolist() == [6.0]
    state, memory, rows = refill(torch.tensor([True]), pending, state, memory, rows)
    assert len(rows.sentence) == 0 and state[0].shape == (0,) and memory[0].shape == (0, 2)


class Book(NamedTuple):
    sentence: Tensor
    scores: Tensor  # float64 here, float32 from `start`: refill casts


def start_pairs(taken: Taken):
    """Two rows per sentence (its state and memory twice) and float32 scores."""
    twice = torch.arange(len(taken.rows.sentence)).repeat_interleave(2)
    book = Book(taken.rows.sentence, torch.zeros(len(taken.rows.sentence)))
    return select_rows(taken.state, twice), select_rows(taken.memory, twice), book


def test_with_offsets_a_sentences_rows_move_together():
    pending = Pending(stream([5, 6, 7, 8], [3, 1]), BOS)
    state, memory, _ = start_pairs(pending.take(3))
    book = Book(torch.tensor([0, 1, 2]), torch.tensor([-1.0, -2.0, -3.0], dtype=torch.float64))
    done = torch.tensor([True, False, True])
    offsets = torch.arange(2)
    state, memory, book = refill(done, pending, state, memory, book, start_pairs, offsets)
    # sentence 3 (id 8) in sentence 0's rows 0 and 1; sentence 2's rows 4 and 5 go
    assert state[0].tolist() == [8.0, 8.0, 6.0, 6.0]
    assert memory[0][:, 1].tolist() == [8, 8, 6, 6]
    assert book.sentence.tolist() == [3, 1]
    assert book.scores.dtype == torch.float64 and book.scores.tolist() == [0.0, -2.0]
