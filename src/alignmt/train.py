"""Training: `train(cfg)` fits a Seq2Seq and writes a run directory.

The loop is the classic one of Bahdanau et al. (2015) with today's defaults: teacher forcing,
token-level cross-entropy that ignores padding (optionally label-smoothed), Adam, gradient-norm
clipping, and a learning-rate schedule with optional linear warm-up: cosine to zero, constant,
or halved when the validation metric plateaus. Batches come either from a built-in synthetic
task (tasks.py), drawn fresh at every step, or from a parallel corpus, in length-bucketed
batches reshuffled every epoch.

On a corpus the model is evaluated every `eval_every` steps (validation loss, and BLEU of
greedy translations); the best model by `metric` is kept and training can stop early. A run
directory holds `model.safetensors` (the best model, or the last without validation),
`last.safetensors` (the last model plus everything needed to resume: optimizer moments, RNG
states, position in the data, schedule), `config.yaml`, `metrics.jsonl` (one JSON record per
logged interval and per evaluation) and `curves.png`; with `snapshot_every` also
`snapshots/step_NNNNNN.safetensors`, the weights at step 0, every N steps and the last step.
Resuming replays nothing: it restores that state, so a killed and resumed run ends with the
same weights (and snapshots) as an uninterrupted one.
Progress is a tqdm bar on stderr, shown only when stderr is a terminal.
"""

from __future__ import annotations

import json
import logging
import math
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm import tqdm

from alignmt import tasks
from alignmt.checkpoint import (
    LAST,
    WEIGHTS,
    as_tuples,
    capture_train_state,
    load_weights,
    restore_train_state,
    save_checkpoint,
    snapshot_path,
    snapshot_steps,
)
from alignmt.config import Config, DataConfig, TrainConfig, dump_config
from alignmt.data import Batch, Vocab, bucket_batches, make_batch
from alignmt.evaluate import corpus_scores
from alignmt.model import Seq2Seq
from alignmt.plot import loss_curves, save_png
from alignmt.prepare import Text, prepare_text
from alignmt.translate import Translator

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    run_dir: Path
    model: Seq2Seq  # the best (or last) model, in eval mode
    src_vocab: Vocab
    tgt_vocab: Vocab
    steps: list[int]  # the step at the end of each logged interval
    losses: list[float]  # mean training loss over each interval
    seconds: float  # wall time of the loop (model building and saving excluded)
    evals: list[dict[str, float]] = field(default_factory=list)  # validation records


@dataclass
class Progress:
    """Everything besides weights and optimizer that a resumed run needs; JSON-ready."""

    step: int = 0
    epoch: int = 0  # corpus: current epoch and how many of its batches are done
    batch: int = 0
    lr_scale: float = 1.0  # plateau schedule: product of the halvings so far
    best: float | None = None  # best validation metric, oriented so that higher is better
    bad_evals: int = 0  # evaluations since `best` last improved
    task_rng: Any = None  # synthetic task: the data generator's state
    seconds: float = 0.0  # training time so far, across resumptions


def train(cfg: Config, *, progress: bool | None = None, resume: bool = False) -> TrainResult:
    """Train the model `cfg` describes and save it to `cfg.out_dir`.

    Args:
        cfg: the resolved configuration.
        progress: draw a progress bar; None draws one when stderr is a terminal.
        resume: continue from `cfg.out_dir`/last.safetensors instead of starting afresh.

    Returns:
        The trained model, its vocabularies, the loss curve and the training time.
    """
    seed_everything(cfg.seed)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    device = pick_device(cfg.train.device)
    text = prepare_text(cfg.data, cfg.seed)
    model = Seq2Seq.from_config(
        cfg.model, src_vocab=len(text.src_vocab), tgt_vocab=len(text.tgt_vocab)
    ).to(device)
    optimizer = make_optimizer(model, cfg.train)
    run_dir = Path(cfg.out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    state = Progress(task_rng=random.Random(cfg.seed).getstate())
    if resume:
        state = Progress(**restore_train_state(run_dir / LAST, model, optimizer))
        log.info("resuming %s at step %d", run_dir, state.step)
    (run_dir / "config.yaml").write_text(dump_config(cfg))
    loop = _Loop(cfg, model, optimizer, text, state, run_dir, device)
    seconds = loop.run(progress)
    best = run_dir / WEIGHTS
    if best.is_file() and text.valid:
        model.load_state_dict(load_weights(best))
    model.eval()
    return TrainResult(
        run_dir, model, text.src_vocab, text.tgt_vocab, loop.steps, loop.losses, seconds,
        loop.evals,
    )  # fmt: skip


class _Loop:
    """The training loop and its bookkeeping, split into short methods."""

    def __init__(self, cfg, model, optimizer, text, state, run_dir, device) -> None:
        self.cfg, self.model, self.optimizer, self.text = cfg, model, optimizer, text
        self.state, self.run_dir, self.device = state, run_dir, device
        self.steps, self.losses, self.evals = _history(run_dir / "metrics.jsonl", state.step)
        _drop_stale_snapshots(run_dir, state.step)
        self.board = _tensorboard(run_dir) if cfg.train.tensorboard else None

    def run(self, progress: bool | None) -> float:
        cfg, state = self.cfg.train, self.state
        show = sys.stderr.isatty() if progress is None else progress
        bar = tqdm(total=cfg.steps, initial=state.step, desc=f"train {self.run_dir.name}",
                   disable=not show, file=sys.stderr)  # fmt: skip
        interval, start = [], time.perf_counter()
        self.start = start - self.state.seconds
        batches = self._batches()
        with (self.run_dir / "metrics.jsonl").open("a") as self.metrics:
            if state.step == 0:
                self._snapshot()  # the untrained weights: where a look at training starts
            last = state.step >= cfg.steps or self._out_of_time()
            while not last:
                self._set_lr()
                interval.append(train_step(self.model, next(batches).to(self.device),
                                           self.optimizer, cfg))  # fmt: skip
                state.step += 1
                bar.update()
                if cfg.snapshot_every and state.step % cfg.snapshot_every == 0:
                    self._snapshot()
                last = state.step >= cfg.steps or self._out_of_time()
                if state.step % cfg.log_every == 0 or last:
                    bar.set_postfix(loss=f"{self._log(interval):.4f}")
                    interval.clear()
                due = last or (cfg.eval_every and state.step % cfg.eval_every == 0)
                if due and self._evaluate_and_save():
                    break  # early stop
        bar.close()
        self._snapshot()  # the last step, wherever the steps, the clock or early stopping ended
        if not self.text.valid:
            self._save(self.run_dir / WEIGHTS, with_state=False)
        plot_curves(self.run_dir / "curves.png", self.steps, self.losses, self.evals)
        return time.perf_counter() - start

    def _batches(self) -> Iterator[Batch]:
        if self.text.train:
            return corpus_batches(self.text, self.cfg.train, self.cfg.seed, self.state)
        rng = random.Random()
        rng.setstate(as_tuples(self.state.task_rng))
        return task_batches(self.cfg.data, self.text.src_vocab, self.cfg.train.batch_size, rng,
                            self.state)  # fmt: skip

    def _elapsed(self) -> float:
        """Seconds of training so far, across resumptions."""
        return time.perf_counter() - self.start

    def _out_of_time(self) -> bool:
        return 0 < 60 * self.cfg.train.minutes <= self._elapsed()

    def _set_lr(self) -> None:
        factor = lr_factor(self.cfg.train)(self.state.step, self._elapsed()) * self.state.lr_scale
        for group in self.optimizer.param_groups:
            group["lr"] = self.cfg.train.lr * factor

    def _log(self, interval: list[Tensor]) -> float:
        loss = torch.stack(interval).mean().item()  # the only host sync of the interval
        self.steps.append(self.state.step)
        self.losses.append(loss)
        lr = self.optimizer.param_groups[0]["lr"]
        self.state.seconds = round(self._elapsed(), 3)
        self._record({"step": self.state.step, "loss": loss, "lr": lr, "epoch": self.state.epoch,
                      "seconds": self.state.seconds})  # fmt: skip
        log.info("step %d loss %.4f", self.state.step, loss)
        return loss

    def _record(self, record: dict[str, Any]) -> None:
        self.metrics.write(json.dumps(record) + "\n")
        self.metrics.flush()
        for key, value in record.items():
            if self.board and key not in ("step", "seconds", "epoch"):
                self.board.add_scalar(key, value, record["step"])

    def _evaluate_and_save(self) -> bool:
        """Evaluate (corpus only), keep the best model and the last state; True: stop early."""
        stop = False
        if self.text.valid:
            record = validate(self.model, self.text, self.cfg)
            record["step"] = self.state.step
            record["seconds"] = round(self._elapsed(), 3)
            self.evals.append(record)
            self._record(record)
            log.info("step %d valid %s", self.state.step, record)
            if self._improved(record):
                self._save(self.run_dir / WEIGHTS, with_state=False)
            stop = 0 < self.cfg.train.early_stop <= self.state.bad_evals
        self._save(self.run_dir / LAST, with_state=True)
        return stop

    def _improved(self, record: dict[str, float]) -> bool:
        cfg, state = self.cfg.train, self.state
        value = record["bleu"] if cfg.metric == "bleu" else -record["valid_loss"]
        if state.best is None or value > state.best:
            state.best, state.bad_evals = value, 0
            return True
        state.bad_evals += 1
        if cfg.schedule == "plateau" and state.bad_evals % cfg.plateau_patience == 0:
            state.lr_scale *= 0.5
        return False

    def _snapshot(self) -> None:
        """Keep this step's weights as a model-only checkpoint, unless it is already kept."""
        path = snapshot_path(self.run_dir, self.state.step)
        if self.cfg.train.snapshot_every and not path.is_file():
            self._save(path, with_state=False)

    def _save(self, path: Path, *, with_state: bool) -> None:
        self.model.eval()
        text = self.text
        train_state = capture_train_state(self.optimizer, vars(self.state)) if with_state else None
        save_checkpoint(path, self.model, self.cfg, text.src_vocab, text.tgt_vocab,
                        self.state.step, tokenizers=text.tokenizers,
                        train_state=train_state)  # fmt: skip


def make_optimizer(model: Seq2Seq, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam at cfg.lr; `fused` updates all parameters in one kernel instead of a dozen ops
    per tensor, which is 5% of a training step on 2 CPU cores."""
    return torch.optim.Adam(model.parameters(), lr=cfg.lr, fused=True)


def train_step(
    model: Seq2Seq, batch: Batch, optimizer: torch.optim.Optimizer, cfg: TrainConfig
) -> Tensor:
    """One update on `batch`; returns the loss before the update, detached, left on the
    device so that a GPU need not wait for it."""
    model.train()
    loss = model.loss(batch.src, batch.src_len, batch.tgt_in, batch.tgt_out, cfg.label_smoothing)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.clip_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm, foreach=True)
    optimizer.step()
    return loss.detach()


def lr_factor(cfg: TrainConfig):
    """The schedule as a multiplier of cfg.lr: linear warm-up, then cosine to zero over the
    remaining steps ("cosine") or flat ("constant", "plateau": halvings are applied on top).

    With a time budget (`cfg.minutes`) the cosine runs on whichever is further along, steps or
    seconds, so a run on a slower machine still anneals to zero when its time is up
    (budgeted training, Li et al. 2020)."""

    def factor(step: int, seconds: float = 0.0) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        if cfg.schedule != "cosine":
            return 1.0
        progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        if cfg.minutes > 0:
            progress = max(progress, seconds / (60 * cfg.minutes))
        return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


# --- Batches ------------------------------------------------------------------------------


def corpus_batches(text: Text, cfg: TrainConfig, seed: int, state: Progress) -> Iterator[Batch]:
    """Length-bucketed batches, epoch after epoch, from where `state` says the run is.

    Each epoch's order depends only on (seed, epoch), so a resumed run skips the batches
    it has done and continues with exactly the ones an uninterrupted run would see.
    """
    lengths = [(len(s), len(t)) for s, t in text.train]
    while True:
        rng = random.Random(f"{seed}/epoch {state.epoch}")
        order = bucket_batches(lengths, batch_size=cfg.batch_size,
                               batch_tokens=cfg.batch_tokens, rng=rng)  # fmt: skip
        while state.batch < len(order):
            rows = order[state.batch]
            state.batch += 1
            yield make_batch([text.train[i] for i in rows], text.src_vocab, text.tgt_vocab)
        state.epoch, state.batch = state.epoch + 1, 0


def task_batches(
    cfg: DataConfig, vocab: Vocab, batch_size: int, rng: random.Random, state: Progress
) -> Iterator[Batch]:
    """An endless stream of fresh synthetic batches (the task is never short of data); the
    generator's state is copied into `state` before each batch, for resuming."""
    while True:
        pairs = tasks.sample_pairs(cfg.task, rng, batch_size, cfg.min_len, cfg.max_len)
        batch = make_batch([(vocab.encode(s), vocab.encode(t)) for s, t in pairs], vocab, vocab)
        state.task_rng = rng.getstate()
        yield batch


# --- Validation ---------------------------------------------------------------------------


@torch.no_grad()
def validate(model: Seq2Seq, text: Text, cfg: Config, batch_size: int = 64) -> dict[str, float]:
    """Validation loss (teacher-forced, no smoothing) and BLEU of greedy translations."""
    model.eval()
    device = next(model.parameters()).device
    total, tokens = 0.0, 0
    for start in range(0, len(text.valid_ids), batch_size):
        batch = make_batch(text.valid_ids[start : start + batch_size], text.src_vocab,
                           text.tgt_vocab).to(device)  # fmt: skip
        loss = model.loss(batch.src, batch.src_len, batch.tgt_in, batch.tgt_out)
        total += float(loss) * batch.num_tgt_tokens
        tokens += batch.num_tgt_tokens
    greedy = replace(cfg.search, beam_size=1)
    translator = Translator(model, tokenizers=text.tokenizers,
                            vocabs=(text.src_vocab, text.tgt_vocab), search=greedy)  # fmt: skip
    hyps = [t[0].text for t in translator.translate([p.src for p in text.valid], warn=False)]
    bleu = corpus_scores(hyps, [p.tgt for p in text.valid], lowercase=cfg.data.lowercase).bleu
    return {"valid_loss": total / tokens, "bleu": bleu}


def _history(path: Path, step: int) -> tuple[list[int], list[float], list[dict]]:
    """The records a resumed run keeps: those up to `step` (later ones are redone)."""
    steps, losses, evals, kept = [], [], [], []
    if step and path.is_file():
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["step"] > step:
                continue
            kept.append(line)
            if "valid_loss" in record:
                evals.append(record)
            else:
                steps.append(record["step"])
                losses.append(record["loss"])
    path.write_text("".join(line + "\n" for line in kept))
    return steps, losses, evals


def _drop_stale_snapshots(run_dir: Path, step: int) -> None:
    """A fresh run (step 0) keeps no snapshot of an earlier run in its folder; a resumed one
    drops those the killed run kept after its last checkpoint, which it redoes."""
    for kept in snapshot_steps(run_dir):
        if kept > step or step == 0:
            snapshot_path(run_dir, kept).unlink()


def _tensorboard(run_dir: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:  # torch imports it lazily; the package is optional
        raise ValueError(
            "train.tensorboard=true needs the tensorboard package: pip install tensorboard"
        ) from err
    return SummaryWriter(str(run_dir / "tensorboard"))


def plot_curves(path: Path, steps, losses, evals) -> None:
    curves = {"train": (steps, losses)}
    if evals:
        curves["valid"] = ([e["step"] for e in evals], [e["valid_loss"] for e in evals])
    if steps:
        save_png(loss_curves(curves, title=path.parent.name), path)


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
