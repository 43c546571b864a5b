"""Checkpoint averaging (`alignmt average`): the mean of a run's last kept weights."""

from __future__ import annotations

import pytest
import torch

from alignmt.checkpoint.average import average_run, kept_steps
from alignmt.checkpoint.format import load_header, snapshot_path
from alignmt.checkpoint.torch_io import load_checkpoint, load_weights
from alignmt.cli import main
from alignmt.training.run import train
from tests.test_snapshot import tiny_config


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    # snapshots at 0, 5, 10 and 12; last.safetensors is step 12 too
    return train(tiny_config(tmp_path_factory.mktemp("avg")), progress=False).run_dir


def test_the_kept_steps_are_the_snapshots_and_a_newer_last_checkpoint(run, tmp_path):
    assert list(kept_steps(run)) == [0, 5, 10, 12]
    assert kept_steps(run)[12] == snapshot_path(run, 12)
    no_snapshots = tmp_path / "bare"
    no_snapshots.mkdir()
    (no_snapshots / "last.safetensors").write_bytes((run / "last.safetensors").read_bytes())
    assert list(kept_steps(no_snapshots)) == [12]


def test_the_average_of_the_last_three_is_the_mean_of_their_tensors(run, tmp_path):
    averaged = average_run(run, 3, tmp_path / "avg", overwrite=False)
    assert averaged.steps == [5, 10, 12]
    kept = [load_weights(snapshot_path(run, step)) for step in (5, 10, 12)]
    mean = load_weights(averaged.path)
    assert mean.keys() == kept[0].keys()
    for name, tensor in mean.items():
        expected = sum(k[name].double() for k in kept) / 3
        torch.testing.assert_close(tensor.double(), expected, rtol=0, atol=1e-7)
    assert not all(torch.equal(tensor, kept[-1][name]) for name, tensor in mean.items())
    loaded = load_checkpoint(tmp_path / "avg")  # a run folder every command loads
    assert loaded.step == 12 and (tmp_path / "avg" / "config.yaml").is_file()
    assert load_header(run).config == loaded.config


def test_equal_checkpoints_average_to_themselves_exactly(run, tmp_path):
    copy = tmp_path / "copy"
    (copy / "snapshots").mkdir(parents=True)
    for step in (3, 4):  # the same weights kept at two steps
        snapshot_path(copy, step).write_bytes(snapshot_path(run, 12).read_bytes())
    averaged = average_run(copy, 2, tmp_path / "avg", overwrite=False)
    original, mean = load_weights(snapshot_path(run, 12)), load_weights(averaged.path)
    assert all(torch.equal(mean[name], t) for name, t in original.items())


def test_the_command_averages_and_refuses_what_it_cannot_do(run, tmp_path, capsys):
    out = tmp_path / "avg"
    assert main(["average", str(run), "--last", "2", "--out", str(out)]) == 0
    assert "steps 10, 12" in capsys.readouterr().out
    refusals = {
        "--last 5": ["--last", "5", "--out", str(tmp_path / "other")],
        "--last 1": ["--last", "1", "--out", str(tmp_path / "other")],
        "its own folder": ["--last", "2", "--out", str(run)],
        "a folder holding a run": ["--last", "2", "--out", str(out)],
    }
    for why, flags in refusals.items():
        assert main(["average", str(run), *flags]) == 2, why
        assert capsys.readouterr().err.startswith("error: "), why
    assert main(["average", str(run), "--last", "3", "--out", str(out), "--overwrite"]) == 0
    assert load_header(out / "model.safetensors").step == 12


def test_checkpoints_of_another_model_are_refused(run, tmp_path):
    mixed = tmp_path / "mixed"
    (mixed / "snapshots").mkdir(parents=True)
    snapshot_path(mixed, 1).write_bytes(snapshot_path(run, 12).read_bytes())
    bigger = tiny_config(tmp_path, steps=1, snapshot_every=1)
    bigger.model.emb_dim = 12
    bigger.out_dir = str(tmp_path / "bigger")
    snapshot_path(mixed, 2).write_bytes(
        snapshot_path(train(bigger, progress=False).run_dir, 1).read_bytes()
    )
    with pytest.raises(ValueError, match="only checkpoints of one run"):
        average_run(mixed, 2, tmp_path / "avg", overwrite=False)
