"""Run folders under faults: refusing to start over an earlier run, checkpoints without an
evaluation, a log cut short, a disk that fills, and checkpoints from elsewhere."""

from __future__ import annotations

import json
import os

import pytest
import yaml
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from alignmt.checkpoint.format import load_header
from alignmt.checkpoint.rundir import RunFolderError, WriteError
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.cli import main
from alignmt.config import Config, DataConfig, ModelConfig, TrainConfig
from alignmt.training.run import train
from tests.conftest import toy_corpus_config


def tiny(folder, **train_keys) -> Config:
    return Config(
        model=ModelConfig(emb_dim=8, enc_hidden=8, dec_hidden=16, attn_dim=8),
        data=DataConfig(task="reverse", min_len=2, max_len=4),
        train=TrainConfig(**{"steps": 12, "log_every": 4, "batch_size": 16, **train_keys}),
        out_dir=str(folder / "run"),
    )


def step_of(path) -> int:
    with safe_open(str(path), framework="pt") as f:
        return json.loads(f.metadata()["train_state"])["progress"]["step"]


def test_a_new_run_in_a_folder_holding_one_is_refused_and_leaves_it_as_it_was(tmp_path):
    run_dir = train(tiny(tmp_path), progress=False).run_dir
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    with pytest.raises(
        RunFolderError, match=r"holds an earlier run \(model.safetensors, last"
    ) as no:
        train(tiny(tmp_path, steps=4), progress=False)
    # the advice for the command line and for Python alike
    assert all(
        w in str(no.value) for w in ("--resume", "resume=True", "--overwrite", "overwrite=True")
    )
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before


def test_overwrite_starts_afresh_and_keeps_nothing_of_the_earlier_run(tmp_path):
    train(tiny(tmp_path, steps=12), progress=False)
    result = train(tiny(tmp_path, steps=4), progress=False, overwrite=True)
    records = (result.run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in records] == [4]
    assert load_checkpoint(result.run_dir).step == 4


def test_the_cli_refuses_too_and_names_both_ways_out(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"out_dir": str(tmp_path / "run")}))
    keys = ["model.emb_dim=8", "model.enc_hidden=8", "model.dec_hidden=16", "train.steps=2"]
    assert main(["train", str(config), *keys]) == 0
    assert main(["train", str(config), *keys]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["train", str(config), *keys, "--overwrite"]) == 0


def test_without_evaluations_a_resumable_checkpoint_is_written_every_save_every_steps(
    tmp_path, monkeypatch
):
    from tests.conftest import train_killed_at

    cfg = tiny(tmp_path, steps=12, save_every=5)  # eval_every 0, as reverse.yaml
    train_killed_at(cfg, 8, monkeypatch)
    assert step_of(tmp_path / "run" / "last.safetensors") == 5
    assert load_checkpoint(tmp_path / "run").step == 5  # translatable: last, until a model


def test_a_metrics_line_cut_short_by_a_kill_is_dropped_on_resume(tmp_path, monkeypatch):
    from tests.conftest import train_killed_at

    whole = train(tiny(tmp_path / "whole", save_every=4), progress=False).run_dir
    train_killed_at(tiny(tmp_path / "cut", save_every=4), 10, monkeypatch)
    metrics = tmp_path / "cut" / "run" / "metrics.jsonl"
    with metrics.open("a") as f:
        f.write('{"step": 12, "lo')  # what a kill mid-write leaves
    resumed = train(tiny(tmp_path / "cut", save_every=4), progress=False, resume=True).run_dir

    def strip(run_dir):
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(r).items() if k != "seconds"} for r in lines]

    assert strip(resumed) == strip(whole)


def test_a_damaged_metrics_line_before_the_last_is_named(tmp_path):
    cfg = tiny(tmp_path, steps=8, save_every=4)
    run_dir = train(cfg, progress=False).run_dir
    metrics = run_dir / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    metrics.write_text("garbage\n" + "\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl:1: not a JSON record"):
        train(cfg, progress=False, resume=True)


def test_the_clock_kept_at_a_checkpoint_counts_the_validation_before_it(tmp_path, monkeypatch):
    import importlib

    module = importlib.import_module("alignmt.training.loop")
    real = module.validate

    def slow_validate(*args, **kwargs):
        import time

        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "validate", slow_validate)
    run_dir = train(
        toy_corpus_config(tmp_path, steps=10, eval_every=10, log_every=5), progress=False
    ).run_dir
    records = [json.loads(r) for r in (run_dir / "metrics.jsonl").read_text().splitlines()]
    logged = max(r["seconds"] for r in records if "loss" in r)
    with safe_open(str(run_dir / "last.safetensors"), framework="pt") as f:
        kept = json.loads(f.metadata()["train_state"])["progress"]["seconds"]
    assert kept >= logged + 0.5


def test_a_full_disk_keeps_the_last_good_checkpoint_and_names_the_folder(tmp_path, monkeypatch):
    from tests.conftest import train_killed_at

    cfg = tiny(tmp_path, steps=12, save_every=4)
    train_killed_at(cfg, 6, monkeypatch)
    last = tmp_path / "run" / "last.safetensors"
    good = last.read_bytes()
    os.symlink("/dev/full", str(last) + ".tmp")  # the next checkpoint write: ENOSPC, for real
    with pytest.raises(WriteError, match=r"cannot write last.safetensors in .*run: No space"):
        train(cfg, progress=False, resume=True)
    assert last.read_bytes() == good
    assert not os.path.lexists(str(last) + ".tmp")
    assert train(cfg, progress=False, resume=True).step == 12  # and it resumes once there is room


def test_a_full_disk_stops_the_cli_with_exit_1_and_the_cause(tmp_path, capsys, monkeypatch):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"out_dir": str(tmp_path / "run")}))
    (tmp_path / "run").mkdir()
    os.symlink("/dev/full", tmp_path / "run" / "last.safetensors.tmp")
    keys = ["model.emb_dim=8", "model.enc_hidden=8", "model.dec_hidden=16", "train.steps=2"]
    assert main(["train", str(config), *keys]) == 1
    err = capsys.readouterr().err
    assert "cannot write last.safetensors in" in err and "No space left on device" in err
    assert "Traceback" not in err


def _rewrite(path, *, drop=(), **changes) -> None:
    """`path` with metadata fields dropped or changed, its tensors kept."""
    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata())
    tensors = load_file(str(path))
    meta = {k: v for k, v in {**meta, **changes}.items() if k not in drop}
    save_file(tensors, str(path), metadata=meta)


def test_a_checkpoint_from_a_newer_alignmt_with_unknown_keys_says_so(toy_run, tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes((toy_run / "model.safetensors").read_bytes())
    stored = yaml.safe_load(_meta(path)["config"])
    stored["model"]["rotary"] = True
    _rewrite(path, config=yaml.safe_dump(stored), alignmt="9.0.0")
    with pytest.raises(ValueError, match=r"unknown key 'model.rotary'.*written by alignmt 9.0.0"):
        load_checkpoint(path)


def _meta(path) -> dict[str, str]:
    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(drop=("src_vocab",)), r"metadata lacks \['src_vocab'\]"),
        (dict(tgt_vocab="{"), r"its tgt_vocab is unreadable"),
        (
            dict(tgt_vocab=json.dumps({"itos": ["<pad>", "<s>", "</s>", "<unk>", "x"]})),
            r"weights do not fit the model",
        ),
    ],
    ids=["missing vocabulary", "garbage vocabulary", "vocabulary of another size"],
)
def test_a_missing_or_wrong_vocabulary_is_named_not_a_traceback(toy_run, tmp_path, change, message):
    path = tmp_path / "model.safetensors"
    path.write_bytes((toy_run / "model.safetensors").read_bytes())
    _rewrite(path, **change)
    with pytest.raises(ValueError, match=message):
        load_checkpoint(path)


def test_resuming_on_a_corpus_that_builds_another_vocabulary_is_refused(tmp_path, monkeypatch):
    from tests.conftest import train_killed_at, write_toy_corpus

    cfg = toy_corpus_config(tmp_path, steps=20, eval_every=10)
    train_killed_at(cfg, 15, monkeypatch)
    write_toy_corpus(tmp_path / "data", n=40, seed=7)  # the corpus changed meanwhile
    with pytest.raises(ValueError, match=r"differs in the source vocabulary: \d+ entries there"):
        train(cfg, progress=False, resume=True)


def test_resuming_under_another_architecture_is_refused_with_the_keys(tmp_path, monkeypatch):
    from dataclasses import replace

    from tests.conftest import train_killed_at

    cfg = tiny(tmp_path, save_every=4)
    train_killed_at(cfg, 6, monkeypatch)
    other = replace(cfg, model=replace(cfg.model, dec_hidden=32))
    with pytest.raises(ValueError, match=r"model.dec_hidden: 16 there, 32 now"):
        train(other, progress=False, resume=True)
    assert load_header(tmp_path / "run" / "last.safetensors").config.model.dec_hidden == 16
