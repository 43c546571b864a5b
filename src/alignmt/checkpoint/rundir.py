"""A run folder's files on disk: starting a run in a folder, and writing its files so that
a kill, a power cut or a full disk at any moment leaves each one either old or new.

A folder that holds a run is never reused by accident: a new run there is refused unless
it resumes the run (`--resume`) or replaces it (`--overwrite`, which first deletes what
training wrote there and nothing else). Every file training writes whole goes through
`publish`: written beside its name, flushed to disk, renamed into place, and the rename
flushed too. A write that fails (no space, a read-only folder) removes its partial file and
says which folder and why, keeping whatever was there before.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

# What training writes in a run folder; `--overwrite` deletes these and only these.
RUN_FILES = (
    "model.safetensors",
    "last.safetensors",
    "metrics.jsonl",
    "curves.png",
    "shortlist.safetensors",
)
RUN_FOLDERS = ("snapshots", "tensorboard")


class RunFolderError(ValueError):
    """A run folder that cannot be started in as asked (it holds another run)."""


class WriteError(OSError):
    """A file of a run could not be written; what was there before is kept."""


def earlier_run(run_dir: Path) -> list[str]:
    """The names of what an earlier run left in `run_dir` ([] for a new or empty folder)."""
    return [name for name in (*RUN_FILES, *RUN_FOLDERS) if (run_dir / name).exists()]


def check_new_run(run_dir: Path, *, resume: bool, overwrite: bool) -> str | None:
    """Why a run may not start in `run_dir` as asked, or None. A resumed run may start in
    any folder; a new one only in a folder holding no run, unless it may overwrite it."""
    found = earlier_run(run_dir)
    if resume or overwrite or not found:
        return None
    return (
        f"{run_dir} holds an earlier run ({', '.join(found)}): continue it with --resume "
        "(in Python, resume=True), start afresh with --overwrite (overwrite=True, which "
        "deletes those), or choose another out_dir"
    )


def clear_run(run_dir: Path) -> None:
    """Delete what training wrote in `run_dir`, and any half-written file of it."""
    for name in RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)
    for name in RUN_FOLDERS:
        shutil.rmtree(run_dir / name, ignore_errors=True)
    for partial in run_dir.glob("*.tmp"):
        partial.unlink()


def publish(path: Path, write: Callable[[Path], None]) -> Path:
    """Write `path` atomically and durably: `write(tmp)` writes the content beside it, which
    is flushed to disk and renamed into place. On failure the partial file is removed and a
    `WriteError` names the folder and the cause; `path` keeps its old content."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        _fsync(tmp)  # on disk before it takes the name: a power cut leaves the old or the new
        os.replace(tmp, path)
        _fsync(path.parent)  # and the rename itself
    except OSError as err:
        tmp.unlink(missing_ok=True)
        kept = "the previous one is kept" if path.exists() else "there was none before"
        raise WriteError(
            f"cannot write {path.name} in {path.parent}: {err.strerror or err} ({kept})"
        ) from err
    return path


def write_text(path: Path, text: str) -> Path:
    """`publish` a text file."""
    return publish(path, lambda tmp: tmp.write_text(text))


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
