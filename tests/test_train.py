"""The training loop, its loss and schedule, and checkpoints."""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging

import pytest
import torch
from safetensors.torch import load_file

from alignmt.checkpoint.torch_io import load_checkpoint, save_checkpoint
from alignmt.config import Config, DataConfig, ModelConfig, TrainConfig, load_config
from alignmt.model.batch import Batch
from alignmt.text.tasks import ALPHABET
from alignmt.text.vocab import Vocab
from alignmt.training.distributed import Objective
from alignmt.training.optim import lr_factor, train_step
from alignmt.training.run import train
from alignmt.training.torch_backend import TorchBackend
from tests.conftest import padded_batch, tiny_model, toy_corpus_config, train_killed_at


def tiny_config(tmp_path, **train) -> Config:
    return Config(
        model=ModelConfig(emb_dim=16, enc_hidden=32, dec_hidden=64, attn_dim=32),
        data=DataConfig(task="reverse", min_len=2, max_len=4),
        train=TrainConfig(**{"steps": 160, "log_every": 40, "lr": 1e-2, "batch_size": 32, **train}),
        out_dir=str(tmp_path / "run"),
    )


def test_cosine_schedule_warms_up_linearly_then_decays_to_zero():
    factor = lr_factor(TrainConfig(steps=110, warmup_steps=10, schedule="cosine"))
    assert [factor(s) for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])
    assert factor(10) == pytest.approx(1.0)
    assert factor(60) == pytest.approx(0.5)
    assert factor(110) == pytest.approx(0.0)
    constant = lr_factor(TrainConfig(steps=110, warmup_steps=0, schedule="constant"))
    assert constant(0) == constant(100) == 1.0


def test_a_time_budget_moves_the_cosine_along_by_whichever_is_further_steps_or_seconds():
    factor = lr_factor(TrainConfig(steps=1000, warmup_steps=0, schedule="cosine", minutes=1))
    assert factor(500, seconds=0.0) == pytest.approx(0.5)  # steps ahead
    assert factor(10, seconds=30.0) == pytest.approx(0.5)  # seconds ahead
    assert factor(10, seconds=60.0) == pytest.approx(0.0)
    unbudgeted = lr_factor(TrainConfig(steps=1000, warmup_steps=0, schedule="cosine"))
    assert unbudgeted(10, seconds=1e6) > 0.99


def test_training_stops_when_its_minutes_are_up_with_the_rate_annealed(tmp_path, monkeypatch):
    loop_module = importlib.import_module("alignmt.training.loop")
    backend = importlib.import_module("alignmt.training.torch_backend")
    clock = [0.0]  # one second per update, so the budget is counted in steps
    real_step = backend.train_step

    def one_second_step(*args):
        clock[0] += 1.0
        return real_step(*args)

    monkeypatch.setattr(loop_module.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(backend, "train_step", one_second_step)
    cfg = tiny_config(tmp_path, steps=1000, minutes=0.55, log_every=10)
    result = train(cfg, progress=False)
    assert result.steps == [10, 20, 30, 33]  # the last, short interval is logged too
    records = [json.loads(r) for r in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["lr"] == pytest.approx(1e-2 * lr_factor(cfg.train)(32, seconds=32.0))
    assert records[-1]["lr"] < 1e-4
    assert (result.run_dir / "model.safetensors").is_file()


def test_a_clock_that_runs_out_during_an_evaluation_makes_that_step_the_last(tmp_path, monkeypatch):
    loop_module = importlib.import_module("alignmt.training.loop")
    backend = importlib.import_module("alignmt.training.torch_backend")
    clock = [0.0]  # one second per update, 25 seconds per validation
    real_step, real_validate = backend.train_step, loop_module.validate

    def one_second_step(*args):
        clock[0] += 1.0
        return real_step(*args)

    def slow_validate(*args):
        clock[0] += 25.0
        return real_validate(*args)

    monkeypatch.setattr(loop_module.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(backend, "train_step", one_second_step)
    monkeypatch.setattr(loop_module, "validate", slow_validate)
    cfg = toy_corpus_config(tmp_path, steps=1000, minutes=0.5, eval_every=10)
    result = train(cfg, progress=False)
    # at step 10 (10 s) the evaluation is due and ends at 35 s, past the 30-s budget
    assert [record["step"] for record in result.evals] == [10]
    assert result.step == 10


def test_clipping_bounds_the_gradient_norm_of_the_update():
    model = tiny_model(dtype=torch.float32)
    src, src_len, tgt_in, tgt_len = padded_batch()
    batch = Batch(src, src_len, tgt_in, tgt_out=tgt_in, tgt_len=tgt_len)  # any targets will do
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    train_step(
        Objective(model), [batch], batch.num_tgt_tokens, optimizer, TrainConfig(clip_norm=1e-3)
    )
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    assert norm <= 1e-3 * (1 + 1e-4)


def test_training_lowers_the_loss_and_writes_a_complete_run_folder(tmp_path):
    cfg = tiny_config(tmp_path)
    result = train(cfg, progress=False)
    assert result.steps == [40, 80, 120, 160]
    assert result.losses[-1] < result.losses[0] / 2
    records = [
        json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in records] == result.steps
    # the rate of each interval's last update: the cosine's last step, just above zero
    assert records[-1]["lr"] == pytest.approx(1e-2 * lr_factor(cfg.train)(159))
    assert records[-1]["lr"] < 1e-5
    assert load_config(result.run_dir / "config.yaml") == cfg
    assert (result.run_dir / "model.safetensors").stat().st_size > 0


def test_the_same_seed_trains_the_same_weights(tmp_path):
    first = train(tiny_config(tmp_path / "a", steps=15), progress=False).model.state_dict()
    second = train(tiny_config(tmp_path / "b", steps=15), progress=False).model.state_dict()
    for name, tensor in first.items():
        assert torch.equal(tensor, second[name]), name


def test_a_checkpoint_reloads_to_identical_logits_config_and_vocabularies(tmp_path):
    model = tiny_model(dtype=torch.float32, rnn="lstm", layers=2, readout="maxout")
    cfg = Config(
        model=ModelConfig(
            rnn="lstm",
            emb_dim=5,
            enc_hidden=4,
            enc_layers=2,
            bidirectional=True,
            dec_hidden=8,
            dec_layers=2,
            attn_dim=6,
            init="bridge",
            readout="maxout",
            readout_dim=3,
        )
    )
    vocab = Vocab(ALPHABET[:9])
    path = save_checkpoint(tmp_path, model, cfg, vocab, vocab, step=7)
    assert not list(tmp_path.glob("*.tmp"))  # written to a temporary name, then renamed
    loaded = load_checkpoint(tmp_path)
    src, src_len, tgt_in, _ = padded_batch()
    torch.testing.assert_close(
        loaded.model(src, src_len, tgt_in).log_probs.logits,
        model(src, src_len, tgt_in).log_probs.logits,
    )
    assert (loaded.config, loaded.src_vocab, loaded.step) == (cfg, vocab, 7)
    assert load_checkpoint(path).step == 7  # the file itself works too


def test_loading_something_else_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint here"):
        load_checkpoint(tmp_path)
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(1)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="not an alignmt checkpoint"):
        load_checkpoint(tmp_path)


# --- corpus runs: validation, best model, early stopping, resuming ---------------------------


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_corpus_run_validates_keeps_the_best_model_and_stores_its_tokenizers(tmp_path):
    result = train(toy_corpus_config(tmp_path), progress=False)
    evals = [r for r in _records(result.run_dir) if "bleu" in r]
    assert [r["step"] for r in evals] == [10, 20, 30] == [r["step"] for r in result.evals]
    best = load_checkpoint(result.run_dir)
    assert best.step == max(evals, key=lambda r: r["bleu"])["step"]
    assert (best.src_tokenizer.kind, best.tgt_tokenizer.kind) == ("moses", "moses")
    assert load_checkpoint(result.run_dir / "last.safetensors").step == 30
    assert (result.run_dir / "curves.png").stat().st_size > 0


def test_train_threads_hold_for_the_run_and_the_callers_count_comes_back(tmp_path, monkeypatch):
    # torch's thread count is process-wide: a run that kept train.threads would slow every
    # later computation of the caller (a notebook, a test session) that asked for another.
    seen = []
    update = TorchBackend.update
    monkeypatch.setattr(
        TorchBackend, "update", lambda *a: seen.append(torch.get_num_threads()) or update(*a)
    )
    before = torch.get_num_threads()
    train(toy_corpus_config(tmp_path, steps=3, eval_every=0, threads=before + 1), progress=False)
    assert seen == [before + 1] * 3
    assert torch.get_num_threads() == before


def test_early_stopping_ends_the_run_after_evaluations_without_improvement(tmp_path):
    # A vanishing learning rate leaves BLEU where the first evaluation put it.
    cfg = toy_corpus_config(tmp_path, steps=100, eval_every=5, early_stop=2, lr=1e-12)
    result = train(cfg, progress=False)
    assert [r["step"] for r in result.evals] == [5, 10, 15]
    assert result.steps[-1] == 15


def test_the_plateau_schedule_halves_the_rate_after_each_evaluation_without_improvement(tmp_path):
    cfg = toy_corpus_config(
        tmp_path, steps=20, eval_every=5, schedule="plateau", plateau_patience=1, lr=1e-12
    )
    lrs = [r["lr"] for r in _records(train(cfg, progress=False).run_dir) if "lr" in r]
    assert lrs == pytest.approx([1e-12, 1e-12, 0.5e-12, 0.25e-12])


@pytest.mark.parametrize("data", ["corpus", "task"])
def test_a_killed_run_resumed_from_its_last_checkpoint_ends_with_the_same_weights(
    tmp_path, monkeypatch, data
):
    def config(folder):
        if data == "corpus":  # crosses an epoch boundary (13 batches per epoch), dropout on
            return toy_corpus_config(folder, steps=30, eval_every=10)
        return tiny_config(folder, steps=30, eval_every=10, log_every=5)

    train(config(tmp_path / "whole"), progress=False)
    train_killed_at(config(tmp_path / "killed"), 23, monkeypatch)
    train(config(tmp_path / "killed"), progress=False, resume=True)

    whole, resumed = (
        load_file(str(tmp_path / d / "run" / "last.safetensors")) for d in ("whole", "killed")
    )
    assert whole.keys() == resumed.keys()
    for name, tensor in whole.items():  # weights, optimizer moments and RNG state
        assert torch.equal(tensor, resumed[name]), name
    strip = lambda rs: [{k: v for k, v in r.items() if k != "seconds"} for r in rs]  # noqa: E731
    assert strip(_records(tmp_path / "killed" / "run")) == strip(
        _records(tmp_path / "whole" / "run")
    )


def test_resuming_a_run_stopped_before_its_first_checkpoint_starts_it_from_step_0(tmp_path, caplog):
    cfg = tiny_config(tmp_path, steps=4, log_every=2)
    whole = train(cfg, progress=False, overwrite=True)
    (whole.run_dir / "last.safetensors").unlink()  # as if killed before writing one
    with caplog.at_level(logging.WARNING, logger="alignmt.training.start"):
        resumed = train(cfg, progress=False, resume=True)
    assert "starting from step 0" in caplog.text
    assert resumed.steps == whole.steps and resumed.losses == whole.losses


def test_tensorboard_logging_writes_events_or_says_which_package_is_missing(tmp_path):
    cfg = tiny_config(tmp_path, steps=4, log_every=2, tensorboard=True)
    if importlib.util.find_spec("tensorboard") is None:
        with pytest.raises(ValueError, match="pip install tensorboard"):
            train(cfg, progress=False)
    else:  # the dev extras install it, so CI runs this branch
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        run_dir = train(cfg, progress=False).run_dir
        events = EventAccumulator(str(run_dir / "tensorboard"))
        events.Reload()
        logged = _records(run_dir)
        assert [e.step for e in events.Scalars("loss")] == [r["step"] for r in logged] == [2, 4]
        assert [e.value for e in events.Scalars("loss")] == pytest.approx(
            [r["loss"] for r in logged]
        )
        assert {"loss", "lr", "tokens", "skipped"} <= set(events.Tags()["scalars"])
