"""Raw parallel text from disk: line-aligned file pairs and TSV files, plain or gzipped.

Owns turning files into sentence pairs that remember where they came from, with errors that
name the file and line, and a `ReadReport` that accounts for every line read: a pair is
either kept or listed as dropped, never lost silently. Pairs can be read into memory
(`read_parallel`, `read_tsv`) or streamed a line at a time (`stream_parallel`, `stream_tsv`),
for corpora too big to hold as Python strings. Does not tokenise (`tokenize`) or
batch (`split`, `alignmt.model.batch`), and imports no other alignmt module.
"""

from __future__ import annotations

import gzip
import itertools
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

logger = logging.getLogger(__name__)

_BOM = b"\xef\xbb\xbf"  # the UTF-8 byte order mark
_SHOWN_DROPS = 3  # locations named in a one-line summary


class CorpusError(ValueError):
    """A corpus file that cannot be read as asked; the message names file and line."""


@dataclass(frozen=True)
class Pair:
    """One sentence pair, stripped of surrounding whitespace, and where it was read."""

    src: str
    tgt: str
    where: str  # "path:LINE", 1-based; the source file's path for two parallel files


@dataclass
class ReadReport:
    """What one read did: `read == kept + len(empty)` always holds."""

    path: str  # "a.en + a.de" for parallel files, or the TSV path
    read: int  # lines read (per file, for parallel files)
    kept: int  # pairs returned
    empty: list[str] = field(default_factory=list)  # "path:LINE" of pairs with an empty side

    def summary(self) -> str:
        """One line for logs, naming the first few dropped locations."""
        dropped = len(self.empty)
        line = f"{self.path}: {self.read} lines, {self.kept} kept, {dropped} dropped as empty"
        return f"{line} ({locations(self.empty, dropped)})" if dropped else line


def locations(first: Sequence[str], count: int) -> str:
    """The first few of `count` dropped locations for a log line: "a:2, a:5, a:9, and 4 more"."""
    more = count - _SHOWN_DROPS
    return ", ".join(first[:_SHOWN_DROPS]) + (f", and {more} more" if more > 0 else "")


def iter_lines(path: str | Path) -> Iterator[str]:
    """The lines of a UTF-8 text file, one at a time, `.gz` decompressed, without terminators.

    Lines are split on "\\n" only (a preceding "\\r" is dropped too), never on the other
    characters `str.splitlines` treats as breaks ("\\x85", "\\u2028", ...): those occur
    inside real sentences and splitting on them would shift every later line number.
    A "\\r" anywhere else is refused rather than guessed at: read as a line end it would
    shift every later line number away from what `wc -l`, `sed -n` and the other file of a
    pair count; read as text it would make a file with classic Mac line ends one line (a
    TSV's first pair, the rest ignored as extra columns). A NUL byte is refused too: text
    has none, and a UTF-16 file read as UTF-8 has one in every other byte.

    Args:
        path: a text file; read with gzip when its name ends in `.gz`.

    Yields:
        The lines in order, a leading UTF-8 byte order mark removed (a file of the mark
        alone has no lines). A final newline does not make an extra empty line.

    Raises:
        CorpusError: the file is missing, a directory, unreadable, not valid UTF-8, or
            holds a NUL byte or a "\\r" that ends no line (the message gives the line and
            column of the first), when the reading gets there.
    """
    path = Path(path)
    if path.is_dir():
        raise CorpusError(f"{path}: is a directory, expected a text file")
    lineno = 0
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as file:
            # Binary iteration splits on b"\n" alone; decoding line by line keeps errors exact.
            for lineno, raw in _numbered(file):
                yield _check_text(_decode(raw, path, lineno), path, lineno)
    except FileNotFoundError as exc:
        raise CorpusError(f"{path}: no such file") from exc
    except (OSError, EOFError) as exc:
        raise CorpusError(f"{path}:{lineno + 1}: cannot read ({exc})") from exc


def read_lines(path: str | Path) -> list[str]:
    """Every line of a UTF-8 text file: `iter_lines` as a list (same arguments and errors)."""
    return list(iter_lines(path))


def _numbered(file: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    """The lines of a binary file numbered from 1, a leading UTF-8 byte order mark removed.

    A file of the mark alone gives no line: it is what an editor saves for an empty file.
    """
    for lineno, raw in enumerate(file, 1):
        raw = raw.removeprefix(_BOM) if lineno == 1 else raw
        if raw:  # empty only when the mark was the whole file
            yield lineno, raw


def _decode(raw: bytes, path: Path, lineno: int) -> str:
    raw = raw.removesuffix(b"\n").removesuffix(b"\r")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Editors count columns in characters, so decode the valid prefix to count them.
        column = len(raw[: exc.start].decode("utf-8")) + 1
        bad = raw[exc.start]
        msg = f"{path}:{lineno}: invalid UTF-8 (byte 0x{bad:02x} at column {column})"
        raise CorpusError(msg) from None


# What a corpus line may not hold: (what it is, what to do about it).
_NOT_TEXT = {
    "\0": ("a NUL byte", "is it a binary or UTF-16 file? corpora are read as UTF-8"),
    "\r": (
        "a carriage return that ends no line",
        "lines end in \\n or \\r\\n: for classic "
        "Mac line ends, tr '\\r' '\\n'; for stray ones, tr -d '\\r'",
    ),
}


def _check_text(line: str, path: Path, lineno: int) -> str:
    """`line`, or a CorpusError naming the first NUL or lone "\\r" in it and its column."""
    if "\0" in line or "\r" in line:
        column, char = min((line.find(c) + 1, c) for c in _NOT_TEXT if c in line)
        what, hint = _NOT_TEXT[char]
        raise CorpusError(f"{path}:{lineno}: {what} at column {column} ({hint})")
    return line


def input_lines(stream: BinaryIO, name: str = "stdin") -> list[str]:
    """The lines of text to translate, split as `iter_lines` splits a file ("\\n" or "\\r\\n"
    endings, a leading byte order mark dropped), except that nothing is refused, since every
    input line must get its output line: a line of invalid UTF-8 is kept with U+FFFD for its
    bad bytes and a warning that names it, and NUL bytes and lone "\\r" stay in the text
    (tokenizers read them as they read other control characters).

    Args:
        stream: a binary stream (`sys.stdin.buffer`).
        name: what to call it in warnings.

    Returns:
        The lines in order; a final newline makes no extra empty line.
    """
    lines = []
    for lineno, raw in _numbered(stream):
        try:
            line = _decode(raw, Path(name), lineno)
        except CorpusError as bad:
            logger.warning("%s; translating it with U+FFFD in place of the bad bytes", bad)
            line = raw.removesuffix(b"\n").removesuffix(b"\r").decode("utf-8", "replace")
        lines.append(line)
    return lines


Row = tuple[int, str, str]  # (1-based line, source, target)


@dataclass
class PairStream:
    """The sentence pairs of a corpus, read as they are iterated over: one pass, little memory.

    Iterating gives `(line, source, target)` rows, both sides stripped and neither empty; the
    `report` counts what has been read so far (it is complete once the rows are exhausted).
    """

    rows: Iterator[Row]
    report: ReadReport
    origin: Path  # the file whose line numbers the rows give: the source file, or the TSV
    files: tuple[Path, ...]  # every file read, for a cache key

    def __iter__(self) -> Iterator[Row]:
        return self.rows


def stream_parallel(src_path: str | Path, tgt_path: str | Path) -> PairStream:
    """Sentence pairs from two line-aligned files, streamed (see `read_parallel`).

    Raises:
        CorpusError: as `read_parallel`, when the reading gets there.
    """
    src_path, tgt_path = Path(src_path), Path(tgt_path)
    report = ReadReport(path=f"{src_path} + {tgt_path}", read=0, kept=0)
    rows = _parallel_rows(src_path, tgt_path, report)
    return PairStream(rows, report, src_path, (src_path, tgt_path))


def _parallel_rows(src_path: Path, tgt_path: Path, report: ReadReport) -> Iterator[Row]:
    src_lines, tgt_lines = iter_lines(src_path), iter_lines(tgt_path)
    for lineno, (src, tgt) in enumerate(itertools.zip_longest(src_lines, tgt_lines), 1):
        if src is None or tgt is None:
            # One file has ended: count the rest of the other for the message.
            n_src = lineno - 1 + (src is not None) + sum(1 for _ in src_lines)
            n_tgt = lineno - 1 + (tgt is not None) + sum(1 for _ in tgt_lines)
            longer = src_path if n_src > n_tgt else tgt_path
            raise CorpusError(
                f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}: "
                f"line {lineno} of {longer} has no partner"
            )
        report.read = lineno
        row = _keep(lineno, src, tgt, src_path, report)
        if row:
            yield row


def _keep(lineno: int, src: str, tgt: str, origin: Path, report: ReadReport) -> Row | None:
    """The stripped row, or None (and the line listed in the report) when a side is empty."""
    src, tgt = src.strip(), tgt.strip()
    if src and tgt:
        report.kept += 1
        return lineno, src, tgt
    report.empty.append(f"{origin}:{lineno}")
    return None


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> tuple[list[Pair], ReadReport]:
    """Sentence pairs from two line-aligned files, line i of one translating line i of the other.

    Args:
        src_path: source sentences, one a line.
        tgt_path: target sentences, one a line, as many lines as `src_path`.

    Returns:
        The pairs, each with `where` = "src_path:LINE", and the report; pairs with an empty
        side are dropped and listed in `report.empty` (and logged as a warning).

    Raises:
        CorpusError: either file cannot be read, or their line counts differ (the message
            names both files, both counts and the first line without a partner).
    """
    return read_stream(stream_parallel(src_path, tgt_path))


def stream_tsv(path: str | Path, *, src_column: int = 0, tgt_column: int = 1) -> PairStream:
    """Sentence pairs from tab-separated lines, streamed (see `read_tsv`).

    Raises:
        ValueError: the columns are negative or equal.
        CorpusError: as `read_tsv`, when the reading gets there.
    """
    if min(src_column, tgt_column) < 0 or src_column == tgt_column:
        raise ValueError(
            f"src_column and tgt_column must be distinct and >= 0, got {src_column}, {tgt_column}"
        )
    path = Path(path)
    report = ReadReport(path=str(path), read=0, kept=0)
    return PairStream(_tsv_rows(path, src_column, tgt_column, report), report, path, (path,))


def _tsv_rows(path: Path, src_column: int, tgt_column: int, report: ReadReport) -> Iterator[Row]:
    first: tuple[int, int] | None = None  # (line, fields) of the first non-blank line
    for lineno, line in enumerate(iter_lines(path), 1):
        report.read = lineno
        src = tgt = ""  # a blank line is a pair with empty sides: dropped and counted
        if line.strip():
            fields = _fields(line, path, lineno, (src_column, tgt_column), first)
            first = first or (lineno, len(fields))
            src, tgt = fields[src_column], fields[tgt_column]
        row = _keep(lineno, src, tgt, path, report)
        if row:
            yield row


def read_tsv(
    path: str | Path, *, src_column: int = 0, tgt_column: int = 1
) -> tuple[list[Pair], ReadReport]:
    """Sentence pairs from tab-separated lines, `source<TAB>target[<TAB>attribution...]`.

    Args:
        path: the TSV file (Tatoeba/Anki style); `.gz` is decompressed.
        src_column: 0-based field holding the source; swap the two to reverse direction.
        tgt_column: 0-based field holding the target. Other fields are ignored.

    Returns:
        The pairs, each with `where` = "path:LINE", and the report; blank lines and pairs
        with an empty side are dropped and listed in `report.empty` (and logged).

    Raises:
        ValueError: the columns are negative or equal.
        CorpusError: the file cannot be read, or a non-blank line has no tab, fewer
            fields than the requested columns need, or not as many fields as the first
            non-blank line.
    """
    return read_stream(stream_tsv(path, src_column=src_column, tgt_column=tgt_column))


def _fields(
    line: str, path: Path, lineno: int, columns: tuple[int, int], first: tuple[int, int] | None
) -> list[str]:
    """The fields of a non-blank TSV line, or a CorpusError: no tab, too few fields for
    `columns`, or not as many as `first` = (line, fields) of the file's first non-blank line
    (TSV rows have one width, so an extra field is a tab inside a sentence that would cut
    it short unnoticed, and a missing one a sentence or attribution lost)."""
    fields = line.split("\t")
    if len(fields) < 2:
        raise CorpusError(
            f"{path}:{lineno}: expected source<TAB>target[<TAB>...], found 1 field (no tab)"
        )
    if max(columns) >= len(fields):
        raise CorpusError(
            f"{path}:{lineno}: columns {columns[0]} and {columns[1]} asked for, "
            f"found {len(fields)} fields"
        )
    if first and len(fields) != first[1]:
        raise CorpusError(
            f"{path}:{lineno}: {len(fields)} fields where line {first[0]} has {first[1]} "
            "(a tab inside a sentence, or a field missing?)"
        )
    return fields


def read_stream(stream: PairStream) -> tuple[list[Pair], ReadReport]:
    """Every pair of `stream` in memory, located "origin:LINE"; dropped pairs are logged.

    Args:
        stream: from `stream_parallel` or `stream_tsv`, not yet iterated.

    Returns:
        The pairs and the complete report.
    """
    pairs = [Pair(src, tgt, f"{stream.origin}:{lineno}") for lineno, src, tgt in stream]
    if stream.report.empty:
        logger.warning(stream.report.summary())
    return pairs, stream.report
