"""Drills on faults inside a training run: a checkpoint write that fails, an update that is
not finite. Each returns a `drill_common.Tally` result, as those of drill_runs.py do.

- `disks`: checkpoint writes that fail for lack of space (a write through to /dev/full; a
  full tmpfs, where mounting one is allowed) or on a read-only filesystem (EROFS raised
  in-process): exit 1 naming the folder and the cause, the last good checkpoint byte for
  byte as it was, no partial file left, and a resume that ends as an uninterrupted run
  once the fault is gone.
- `nonfinite`: NaN and inf losses and gradients at random steps: each update is skipped and
  counted in metrics.jsonl, and the weights stay finite; `max_bad_steps` in a row stop the
  run with an error and leave the last good checkpoint, from which it resumes.

Both train with either engine (`train.engine`).
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import json
import os
import random
import subprocess
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from unittest import mock

import numpy as np
import torch
from benchmarks.drill_common import outcome, run_cli
from benchmarks.drill_runs import (
    differences,
    finish,
    last_step,
    reverse_config,
    run_to_end,
    start,
    uninterrupted,
    write_config,
)
from safetensors.torch import load_file

from alignmt.training.loop import TrainingError
from alignmt.training.run import train

# --- a full or read-only disk -----------------------------------------------------------------


def disks(workdir: Path, *, mounts: bool = True, engine: str = "torch", steps: int = 300) -> dict:
    """Checkpoint writes that fail: through to /dev/full; into a full tmpfs (with `mounts`,
    where this process may mount one); and on a read-only filesystem, in-process: the write
    raises EROFS as the kernel would (a filesystem with files open for writing cannot be
    remounted read-only under a running process)."""
    reference = reverse_config(workdir / "whole", engine=engine, steps=steps)
    problems = uninterrupted(reference)
    if problems:
        return outcome([problems])
    faults = {"dev_full": partial(_fail_a_write, fault=_through_dev_full, cause="No space")}
    if mounts and _can_mount(workdir / "probe"):
        faults["tmpfs_full"] = partial(_fail_a_write, fault=_fill_tmpfs, cause="No space")
    faults["read_only"] = _read_only
    results = []
    for name, fail in faults.items():
        folder = workdir / name
        try:
            found = fail(folder, engine=engine, steps=steps)
            found += differences(folder / "run", Path(reference.out_dir))
        finally:
            subprocess.run(["umount", str(folder)], capture_output=True)  # the tmpfs, if any
        results.append(found)
    return outcome(results)


def _fail_a_write(
    folder: Path,
    *,
    fault: Callable[[Path], Callable[[], None]],
    cause: str,
    engine: str,
    steps: int,
) -> list[str]:
    """Train in `folder`, bring on `fault` once a checkpoint is on disk, and check that the
    run stopped as it should and kept that checkpoint; then clear the fault (the callable
    `fault` returned) and resume to the end."""
    cfg = reverse_config(folder, engine=engine, steps=steps)
    run_dir, last = Path(cfg.out_dir), Path(cfg.out_dir) / "last.safetensors"
    if fault is _fill_tmpfs:
        folder.mkdir(parents=True, exist_ok=True)
        mount = ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)]
        subprocess.run(mount, check=True, capture_output=True)
    process = start(write_config(cfg))
    while process.poll() is None and not last.is_file():
        time.sleep(0.005)
    clear = fault(folder)
    good = last.read_bytes()  # no write can succeed from here on
    status, _, err = finish(process, timeout=120)
    problems = []
    if status != 1 or f"in {run_dir}" not in err or cause not in err or "Traceback" in err:
        problems.append(f"{folder.name}: exit {status}, said {err.strip()[-300:]!r}")
    if last.read_bytes() != good:
        problems.append(f"{folder.name}: the last good checkpoint changed")
    left = sorted(p.name for p in run_dir.glob("*.tmp"))
    if left:
        problems.append(f"{folder.name}: partial files left: {left}")
    clear()
    return problems + run_to_end(cfg, "--resume")[1]


def _through_dev_full(folder: Path) -> Callable[[], None]:
    """The next checkpoint's temporary file is a link to /dev/full: its write fails with
    ENOSPC as on a full disk, with no mount and no root."""
    tmp = folder / "run" / "last.safetensors.tmp"
    while True:
        try:
            tmp.symlink_to("/dev/full")
            return lambda: None  # the failed write removes the link itself
        except FileExistsError:  # a write is under way: plant it after
            time.sleep(0.001)


def _can_mount(probe: Path) -> bool:
    probe.mkdir(parents=True, exist_ok=True)
    mount = ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)]
    if subprocess.run(mount, capture_output=True).returncode:
        return False
    subprocess.run(["umount", str(probe)], check=True)
    return True


def _fill_tmpfs(folder: Path) -> Callable[[], None]:
    """Fill the tmpfs the run is on; the callable frees the space again."""
    if not os.path.ismount(folder):  # never fill a real disk
        raise RuntimeError(f"{folder} is not a mounted tmpfs")
    filler = folder / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as f:
        while True:
            f.write(bytes(1 << 16))
            f.flush()
    return filler.unlink


def _read_only(folder: Path, *, engine: str, steps: int) -> list[str]:
    """Train in-process, with every checkpoint write after the first raising EROFS."""
    cfg = reverse_config(folder, engine=engine, steps=steps)
    config, run_dir = write_config(cfg), Path(cfg.out_dir)
    real = Path.write_bytes

    def refused(path: Path, data: bytes) -> int:
        if path.parent == run_dir and (run_dir / "last.safetensors").is_file():
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real(path, data)

    with mock.patch.object(Path, "write_bytes", refused):
        status, err = run_cli(["train", str(config)])
        good = (run_dir / "last.safetensors").read_bytes()
    problems = []
    if status != 1 or f"in {run_dir}" not in err or "Read-only file system" not in err:
        problems.append(f"read_only: exit {status}, said {err.strip()[-300:]!r}")
    if last_step(run_dir / "last.safetensors") != 10 or list(run_dir.glob("*.tmp")):
        problems.append("read_only: the first checkpoint was not kept as it was")
    status, err = run_cli(["train", str(config), "--resume"])
    if status or (run_dir / "last.safetensors").read_bytes() == good:
        problems.append(f"read_only: the resumed run exited {status}: {err.strip()[-300:]!r}")
    return problems


# --- non-finite losses and gradients ----------------------------------------------------------


class _Blow(torch.autograd.Function):
    """The identity whose gradient is multiplied by `factor`: a finite loss with a NaN or
    infinite gradient."""

    @staticmethod
    def forward(ctx, loss: torch.Tensor, factor: float) -> torch.Tensor:
        ctx.factor = factor
        return loss.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.factor, None


POISONS = {
    "NaN loss": lambda loss: loss * float("nan"),
    "inf loss": lambda loss: loss * float("inf"),
    "NaN gradient": lambda loss: _Blow.apply(loss, float("nan")),
    "inf gradient": lambda loss: _Blow.apply(loss, float("inf")),
}


# The same faults in JAX, on (loss, gradient) as the differentiated function would return them:
# the gradient of loss * NaN (or * inf) is the gradient times NaN (or times inf, NaN where 0).
FLAX_POISONS = {
    "NaN loss": lambda loss, grad: (loss * np.nan, _times(grad, np.nan)),
    "inf loss": lambda loss, grad: (loss * np.inf, _times(grad, np.inf)),
    "NaN gradient": lambda loss, grad: (loss, _times(grad, np.nan)),
    "inf gradient": lambda loss, grad: (loss, _times(grad, np.inf)),
}


def _times(grad, factor: float):
    import jax  # here: JAX is an optional extra, and the PyTorch drills run without it

    return jax.tree_util.tree_map(lambda g: g * factor, grad)


@contextlib.contextmanager
def poisoned(at: dict[int, str], engine: str = "torch") -> Iterator[None]:
    """Training's loss poisoned (`POISONS`) at the given calls, counted from 1: PyTorch's
    before its backward pass, Flax's as its compiled gradient returns."""
    if engine == "flax":
        with _flax_poisoned(at):
            yield
        return
    module = importlib.import_module("alignmt.training.optim")
    real, calls = module.loss_of, [0]

    def loss_of(*args):
        calls[0] += 1
        loss = real(*args)
        return POISONS[at[calls[0]]](loss) if calls[0] in at else loss

    with mock.patch.object(module, "loss_of", loss_of):
        yield


def _flax_poisoned(at: dict[int, str]) -> contextlib.AbstractContextManager:
    """Each `flax_optim.Updates` made meanwhile with its gradient poisoned at `at`'s calls;
    the update that follows skips (or applies) what it gets, as it would in a real run."""
    module = importlib.import_module("alignmt.training.flax_optim")
    real_init, calls = module.Updates.__init__, [0]

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        grad = self.grad

        def poisoned_grad(*inputs):
            calls[0] += 1
            loss_grad = grad(*inputs)
            return FLAX_POISONS[at[calls[0]]](*loss_grad) if calls[0] in at else loss_grad

        self.grad = poisoned_grad

    return mock.patch.object(module.Updates, "__init__", init)


def nonfinite(workdir: Path, count: int, seed: int = 0, engine: str = "torch") -> dict:
    """`count` poisoned updates at random steps of one run, and then a run poisoned
    `max_bad_steps` times in a row."""
    rng = random.Random(seed)
    cfg = reverse_config(workdir / "scattered", steps=300, engine=engine)
    at = {step: rng.choice(sorted(POISONS)) for step in rng.sample(range(1, 301), count)}
    with poisoned(at, engine):
        result = train(cfg, progress=False)
    skipped = [
        json.loads(line).get("skipped")
        for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    problems = [] if skipped[-1] == count else [f"{count} poisoned, {skipped[-1]} skipped"]
    for name in ("last.safetensors", "model.safetensors"):
        path = result.run_dir / name
        problems += [f"{path}: {key} is not finite" for key in _not_finite(path)]
    results = [problems if i == 0 else [] for i in range(count)]  # one run holds them all
    return outcome([*results, _streak(workdir / "streak", rng, engine)])


def _streak(folder: Path, rng: random.Random, engine: str) -> list[str]:
    cfg = reverse_config(folder, steps=100, max_bad_steps=5, engine=engine)
    first = rng.randint(25, 90)
    try:
        with poisoned({step: "NaN loss" for step in range(first, first + 5)}, engine):
            train(cfg, progress=False)
        return [f"{folder}: 5 poisoned updates in a row did not stop the run"]
    except TrainingError as err:
        said = str(err)
    last = Path(cfg.out_dir) / "last.safetensors"
    problems = [] if "5 updates in a row" in said else [f"{folder}: said {said!r}"]
    # the last checkpoint before the error at step first + 4 (which writes none): one written
    # amid the streak holds the weights of the last applied update, as skipping changes nothing
    if last_step(last) != (first + 3) // 10 * 10:
        problems.append(f"{folder}: kept step {last_step(last)}, not the last checkpoint")
    if _not_finite(last):
        problems.append(f"{last}: not finite")
    problems += [] if train(cfg, progress=False, resume=True).step == 100 else ["no resume"]
    return problems


def _not_finite(path: Path) -> list[str]:
    """The floating-point tensors of the checkpoint at `path` that hold a NaN or an inf."""
    tensors = load_file(str(path))
    return [k for k, t in tensors.items() if t.is_floating_point() and not torch.isfinite(t).all()]
