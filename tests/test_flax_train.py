"""Training with `train.engine=flax`: the run folder it writes, one update against PyTorch's,
padding, skipped updates (and a run that overflows, stopped as PyTorch's is), validation, and
resuming after a kill."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

if os.environ.get("CI"):  # CI installs the [flax] extra: there a missing JAX is a failure
    import jax
else:
    jax = pytest.importorskip(
        "jax", reason="the [flax] extra is not installed: pip install -e '.[flax]'"
    )

from alignmt.checkpoint.flax_io import build_model, load_flax, params_from_tensors
from alignmt.checkpoint.format import LAST, snapshot_path
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.config import Config, DataConfig, ModelConfig, TrainConfig
from alignmt.model.batch import make_batch
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.prepare import prepare_text
from alignmt.text.tasks import ALPHABET
from alignmt.text.vocab import Vocab
from alignmt.training import flax_optim
from alignmt.training.distributed import Objective, World
from alignmt.training.flax_backend import FlaxBackend
from alignmt.training.loop import TrainingError
from alignmt.training.optim import make_optimizer, train_step
from alignmt.training.run import train
from alignmt.training.torch_backend import TorchBackend
from alignmt.training.validate import validate
from tests.conftest import Killed, toy_corpus_config

jax.config.update("jax_default_matmul_precision", "highest")


def reverse_config(tmp_path, **train) -> Config:
    return Config(
        model=ModelConfig(**_dims(), dropout=0.2),
        data=DataConfig(task="reverse", min_len=2, max_len=5),
        train=TrainConfig(
            **{"engine": "flax", "steps": 12, "log_every": 4, "batch_size": 8, **train}
        ),
        out_dir=str(tmp_path / "run"),
    )


@pytest.mark.slow  # trains and compiles whole Flax runs
def test_a_flax_run_folder_is_read_by_pytorch_and_gives_the_same_logits(tmp_path):
    cfg = toy_corpus_config(tmp_path, engine="flax", steps=40, eval_every=40)
    result = train(cfg, progress=False)
    assert result.losses[-1] < result.losses[0]
    assert [e["step"] for e in result.evals] == [40]
    run = tmp_path / "run"
    torch_ckpt, flax_ckpt = load_checkpoint(run), load_flax(run)
    batch = make_batch(
        [(torch_ckpt.src_vocab.encode(["a", "b"]), torch_ckpt.tgt_vocab.encode(["c"]))],
        torch_ckpt.src_vocab,
        torch_ckpt.tgt_vocab,
    )
    with torch.no_grad():
        expected = torch_ckpt.model(batch.src, batch.src_len, batch.tgt_in).log_probs.logits.numpy()
    log_probs, _ = flax_ckpt.model.apply(
        {"params": flax_ckpt.params},
        batch.src.numpy(),
        batch.src_len.numpy(),
        batch.tgt_in.numpy(),
    )
    np.testing.assert_allclose(np.asarray(log_probs.logits), expected, atol=1e-5)


def test_one_update_equals_pytorchs_clipped_adam_step_on_the_same_weights():
    cfg = TrainConfig(lr=0.05, clip_norm=0.5, label_smoothing=0.1)
    vocab, model_cfg = Vocab(list(ALPHABET)), ModelConfig(**_dims())
    torch.manual_seed(0)
    model = Seq2Seq.from_config(model_cfg, src_vocab=len(vocab), tgt_vocab=len(vocab))
    pairs = [(vocab.encode(list(s)), vocab.encode(list(s[::-1]))) for s in ("abc", "de", "fghi")]
    batch = make_batch(pairs, vocab, vocab)
    state = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    params = params_from_tensors(state, model_cfg)
    flax_model = build_model(model_cfg, vocab, vocab)
    tx = flax_optim.make_optimizer(cfg)
    updates = flax_optim.Updates(flax_model, tx, cfg.label_smoothing)
    arrays = flax_optim.padded(batch, 5, vocab.eos_id)
    new, _, loss, finite = updates.step(
        params, tx.init(params), [arrays], [1.0], jax.random.key(0), cfg.lr
    )
    optimizer = make_optimizer(model, cfg)
    expected, applied = train_step(Objective(model), [batch], batch.num_tgt_tokens, optimizer, cfg)
    assert bool(finite) and applied
    assert float(loss) == pytest.approx(float(expected), abs=1e-5)
    after = params_from_tensors({k: v.numpy() for k, v in model.state_dict().items()}, model_cfg)
    moved = jax.tree_util.tree_map(lambda a, b: np.abs(a - b).max(), after, params)
    assert max(jax.tree_util.tree_leaves(moved)) > 1e-3  # the step changed the weights
    gaps = jax.tree_util.tree_map(lambda a, b: np.abs(np.asarray(a) - b).max(), new, after)
    # Adam's first step moves a weight by lr g / (|g| + eps): where |g| is a few eps, the
    # float32 rounding of g, which XLA and PyTorch do in their own order, moves it by up to
    # lr |dg| / eps (1.5e-5 seen on an AMD EPYC): 2e-3 lr leaves 500 times the step to spare
    assert max(jax.tree_util.tree_leaves(gaps)) < 2e-3 * cfg.lr


def _dims() -> dict:
    return {"emb_dim": 8, "enc_hidden": 8, "dec_hidden": 16, "attn_dim": 8}


def test_padding_rows_and_bucketed_lengths_change_no_loss():
    vocab = Vocab(list(ALPHABET))
    batch = make_batch([(vocab.encode(list("abc")), vocab.encode(list("cba")))], vocab, vocab)
    cfg = ModelConfig(**_dims())
    model = build_model(cfg, vocab, vocab)
    params = flax_optim.init_params(model, seed=0)
    updates = flax_optim.Updates(model, flax_optim.make_optimizer(TrainConfig()), 0.1)
    tight = {
        "src": batch.src.numpy(),
        "src_len": batch.src_len.numpy(),
        "tgt_in": batch.tgt_in.numpy(),
        "tgt_out": batch.tgt_out.numpy(),
    }
    roomy = flax_optim.padded(batch, 6, vocab.eos_id)
    assert roomy["src"].shape == (6, 8) and roomy["tgt_in"].shape == (6, 8)
    key = jax.random.key(0)
    assert float(updates.loss(params, roomy, key)) == pytest.approx(
        float(updates.loss(params, tight, key)), abs=1e-6
    )


def test_validation_batches_are_the_training_layout_built_without_torch():
    vocab = Vocab(list(ALPHABET))
    pairs = [(vocab.encode(list(s)), vocab.encode(list(s[::-1]))) for s in ("abc", "de", "fghij")]
    expected = flax_optim.padded(make_batch(pairs, vocab, vocab), 8, vocab.eos_id)
    built = flax_optim.teacher_forced(pairs, (vocab, vocab))
    assert built.keys() == expected.keys()
    for name, array in expected.items():
        np.testing.assert_array_equal(built[name], array, err_msg=name, strict=True)


def test_flax_validation_measures_what_pytorchs_measures_on_the_same_weights(toy_run):
    ckpt = load_checkpoint(toy_run)
    cfg = ckpt.config
    text = prepare_text(cfg.data, cfg.seed)
    torch_backend = TorchBackend(
        cfg=cfg,
        model=ckpt.model,
        optimizer=make_optimizer(ckpt.model, cfg.train),
        text=text,
        world=World(),
        device=torch.device("cpu"),
    )
    expected = validate(torch_backend, text, cfg)
    params = params_from_tensors(
        {k: v.numpy() for k, v in ckpt.model.state_dict().items()}, cfg.model
    )
    tx = flax_optim.make_optimizer(cfg.train)
    backend = FlaxBackend(
        cfg=cfg,
        model=build_model(cfg.model, text.src_vocab, text.tgt_vocab),
        tx=tx,
        params=params,
        opt_state=tx.init(params),
        key=jax.random.key(0),
        text=text,
    )
    measured = validate(backend, text, cfg)
    assert expected["bleu"] > 10  # the run translates: greedy search has choices to get right
    assert measured["bleu"] == pytest.approx(expected["bleu"], abs=1e-9)
    assert measured["valid_loss"] == pytest.approx(expected["valid_loss"], rel=1e-5)


def test_lengths_are_padded_up_a_short_ladder():
    ladder = [8, 8, 16, 32, 48, 64, 96, 128]
    assert [flax_optim.bucket(n) for n in (1, 8, 9, 32, 33, 64, 65, 100)] == ladder
    assert len({flax_optim.bucket(n) for n in range(1, 82)}) == 7  # data.max_tokens=80 + </s>


def test_an_update_with_a_non_finite_gradient_is_not_applied():
    vocab = Vocab(list(ALPHABET))
    model = build_model(ModelConfig(**_dims()), vocab, vocab)
    params = flax_optim.init_params(model, seed=0)
    tx = flax_optim.make_optimizer(TrainConfig())
    updates = flax_optim.Updates(model, tx, 0.0)
    nan = jax.tree_util.tree_map(lambda p: p * np.nan, params)
    kept, _, finite = updates.apply(params, tx.init(params), nan, 1e-3)
    assert not bool(finite)
    same = jax.tree_util.tree_map(lambda a, b: bool((a == b).all()), kept, params)
    assert all(jax.tree_util.tree_leaves(same))


@pytest.mark.slow  # trains and compiles whole Flax runs
def test_a_killed_flax_run_resumes_to_the_same_weights(tmp_path, monkeypatch):
    straight = reverse_config(tmp_path / "straight")
    train(straight, progress=False)
    killed = reverse_config(tmp_path / "killed", save_every=4)
    real, calls = flax_optim.Updates.step, [0]

    def dies(self, *args):
        calls[0] += 1
        if calls[0] == 7:  # after the checkpoint at step 4: steps 5 and 6 are redone
            raise Killed
        return real(self, *args)

    monkeypatch.setattr(flax_optim.Updates, "step", dies)
    with pytest.raises(Killed):
        train(killed, progress=False)
    monkeypatch.setattr(flax_optim.Updates, "step", real)
    train(killed, progress=False, resume=True)
    a = load_file(str(tmp_path / "straight" / "run" / LAST))
    b = load_file(str(tmp_path / "killed" / "run" / LAST))
    assert a.keys() == b.keys() and any(k.startswith("_train.flax.opt") for k in a)
    for name in a:  # bit for bit: optax's scalars come back in their own shape, ()
        np.testing.assert_array_equal(a[name], b[name], err_msg=name, strict=True)


@pytest.mark.slow  # trains a run in each backend
def test_each_backend_refuses_to_resume_the_others_optimiser_state(tmp_path):
    flax_run = reverse_config(tmp_path / "f", steps=2)
    train(flax_run, progress=False)
    flax_run.train.engine, flax_run.train.steps = "torch", 4
    with pytest.raises(ValueError, match=r"train.engine=flax, whose optimiser state"):
        train(flax_run, progress=False, resume=True)
    torch_run = reverse_config(tmp_path / "t", steps=2, engine="torch")
    train(torch_run, progress=False)
    torch_run.train.engine, torch_run.train.steps = "flax", 4
    with pytest.raises(ValueError, match=r"train.engine=torch, whose optimiser state"):
        train(torch_run, progress=False, resume=True)


def _overflowed(folder, backend: str, caplog) -> dict:
    """A run whose first update (lr 1e30) takes the weights to about 1e30, where every later
    loss overflows: what it said, logged and kept."""
    every = {"log_every": 1, "save_every": 1, "snapshot_every": 1}
    cfg = reverse_config(folder, engine=backend, lr=1e30, max_bad_steps=3, **every)
    caplog.clear()
    with caplog.at_level(logging.WARNING), pytest.raises(TrainingError) as raised:
        train(cfg, progress=False)
    run = folder / "run"
    metrics = (run / "metrics.jsonl").read_text().splitlines()
    weights = [load_file(str(snapshot_path(run, step))) for step in range(4)]
    last = load_file(str(run / LAST))
    counts = {k: v for k, v in last.items() if k.endswith(("step", ".count"))}  # Adam's t
    return {
        "error": str(raised.value).replace(str(run), "RUN"),
        "warnings": [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING],
        "losses": [json.loads(line)["loss"] is None for line in metrics],
        "skipped": [json.loads(line)["skipped"] for line in metrics],
        "moved": [any((w[k] != weights[0][k]).any() for k in w) for w in weights[1:]],
        "kept": [all((w[k] == weights[1][k]).all() for k in w) for w in weights[2:]],
        "finite": all(np.isfinite(v).all() for k, v in last.items() if v.dtype.kind == "f"),
        "adam_steps": sorted({float(v.max()) for v in counts.values()}),
    }


@pytest.mark.slow  # a Flax run and a PyTorch run, driven into non-finite updates
def test_an_overflowing_rate_stops_a_flax_run_as_it_stops_a_pytorch_run(tmp_path, caplog):
    runs = {b: _overflowed(tmp_path / b, b, caplog) for b in ("torch", "flax")}
    flax = runs["flax"]
    assert flax["error"].startswith(
        "3 updates in a row had a non-finite loss or gradient (train.max_bad_steps=3), the "
        "last at step 4; none was applied (RUN/last.safetensors holds the last checkpoint)"
    )
    assert flax["warnings"] == [
        f"step {n}: non-finite loss or gradient, update skipped ({n - 1} in a row)"
        for n in (2, 3, 4)
    ]
    assert flax["losses"] == [False, True, True] and flax["skipped"] == [0, 1, 2]
    # the first update moved the weights; the skipped ones changed neither them nor Adam
    assert flax["moved"] == [True, True, True] and flax["kept"] == [True, True]
    assert flax["finite"] and flax["adam_steps"] == [1.0]
    assert flax == runs["torch"]
