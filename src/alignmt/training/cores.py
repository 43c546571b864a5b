"""The threads to compute with on a CPU that other processes share.

PyTorch starts one OpenMP thread per core, and every operation waits for all of them. When
another process keeps a core busy, the thread that shares it runs only in its time slices,
and the small operations of an RNN step wait for it each time. Beside one other 2-thread
training on 2 cores, a short demo took 6.0x its time alone on two threads, 1.5x on one, and
1.5x on two whose OpenMP wait policy is passive, which made it a third slower alone
(benchmarks/shared_cpu.py; docs/benchmarks.md, "A CPU shared with another process"). So a
run that was not told its thread count measures how busy its cores are for a moment, and
computes on the ones left free; it says so once.

Linux only (/proc/stat); elsewhere the count stays PyTorch's.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SAMPLE_SECONDS = 0.25  # long enough for /proc/stat's 10 ms ticks, short beside any training
_said: set[str] = set()  # what this process has said already


@dataclass(frozen=True)
class Load:
    """How many of this process's cores other processes kept busy during a sample."""

    cores: int  # the cores this process may run on
    busy: float  # cores' worth of time that other processes used

    @property
    def free(self) -> int:
        """The cores left, at least one: a core counts as busy from half its time."""
        return max(1, self.cores - round(self.busy))


def cpu_ticks(stat: str, cpus: set[int]) -> tuple[int, int]:
    """(busy, total) clock ticks over `cpus` from the text of /proc/stat; idle and I/O wait
    are the only ticks that are not busy."""
    busy = total = 0
    for line in stat.splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
        total += sum(ticks)
        busy += sum(ticks) - ticks[3] - ticks[4]
    return busy, total


def own_ticks(stat: str) -> int:
    """This process's user and system clock ticks, from the text of /proc/self/stat (the
    fields after the command name, which may hold spaces, so counted from its ')')."""
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of the file


def measure(seconds: float = SAMPLE_SECONDS) -> Load | None:
    """The load on this process's cores over `seconds`, less this process's own; None where
    the system does not tell (no /proc)."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    proc, own = Path("/proc/stat"), Path("/proc/self/stat")
    if not cpus or not proc.is_file():
        return None
    busy0, total0 = cpu_ticks(proc.read_text(), cpus)
    mine0 = own_ticks(own.read_text())
    time.sleep(seconds)
    busy1, total1 = cpu_ticks(proc.read_text(), cpus)
    mine1 = own_ticks(own.read_text())
    per_core = (total1 - total0) / len(cpus)
    if per_core <= 0:
        return None
    others = max(0, (busy1 - busy0) - (mine1 - mine0))
    return Load(cores=len(cpus), busy=others / per_core)


def threads_to_use(current: int, what: str = "computing") -> int:
    """The threads to compute with, at most `current` (PyTorch's count): the cores other
    processes leave free. One thread, an OMP_NUM_THREADS the user set, or a system that does
    not tell keep `current`. Says once per finding what it found, naming `what` it does."""
    if current <= 1 or "OMP_NUM_THREADS" in os.environ:
        return current
    load = measure()
    if load is None or load.free >= current:
        return current
    busy = min(load.cores, round(load.busy))
    said = (
        f"{load.cores} cores, {busy} busy with other processes: {what} on {load.free} "
        f"thread{'s' if load.free > 1 else ''} (train.threads=N chooses the count)"
    )
    if said not in _said:
        _said.add(said)
        log.warning(said)
    return load.free
