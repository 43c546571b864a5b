"""Tokenised training corpora as flat id arrays, and their memory-mapped cache on disk.

Owns `TokenArrays`, what training reads a corpus from (N pairs of id lists in four flat
arrays), and the cache folder that holds one between runs: its key (a digest of the corpus
files' contents and of every setting that shapes the result), its layout, publishing a
finished build atomically, and checking a folder before trusting it. Memory-mapped arrays
let the processes of a run share one copy through the page cache. Reading, tokenising and
counting the corpus is `build`'s.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs

from alignmt.text.tokenize import Tokenizer, tokenizer_from_json
from alignmt.text.vocab import Vocab

FORMAT = 2  # bump when the folder's layout or the way it is built changes
META = "meta.json"
ARRAYS = ("src_ids", "src_offsets", "tgt_ids", "tgt_offsets", "lines")
SIDES = ("src", "tgt")

IdPair = tuple[list[int], list[int]]


class CacheError(ValueError):
    """A cache folder that is incomplete or damaged; the message names the folder and file."""


class TokenArrays:
    """A tokenised parallel corpus of N pairs, ids without specials, in four flat arrays,
    and the line of the corpus file each pair was read from.

    Layout (the target side's is the same): pair i's source ids are
    `src_ids[src_offsets[i] : src_offsets[i + 1]]`, so three pairs of 3, 1 and 3 tokens are
        src_ids      [7 9 4 5 8 8 6]   (T,) uint16 or int32, T source tokens in all
        src_offsets  [0 3 4 7]         (N + 1,) int64: 0 first, T last
        lines        [1 2 4]           (N,) int64: line 3 was dropped (empty, too long...)
    The arrays may be memory-mapped files: nothing here copies them whole.
    """

    def __init__(
        self,
        src_ids: np.ndarray,
        src_offsets: np.ndarray,
        tgt_ids: np.ndarray,
        tgt_offsets: np.ndarray,
        lines: np.ndarray,
    ) -> None:
        # np.asarray drops np.memmap's subclass (the mapping stays): slicing a plain
        # array view is several times cheaper, and pairs() slices twice a row.
        self.src_ids, self.src_offsets = np.asarray(src_ids), np.asarray(src_offsets)
        self.tgt_ids, self.tgt_offsets = np.asarray(tgt_ids), np.asarray(tgt_offsets)
        self.lines = np.asarray(lines)  # which line of the corpus (1-based) each pair is
        if len(self.src_offsets) != len(self.tgt_offsets) or not len(self.src_offsets):
            raise ValueError(
                f"offsets: need N + 1 each, got {len(self.src_offsets)} source and "
                f"{len(self.tgt_offsets)} target"
            )
        if len(self.lines) != len(self.src_offsets) - 1:
            raise ValueError(f"lines: need N = {len(self.src_offsets) - 1}, got {len(self.lines)}")

    @classmethod
    def from_pairs(cls, pairs: Sequence[IdPair]) -> TokenArrays:
        """The arrays of id pairs held as lists (small corpora and tests), read from lines
        1 to N."""
        sides = []
        for side in (0, 1):
            seqs = [pair[side] for pair in pairs]
            lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            ids = np.fromiter(
                (i for seq in seqs for i in seq), dtype=np.int32, count=int(offsets[-1])
            )
            sides += [ids, offsets]
        return cls(*sides, np.arange(1, len(pairs) + 1, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    @cached_property
    def lengths(self) -> np.ndarray:
        """(N, 2) int64: source and target tokens of each pair, specials not counted."""
        return np.stack([np.diff(self.src_offsets), np.diff(self.tgt_offsets)], axis=1)

    def pairs(self, rows: Sequence[int]) -> list[IdPair]:
        """The (source ids, target ids) of `rows`, in that order, as lists of Python ints."""
        src, tgt = self.src_offsets, self.tgt_offsets
        return [
            (self.src_ids[src[r] : src[r + 1]].tolist(), self.tgt_ids[tgt[r] : tgt[r + 1]].tolist())
            for r in rows
        ]

    def arrays(self) -> dict[str, np.ndarray]:
        """The five arrays by file name stem (`ARRAYS`)."""
        return dict(
            zip(
                ARRAYS,
                (self.src_ids, self.src_offsets, self.tgt_ids, self.tgt_offsets, self.lines),
                strict=True,
            )
        )


def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest dtype that holds the ids of a vocabulary: uint16 for most subword ones."""
    return np.dtype(np.uint16 if vocab_size <= 2**16 else np.int32)


# --- Where a cache lives, and its key -------------------------------------------------------


def cache_root(cache_dir: str) -> Path:
    """The folder that holds cache folders: `cache_dir`, else $ALIGNMT_CACHE, else the
    platform's user cache folder (~/.cache/alignmt on Linux, $XDG_CACHE_HOME/alignmt if set)."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    if os.environ.get("ALIGNMT_CACHE"):
        return Path(os.environ["ALIGNMT_CACHE"]).expanduser()
    return Path(platformdirs.user_cache_dir("alignmt"))


def file_digest(path: Path) -> str:
    """blake2b of a file's bytes (a .gz file's compressed ones), read in blocks."""
    digest = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as file:
        while block := file.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def cache_key(settings: Mapping[str, Any], files: Sequence[Path]) -> str:
    """The folder name for a corpus and the settings that shape its arrays.

    Args:
        settings: every setting the result depends on, JSON-serialisable.
        files: the corpus files; their contents count, not their names or times.

    Returns:
        40 hex digits.
    """
    spec = {"format": FORMAT, "settings": settings, "files": [file_digest(f) for f in files]}
    return hashlib.blake2b(json.dumps(spec, sort_keys=True).encode(), digest_size=20).hexdigest()


# --- Writing and publishing -----------------------------------------------------------------


def new_array(folder: Path | None, name: str, dtype: np.dtype, length: int) -> np.ndarray:
    """A (length,) array to fill: a memory-mapped `folder/name.npy`, or in RAM for None."""
    if folder is None:
        return np.empty(length, dtype=dtype)
    return np.lib.format.open_memmap(
        folder / f"{name}.npy", mode="w+", dtype=dtype, shape=(length,)
    )


def write_cache(
    folder: Path,
    arrays: TokenArrays,
    tokenizers: Sequence[Tokenizer],
    vocabs: Sequence[Vocab],
    meta: dict[str, Any],
) -> None:
    """Complete a folder whose arrays are written (by `new_array`): flush them, then write
    the tokenizers, the vocabularies and, last, meta.json with the arrays' sizes."""
    meta = {**meta, "format": FORMAT, "pairs": len(arrays), "arrays": {}}
    for name, array in arrays.arrays().items():
        array.base.flush()  # the np.memmap that new_array made
        size = (folder / f"{name}.npy").stat().st_size
        meta["arrays"][name] = {"dtype": array.dtype.str, "length": len(array), "bytes": size}
    for side, tokenizer, vocab in zip(SIDES, tokenizers, vocabs, strict=True):
        (folder / f"{side}_tokenizer.json").write_text(tokenizer.to_json())
        (folder / f"{side}_vocab.json").write_text(vocab.to_json())
    meta["vocab_sizes"] = [len(v) for v in vocabs]
    (folder / META).write_text(json.dumps(meta, indent=1, ensure_ascii=False))


def rename_into_place(built: Path, folder: Path) -> None:
    """Rename the finished `built` folder to `folder` in one step, so that a reader sees
    all of a cache or none; if another process published it first, keep theirs."""
    try:
        os.rename(built, folder)
    except OSError:
        if not (folder / META).is_file():
            raise
        shutil.rmtree(built, ignore_errors=True)


# --- Loading and checking -------------------------------------------------------------------


@dataclass
class Cached:
    """What a cache folder holds."""

    arrays: TokenArrays  # memory-mapped, read-only
    tokenizers: tuple[Tokenizer, Tokenizer]
    vocabs: tuple[Vocab, Vocab]
    meta: dict[str, Any]  # meta.json: counts, sizes, what was dropped


def load_cache(folder: Path) -> Cached:
    """A cache folder's contents, checked before use.

    Args:
        folder: a folder that `rename_into_place` made.

    Returns:
        The arrays (memory-mapped), tokenizers, vocabularies and meta.json.

    Raises:
        CacheError: a file is missing, unreadable, of the wrong size or type, or the arrays
            are inconsistent (offsets not running from 0 to the ids' length in order, ids
            outside the vocabulary). The message says to delete the folder.
    """
    meta = _load_json(folder, META, json.loads)
    if meta.get("format") != FORMAT:
        raise _damaged(folder, META, f"format {meta.get('format')!r}, expected {FORMAT}")
    tokenizers = tuple(
        _load_json(folder, f"{s}_tokenizer.json", tokenizer_from_json) for s in SIDES
    )
    vocabs = tuple(_load_json(folder, f"{s}_vocab.json", Vocab.from_json) for s in SIDES)
    arrays = {name: _load_array(folder, name, meta) for name in ARRAYS}
    for side, vocab in zip(SIDES, vocabs, strict=True):
        _check_side(folder, side, arrays[f"{side}_ids"], arrays[f"{side}_offsets"], vocab, meta)
    if len(arrays["lines"]) != meta.get("pairs"):
        raise _damaged(
            folder, "lines.npy", f"{len(arrays['lines'])} lines for {meta.get('pairs')} pairs"
        )
    return Cached(TokenArrays(**arrays), tokenizers, vocabs, meta)


def _damaged(folder: Path, name: str, problem: str) -> CacheError:
    return CacheError(
        f"{folder / name}: {problem}. The cache folder {folder} is damaged or incomplete: "
        "delete it and it will be rebuilt"
    )


def _load_json(folder: Path, name: str, parse) -> Any:
    path = folder / name
    try:
        return parse(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _damaged(folder, name, "missing") from None
    except (OSError, ValueError, KeyError, TypeError) as err:  # JSONDecodeError is a ValueError
        raise _damaged(folder, name, f"unreadable ({type(err).__name__}: {err})") from None


def _load_array(folder: Path, name: str, meta: dict[str, Any]) -> np.ndarray:
    file = f"{name}.npy"
    try:
        expected = meta["arrays"][name]
        size, dtype, length = expected["bytes"], np.dtype(expected["dtype"]), expected["length"]
    except (KeyError, TypeError) as err:
        raise _damaged(folder, META, f"no valid entry for {file} ({err!r})") from None
    path = folder / file
    if not path.is_file():
        raise _damaged(folder, file, "missing")
    if path.stat().st_size != size:
        raise _damaged(folder, file, f"{path.stat().st_size} bytes, {META} says {size}")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as err:
        raise _damaged(folder, file, f"not a readable .npy file ({err})") from None
    if array.dtype != dtype or array.shape != (length,):
        raise _damaged(
            folder, file, f"{array.dtype} {array.shape}, {META} says {dtype} ({length},)"
        )
    return array


def _check_side(
    folder: Path, side: str, ids: np.ndarray, offsets: np.ndarray, vocab: Vocab, meta: dict
) -> None:
    file = f"{side}_offsets.npy"
    if len(offsets) != meta.get("pairs", -1) + 1:
        raise _damaged(folder, file, f"{len(offsets)} offsets for {meta.get('pairs')} pairs")
    if offsets[0] != 0 or offsets[-1] != len(ids):
        raise _damaged(
            folder,
            file,
            f"offsets run from {offsets[0]} to {offsets[-1]}, "
            f"not from 0 to {len(ids)} (the ids' length)",
        )
    if np.any(offsets[1:] < offsets[:-1]):
        raise _damaged(folder, file, "offsets decrease")
    # Every id must be <unk> or a real token: a special or an id past the vocabulary
    # would only fail far into training, in make_batch or in the embedding. A copying
    # model's ids go past it by less than the longest sentence (alignmt.text.copy).
    settings = meta.get("settings", {})
    end = len(vocab) + (settings.get("max_tokens", 0) if settings.get("copy_ids") else 0)
    if len(ids) and not (vocab.unk_id <= int(ids.min()) and int(ids.max()) < end):
        problem = (
            f"ids from {ids.min()} to {ids.max()}, outside {vocab.unk_id}.."
            f"{end - 1} of {side}_vocab.json"
        )
        raise _damaged(folder, f"{side}_ids.npy", problem)
