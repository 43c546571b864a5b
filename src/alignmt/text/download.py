"""Getting a corpus's pinned files into the data folder, over HTTP or from a mirror folder.

Every file is written beside its final place as `.NAME.part`, checked against its pinned
size and SHA-256, and only then renamed to NAME, so a killed download leaves nothing that
looks complete. A download that stops midway keeps its `.part` and the next one asks the
server for the rest (an HTTP range request); anything that can never become the pinned file
(a wrong checksum, an HTML page, a full disk) is deleted and named in the error, with what
to do. Python's own `urllib` does the HTTP, because no well-kept download library resumes
a partial file: pooch (1.9), the one scientific Python uses, writes to a temporary file that
a failure deletes.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import itertools
import os
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

from tqdm import tqdm

from alignmt import __version__
from alignmt.text.corpora import Corpus, Pinned, missing_files
from alignmt.text.corpus import CorpusError

_BLOCK = 1 << 16
_TIMEOUT_S = 60  # a server silent this long mid-file is given up on; the .part is kept
# What a pinned file starts with; an archive or gzip file that starts otherwise is refused.
_MAGIC = {".gz": b"\x1f\x8b", ".zip": b"PK\x03\x04"}


class DownloadError(CorpusError):
    """A file that could not be got; the message names the URL or file and what to do."""


@dataclass
class Got:
    """What one `get` did, file by file."""

    corpus: str
    folder: Path
    already: list[str] = field(default_factory=list)  # there before, left as they were
    fetched: list[str] = field(default_factory=list)  # downloaded or copied, and checked
    missing: list[str] = field(default_factory=list)  # not in the mirror
    refused: list[str] = field(default_factory=list)  # in the mirror, not the pinned bytes

    def summary(self) -> str:
        got = len(self.already) + len(self.fetched)
        files = "file" if got == 1 else "files"
        line = f"{self.corpus}: {got} {files} in {self.folder} ({len(self.fetched)} new)"
        if self.missing:
            line += f"; the mirror lacks {len(self.missing)}: {', '.join(self.missing)}"
        for problem in self.refused:
            line += f"\n  not copied: {problem}"
        return line


def get(
    corpus: Corpus,
    root: Path,
    *,
    every: bool = False,
    mirror: Path | None = None,
    progress: bool = False,
) -> Got:
    """The corpus's files (its default ones, or `every` one) into `root/NAME`, downloaded or,
    with `mirror`, copied from that folder; files already there are kept.

    Raises:
        DownloadError: a download failed (the first one stops the rest). From a mirror,
            files it lacks or holds with other bytes are reported in `Got` instead.
    """
    folder = root / corpus.name
    wanted = corpus.wanted(every)
    todo = missing_files(corpus, wanted, root)
    done = Got(corpus.name, folder, already=[f.name for f in wanted if f not in todo])
    if todo:
        _make_folder(folder)
    try:
        for file in todo:
            if mirror is None:
                _download(corpus, file, folder, progress)
                done.fetched.append(file.name)
            else:
                _from_mirror(corpus, file, folder, mirror, done, progress)
    finally:
        if todo and not any(folder.iterdir()):  # the data folder as it was
            folder.rmdir()
    return done


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DownloadError(
            f"{folder}: cannot make the data folder ({error.strerror}); set ALIGNMT_DATA to a "
            "folder you can write"
        ) from error


# --- From a mirror folder -------------------------------------------------------------------


class _Refused(DownloadError):
    """A source's bytes are not the pinned file's."""


def _from_mirror(
    corpus: Corpus, file: Pinned, folder: Path, mirror: Path, done: Got, progress: bool
) -> None:
    """Copies `file` from the mirror folder (laid out as the data folder, or holding the
    files themselves) into the corpus folder, or notes in `done` that the mirror lacks the
    file or holds other bytes."""
    names = [file.name] + ([file.excerpt.archive] if file.excerpt else [])
    found = [d / n for n in names for d in (mirror / corpus.name, mirror) if (d / n).is_file()]
    if not found:
        done.missing.append(file.name)
        return
    source, part = found[0], _part_path(folder, file.name)
    try:
        if source.name == file.name:
            with source.open("rb") as src, _writing(part, file.name, "wb") as out:
                _pump(src, out, _bar(file.name, file.size, 0, progress))
        else:
            _excerpt(file, source, part)
        _install(file, part, folder, where=str(source), advice="this copy is not the pinned one")
        done.fetched.append(file.name)
    except _Refused as refused:
        done.refused.append(str(refused))


# --- Over HTTP ------------------------------------------------------------------------------


def _download(corpus: Corpus, file: Pinned, folder: Path, progress: bool) -> None:
    """`file` from its URL into `folder`, resuming a `.part` an earlier try left."""
    offline = (
        f"on a machine without a network, copy the files from one with it and run: "
        f"alignmt data get {corpus.name} --from DIR"
    )
    if file.excerpt is None:
        part = _part_path(folder, file.name)
        _fetch(file.url, part, file.size, file.name, offline, progress)
        advice = "the download was corrupted, or the file changed on the server; run again"
        _install(file, part, folder, where=file.url, advice=advice)
        return
    archive, part = _part_path(folder, file.excerpt.archive), _part_path(folder, file.name)
    _fetch(file.url, archive, None, file.excerpt.archive, offline, progress)
    try:
        _excerpt(file, archive, part)
        advice = (
            f"the archive has been revised since alignmt pinned its first "
            f"{file.excerpt.lines:,} lines; get {file.name} from a mirror with --from DIR, "
            "or point the config at your own file"
        )
        _install(file, part, folder, where=file.url, advice=advice)
    finally:
        archive.unlink(missing_ok=True)


def _fetch(url: str, part: Path, size: int | None, name: str, offline: str, progress: bool) -> None:
    """All of `url` into `part`, asking only for what it lacks when it has some bytes.

    Raises:
        DownloadError: the server could not be reached or refused (`part` as it was); the
            transfer broke (`part` keeps what came, for the next try); an HTML page came
            instead of the file (not written).
    """
    have = part.stat().st_size if part.exists() else 0
    if size is not None and have > size:  # not a beginning of this file: start again
        part.unlink()
        have = 0
    if size is not None and have == size:
        return  # all there: the checksum decides
    response = _open(url, have, offline)
    if response is None:
        return  # the server has no bytes past `have`
    with response:
        if have and response.status != 206:  # the server ignored the range: from the start
            have = 0
        total = size or _length(response, have)
        first = _read(response, url)
        _check_start(first, name, url, response.headers.get("Content-Type", ""), have == 0)
        with _writing(part, name, "ab" if have else "wb") as out:
            bar = _bar(name, total, have, progress)
            out.write(first)
            bar.update(len(first))
            try:
                _pump(response, out, bar)
            except (http.client.HTTPException, ConnectionError, TimeoutError) as broke:
                raise _broken(url, part, total, broke) from broke
    if total and part.stat().st_size < total:
        raise _broken(url, part, total, "the server closed the connection")


def _open(url: str, have: int, offline: str) -> http.client.HTTPResponse | None:
    headers = {"User-Agent": f"alignmt/{__version__} (corpus download)"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        return urlopen(Request(url, headers=headers), timeout=_TIMEOUT_S)
    except HTTPError as error:
        if error.code == 416 and have:  # "range not satisfiable": nothing is left to send
            return None
        raise DownloadError(
            f"{url}: HTTP {error.code} {error.reason}; nothing was changed in the data folder"
        ) from error
    except (URLError, TimeoutError, ConnectionError) as error:
        reason = getattr(error, "reason", error)
        raise DownloadError(f"{url}: cannot connect ({reason}); {offline}") from error


def _length(response: http.client.HTTPResponse, have: int) -> int | None:
    """The whole file's size, from Content-Length (plus `have` on a range reply)."""
    length = response.headers.get("Content-Length")
    return int(length) + have if length and length.isdigit() else None


def _read(response: BinaryIO, url: str) -> bytes:
    try:
        return response.read(_BLOCK)
    except (http.client.HTTPException, ConnectionError, TimeoutError) as broke:
        raise DownloadError(f"{url}: the transfer broke at once ({broke}); run again") from broke


def _check_start(first: bytes, name: str, url: str, content_type: str, fresh: bool) -> None:
    """Refuses an HTML page (a login, error or proxy page) where `name` was expected, and a
    fresh download of a gzip or zip file that does not start as one."""
    start = first.lstrip()[:15].lower()
    if content_type.startswith("text/html") or start.startswith((b"<!doctype html", b"<html")):
        raise DownloadError(
            f"{url} sent an HTML page, not {name} (an error or login page, or a proxy's); "
            "nothing was kept: open the URL in a browser to see what it says"
        )
    magic = _MAGIC.get(Path(name).suffix)
    if fresh and magic and not first.startswith(magic):
        raise DownloadError(
            f"{url} did not send a {Path(name).suffix} file (it starts {first[:12]!r}); "
            "nothing was kept"
        )


def _broken(url: str, part: Path, total: int | None, why: object) -> DownloadError:
    have = part.stat().st_size if part.exists() else 0
    of = f" of {total:,}" if total else ""
    return DownloadError(
        f"{url}: the transfer broke after {have:,}{of} bytes ({why}); run the same command "
        f"again to resume (the bytes so far are kept in {part})"
    )


# --- Writing, checking and installing a file ------------------------------------------------


def _part_path(folder: Path, name: str) -> Path:
    """Where `name` is written until it is checked: hidden, and never the final name."""
    return folder / f".{name}.part"


@contextmanager
def _writing(part: Path, name: str, mode: str) -> Iterator[BinaryIO]:
    """`part` opened to write; a full disk deletes it and says so."""
    try:
        with part.open(mode) as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        part.unlink(missing_ok=True)
        raise DownloadError(
            f"{part.parent}: no space left to write {name}; nothing was kept: free some "
            "space, or set ALIGNMT_DATA to a folder on another disk"
        ) from error


def _pump(src: BinaryIO, out: BinaryIO, bar: tqdm) -> None:
    with bar:
        for block in iter(lambda: src.read(_BLOCK), b""):
            out.write(block)
            bar.update(len(block))


def _bar(name: str, total: int | None, have: int, progress: bool) -> tqdm:
    return tqdm(
        total=total,
        initial=have,
        desc=name,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        disable=not progress,
    )


def _excerpt(file: Pinned, archive: Path, part: Path) -> None:
    """The first lines of the archive's member, as `file.excerpt` names them, into `part`."""
    excerpt = file.excerpt
    assert excerpt is not None
    try:
        with zipfile.ZipFile(archive) as zipped:
            members = [n for n in zipped.namelist() if Path(n).name == excerpt.member]
            if not members:
                raise _Refused(f"{archive}: holds no {excerpt.member}")
            with zipped.open(members[0]) as src, _writing(part, file.name, "wb") as out:
                for line in itertools.islice(src, excerpt.lines):
                    out.write(line if line.endswith(b"\n") else line + b"\n")
    except zipfile.BadZipFile as error:
        raise _Refused(f"{archive}: not a zip archive ({error})") from error


def _install(file: Pinned, part: Path, folder: Path, *, where: str, advice: str) -> None:
    """`part` renamed to the file's name once its size and SHA-256 are the pinned ones;
    deleted otherwise."""
    size, digest = part.stat().st_size, _sha256(part)
    if (size, digest) != (file.size, file.sha256):
        part.unlink()
        raise _Refused(
            f"{where}: {size:,} bytes with SHA-256 {digest[:16]}..., not the pinned "
            f"{file.size:,} bytes with {file.sha256[:16]}...: {advice}; nothing was kept"
        )
    os.replace(part, folder / file.name)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
