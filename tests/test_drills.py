"""The run drills of benchmarks/drills.py with a few faults each: kills, signals, a full or
read-only disk, non-finite updates, and bad run folders and arguments. Each asserts that
every fault held; the checks that they can fail come first."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from benchmarks import drill_args, drill_faults, drill_runs, drill_signals

from alignmt.training.run import train


@pytest.fixture(scope="module")
def corpus_run(tmp_path_factory) -> Path:
    """A small corpus run: model, last checkpoint, config.yaml and its data."""
    cfg = drill_runs.corpus_config(tmp_path_factory.mktemp("drill_corpus"), steps=40)
    return train(cfg, progress=False).run_dir


def test_the_drills_see_a_run_that_ended_otherwise_and_a_command_that_was_not_refused(
    tmp_path, corpus_run
):
    faster = drill_runs.reverse_config(tmp_path / "b", steps=20, lr=1e-2)
    one = train(drill_runs.reverse_config(tmp_path / "a", steps=20), progress=False).run_dir
    other = train(faster, progress=False).run_dir
    assert drill_runs.differences(one, one) == []
    assert any("model.safetensors" in d for d in drill_runs.differences(one, other))
    assert any("metrics.jsonl" in d for d in drill_runs.differences(one, other))
    assert drill_args.refused(["translate", str(corpus_run)], "error", stdin="the cat\n")
    assert drill_args.refused(["translate", str(corpus_run), "--beam=2"], "--beam", tripwires=True)


@pytest.mark.slow  # a whole drill, run by run
def test_bad_run_folders_and_arguments_are_refused_with_a_message(tmp_path, corpus_run):
    result = drill_args.bad_inputs(tmp_path, corpus_run)
    assert result["failures"] == []
    assert result["tried"] == result["held"] > 200


@pytest.mark.slow  # a whole drill, run by run
def test_non_finite_losses_and_gradients_are_skipped_counted_and_stopped(tmp_path):
    result = drill_faults.nonfinite(tmp_path, count=4, seed=3)
    assert result == {"tried": 5, "held": 5, "failures": []}


@pytest.mark.slow
def test_a_full_or_read_only_disk_keeps_the_last_checkpoint_and_says_where(tmp_path):
    result = drill_faults.disks(tmp_path, mounts=False, steps=100)  # /dev/full, read-only: no root
    assert result == {"tried": 2, "held": 2, "failures": []}


@pytest.mark.slow
def test_random_kills_resume_to_the_weights_and_metrics_of_an_uninterrupted_run(tmp_path):
    result = drill_runs.kills(tmp_path, count=3, steps=100)
    assert result["failures"] == [] and result["tried"] == result["held"] == 3


@pytest.mark.slow
def test_sigterm_stops_with_a_checkpoint_that_resumes_as_if_uninterrupted(tmp_path):
    """SIGTERM here; the torchrun drill below sends SIGINT, which the same handler takes."""
    result = drill_signals.signals(tmp_path, count=1, steps=150, sent=(signal.SIGTERM,))
    assert result == {"tried": 1, "held": 1, "failures": []}


@pytest.mark.slow
def test_a_kill_and_a_signal_to_one_of_two_torchrun_processes_lose_nothing(tmp_path):
    """Both torchrun drills against one uninterrupted two-process run of the corpus config
    (validated every 20 steps): a rank killed, the run resumed to the end; a rank sent
    SIGINT (Ctrl-C), both stopping at one step, resumed to the end; each bit for bit the
    reference."""
    reference, problems = drill_runs.reference_run(
        tmp_path, corpus=True, nproc=2, steps=60, save_every=0
    )
    assert problems == []
    killed = drill_runs.kills(tmp_path, count=1, nproc=2, corpus=True, reference=reference)
    assert killed["failures"] == [] and killed["tried"] == killed["held"] == 1
    signalled = drill_signals.signals(
        tmp_path, count=1, nproc=2, reference=reference, sent=(signal.SIGINT,)
    )
    assert signalled == {"tried": 1, "held": 1, "failures": []}
