"""The signal drill: SIGTERM or SIGINT mid-training must exit 0 within `SIGNAL_BOUND` seconds
with a checkpoint of the step it stopped at, and the model a task run translates with;
`--resume` then ends as an uninterrupted run, bit for bit. Under torchrun (2 processes) one
rank is signalled, as a scheduler pre-empting one node does, and both stop at the same step.
It trains with either engine (`train.engine`), on the runs of drill_runs.py, and returns a
`drill_common.Tally` result as every drill does.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

from benchmarks.drill_common import outcome
from benchmarks.drill_runs import (
    Reference,
    differences,
    faulted,
    finish,
    last_step,
    reference_run,
    reverse_config,
    run_to_end,
    start,
    uninterrupted,
    workers,
    write_config,
)

from alignmt.config import Config

SIGNAL_BOUND = 10.0  # seconds from a signal to the exit, checkpoint written


def signals(
    workdir: Path,
    count: int,
    seed: int = 0,
    steps: int = 1000,
    engine: str = "torch",
    nproc: int = 1,
    reference: Reference | None = None,
    sent: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT),
) -> dict:
    """The signals `sent` in turn, one into each of `count` runs, at random moments of
    training; each run is then resumed to its end and compared with an uninterrupted run
    (`reference`, trained here unless given; then `steps` and `engine` are its). With
    `nproc` processes under torchrun, one rank is signalled."""
    rng = random.Random(seed)
    if reference is None:
        keys = {"steps": steps, "save_every": 0, "engine": engine}
        if nproc > 1:
            reference, problems = reference_run(workdir, corpus=False, nproc=nproc, **keys)
        else:  # in this process: its time draws no moments
            cfg = reverse_config(workdir / "whole", **keys)
            reference, problems = Reference(cfg, 0.0), uninterrupted(cfg)
        if problems:
            return outcome([problems])
    logged = _logged(Path(reference.cfg.out_dir))
    results = []
    for trial in range(count):
        cfg = faulted(reference, workdir / f"signalled{trial}")
        problems, stopped = _signal_once(cfg, sent[trial % len(sent)], rng, logged, nproc)
        ended = differences(Path(cfg.out_dir), Path(reference.cfg.out_dir), stopped)
        results.append(problems + (ended if stopped else []))
    return outcome(results)


def _logged(run: Path) -> tuple[list[int], float]:
    """The steps a finished run logged its intervals at, and the seconds an interval took."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    intervals = [r for r in records if "loss" in r]
    seconds = intervals[-1]["seconds"] - intervals[0]["seconds"]
    return [r["step"] for r in intervals], seconds / max(1, len(intervals) - 1)


def _last_logged(metrics: Path) -> int:
    """The last step a running run has logged an interval at (0 before its first)."""
    lines = metrics.read_text().splitlines() if metrics.is_file() else []
    records = [json.loads(line) for line in lines if line.endswith("}")]  # not one half-written
    return max((r["step"] for r in records if "loss" in r), default=0)


def _signal_once(
    cfg: Config, sent: signal.Signals, rng: random.Random, logged: tuple, nproc: int
) -> tuple[list[str], int]:
    """Signal a training run (one of its ranks) once, at a random moment of its training
    (`logged`: the reference's logged steps and seconds per interval), check how it stopped,
    and resume it to the end: (problems, the step it stopped at; 0 if it did not)."""
    run_dir, config = Path(cfg.out_dir), write_config(cfg)
    # In steps, not seconds, so that it lands mid-training however fast this run goes: in
    # seconds it could land at exit, where Python has given the signals back to the default
    steps, interval = logged
    after = rng.choice([s for s in steps if s <= 0.6 * steps[-1]] or steps[:1])
    lag = rng.uniform(0, 1) * interval
    process = start(config, nproc=nproc)
    while process.poll() is None and _last_logged(run_dir / "metrics.jsonl") < after:
        time.sleep(0.01)
    time.sleep(lag)
    if process.poll() is not None:
        return [f"{run_dir}: ended before the {sent.name} could be sent; lengthen the run"], 0
    sent_at = time.monotonic()
    os.kill(rng.choice(workers(process, nproc)), sent)
    status, out, err = finish(process, timeout=60)
    took = time.monotonic() - sent_at
    problems = []
    # rank 0 reports; a signal to another rank reaches it as the stop all ranks agree on
    heard = f"{sent.name}: stopping at step" in err
    told = f"stopped by {sent.name} at step" in out or (
        nproc > 1 and "stopped by a signal to another process at step" in out
    )
    if status != 0 or not heard or not told:
        problems.append(
            f"{run_dir}: {sent.name}: exit {status}, said {out.strip()!r} {err.strip()[-300:]!r}"
        )
    if took > SIGNAL_BOUND:
        problems.append(f"{run_dir}: {sent.name}: took {took:.1f} s to stop")
    if problems:
        return problems, 0
    said = int(out.split(" at step ")[1].split(",")[0])
    if last_step(run_dir / "last.safetensors") != said:
        problems.append(f"{run_dir}: stopped at step {said}, checkpoint of another step")
    if not (run_dir / "model.safetensors").is_file():
        problems.append(f"{run_dir}: stopped at step {said} without a model to translate with")
    return problems + run_to_end(cfg, "--resume", nproc=nproc)[1], said
