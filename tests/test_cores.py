"""The threads a run computes with beside other processes: reading /proc/stat, this
process's own time left out, and the count chosen and said once."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from alignmt.training import cores
from alignmt.training.cores import Load, cpu_ticks, own_ticks, threads_to_use

STAT = """cpu  300 0 100 600 10 0 0 0 0 0
cpu0 100 0 50 300 5 0 0 0 0 0
cpu1 200 0 50 300 5 0 0 0 0 0
cpu2 999 0 0 1 0 0 0 0 0 0
intr 1 2 3
"""


def test_busy_ticks_are_all_but_idle_and_io_wait_on_the_cores_this_process_may_use():
    assert cpu_ticks(STAT, {0, 1}) == (400, 1010)
    assert cpu_ticks(STAT, {2}) == (999, 1000)  # the all-cpu line is never counted


def test_own_ticks_are_user_and_system_after_a_command_name_with_spaces_and_parentheses():
    stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 10 0 0 0 70 30 0 0 20 0 1 0"
    assert own_ticks(stat) == 100


@pytest.mark.parametrize(("busy", "free"), [(0.0, 2), (0.4, 2), (0.6, 1), (1.4, 1), (2.0, 1)])
def test_a_core_counts_as_busy_from_half_its_time_and_one_is_always_left(busy, free):
    assert Load(cores=2, busy=busy).free == free


def test_a_busy_core_lowers_the_count_and_is_said_once(monkeypatch, caplog):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cores, "_said", set())
    monkeypatch.setattr(cores, "measure", lambda: Load(cores=2, busy=1.9))
    with caplog.at_level(logging.WARNING):
        assert threads_to_use(2, "training") == 1
        assert threads_to_use(2, "training") == 1
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "2 cores, 2 busy with other processes: training on 1 thread "
        "(train.threads=N chooses the count)"
    ]
    monkeypatch.setattr(cores, "measure", lambda: Load(cores=2, busy=0.2))
    assert threads_to_use(2) == 2  # free again: the count is torch's


def test_one_thread_or_a_users_omp_num_threads_is_kept_without_measuring(monkeypatch):
    def measured() -> Load:
        raise AssertionError("measured")

    monkeypatch.setattr(cores, "measure", measured)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads_to_use(1) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert threads_to_use(2) == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat is Linux's")
def test_a_spinning_process_is_measured_as_about_one_busy_core():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        load = cores.measure(seconds=0.5)
    finally:
        spinner.kill()
        spinner.wait()
    assert load is not None and load.busy >= 0.5  # other work on the machine can only add
