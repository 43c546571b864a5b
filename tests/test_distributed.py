"""Training on several processes (torchrun, DDP over gloo on the CPU), and the stop decisions
every run takes together: signals, non-finite updates, a process that dies, resuming.

The multi-process tests start real processes (`python -m torch.distributed.run`, which is
`torchrun`) and bound every wait, so a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from alignmt.config import Config, DataConfig, ModelConfig, TrainConfig, dump_config
from alignmt.training.batches import Progress
from alignmt.training.distributed import World, check_resume
from alignmt.training.loop import TrainingError
from alignmt.training.run import train
from tests.conftest import toy_corpus_config

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    # One thread a process: two processes share the CI machine's two cores.
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def _write(cfg: Config, folder: Path) -> Path:
    path = folder / "config.yaml"
    path.write_text(dump_config(cfg))
    return path


def torchrun(config: Path, *args: str, nproc: int = 2, timeout: float = 240):
    """`torchrun --standalone --nproc-per-node N -m alignmt train CONFIG ARGS`, bounded."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "alignmt",
        "train",
        str(config),
        *args,
    ]
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout)


def weights(path: Path) -> dict[str, torch.Tensor]:
    return {k: v for k, v in load_file(str(path)).items() if not k.startswith("_train.")}


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def corpus_config(folder: Path, **train) -> Config:
    cfg = toy_corpus_config(
        folder,
        **{"steps": 6, "log_every": 2, "eval_every": 3, "lr": 3e-3, "batch_size": 8, **train},
    )
    return replace(cfg, model=replace(cfg.model, dropout=0.0))


# --- the same optimisation on 2 processes as on 1 accumulating 2 ---------------------------


@pytest.mark.slow
def test_two_gloo_processes_train_the_weights_one_process_accumulating_two_does(tmp_path):
    # BLEU wavers this early, so the plateau schedule halves the rate now and then: rank 0
    # decides that, and the other process must follow
    two = corpus_config(
        tmp_path / "two", schedule="plateau", plateau_patience=1, eval_every=2, steps=12
    )
    done = torchrun(_write(two, tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    one = replace(two, out_dir=str(tmp_path / "one"), train=replace(two.train, accumulate=2))
    train(one, progress=False)
    a = weights(Path(two.out_dir) / "last.safetensors")
    b = weights(tmp_path / "one/last.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5, msg=name)
    # the logged losses are over both processes' tokens, as the single process logs them
    two_losses = [r["loss"] for r in records(Path(two.out_dir)) if "loss" in r]
    one_losses = [r["loss"] for r in records(tmp_path / "one") if "loss" in r]
    assert two_losses == pytest.approx(one_losses, rel=1e-5)
    assert [r["lr"] for r in records(tmp_path / "one") if "lr" in r][-1] < two.train.lr / 2
    assert [r["tokens"] for r in records(tmp_path / "one") if "tokens" in r] == [
        r["tokens"] for r in records(Path(two.out_dir)) if "tokens" in r
    ]
    # and one process without accumulation trains something else: the test can fail
    alone = replace(two, out_dir=str(tmp_path / "alone"))
    train(alone, progress=False)
    c = weights(tmp_path / "alone/last.safetensors")
    assert any(not torch.allclose(a[n], c[n], rtol=1e-4, atol=1e-5) for n in a)


def test_a_checkpoint_refuses_a_resume_that_would_change_the_updates():
    saved = {"world_size": 2, "accumulate": 1}
    check_resume(saved, World(size=1), accumulate=2, where="run")  # same 2 micro-batches: fine
    check_resume(saved, World(size=2), accumulate=1, where="run")
    with pytest.raises(ValueError, match=r"2 process\(es\) x train.accumulate=1 .* N x K = 2"):
        check_resume(saved, World(size=1), accumulate=1, where="run")
    check_resume({}, World(size=1), accumulate=1, where="old run")  # saved before: 1 x 1


def test_resuming_a_two_process_run_on_one_process_needs_the_same_updates(tmp_path):
    cfg = corpus_config(tmp_path, steps=3, eval_every=3)
    train(replace(cfg, train=replace(cfg.train, accumulate=2)), progress=False)
    last = Path(cfg.out_dir) / "last.safetensors"
    assert json.loads(load_file_metadata(last)["train_state"])["progress"]["accumulate"] == 2
    with pytest.raises(ValueError, match="would change the optimisation"):
        train(replace(cfg, train=replace(cfg.train, steps=6)), progress=False, resume=True)


def load_file_metadata(path: Path) -> dict[str, str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return f.metadata()


# --- signals, resuming, a dead process ---------------------------------------------------


def _wait_for_record(run_dir: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        path = run_dir / "metrics.jsonl"
        if path.is_file() and path.read_text().strip():
            return
        assert process.poll() is None, process.communicate()[1][-3000:]
        time.sleep(0.05)
    raise AssertionError(f"no training record in {timeout} s")


def reverse_config(folder: Path, **train) -> Config:
    return Config(
        model=ModelConfig(emb_dim=16, enc_hidden=16, dec_hidden=32, attn_dim=16, dropout=0.1),
        data=DataConfig(task="reverse", min_len=2, max_len=6),
        train=TrainConfig(
            **{"steps": 150, "log_every": 5, "batch_size": 16, "lr": 3e-3, "threads": 1, **train}
        ),
        out_dir=str(folder / "run"),
    )


def _progress(path: Path) -> dict:
    return json.loads(load_file_metadata(path)["train_state"])["progress"]


# A signal to one process of two, or to a single one, stops the run with a checkpoint that
# resumes as if uninterrupted: benchmarks/drill_signals.py's drill, which
# tests/test_drills.py runs.


@pytest.mark.slow
def test_killing_one_of_two_processes_makes_the_other_exit_with_an_error(tmp_path):
    """Without torchrun's agent to clean up: the survivor's next collective fails."""
    cfg = reverse_config(tmp_path, steps=100_000)
    config = _write(cfg, tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ranks = []
    for rank in (0, 1):
        env = {
            **_env(),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        ranks.append(
            subprocess.Popen(
                [sys.executable, "-m", "alignmt", "train", str(config)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        _wait_for_record(Path(cfg.out_dir), ranks[0])
        ranks[1].kill()
        start = time.monotonic()
        _, err = ranks[0].communicate(timeout=60)
        assert ranks[0].returncode not in (0, None)
        assert "died or stopped answering" in err, err[-4000:]
        assert time.monotonic() - start < 60
    finally:
        for process in ranks:
            process.kill()


# --- non-finite updates ------------------------------------------------------------------


def _poison(monkeypatch, bad_calls: set[int] | None = None) -> None:
    """Make the loss NaN on the given calls (all from the first, when None)."""
    module = importlib.import_module("alignmt.training.optim")
    real, calls = module.loss_of, [0]

    def poisoned(*args):
        calls[0] += 1
        loss = real(*args)
        return loss * float("nan") if bad_calls is None or calls[0] in bad_calls else loss

    monkeypatch.setattr(module, "loss_of", poisoned)


def test_a_non_finite_update_is_skipped_and_counted_and_never_applied(tmp_path, monkeypatch):
    _poison(monkeypatch, {3, 4})
    cfg = reverse_config(tmp_path, steps=10, log_every=5)
    result = train(cfg, progress=False)
    assert [r["skipped"] for r in records(result.run_dir)] == [2, 2]
    assert all(torch.isfinite(p).all() for p in result.model.parameters())
    assert all(r["loss"] is not None and r["loss"] == r["loss"] for r in records(result.run_dir))


def test_too_many_non_finite_updates_in_a_row_stop_the_run_with_an_error(tmp_path, monkeypatch):
    _poison(monkeypatch)
    cfg = reverse_config(tmp_path, steps=50, max_bad_steps=4)
    with pytest.raises(TrainingError, match=r"4 updates in a row .*train.max_bad_steps=4"):
        train(cfg, progress=False)


def test_progress_is_json_ready_and_resumes_from_an_older_checkpoint_without_new_fields():
    old = {"step": 5, "epoch": 1, "batch": 3}
    assert Progress(**old).world_size == 1
    json.dumps(vars(Progress(**old)))


def test_a_signal_at_a_step_due_for_evaluation_leaves_it_to_the_resumed_run(tmp_path, monkeypatch):
    """Stopped by SIGTERM during step 5 of a run that evaluates every 5 steps: the checkpoint
    is written at once, and resuming evaluates step 5 before going on, so the run ends as
    an uninterrupted one does (best model, evaluations, weights)."""
    straight = toy_corpus_config(tmp_path / "straight", steps=10, eval_every=5)
    train(straight, progress=False)
    stopped = replace(straight, out_dir=str(tmp_path / "stopped"))
    module = importlib.import_module("alignmt.training.torch_backend")
    real, calls = module.train_step, [0]

    def signalled(*args):
        calls[0] += 1
        if calls[0] == 5:
            os.kill(os.getpid(), signal.SIGTERM)  # caught by the loop's handler
        return real(*args)

    monkeypatch.setattr(module, "train_step", signalled)
    assert train(stopped, progress=False).stopped_by == "SIGTERM"
    assert _progress(Path(stopped.out_dir) / "last.safetensors")["eval_pending"] is True
    assert [r for r in records(Path(stopped.out_dir)) if "bleu" in r] == []
    monkeypatch.setattr(module, "train_step", real)
    train(stopped, progress=False, resume=True)
    for name in ("last.safetensors", "model.safetensors"):
        a, b = weights(Path(stopped.out_dir) / name), weights(Path(straight.out_dir) / name)
        assert all(torch.equal(a[k], b[k]) for k in a), name
    evals = [
        [r["step"], r["bleu"], r["valid_loss"]]
        for r in records(Path(stopped.out_dir))
        if "bleu" in r
    ]
    assert evals == [
        [r["step"], r["bleu"], r["valid_loss"]]
        for r in records(Path(straight.out_dir))
        if "bleu" in r
    ]


def test_a_demo_stopped_by_a_signal_stops_instead_of_comparing_a_half_trained_model(
    tmp_path, monkeypatch, capsys
):
    from alignmt.cli import main
    from alignmt.experiments import demo

    trained = []

    def stopped_at_once(cfg, progress=None, overwrite=False):
        trained.append(cfg.out_dir)
        one_step = replace(cfg, train=replace(cfg.train, steps=1))
        return replace(train(one_step, progress=False, overwrite=overwrite), stopped_by="SIGINT")

    monkeypatch.setattr(demo, "train", stopped_at_once)
    assert main(["demo", "--steps", "1", "--out", str(tmp_path / "demo")]) == 130
    assert len(trained) == 1  # the other models were not trained, nor anything compared
    assert "interrupted (SIGINT" in capsys.readouterr().err
