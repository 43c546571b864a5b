"""A corpus tokenised a chunk at a time, in worker processes: its parts, merged into arrays.

Each worker process tokenises chunks of pairs (`tokenise`), cuts them to a length if asked,
and drops over-long and lopsided pairs, recording how many and the first few lines; a part is
the chunk's kept pairs as codes into the chunk's own token table, written to a file (or kept
in memory). `Seen` merges the tables and counts of the parts into one count per token, for
the vocabularies, and `assemble` maps every part's codes to vocabulary ids, into
`cache.TokenArrays`. What to read and which tokenizers to use is `build`'s.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from alignmt.text import copy
from alignmt.text.cache import SIDES, TokenArrays, id_dtype, new_array
from alignmt.text.tokenize import TokenCodes, Tokenizer, tokenizer_from_json
from alignmt.text.vocab import Vocab

CHUNK_PAIRS = 32_768  # pairs a worker tokenises at a time
_QUEUED = 2  # chunks in flight per worker: enough to keep each busy, few to hold in memory
SHOWN = 3  # dropped lines named in a log line

Chunk = tuple[int, list[int], list[str], list[str]]  # index, lines, sources, targets


@dataclass
class Part:
    """One chunk, tokenised: its kept pairs as codes into the chunk's own token tables."""

    read: int  # pairs in the chunk
    kept: int  # pairs kept
    tokens: tuple[int, int]  # source and target tokens of the kept pairs
    dropped: dict[str, tuple[int, list[int]]]  # "long"/"ratio": (pairs, first few lines)
    path: str | None  # the .npz file of the codes and lengths, or None: in `arrays`
    arrays: dict[str, np.ndarray] | None  # {src,tgt}_{codes,lengths}, and lines
    # Set in the main process: each side's table as numbers of `Seen` (code -> number).
    numbers: tuple[np.ndarray, np.ndarray] | None = None

    def load(self) -> dict[str, np.ndarray]:
        """The codes and lengths; a file is read once, then deleted."""
        if self.path is None:
            return self.arrays
        with np.load(self.path) as data:
            arrays = {name: data[name] for name in data.files}
        os.unlink(self.path)
        return arrays


class _Tokenise:
    """Turns a chunk of pairs into a `Part`, in a worker process or in this one."""

    def __init__(
        self,
        tokenizers: list[str],
        max_tokens: int,
        max_ratio: float,
        folder: str | None,
        cut: int = 0,
    ) -> None:
        self.tokenizers = [tokenizer_from_json(spec) for spec in tokenizers]
        self.max_tokens, self.max_ratio, self.folder = max_tokens, max_ratio, folder
        self.cut = cut

    def __call__(self, chunk: Chunk) -> tuple[Part, list[list[str]], list[np.ndarray]]:
        """The part, and each side's table (code -> token) with the tokens' counts."""
        index, lines, *texts = chunk
        encoded = [tok.encode_batch(side) for tok, side in zip(self.tokenizers, texts, strict=True)]
        if self.cut:
            encoded = [first_tokens(enc, self.cut) for enc in encoded]
        lengths = np.stack([encoded[0].lengths, encoded[1].lengths])  # (2, n)
        long = (lengths > self.max_tokens).any(axis=0)  # (n,)
        ratio = np.zeros_like(long)
        if self.max_ratio:
            ratio = ~long & (lengths.max(axis=0) > self.max_ratio * lengths.min(axis=0))
        keep = ~(long | ratio)
        arrays, tables, counts = {}, [], []
        for side, enc in zip(SIDES, encoded, strict=True):
            codes = enc.codes[np.repeat(keep, enc.lengths)]
            count = np.bincount(codes, minlength=len(enc.table))
            used = np.flatnonzero(count)  # renumbered over the tokens used: smaller tables
            renumber = np.zeros(len(enc.table), dtype=np.int32)
            renumber[used] = np.arange(len(used))
            arrays[f"{side}_codes"] = renumber[codes].astype(id_dtype(len(used)))
            arrays[f"{side}_lengths"] = enc.lengths[keep].astype(np.int32)
            tables.append([enc.table[i] for i in used])
            counts.append(count[used])
        arrays["lines"] = np.asarray(lines, dtype=np.int64)[keep]
        dropped = {
            kind: (int(mask.sum()), np.asarray(lines)[mask][:SHOWN].tolist())
            for kind, mask in (("long", long), ("ratio", ratio))
        }
        tokens = (len(arrays["src_codes"]), len(arrays["tgt_codes"]))
        path = None
        if self.folder is not None:
            path = os.path.join(self.folder, f"part{index:06d}.npz")
            np.savez(path, **arrays)
        part = Part(len(lines), int(keep.sum()), tokens, dropped, path, None if path else arrays)
        return part, tables, counts


_WORKER: _Tokenise | None = None  # a worker process's tokeniser, made once by _start_worker


def _start_worker(*args: Any) -> None:
    global _WORKER
    _WORKER = _Tokenise(*args)


def _work(chunk: Chunk) -> tuple[Part, list[list[str]], list[np.ndarray]]:
    return _WORKER(chunk)


def tokenise(
    rows: Iterable[tuple[int, str, str]],
    tokenizers: Sequence[Tokenizer],
    *,
    max_tokens: int,
    max_ratio: float,
    folder: Path | None,
    workers: int,
    cut: int = 0,
) -> Iterator[tuple[Part, list[list[str]], list[np.ndarray]]]:
    """The rows tokenised a chunk at a time, in order; in `workers` processes when there is
    more than one chunk, with a few chunks queued at most, so that memory stays flat.

    Args:
        rows: (line, source, target) of each pair.
        tokenizers: the source and target tokenizers.
        max_tokens: pairs with more tokens on either side are dropped.
        max_ratio: > 0: pairs whose longer side has more than this many times the tokens of
            the shorter are dropped too.
        folder: where the parts' codes go, one file each; None: they stay in memory.
        workers: processes; 1 tokenises in this one.
        cut: > 0: each side keeps only its first `cut` tokens, before `max_tokens` and
            `max_ratio` look at it.

    Yields:
        Each chunk's part, and each side's token table (code -> token) with the tokens'
        counts in the kept pairs.
    """
    args = (
        [t.to_json() for t in tokenizers],
        max_tokens,
        max_ratio,
        None if folder is None else str(folder),
        cut,
    )
    chunks = _chunks(rows)
    first = list(itertools.islice(chunks, 2))
    if workers == 1 or len(first) < 2:
        yield from map(_Tokenise(*args), itertools.chain(first, chunks))
        return
    with processes(workers, initializer=_start_worker, initargs=args) as pool:
        queued: deque[Future] = deque()
        for chunk in itertools.chain(first, chunks):
            queued.append(pool.submit(_work, chunk))
            if len(queued) >= _QUEUED * workers:
                yield queued.popleft().result()
        while queued:
            yield queued.popleft().result()


def first_tokens(encoded: TokenCodes, cut: int) -> TokenCodes:
    """Each sentence's first `cut` tokens; the table is kept whole, some entries now unused."""
    starts = np.cumsum(encoded.lengths) - encoded.lengths  # (n,) each sentence's first code
    position = np.arange(len(encoded.codes)) - np.repeat(starts, encoded.lengths)  # in sentence
    return TokenCodes(
        encoded.codes[position < cut], np.minimum(encoded.lengths, cut), encoded.table
    )


@contextmanager
def processes(workers: int, **kwargs: Any) -> Iterator[ProcessPoolExecutor]:
    # spawn, not fork: this process may run threads (torch's, a process group's), and a
    # forked child gets only the calling one, with any lock another held left locked.
    context = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(workers, mp_context=context, **kwargs) as pool:
            yield pool
    except BrokenProcessPool as err:
        raise RuntimeError(
            "data.train: a tokenising process died (its error is above). Each process "
            "imports the main script, so a script that prepares data must do it under "
            "`if __name__ == '__main__':`; or set data.workers=1"
        ) from err


def _chunks(rows: Iterable[tuple[int, str, str]]) -> Iterator[Chunk]:
    rows = iter(rows)
    for index in itertools.count():
        block = list(itertools.islice(rows, CHUNK_PAIRS))
        if not block:
            return
        yield index, *([row[i] for row in block] for i in range(3))


# --- Vocabularies and the final arrays ------------------------------------------------------


class Seen:
    """One side's tokens over all parts: each numbered when first seen, and counted.

    Workers' tables are per chunk, so the main process keeps one number per token (far
    fewer than the chunks' tables together) and a part only its code -> number array.
    """

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}
        self.counts = np.zeros(1 << 12, dtype=np.int64)  # grown as needed

    def add(self, table: list[str], counts: np.ndarray) -> np.ndarray:
        """Count a part's tokens (`table` lists each once); returns code -> number."""
        numbers = np.fromiter(
            (self.numbers.setdefault(t, len(self.numbers)) for t in table),
            dtype=np.int32,
            count=len(table),
        )
        if len(self.numbers) > len(self.counts):
            grown = np.zeros(max(2 * len(self.counts), len(self.numbers)), dtype=np.int64)
            grown[: len(self.counts)] = self.counts
            self.counts = grown
        self.counts[numbers] += counts
        return numbers

    def vocab(self, min_freq: int, max_size: int | None = None) -> Vocab:
        """The vocabulary of the counted tokens (`Vocab.build`'s order and cut)."""
        counts = self.counts[: len(self.numbers)].tolist()
        counted = dict(zip(self.numbers, counts, strict=True))
        return Vocab.from_counts(counted, min_freq, max_size)

    def ids(self, vocab: Vocab) -> np.ndarray:
        """number -> id in `vocab` (`<unk>` for tokens it left out)."""
        return np.array([vocab.stoi.get(t, vocab.unk_id) for t in self.numbers], dtype=np.int64)


def dropped(parts: list[Part], kind: str) -> dict[str, Any]:
    """How many pairs the parts dropped as `kind` ("long", "ratio"), and the first lines."""
    lines = [line for part in parts for line in part.dropped[kind][1]]
    return dict(count=sum(part.dropped[kind][0] for part in parts), first=lines[:SHOWN])


def assemble(
    parts: list[Part],
    seen: tuple[Seen, Seen],
    vocabs: tuple[Vocab, Vocab],
    folder: Path | None,
    *,
    copy_ids: bool = False,
    longest: int = 0,
) -> TokenArrays:
    """The parts' codes as vocabulary ids, laid end to end a part at a time, and their
    pairs' lines, into `folder` (memory-mapped) or memory; with `copy_ids`, as a copying
    model reads and writes them (alignmt.text.copy), extended ids up to len(vocab) +
    `longest`, the most tokens a side has."""
    pairs = sum(part.kept for part in parts)
    ids_of = [side.ids(vocab) for side, vocab in zip(seen, vocabs, strict=True)]  # number -> id
    ids, offsets = [], []
    for s, side in enumerate(SIDES):
        total = sum(part.tokens[s] for part in parts)
        size = len(vocabs[s]) + (longest if copy_ids else 0)
        ids.append(new_array(folder, f"{side}_ids", id_dtype(size), total))
        offsets.append(new_array(folder, f"{side}_offsets", np.dtype(np.int64), pairs + 1))
        offsets[s][0] = 0
    lines = new_array(folder, "lines", np.dtype(np.int64), pairs)
    words = [list(side.numbers) for side in seen] if copy_ids else []  # number -> token
    row, token = 0, [0, 0]
    for part in parts:
        arrays = part.load()
        lines[row : row + part.kept] = arrays["lines"]
        for s, side in enumerate(SIDES):
            codes, lengths = arrays[f"{side}_codes"], arrays[f"{side}_lengths"]
            ids[s][token[s] : token[s] + len(codes)] = ids_of[s][part.numbers[s]][codes]
            ends = token[s] + np.cumsum(lengths, dtype=np.int64)
            offsets[s][row + 1 : row + 1 + part.kept] = ends
        if copy_ids:
            for s, extended in enumerate(_copy_ids(part, arrays, words, vocabs)):
                ids[s][token[s] : token[s] + len(extended)] = extended
        for s, side in enumerate(SIDES):
            token[s] += len(arrays[f"{side}_codes"])
        row += part.kept
    return TokenArrays(ids[0], offsets[0], ids[1], offsets[1], lines)


def _copy_ids(
    part: Part, arrays: dict[str, np.ndarray], words: list[list[str]], vocabs: tuple[Vocab, Vocab]
) -> tuple[np.ndarray, np.ndarray]:
    """A part's source and target ids as a copying model reads and writes them, a pair at a
    time from its words (copying compares the two sides' strings); `words` maps each side's
    token numbers to tokens."""
    sides = []
    for s, side in enumerate(SIDES):
        numbers = part.numbers[s][arrays[f"{side}_codes"]]
        ends = np.cumsum(arrays[f"{side}_lengths"])
        sides.append([[words[s][n] for n in row] for row in np.split(numbers, ends[:-1])])
    src, tgt = [], []
    for src_tokens, tgt_tokens in zip(*sides, strict=True):
        src += copy.source_ids(src_tokens, vocabs[0])
        tgt += copy.target_ids(src_tokens, tgt_tokens, *vocabs)
    return np.array(src, dtype=np.int64), np.array(tgt, dtype=np.int64)
