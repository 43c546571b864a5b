"""A run's progress where stderr is no terminal: a line every half minute, the estimate of
the time left starting after the first update, which may compile, and ending no later than
a time budget."""

from __future__ import annotations

import pytest

from alignmt.training import report
from alignmt.training.report import ProgressReport


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(report.time, "perf_counter", clock)
    return clock


def test_lines_every_half_minute_estimate_from_the_updates_after_the_first(clock, capsys):
    progress = ProgressReport("run", total=100, initial=0, show="lines", compiles="jax.jit")
    assert "compiling the first update (jax.jit)" in capsys.readouterr().err
    clock.now = 600.0  # ten minutes of compiling: not the pace of the run
    progress.update()
    for _ in range(40):  # then one update a second
        clock.now += 1.0
        progress.update()
        if progress.step == 20:
            progress.set_loss("1.25")
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "train run: step 31/100 (31%), loss 1.25, about 1 min 9 s left",
    ]
    progress.close()
    assert capsys.readouterr().err == "train run: step 41/100 (41%), loss 1.25, about 59 s left\n"


def test_a_short_run_and_a_quiet_one_say_nothing(clock, capsys):
    for show in ("lines", "none"):
        progress = ProgressReport("run", total=10, initial=0, show=show)
        for _ in range(10):
            clock.now += 1.0
            progress.update()
        progress.close()
    assert capsys.readouterr().err == ""


def test_a_resumed_run_counts_from_its_step(clock):
    progress = ProgressReport("run", total=100, initial=50, show="none")
    progress.update()  # step 51, the first of this process
    clock.now += 10.0
    progress.update()
    assert progress.seconds_left(clock.now) == pytest.approx(10.0 * 48)


def test_a_run_whose_stderr_is_no_terminal_prints_progress_lines(tmp_path, monkeypatch, capsys):
    from alignmt.training.run import train
    from tests.conftest import toy_corpus_config

    monkeypatch.setattr(report, "LINE_SECONDS", 0.0)  # a line after every update
    train(toy_corpus_config(tmp_path, steps=6, eval_every=0, log_every=3), progress=None)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("train")]
    assert lines[0].startswith("train run: step 2/6 (33%), about")  # step 1 may compile
    assert lines[-1].startswith("train run: step 6/6 (100%), loss ")


def test_a_time_budget_ends_the_estimate_where_it_stops_the_run(clock):
    """train.minutes stops a run long before its steps: the time left is the budget's."""
    progress = ProgressReport("run", total=3500, initial=0, show="none", deadline=240.0)
    progress.update()
    clock.now += 1.0
    progress.update()  # one step a second: 3,498 s to the last step, 239 s to the deadline
    assert progress.seconds_left(clock.now) == pytest.approx(239.0)
    clock.now = 300.0  # past the deadline, in a last evaluation
    assert progress.seconds_left(clock.now) == 0.0
