"""Checkpoint averaging: the element-wise mean of the weights a run kept at its last N steps,
written as a new run folder that every command loads. Plain arrays: no framework needed.

Averaging the parameters of the last few checkpoints of one run smooths out the noise of the
final updates and usually gains a little BLEU for nothing (Junczys-Dowmunt et al. 2016;
Vaswani et al. 2017, §6.1). Only checkpoints of the same run average meaningfully: they lie
close together in one basin of the loss, so their mean does too. The candidates are the run's
snapshots (`train.snapshot_every`) and its last checkpoint; the best model
(model.safetensors) is a copy of one of these steps, so it adds nothing of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save

from alignmt.checkpoint.format import (
    LAST,
    TRAIN_PREFIX,
    WEIGHTS,
    load_header,
    readable,
    snapshot_path,
    snapshot_steps,
)
from alignmt.checkpoint.rundir import check_new_run, clear_run, publish, write_text
from alignmt.config import dump_config


@dataclass
class Averaged:
    """What `average_run` wrote."""

    path: Path  # the new run folder's model.safetensors
    steps: list[int]  # the training steps averaged, oldest first


def kept_steps(run_dir: str | Path) -> dict[int, Path]:
    """Every training step whose weights the run in `run_dir` kept, oldest first: its
    snapshots, and last.safetensors where it is newer than all of them."""
    run_dir = Path(run_dir)
    kept = {step: snapshot_path(run_dir, step) for step in snapshot_steps(run_dir)}
    if (run_dir / LAST).is_file():
        kept.setdefault(load_header(run_dir / LAST).step, run_dir / LAST)
    return dict(sorted(kept.items()))


def average_run(run_dir: str | Path, last: int, out: str | Path, *, overwrite: bool) -> Averaged:
    """Average the weights of the last `last` kept steps of `run_dir` into the run folder
    `out` (its model.safetensors and config.yaml), under the newest step's header.

    Raises:
        ValueError: fewer than two steps to average, a checkpoint of another model, or an
            `out` that holds a run (unless `overwrite`).
    """
    run_dir, out = Path(run_dir), Path(out)
    kept = kept_steps(run_dir)
    if last < 2 or len(kept) < last:
        have = ", ".join(map(str, kept)) or "none"
        raise ValueError(
            f"{run_dir}: --last {last} needs at least two kept steps and at most the {len(kept)} "
            f"this run kept (steps {have}); train with train.snapshot_every > 0 to keep more"
        )
    if out.resolve() == run_dir.resolve():
        raise ValueError(f"{out}: the averaged model needs a folder of its own, not {run_dir}")
    if problem := check_new_run(out, resume=False, overwrite=overwrite):
        raise ValueError(problem)
    steps = list(kept)[-last:]
    newest = load_header(kept[steps[-1]])
    for step in steps[:-1]:  # another run's snapshot copied in would average to nonsense
        header = load_header(kept[step])
        if (header.config.model, header.src_vocab, header.tgt_vocab) != (
            newest.config.model,
            newest.src_vocab,
            newest.tgt_vocab,
        ):
            raise ValueError(
                f"{kept[step]}: another model or other vocabularies than {kept[steps[-1]]}; "
                "only checkpoints of one run can be averaged"
            )
    mean = _mean_weights([kept[step] for step in steps])
    with safe_open(str(kept[steps[-1]]), framework="np") as f:
        metadata = dict(f.metadata() or {})
    metadata.pop("train_state", None)
    metadata["averaged_steps"] = ",".join(map(str, steps))
    clear_run(out)  # what an overwritten run left (its last checkpoint) would not match
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "config.yaml", dump_config(newest.config))
    data = save(mean, metadata=metadata)
    path = publish(out / WEIGHTS, lambda tmp: tmp.write_bytes(data))
    return Averaged(path=path, steps=steps)


def _mean_weights(paths: list[Path]) -> dict[str, np.ndarray]:
    """The element-wise mean of the model tensors of `paths`, summed in float64 and stored
    in each tensor's own dtype (so that N float32 copies of one tensor average to it
    exactly)."""
    total: dict[str, np.ndarray] = {}
    dtypes: dict[str, np.dtype] = {}
    for path in paths:
        with readable(path), safe_open(str(path), framework="np") as f:
            for name in f.keys():  # noqa: SIM118
                if name.startswith(TRAIN_PREFIX):
                    continue
                tensor = f.get_tensor(name)
                dtypes[name] = tensor.dtype
                total[name] = total.get(name, 0) + tensor.astype(np.float64)
    return {name: (t / len(paths)).astype(dtypes[name]) for name, t in total.items()}
