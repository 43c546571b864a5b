"""A run's lexical shortlist on disk: `shortlist.safetensors` in the run folder, two int64
tensors (`table`, `frequent`; see text/shortlist.py), written through `rundir.publish`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save

from alignmt.checkpoint.rundir import publish
from alignmt.text.shortlist import Shortlist

SHORTLIST = "shortlist.safetensors"


def save_shortlist(run_dir: str | Path, shortlist: Shortlist) -> Path:
    """Write `shortlist` into the run folder; returns its path."""
    tensors = {"table": shortlist.table, "frequent": shortlist.frequent}
    return publish(Path(run_dir) / SHORTLIST, lambda tmp: tmp.write_bytes(save(tensors)))


def load_shortlist(run_dir: str | Path) -> Shortlist | None:
    """The run folder's shortlist; None when it has none."""
    path = Path(run_dir) / SHORTLIST
    if not path.is_file():
        return None
    try:
        tensors = load_file(str(path))
        shortlist = Shortlist(tensors["table"], tensors["frequent"])
    except (SafetensorError, KeyError) as err:
        raise ValueError(
            f"{path}: not a readable shortlist ({err}); delete it and build it again with "
            "`alignmt shortlist`"
        ) from None
    if shortlist.table.ndim != 2 or shortlist.frequent.ndim != 1:
        raise ValueError(f"{path}: table must be (V_src, L) and frequent (F,)")
    return Shortlist(shortlist.table.astype(np.int64), shortlist.frequent.astype(np.int64))
