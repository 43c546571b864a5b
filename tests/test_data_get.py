"""`alignmt data`: corpora downloaded from a server on 127.0.0.1 that the tests start, or copied
from a mirror folder, each file checked against its pinned size and SHA-256; a download that
breaks resumes, and one that cannot give the pinned bytes leaves the data folder as it was.
No test touches another address."""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from alignmt.cli import main
from alignmt.text import download
from alignmt.text.corpora import Corpus, Excerpt, Pinned, data_root, locate
from alignmt.text.corpus import CorpusError
from alignmt.text.download import DownloadError, get
from tests.conftest import SHARED, needs_shared_data

# --- A file server on 127.0.0.1 -------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    """Serves `server.files` with range requests; `server.how[path]` misbehaves on purpose:
    "html" (an error page), ("cut", n) (closes after n bytes), ("slow", seconds per block)."""

    def do_GET(self):
        server = self.server
        server.ranges.append((self.path, self.headers.get("Range")))
        how = server.how.get(self.path, "ok")
        if how == "html":
            return self._send(200, b"<!DOCTYPE html><html><body>Sign in</body></html>", "text/html")
        if self.path not in server.files:
            return self._send(404, b"not found", "text/plain")
        body = server.files[self.path]
        start = (
            int(self.headers["Range"].split("=")[1].rstrip("-")) if "Range" in self.headers else 0
        )
        if start >= len(body):
            return self._send(416, b"", "text/plain")
        self.send_response(206 if start else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body) - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.end_headers()
        rest = body[start:]
        if how[0] == "cut":
            rest = rest[: how[1]]
        for at in range(0, len(rest), 4096):
            self.wfile.write(rest[at : at + 4096])
            if how[0] == "slow":
                time.sleep(how[1])

    def _send(self, status, body, kind):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        """Silent: the tests read `server.ranges`, not a log."""


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.files, httpd.how, httpd.ranges = {}, {}, []
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _pinned(server, name: str, body: bytes, **changes) -> Pinned:
    """`body` served at /NAME and pinned with its own size and SHA-256."""
    server.files[f"/{name}"] = body
    return Pinned(
        name, f"{server.url}/{name}", len(body), hashlib.sha256(body).hexdigest(), **changes
    )


def _gz(size: int, seed: int = 0) -> bytes:
    """A gzip file of about `size` bytes that does not compress."""
    return gzip.compress(random.Random(seed).randbytes(size), mtime=0)


def _corpus(*files: Pinned) -> Corpus:
    return Corpus("toy", "a toy corpus", "CC0", "nobody", files)


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# --- Downloads ------------------------------------------------------------------------------


def test_a_download_puts_checked_files_in_the_corpus_folder_and_a_second_keeps_them(
    server, tmp_path
):
    files = (
        _pinned(server, "train.en.gz", _gz(50_000)),
        _pinned(server, "train.de.gz", _gz(60_000, seed=1)),
        _pinned(server, "extra.en.gz", _gz(1_000, seed=2), default=False),
    )
    got = get(_corpus(*files), tmp_path)
    assert got.fetched == ["train.en.gz", "train.de.gz"] and not got.already
    for file in files[:2]:
        assert (tmp_path / "toy" / file.name).read_bytes() == server.files[f"/{file.name}"]
    assert _listing(tmp_path) == ["toy", "toy/train.de.gz", "toy/train.en.gz"]  # no .part
    again = get(_corpus(*files), tmp_path, every=True)
    assert again.already == ["train.en.gz", "train.de.gz"] and again.fetched == ["extra.en.gz"]
    assert [path for path, _ in server.ranges].count("/train.en.gz") == 1


def test_a_broken_transfer_keeps_its_bytes_and_the_next_try_asks_only_for_the_rest(
    server, tmp_path
):
    file = _pinned(server, "big.gz", _gz(200_000))
    server.how["/big.gz"] = ("cut", 50_000)
    with pytest.raises(DownloadError) as broke:
        get(_corpus(file), tmp_path)
    assert f"{file.url}: the transfer broke after 50,000 of {file.size:,} bytes" in str(broke.value)
    assert "run the same command again to resume" in str(broke.value)
    assert _listing(tmp_path) == ["toy", "toy/.big.gz.part"]  # nothing looks complete
    server.how.clear()
    assert get(_corpus(file), tmp_path).fetched == ["big.gz"]
    assert server.ranges[-1] == ("/big.gz", "bytes=50000-")
    assert (tmp_path / "toy/big.gz").read_bytes() == server.files["/big.gz"]
    assert _listing(tmp_path) == ["toy", "toy/big.gz"]


def test_a_download_killed_midway_leaves_no_file_and_resumes(server, tmp_path):
    file = _pinned(server, "big.gz", _gz(400_000))
    server.how["/big.gz"] = ("slow", 0.02)  # about 200 KB/s
    child = subprocess.Popen(
        [sys.executable, "-c", _GET_IN_A_CHILD, json.dumps([str(tmp_path), file.__dict__])]
    )
    part = tmp_path / "toy/.big.gz.part"
    for _ in range(500):
        if part.exists() and part.stat().st_size > 20_000:
            break
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait()
    have = part.stat().st_size
    assert 0 < have < file.size and not (tmp_path / "toy/big.gz").exists()
    server.how.clear()
    assert get(_corpus(file), tmp_path).fetched == ["big.gz"]
    assert server.ranges[-1] == ("/big.gz", f"bytes={have}-")
    assert (tmp_path / "toy/big.gz").read_bytes() == server.files["/big.gz"]


_GET_IN_A_CHILD = """
import json, sys
from pathlib import Path
from alignmt.text.corpora import Corpus, Pinned
from alignmt.text.download import get
root, file = json.loads(sys.argv[1])
get(Corpus("toy", "", "", "", (Pinned(**file),)), Path(root))
"""


def test_bytes_that_are_not_the_pinned_ones_are_refused_and_nothing_is_kept(server, tmp_path):
    good = _pinned(server, "train.en.gz", _gz(30_000))
    server.files["/train.en.gz"] = _gz(30_000, seed=9)  # the same size, other bytes
    (tmp_path / "other").mkdir()
    with pytest.raises(DownloadError) as refused:
        get(_corpus(good), tmp_path)
    message = str(refused.value)
    assert message.startswith(f"{good.url}: {len(server.files['/train.en.gz']):,} bytes with")
    assert f"not the pinned {good.size:,} bytes with {good.sha256[:16]}" in message
    assert message.endswith("nothing was kept")
    assert _listing(tmp_path) == ["other"]  # the data folder as it was


def test_an_html_page_where_a_file_was_expected_is_refused(server, tmp_path):
    file = _pinned(server, "train.en.gz", _gz(1_000))
    server.how["/train.en.gz"] = "html"
    with pytest.raises(DownloadError, match=r"/train\.en\.gz sent an HTML page, not train\.en\.gz"):
        get(_corpus(file), tmp_path)
    assert _listing(tmp_path) == []
    server.how.clear()
    server.files["/train.en.gz"] = b"plain text, not gzip" * 50  # nor a gzip file that is not
    with pytest.raises(DownloadError, match=r"did not send a \.gz file \(it starts b'plain"):
        get(_corpus(file), tmp_path)
    assert _listing(tmp_path) == []


def test_no_server_and_a_missing_file_say_what_to_do(server, tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    nowhere = Pinned("a.gz", f"http://127.0.0.1:{port}/a.gz", 10, "0" * 64)
    with pytest.raises(DownloadError, match=r"cannot connect .*alignmt data get toy --from DIR"):
        get(_corpus(nowhere), tmp_path)
    gone = Pinned("a.gz", f"{server.url}/a.gz", 10, "0" * 64)
    with pytest.raises(DownloadError, match=r"/a\.gz: HTTP 404 Not Found"):
        get(_corpus(gone), tmp_path)
    assert _listing(tmp_path) == []


def test_a_full_disk_deletes_the_partial_file_and_says_so(server, tmp_path, monkeypatch):
    file = _pinned(server, "train.en.gz", _gz(100_000))

    def fill_the_disk(src, out, bar):
        out.write(src.read(1000))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(download, "_pump", fill_the_disk)
    with pytest.raises(DownloadError) as full:
        get(_corpus(file), tmp_path)
    assert str(full.value) == (
        f"{tmp_path / 'toy'}: no space left to write train.en.gz; nothing was kept: free some "
        "space, or set ALIGNMT_DATA to a folder on another disk"
    )
    assert _listing(tmp_path) == []


def _zip(lines: list[bytes]) -> bytes:
    """An archive as manythings.org makes them: the file in a folder, beside macOS's shadow."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("__MACOSX/pairs/._fra.txt", b"not this one")
        archive.writestr("pairs/fra.txt", b"".join(lines))
    return buffer.getvalue()


def test_a_pinned_excerpt_is_cut_from_the_archive_and_checked(server, tmp_path):
    lines = [f"Go {i}.\tVa {i} !\tCC-BY #{i}\n".encode() for i in range(10)]
    server.files["/pairs.zip"] = _zip(lines)
    head = b"".join(lines[:4])
    file = Pinned(
        "pairs.tsv",
        f"{server.url}/pairs.zip",
        len(head),
        hashlib.sha256(head).hexdigest(),
        excerpt=Excerpt("pairs.zip", "fra.txt", 4),
    )
    assert get(_corpus(file), tmp_path).fetched == ["pairs.tsv"]
    assert (tmp_path / "toy/pairs.tsv").read_bytes() == head
    assert _listing(tmp_path) == ["toy", "toy/pairs.tsv"]  # the archive is not kept
    (tmp_path / "toy/pairs.tsv").unlink()
    server.files["/pairs.zip"] = _zip([b"Hi.\tSalut !\tCC-BY #0\n", *lines])  # revised
    with pytest.raises(DownloadError, match="the archive has been revised since alignmt pinned"):
        get(_corpus(file), tmp_path)
    assert _listing(tmp_path) == []


# --- Mirrors and the data folder ------------------------------------------------------------


def test_a_mirror_gives_what_it_has_refuses_what_differs_and_names_what_it_lacks(server, tmp_path):
    files = [_pinned(server, f"{n}.en.gz", _gz(2_000, seed=i)) for i, n in enumerate("abcd")]
    mirror = tmp_path / "mirror"
    (mirror / "toy").mkdir(parents=True)
    (mirror / "toy/a.en.gz").write_bytes(server.files["/a.en.gz"])  # laid out as the cache
    (mirror / "b.en.gz").write_bytes(server.files["/b.en.gz"])  # or the files themselves
    (mirror / "toy/c.en.gz").write_bytes(_gz(2_000, seed=7))  # not the published bytes
    got = get(_corpus(*files), tmp_path / "data", mirror=mirror)
    assert got.fetched == ["a.en.gz", "b.en.gz"] and got.missing == ["d.en.gz"]
    assert len(got.refused) == 1 and got.refused[0].startswith(f"{mirror / 'toy/c.en.gz'}: ")
    assert _listing(tmp_path / "data") == ["toy", "toy/a.en.gz", "toy/b.en.gz"]
    assert "the mirror lacks 1: d.en.gz" in got.summary()
    assert not server.ranges  # nothing was downloaded


def test_the_data_folder_is_alignmt_data_else_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ALIGNMT_DATA", str(tmp_path / "mine"))
    assert data_root() == tmp_path / "mine"
    monkeypatch.delenv("ALIGNMT_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert data_root() == tmp_path / "xdg/alignmt/data"
    assert data_root().parts[-2:] == ("alignmt", "data") or sys.platform == "win32"


# --- The command, on the real mirror --------------------------------------------------------


@pytest.mark.needs_shared_data
@needs_shared_data
def test_data_get_from_the_shared_mirror_then_path_and_list(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ALIGNMT_DATA", str(tmp_path))
    assert main(["data", "path", "multi30k:train"]) == 2
    assert "get it with: alignmt data get multi30k" in capsys.readouterr().err
    assert main(["data", "get", "multi30k", "tatoeba", "--from", str(SHARED / "data")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"multi30k: 6 files in {tmp_path / 'multi30k'} (6 new)",
        f"tatoeba: 1 file in {tmp_path / 'tatoeba'} (1 new)",
    ]
    assert main(["data", "path", "multi30k:train"]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'multi30k/train'}\n"
    assert locate("tatoeba:eng-fra", None, "x") == str(tmp_path / "tatoeba/eng-fra.tsv")
    # --all: what the mirror has is kept, what it lacks is named, and the exit status says so
    assert main(["data", "get", "multi30k", "--all", "--from", str(SHARED / "data")]) == 1
    assert "(0 new); the mirror lacks 16: train.fr.gz, train.cs.gz" in capsys.readouterr().out
    with pytest.raises(CorpusError, match="get it with: alignmt data get multi30k --all"):
        locate("multi30k:test_2017_flickr", ("en", "de"), "data.test")
    assert main(["data", "list"]) == 0
    listing = capsys.readouterr().out
    assert f"data folder: {tmp_path}" in listing
    assert (
        "multi30k:train               en de fr cs    2.40 MB  default: en de   have 2/4" in listing
    )
    assert (
        "tatoeba:eng-fra              eng-fra.tsv    0.56 MB  default          have 1/1" in listing
    )
    assert listing.count("licence: ") == listing.count("cite: ") == 2
    assert main(["data", "get", "wmt14"]) == 2
    assert "unknown corpus 'wmt14'; alignmt knows multi30k, tatoeba" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["multi30k", "tatoeba"]
