"""Snapshots: the weights a run keeps as it trains (`train.snapshot_every`), and loading them."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from alignmt.checkpoint.format import snapshot_path, snapshot_steps
from alignmt.checkpoint.torch_io import load_snapshot, load_weights
from alignmt.config import Config, ConfigError, DataConfig, ModelConfig, TrainConfig, load_config
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.tasks import ALPHABET
from alignmt.text.vocab import Vocab
from alignmt.training.run import train
from tests.conftest import train_killed_at


def tiny_config(folder, **train) -> Config:
    # constant rate: a run's weights at step N do not depend on how many steps it will take
    return Config(
        model=ModelConfig(emb_dim=8, enc_hidden=8, dec_hidden=16, attn_dim=8),
        data=DataConfig(task="reverse", min_len=2, max_len=4),
        train=TrainConfig(
            **{
                "steps": 12,
                "snapshot_every": 5,
                "log_every": 4,
                "lr": 1e-2,
                "batch_size": 16,
                "schedule": "constant",
                **train,
            }
        ),
        out_dir=str(folder / "run"),
    )


def snapshot(run_dir, step: int) -> dict[str, torch.Tensor]:
    return load_snapshot(run_dir, step).model.state_dict()


def assert_same(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> None:
    assert first.keys() == second.keys()
    for name, tensor in first.items():
        assert torch.equal(tensor, second[name]), name


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return train(tiny_config(tmp_path_factory.mktemp("snap")), progress=False).run_dir


def test_snapshots_are_kept_at_step_0_every_n_steps_and_the_last(run):
    assert snapshot_steps(run) == [0, 5, 10, 12]
    assert [load_snapshot(run, step).step for step in (0, 5, 10, 12)] == [0, 5, 10, 12]
    assert not list((run / "snapshots").glob("*.tmp"))


def test_the_step_0_snapshot_is_the_untrained_model_of_the_seed(run):
    cfg = tiny_config(run.parent)
    torch.manual_seed(cfg.seed)
    size = len(Vocab(ALPHABET))
    fresh = Seq2Seq.from_config(cfg.model, src_vocab=size, tgt_vocab=size)
    assert_same(snapshot(run, 0), fresh.state_dict())
    trained = snapshot(run, 5)
    assert not all(torch.equal(t, trained[name]) for name, t in snapshot(run, 0).items())


def test_a_snapshot_holds_the_weights_a_run_had_at_its_step(run, tmp_path):
    shorter = train(tiny_config(tmp_path, steps=5), progress=False).run_dir
    assert_same(snapshot(run, 5), load_weights(shorter / "model.safetensors"))


def test_the_last_snapshot_is_the_saved_model(run):
    assert_same(snapshot(run, 12), load_weights(run / "model.safetensors"))
    stored = load_file(str(snapshot_path(run, 12)))
    assert not [name for name in stored if name.startswith("_train.")]  # no training state


def test_loading_a_missing_snapshot_names_the_path_and_the_steps_kept(run):
    with pytest.raises(FileNotFoundError, match=r"step_000007\.safetensors.*steps 0, 5, 10, 12$"):
        load_snapshot(run, 7)


def test_snapshots_are_off_by_default(tmp_path):
    cfg = tiny_config(tmp_path, steps=3)
    cfg.train.snapshot_every = TrainConfig().snapshot_every
    run_dir = train(cfg, progress=False).run_dir
    assert not (run_dir / "snapshots").exists()
    assert snapshot_steps(run_dir) == []
    with pytest.raises(FileNotFoundError, match=r"kept none \(train.snapshot_every=0\)"):
        load_snapshot(run_dir, 0)


def test_a_negative_snapshot_interval_is_a_config_error():
    with pytest.raises(ConfigError, match=r"train\.snapshot_every: must not be negative, got -1"):
        load_config(overrides=["train.snapshot_every=-1"])


def test_a_run_started_over_an_earlier_one_keeps_none_of_its_snapshots(tmp_path):
    train(tiny_config(tmp_path, steps=10), progress=False)
    run_dir = train(tiny_config(tmp_path, steps=4), progress=False, overwrite=True).run_dir
    assert snapshot_steps(run_dir) == [0, 4]


def test_a_killed_run_resumed_keeps_the_snapshots_of_an_uninterrupted_one(tmp_path, monkeypatch):
    def config(folder):  # snapshots out of step with the checkpoints every 10 steps
        return tiny_config(folder, steps=30, eval_every=10, snapshot_every=4, schedule="cosine")

    whole = train(config(tmp_path / "whole"), progress=False).run_dir
    train_killed_at(config(tmp_path / "killed"), 27, monkeypatch)
    killed = tmp_path / "killed" / "run"
    assert snapshot_steps(killed)[-1] == 24  # kept after the last checkpoint (step 20)
    train(config(tmp_path / "killed"), progress=False, resume=True)

    assert snapshot_steps(killed) == snapshot_steps(whole) == [0, 4, 8, 12, 16, 20, 24, 28, 30]
    for step in snapshot_steps(whole):
        assert_same(snapshot(killed, step), snapshot(whole, step))
