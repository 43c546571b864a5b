"""A run's record of itself: `metrics.jsonl`, TensorBoard events and `curves.png`.

One JSON record per logged interval (step, loss, lr, epoch, seconds, tokens, skipped) and
per evaluation (step, valid_loss, bleu, seconds), each flushed as it is written. A resumed
run keeps the records up to the step it resumes from and redoes the later ones, so the file
reads as one uninterrupted run.
Only rank 0 of a distributed run writes here.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from alignmt.checkpoint.rundir import WriteError, write_text

log = logging.getLogger(__name__)

METRICS = "metrics.jsonl"


class RunLog:
    """The records of the run in `run_dir`, in memory and appended to its metrics file."""

    def __init__(self, run_dir: Path, step: int, *, tensorboard: bool) -> None:
        self.run_dir = run_dir
        self.steps, self.losses, self.evals = _history(run_dir / METRICS, step)
        self.board = _tensorboard(run_dir) if tensorboard else None
        self._file = (run_dir / METRICS).open("a")
        self._failed = False

    def interval(self, record: dict[str, Any]) -> None:
        """A training interval's record; its loss is None when every update was skipped."""
        if record["loss"] is not None:
            self.steps.append(record["step"])
            self.losses.append(record["loss"])
        self._write(record)

    def evaluation(self, record: dict[str, Any]) -> None:
        self.evals.append(record)
        self._write(record)

    def close(self) -> None:
        """Close the files and draw the curves; after a failed write (a full disk), only
        what can still be done, so that the error that stopped the run is the one reported."""
        try:
            self._file.close()
        except OSError:
            if not self._failed:
                raise
        if self.board:
            self.board.close()
        try:
            plot_curves(self.run_dir / "curves.png", self.steps, self.losses, self.evals)
        except OSError as err:  # drawn again from metrics.jsonl by the next run or resume
            log.warning("could not draw %s: %s", self.run_dir / "curves.png", err)

    def _write(self, record: dict[str, Any]) -> None:
        try:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()
        except OSError as err:
            self._failed = True
            raise WriteError(
                f"cannot write {METRICS} in {self.run_dir}: {err.strerror or err}; it holds "
                "the records up to the last one written"
            ) from err
        for key, value in record.items():
            if self.board and value is not None and key not in ("step", "seconds", "epoch"):
                self.board.add_scalar(key, value, record["step"])


def _history(path: Path, step: int) -> tuple[list[int], list[float], list[dict]]:
    """The records a resumed run keeps: those up to `step` (later ones are redone). The file
    is rewritten with just those, atomically; a last line cut short by a kill is dropped."""
    steps, losses, evals, kept = [], [], [], []
    lines = path.read_text().splitlines() if step and path.is_file() else []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except ValueError:
            if number == len(lines):  # written after the checkpoint, when the run was killed
                break
            raise ValueError(
                f"{path}:{number}: not a JSON record; the file was damaged or "
                "edited (delete the line to resume)"
            ) from None
        if record["step"] > step:
            continue
        kept.append(line)
        if "valid_loss" in record:
            evals.append(record)
        elif record["loss"] is not None:
            steps.append(record["step"])
            losses.append(record["loss"])
    write_text(path, "".join(line + "\n" for line in kept))
    return steps, losses, evals


def _tensorboard(run_dir: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:  # torch imports it lazily; the package is optional
        raise ValueError(
            "train.tensorboard=true needs the tensorboard package: pip install tensorboard"
        ) from err
    return SummaryWriter(str(run_dir / "tensorboard"))


def plot_curves(path: Path, steps, losses, evals) -> None:
    # imported here: matplotlib costs every training process 0.6 s of start-up, and only
    # the end of a run plots
    from alignmt.analysis.plot import loss_curves, save_png

    curves = {"train": (steps, losses)}
    if evals:
        curves["valid"] = ([e["step"] for e in evals], [e["valid_loss"] for e in evals])
    if steps:
        save_png(loss_curves(curves, title=path.parent.name), path)
