"""Reliability drills: faults sent at alignmt, many times each, and whether its promises held.

    python benchmarks/drills.py                  # every drill at full count (about 15 minutes)
    python benchmarks/drills.py --only kills     # one drill (see `drills`)
    python benchmarks/drills.py --scale 0.1      # a tenth of each count
    python benchmarks/drills.py --engine flax    # the training drills, train.engine=flax

Each drill sends its faults, checks what alignmt promises after each, and reports how many
were tried and how many held; the table it prints is docs/reliability.md's. The drills
themselves live in drill_runs.py (kills), drill_signals.py, drill_faults.py (disks, non-finite
updates), drill_args.py (bad run folders and arguments), drill_inputs.py (corpora and
translate input from the wild, written by drill_texts.py) and drill_server.py (the server
under attack, with requests from drill_requests.py); each returns a `drill_common.Tally`
result, and tests/ runs each with a few faults. With `--engine flax` the drills on training
(`FLAX`) train with `train.engine=flax`; the others do not depend on the engine that
trained the model, and torchrun is PyTorch's. Every process a drill starts is bounded in
time. Run from the repository root, with nothing else using the CPU (the kills draw their
moments from the time an uninterrupted run takes). Needs root for the full-tmpfs case of
`disks` (it is skipped otherwise, and says so).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path

# Run as a script, this file's folder is on the path but not the repository root, from
# which the drills import each other (as `benchmarks.drill_common`, ...).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import (
    drill_args,
    drill_faults,
    drill_inputs,
    drill_runs,
    drill_server,
    drill_signals,
)

from alignmt.training.run import train

# The drills on training, which run with either engine
FLAX = ("kills", "kills_corpus", "signals", "disks", "nonfinite")


def drills(
    scale: float, workdir: Path, run_dir: Callable[[], Path], engine: str = "torch"
) -> dict[str, tuple[str, Callable]]:
    """Name -> (what it sends, the call), at `scale` times the full counts; `run_dir` trains
    the model that translate, bad_inputs and server drill on, when first called."""

    def n(full: int) -> int:
        return max(1, round(full * scale))

    on = {"engine": engine}
    table = {
        "kills": (
            f"{n(20)} SIGKILLs, reversal task",
            lambda: drill_runs.kills(workdir / "kills", n(20), **on),
        ),
        "kills_corpus": (
            f"{n(20)} SIGKILLs, corpus with validation",
            lambda: drill_runs.kills(workdir / "kills_corpus", n(20), corpus=True, **on),
        ),
        "kills_torchrun": (
            f"{n(10)} SIGKILLs of one of 2 torchrun processes",
            lambda: drill_runs.kills(workdir / "kills_ddp", n(10), nproc=2, corpus=True),
        ),
        "signals": (
            f"{n(10)} SIGTERM / SIGINT",
            lambda: drill_signals.signals(workdir / "signals", n(10), **on),
        ),
        "signals_torchrun": (
            f"{n(10)} SIGTERM / SIGINT to one of 2 torchrun processes",
            lambda: drill_signals.signals(workdir / "signals_ddp", n(10), steps=300, nproc=2),
        ),
        "disks": (
            "checkpoint writes into /dev/full, a full tmpfs, a read-only folder",
            lambda: drill_faults.disks(workdir / "disks", **on),
        ),
        "nonfinite": (
            f"{n(20)} NaN / inf losses and gradients, and a streak",
            lambda: drill_faults.nonfinite(workdir / "nonfinite", n(20), **on),
        ),
        "corpora": (
            f"{n(200)} fuzzed corpora",
            lambda: drill_inputs.corpora(workdir / "corpora", n(200)),
        ),
        "translate": (
            f"translate {n(10_000):,} fuzzed lines",
            lambda: drill_inputs.translations(run_dir(), workdir / "translate", n(10_000)),
        ),
        "bad_inputs": (
            "damaged checkpoints x 4 commands, resume mismatches, bad flags",
            lambda: drill_args.bad_inputs(workdir / "bad_inputs", run_dir()),
        ),
        "server": (
            f"{n(10_000):,} fuzzed requests, {n(20)} slow clients",
            lambda: drill_server.server(run_dir(), n(10_000), n(20)),
        ),
    }
    return table if engine == "torch" else {name: table[name] for name in FLAX}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these drills only")
    parser.add_argument("--scale", type=float, default=1.0, help="share of the full counts")
    parser.add_argument(
        "--engine",
        "--backend",
        dest="engine",
        choices=("torch", "flax"),
        default="torch",
        help=f"train.engine of {FLAX}",
    )
    parser.add_argument("--out", help="results as JSON (default runs/drills[_flax].json)")
    args = parser.parse_args()
    out = Path(args.out or f"runs/drills{'_flax' if args.engine == 'flax' else ''}.json")
    workdir = Path(tempfile.mkdtemp(prefix="alignmt-drills-"))

    @cache
    def run_dir() -> Path:  # what translate, serve and args use
        return train(drill_runs.corpus_config(workdir / "model", steps=300), progress=False).run_dir

    try:
        table = drills(args.scale, workdir, run_dir, args.engine)
        unknown = sorted(set(args.only or ()) - set(table))
        if unknown:
            parser.error(f"--only {' '.join(unknown)}: not among {', '.join(table)}")
        results = {}
        for name in args.only or table:
            what, call = table[name]
            began = time.monotonic()
            result = call()
            results[name] = {"what": what, "seconds": round(time.monotonic() - began, 1), **result}
            print(
                f"{name}: {result['held']} of {result['tried']} held "
                f"({results[name]['seconds']} s)",
                flush=True,
            )
            for failure in result["failures"]:
                print(f"  {failure}", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(
        "\n| drill | what was sent | tried | held | seconds |\n| --- | --- | ---: | ---: | ---: |"
    )
    for name, r in results.items():
        print(f"| {name} | {r['what']} | {r['tried']:,} | {r['held']:,} | {r['seconds']} |")


if __name__ == "__main__":
    main()
