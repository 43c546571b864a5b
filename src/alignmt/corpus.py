"""Raw parallel text from disk: line-aligned file pairs and TSV files, plain or gzipped.

Owns turning files into sentence pairs that remember where they came from, with errors that
name the file and line, and a `ReadReport` that accounts for every line read: a pair is
either kept or listed as dropped, never lost silently. Does not tokenise (`tokenize`) or
batch (`data`), and imports no other alignmt module.
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

_BOM = "\ufeff"
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
        if not self.empty:
            return line
        shown = ", ".join(self.empty[:_SHOWN_DROPS])
        more = dropped - _SHOWN_DROPS
        return f"{line} ({shown}{f', and {more} more' if more > 0 else ''})"


def read_lines(path: str | Path) -> list[str]:
    """Every line of a UTF-8 text file, `.gz` decompressed, without line terminators.

    Lines are split on "\\n" only (a preceding "\\r" is dropped too), never on the other
    characters `str.splitlines` treats as breaks ("\\x85", "\\u2028", ...): those occur
    inside real sentences and splitting on them would shift every later line number.

    Args:
        path: a text file; read with gzip when its name ends in `.gz`.

    Returns:
        The lines in order, a leading UTF-8 byte order mark removed. A final newline does
        not make an extra empty line.

    Raises:
        CorpusError: the file is missing, a directory, unreadable, or not valid UTF-8
            (the message gives the line and column of the first bad byte).
    """
    path = Path(path)
    if path.is_dir():
        raise CorpusError(f"{path}: is a directory, expected a text file")
    lines: list[str] = []
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as file:
            # Binary iteration splits on b"\n" alone; decoding line by line keeps errors exact.
            for raw in file:
                lines.append(_decode(raw, path, len(lines) + 1))
    except FileNotFoundError as exc:
        raise CorpusError(f"{path}: no such file") from exc
    except (OSError, EOFError) as exc:
        raise CorpusError(f"{path}:{len(lines) + 1}: cannot read ({exc})") from exc
    if lines:
        lines[0] = lines[0].removeprefix(_BOM)
    return lines


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
    src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
    n_src, n_tgt = len(src_lines), len(tgt_lines)
    if n_src != n_tgt:
        longer = src_path if n_src > n_tgt else tgt_path
        raise CorpusError(
            f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}: "
            f"line {min(n_src, n_tgt) + 1} of {longer} has no partner"
        )
    rows = ((i, src, tgt) for i, (src, tgt) in enumerate(zip(src_lines, tgt_lines, strict=True), 1))
    return _collect(rows, src_path, label=f"{src_path} + {tgt_path}", read=n_src)


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
        CorpusError: the file cannot be read, or a non-blank line has no tab or fewer
            fields than the requested columns need.
    """
    if min(src_column, tgt_column) < 0 or src_column == tgt_column:
        raise ValueError(
            f"src_column and tgt_column must be distinct and >= 0, got {src_column}, {tgt_column}"
        )
    lines = read_lines(path)
    rows = (
        (i, *_columns(line, path, i, src_column, tgt_column)) for i, line in enumerate(lines, 1)
    )
    return _collect(rows, path, label=str(path), read=len(lines))


def _columns(
    line: str, path: str | Path, lineno: int, src_column: int, tgt_column: int
) -> tuple[str, str]:
    if not line.strip():
        return "", ""
    fields = line.split("\t")
    if len(fields) < 2:
        raise CorpusError(
            f"{path}:{lineno}: expected source<TAB>target[<TAB>...], found 1 field (no tab)"
        )
    if max(src_column, tgt_column) >= len(fields):
        raise CorpusError(
            f"{path}:{lineno}: columns {src_column} and {tgt_column} asked for, "
            f"found {len(fields)} fields"
        )
    return fields[src_column], fields[tgt_column]


def _collect(
    rows: Iterable[tuple[int, str, str]], where_path: str | Path, *, label: str, read: int
) -> tuple[list[Pair], ReadReport]:
    pairs, empty = [], []
    for lineno, src, tgt in rows:
        src, tgt, where = src.strip(), tgt.strip(), f"{where_path}:{lineno}"
        if src and tgt:
            pairs.append(Pair(src, tgt, where))
        else:
            empty.append(where)
    report = ReadReport(path=label, read=read, kept=len(pairs), empty=empty)
    if empty:
        logger.warning(report.summary())
    return pairs, report
