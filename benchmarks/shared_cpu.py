"""The demo on a CPU shared with another process: its wall time alone, and beside one other
2-thread training, for each way of choosing threads.

    python benchmarks/shared_cpu.py                       # every way, a short demo (300 steps)
    python benchmarks/shared_cpu.py --steps 2000 --samples 500 --ways chosen   # the full demo

The ways:
- chosen: alignmt's default, the threads of the cores the other process leaves free
  (training/cores.py);
- two threads: `train.threads=2`, PyTorch's own count on 2 cores, which every run took before;
- two passive: the same with OMP_WAIT_POLICY=PASSIVE, OpenMP's waiting threads sleeping
  rather than spinning.

The busy process is `alignmt train configs/reverse.yaml train.threads=2`, started before
each measurement beside it and killed after. Prints a table: seconds alone, seconds beside,
the ratio, and what the demo said about its threads. Run from the repository root with
nothing else using the CPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAYS = {
    "chosen": ((), {}),
    "two threads": (("train.threads=2",), {}),
    "two passive": (("train.threads=2",), {"OMP_WAIT_POLICY": "PASSIVE"}),
}
WARM_SECONDS = 15.0  # the busy process's start: imports and data, before it trains


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    return {**env, **extra}


@contextmanager
def busy(folder: Path):
    """One other 2-thread training, running for the block."""
    command = [sys.executable, "-m", "alignmt", "train", "configs/reverse.yaml"]
    overrides = ["train.threads=2", "train.steps=10000000", f"out_dir={folder / 'busy'}"]
    other = subprocess.Popen(
        [*command, *overrides, "--overwrite"],
        cwd=ROOT,
        env=_env({}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(WARM_SECONDS)
    try:
        yield
    finally:
        other.kill()
        other.wait()


def demo(folder: Path, way: str, steps: int, samples: int) -> tuple[float, str]:
    """The demo's wall time, and the line it said about threads ('' for none)."""
    overrides, env = WAYS[way]
    command = [sys.executable, "-m", "alignmt", "demo", "--steps", str(steps)]
    command += ["--samples", str(samples), "--out", str(folder / "demo"), *overrides]
    start = time.perf_counter()
    run = subprocess.run(command, cwd=ROOT, env=_env(env), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{run.stderr}")
    said = [line for line in run.stderr.splitlines() if "busy with other processes" in line]
    return seconds, said[0] if said else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--ways", nargs="+", choices=list(WAYS), default=list(WAYS))
    args = parser.parse_args()
    print(f"alignmt demo --steps {args.steps} --samples {args.samples}, {os.cpu_count()} cores")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for way in args.ways:
            alone, _ = demo(folder, way, args.steps, args.samples)
            with busy(folder):
                beside, said = demo(folder, way, args.steps, args.samples)
            rows.append((way, alone, beside, said))
            print(f"  {way}: {alone:.1f} s alone, {beside:.1f} s beside", flush=True)
    print("\n| threads | alone (s) | beside a 2-thread training (s) | ratio | the demo said |")
    print("|---|---:|---:|---:|---|")
    for way, alone, beside, said in rows:
        print(f"| {way} | {alone:.1f} | {beside:.1f} | {beside / alone:.1f}x | {said or '—'} |")


if __name__ == "__main__":
    main()
