"""Training: `train(cfg)` fits a Seq2Seq and writes a run directory.

The loop is the classic one of Bahdanau et al. (2015) with today's defaults: teacher forcing,
token-level cross-entropy that ignores padding, Adam, gradient-norm clipping, and a cosine
learning-rate schedule with optional linear warm-up. Batches come from the built-in synthetic
tasks (tasks.py), drawn fresh at every step from a seeded generator.

A run directory holds `model.safetensors` (weights, config, vocabularies; see checkpoint.py),
`config.yaml` (the resolved config, for reading) and `metrics.jsonl` (one line per logged
interval). Progress is a tqdm bar on stderr, shown only when stderr is a terminal.
"""

from __future__ import annotations

import json
import logging
import math
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from alignmt import tasks
from alignmt.checkpoint import save_checkpoint
from alignmt.config import Config, DataConfig, TrainConfig, dump_config
from alignmt.data import Batch, Vocab, make_batch
from alignmt.model import Seq2Seq

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    run_dir: Path
    model: Seq2Seq  # trained, in eval mode
    src_vocab: Vocab
    tgt_vocab: Vocab
    steps: list[int]  # the step at the end of each logged interval
    losses: list[float]  # mean training loss over each interval
    seconds: float  # wall time of the loop (model building and saving excluded)


def train(cfg: Config, *, progress: bool | None = None) -> TrainResult:
    """Train the model `cfg` describes and save it to `cfg.out_dir`.

    Args:
        cfg: the resolved configuration.
        progress: draw a progress bar; None draws one when stderr is a terminal.

    Returns:
        The trained model, its vocabularies, the loss curve and the training time.
    """
    seed_everything(cfg.seed)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    device = pick_device(cfg.train.device)
    vocab = Vocab(tasks.ALPHABET)
    model = Seq2Seq.from_config(cfg.model, src_vocab=len(vocab), tgt_vocab=len(vocab)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(cfg.train))
    batches = task_batches(cfg.data, vocab, cfg.train.batch_size, random.Random(cfg.seed))

    run_dir = Path(cfg.out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(dump_config(cfg))
    steps, losses, interval = [], [], []  # interval: this log period's losses, on the device
    show = sys.stderr.isatty() if progress is None else progress
    bar = tqdm(
        total=cfg.train.steps, desc=f"train {run_dir.name}", disable=not show, file=sys.stderr
    )
    start = time.perf_counter()
    with (run_dir / "metrics.jsonl").open("w") as metrics:
        for step in range(1, cfg.train.steps + 1):
            interval.append(train_step(model, next(batches).to(device), optimizer, cfg.train))
            schedule.step()
            if step % cfg.train.log_every == 0 or step == cfg.train.steps:
                steps.append(step)
                losses.append(torch.stack(interval).mean().item())  # the only host sync
                interval.clear()
                record = {"step": step, "loss": losses[-1], "lr": schedule.get_last_lr()[0]}
                metrics.write(json.dumps(record) + "\n")
                bar.set_postfix(loss=f"{losses[-1]:.4f}")
                log.info("step %d loss %.4f", step, losses[-1])
            bar.update()
    seconds = time.perf_counter() - start
    bar.close()
    model.eval()
    save_checkpoint(run_dir, model, cfg, vocab, vocab, cfg.train.steps)
    return TrainResult(run_dir, model, vocab, vocab, steps, losses, seconds)


def train_step(
    model: Seq2Seq, batch: Batch, optimizer: torch.optim.Optimizer, cfg: TrainConfig
) -> Tensor:
    """One update on `batch`; returns the loss before the update, detached, left on the
    device so that a GPU need not wait for it."""
    model.train()
    logits = model(batch.src, batch.src_len, batch.tgt_in).logits  # (B, T_tgt, V)
    loss = sequence_loss(logits, batch.tgt_out, model.pad_id)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.clip_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
    optimizer.step()
    return loss.detach()


def sequence_loss(logits: Tensor, targets: Tensor, pad_id: int) -> Tensor:
    """Mean cross-entropy over real target tokens (</s> included, padding excluded).

    Args:
        logits: (B, T_tgt, V).
        targets: (B, T_tgt) int64 y_1 .. y_n </s>, padded with pad_id.
    """
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=pad_id)


def lr_factor(cfg: TrainConfig):
    """The schedule as a multiplier of cfg.lr for LambdaLR: linear warm-up, then cosine to
    zero over the remaining steps ("cosine") or flat ("constant")."""

    def factor(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        if cfg.schedule == "constant":
            return 1.0
        progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def task_batches(
    cfg: DataConfig, vocab: Vocab, batch_size: int, rng: random.Random
) -> Iterator[Batch]:
    """An endless stream of fresh synthetic batches (the task is never short of data)."""
    while True:
        pairs = tasks.sample_pairs(cfg.task, rng, batch_size, cfg.min_len, cfg.max_len)
        yield make_batch([(vocab.encode(s), vocab.encode(t)) for s, t in pairs], vocab, vocab)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def pick_device(name: str) -> torch.device:
    """ "auto" takes CUDA when present; asking for CUDA without one is an error, not a fallback."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device=cuda but torch sees no CUDA device; use auto or cpu")
    return torch.device(name)
