"""Training with `train.backend=flax`: the run folder it writes, one update against PyTorch's,
padding, skipped updates, and resuming after a kill."""

from __future__ import annotations

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

from alignmt.checkpoint.flax_io import load_flax, params_from_tensors
from alignmt.checkpoint.format import LAST
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.config import Config, DataConfig, ModelConfig, TrainConfig
from alignmt.model.batch import make_batch
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.tasks import ALPHABET
from alignmt.text.vocab import Vocab
from alignmt.training import flax_loop
from alignmt.training.distributed import Objective
from alignmt.training.optim import make_optimizer, train_step
from alignmt.training.run import train
from tests.conftest import Killed, toy_corpus_config

jax.config.update("jax_default_matmul_precision", "highest")


def reverse_config(tmp_path, **train) -> Config:
    return Config(
        model=ModelConfig(**_dims(), dropout=0.2),
        data=DataConfig(task="reverse", min_len=2, max_len=5),
        train=TrainConfig(
            **{"backend": "flax", "steps": 12, "log_every": 4, "batch_size": 8, **train}
        ),
        out_dir=str(tmp_path / "run"),
    )


def test_a_flax_run_folder_is_read_by_pytorch_and_gives_the_same_logits(tmp_path):
    cfg = toy_corpus_config(tmp_path, backend="flax", steps=40, eval_every=20)
    result = train(cfg, progress=False)
    assert result.losses[-1] < result.losses[0]
    assert [e["step"] for e in result.evals] == [20, 40]
    run = tmp_path / "run"
    torch_ckpt, flax_ckpt = load_checkpoint(run), load_flax(run)
    batch = make_batch(
        [(torch_ckpt.src_vocab.encode(["a", "b"]), torch_ckpt.tgt_vocab.encode(["c"]))],
        torch_ckpt.src_vocab,
        torch_ckpt.tgt_vocab,
    )
    with torch.no_grad():
        expected = torch_ckpt.model(batch.src, batch.src_len, batch.tgt_in).logits.numpy()
    logits, _ = flax_ckpt.model.apply(
        {"params": flax_ckpt.params},
        batch.src.numpy(),
        batch.src_len.numpy(),
        batch.tgt_in.numpy(),
    )
    np.testing.assert_allclose(np.asarray(logits), expected, atol=1e-5)


def test_one_update_equals_pytorchs_clipped_adam_step_on_the_same_weights():
    cfg = TrainConfig(lr=0.05, clip_norm=0.5, label_smoothing=0.1)
    vocab, model_cfg = Vocab(list(ALPHABET)), ModelConfig(**_dims())
    torch.manual_seed(0)
    model = Seq2Seq.from_config(model_cfg, src_vocab=len(vocab), tgt_vocab=len(vocab))
    pairs = [(vocab.encode(list(s)), vocab.encode(list(s[::-1]))) for s in ("abc", "de", "fghi")]
    batch = make_batch(pairs, vocab, vocab)
    state = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    params = params_from_tensors(state, model_cfg)
    flax_model = flax_loop.build_model(model_cfg, vocab, vocab)
    tx = flax_loop.make_optimizer(cfg)
    updates = flax_loop.Updates(flax_model, tx, cfg.label_smoothing)
    arrays = flax_loop.padded(batch, 5, vocab.eos_id)
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
    assert max(jax.tree_util.tree_leaves(gaps)) < 1e-5


def _dims() -> dict:
    return {"emb_dim": 8, "enc_hidden": 8, "dec_hidden": 16, "attn_dim": 8}


def test_padding_rows_and_bucketed_lengths_change_no_loss():
    vocab = Vocab(list(ALPHABET))
    batch = make_batch([(vocab.encode(list("abc")), vocab.encode(list("cba")))], vocab, vocab)
    cfg = ModelConfig(**_dims())
    model = flax_loop.build_model(cfg, vocab, vocab)
    params = flax_loop.init_params(model, seed=0)
    updates = flax_loop.Updates(model, flax_loop.make_optimizer(TrainConfig()), 0.1)
    tight = {
        "src": batch.src.numpy(),
        "src_len": batch.src_len.numpy(),
        "tgt_in": batch.tgt_in.numpy(),
        "tgt_out": batch.tgt_out.numpy(),
    }
    roomy = flax_loop.padded(batch, 6, vocab.eos_id)
    assert roomy["src"].shape == (6, 8) and roomy["tgt_in"].shape == (6, 8)
    key = jax.random.key(0)
    assert float(updates.loss(params, roomy, key)) == pytest.approx(
        float(updates.loss(params, tight, key)), abs=1e-6
    )


def test_lengths_are_padded_up_a_short_ladder():
    ladder = [8, 8, 16, 32, 48, 64, 96, 128]
    assert [flax_loop.bucket(n) for n in (1, 8, 9, 32, 33, 64, 65, 100)] == ladder
    assert len({flax_loop.bucket(n) for n in range(1, 82)}) == 7  # data.max_tokens=80 + </s>


def test_an_update_with_a_non_finite_gradient_is_not_applied():
    vocab = Vocab(list(ALPHABET))
    model = flax_loop.build_model(ModelConfig(**_dims()), vocab, vocab)
    params = flax_loop.init_params(model, seed=0)
    tx = flax_loop.make_optimizer(TrainConfig())
    updates = flax_loop.Updates(model, tx, 0.0)
    nan = jax.tree_util.tree_map(lambda p: p * np.nan, params)
    kept, _, finite = updates.apply(params, tx.init(params), nan, 1e-3)
    assert not bool(finite)
    same = jax.tree_util.tree_map(lambda a, b: bool((a == b).all()), kept, params)
    assert all(jax.tree_util.tree_leaves(same))


def test_a_killed_flax_run_resumes_to_the_same_weights(tmp_path, monkeypatch):
    straight = reverse_config(tmp_path / "straight")
    train(straight, progress=False)
    killed = reverse_config(tmp_path / "killed", save_every=4)
    real, calls = flax_loop.Updates.step, [0]

    def dies(self, *args):
        calls[0] += 1
        if calls[0] == 7:  # after the checkpoint at step 4: steps 5 and 6 are redone
            raise Killed
        return real(self, *args)

    monkeypatch.setattr(flax_loop.Updates, "step", dies)
    with pytest.raises(Killed):
        train(killed, progress=False)
    monkeypatch.setattr(flax_loop.Updates, "step", real)
    train(killed, progress=False, resume=True)
    a = load_file(str(tmp_path / "straight" / "run" / LAST))
    b = load_file(str(tmp_path / "killed" / "run" / LAST))
    assert a.keys() == b.keys() and any(k.startswith("_train.flax.opt") for k in a)
    # Equal up to float rounding, not bit for bit: the resumed process runs a fresh XLA
    # executable, whose fusion may round differently (about 1e-8 after a few steps here)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=0, atol=1e-6, err_msg=name)


def test_each_backend_refuses_to_resume_the_others_optimiser_state(tmp_path):
    flax_run = reverse_config(tmp_path / "f", steps=2)
    train(flax_run, progress=False)
    flax_run.train.backend, flax_run.train.steps = "torch", 4
    with pytest.raises(ValueError, match=r"train.backend=flax, whose optimiser state"):
        train(flax_run, progress=False, resume=True)
    torch_run = reverse_config(tmp_path / "t", steps=2, backend="torch")
    train(torch_run, progress=False)
    torch_run.train.backend, torch_run.train.steps = "flax", 4
    with pytest.raises(ValueError, match=r"train.backend=torch, whose optimiser state"):
        train(torch_run, progress=False, resume=True)
