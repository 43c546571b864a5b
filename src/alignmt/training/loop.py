"""The training loop of Bahdanau et al. (2015) with today's defaults: teacher forcing,
token-level cross-entropy that ignores padding (optionally label-smoothed), Adam, gradient-norm
clipping, and a learning-rate schedule with optional linear warm-up: cosine to zero, constant,
or halved when the validation metric plateaus. What each update trains on is `batches`'
(length-bucketed corpus batches, or fresh synthetic ones), and running as one of many
processes under torchrun is `distributed`'s; setting a run up is `run`'s.

`Loop` is the same for both backends. What differs between training in PyTorch and in JAX
(an update, the learning rate's home, a mean over processes, validation, checkpoints) is a
`Backend`'s: `torch_backend.TorchBackend` or `flax_backend.FlaxBackend`.

On a corpus the model is evaluated every `eval_every` steps (validation loss, and BLEU of
greedy translations); the best model by `metric` is kept and training can stop early. The
loop stops at `steps`, at the time budget, on early stopping, on SIGTERM or SIGINT (with a
checkpoint of the current step: exit 0, resume later) or after `max_bad_steps` updates in a
row with a non-finite loss or gradient (an error; the weights never take such an update).
Each of these is decided by all processes together. Progress goes to stderr (`report`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from alignmt.checkpoint.format import LAST, WEIGHTS, snapshot_path, snapshot_steps
from alignmt.config import Config, SearchConfig
from alignmt.decoding.engine import Engine
from alignmt.text.guide import TokenLinks
from alignmt.text.prepare import Text
from alignmt.text.vocab import Vocab
from alignmt.training.batches import Progress, Step, steps
from alignmt.training.distributed import Interrupts, World
from alignmt.training.optim import lr_factor
from alignmt.training.report import ProgressReport, how_to_show
from alignmt.training.runlog import RunLog
from alignmt.training.validate import validate

if TYPE_CHECKING:
    from alignmt.model.seq2seq import Seq2Seq

log = logging.getLogger(__name__)

# One update's loss as its backend returns it (a torch or a JAX scalar), left where it was
# computed until an interval's mean is taken: reading it is a host sync.
Loss = TypeVar("Loss")


class TrainingError(RuntimeError):
    """Training cannot go on (too many non-finite updates in a row)."""


class Backend(Protocol[Loss]):
    """What training does differently in PyTorch and in JAX; `Loop` does the rest."""

    # what the first update compiles, which the progress report names; None: nothing
    compiles: str | None

    def set_lr(self, lr: float) -> None:
        """The learning rate of the updates that follow."""

    def update(self, step: Step, index: int) -> Loss | None:
        """One update on this process's share of `step`, the run's `index`-th (from 0);
        its part of the update's loss, or None when the loss or gradient was not finite,
        in which case neither the weights nor the optimiser state changed."""

    def mean_loss(self, losses: list[Loss]) -> float | None:
        """The mean of an interval's applied updates' `losses` over every process's tokens
        (None for none); every process calls it, as every process skipped the same."""

    def valid_loss(self, pairs: list[tuple[list[int], list[int]]]) -> tuple[float, int]:
        """The teacher-forced loss per target token of held-out (source, target) id pairs,
        without dropout or smoothing, and how many target tokens it averages over."""

    def engine(self, search: SearchConfig) -> Engine:
        """The current weights as a decoding engine (`validate` translates with it)."""

    def rng_state(self) -> dict[str, Any]:
        """This process's generator states, which rank 0 saves for every process."""

    def trained_model(self, run_dir: Path) -> Seq2Seq:
        """The run's model once training has ended (the best by validation where it kept
        one), as a PyTorch Seq2Seq in eval mode, as every command reads it."""

    def save_weights(self, path: Path, step: int) -> None:
        """A model-only checkpoint of the current weights at `path`."""

    def save_state(self, path: Path, progress: Progress, rngs: list[dict[str, Any]]) -> None:
        """A resumable checkpoint: weights, optimiser state, `progress` and the generator
        states of every process (`rngs`, in rank order)."""


# (cfg, text, world, the last checkpoint to resume from or None) -> a context in which the
# backend's model, optimiser and device are set up, yielding it and the run's progress
Begin = Callable[
    [Config, Text, World, "Path | None"], AbstractContextManager[tuple[Backend, Progress]]
]


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
    stopped_by: str | None = None  # "SIGTERM" or "SIGINT" when a signal ended the run
    step: int = 0  # the step training ended at
    main: bool = True  # False on the ranks > 0 of a distributed run, which record nothing


class Loop:
    """The training loop and its bookkeeping, split into short methods."""

    def __init__(
        self,
        *,
        cfg: Config,
        backend: Backend[Any],
        text: Text,
        state: Progress,
        run_dir: Path,
        world: World,
        links: TokenLinks | None = None,
    ) -> None:
        self.cfg, self.backend, self.text = cfg, backend, text
        self.links = links  # the training pairs' word links, for guided alignment
        self.state, self.run_dir, self.world = state, run_dir, world
        self.lr = cfg.train.lr  # the rate of the last update
        self.log: RunLog | None = None  # rank 0 alone keeps the run log and the snapshots
        if world.main:
            self.log = RunLog(run_dir, state.step, tensorboard=cfg.train.tensorboard)
            drop_stale_snapshots(run_dir, state.step)
        self.start = time.perf_counter() - state.seconds  # the clock runs on across resumptions
        self.elapsed = state.seconds  # what every process agreed the clock read, last asked
        self.out_of_time = False  # train.minutes has run out
        self.stopped_by: str | None = None  # the signal that stops the run, once caught

    def run(self, progress: bool | None) -> float:
        """Train to the end of the steps, the clock, early stopping or a signal; the seconds
        this call took."""
        started = time.perf_counter()
        report = ProgressReport(
            self.run_dir.name,
            total=self.cfg.train.steps,
            initial=self.state.step,
            show=how_to_show(progress) if self.world.main else "none",
            compiles=self.backend.compiles,
            deadline=self.start + 60 * minutes if (minutes := self.cfg.train.minutes) else None,
        )
        try:
            with Interrupts() as interrupts:
                self._train(interrupts, report)
            self._finish()
        finally:
            report.close()
            if self.log:
                self.log.close()
        return time.perf_counter() - started

    def result(self, model: Seq2Seq, seconds: float) -> TrainResult:
        """What `train` returns once this loop has run `seconds`, handing back `model`."""
        kept = self.log  # rank 0's record; the other ranks keep none
        logged, losses, evals = (kept.steps, kept.losses, kept.evals) if kept else ([], [], [])
        return TrainResult(
            run_dir=self.run_dir,
            model=model,
            src_vocab=self.text.src_vocab,
            tgt_vocab=self.text.tgt_vocab,
            steps=logged,
            losses=losses,
            seconds=seconds,
            evals=evals,
            stopped_by=self.stopped_by,
            step=self.state.step,
            main=self.world.main,
        )

    def _train(self, interrupts: Interrupts, report: ProgressReport) -> None:
        cfg, state = self.cfg.train, self.state
        updates = steps(self.text, self.cfg.data, cfg, self.cfg.seed, state, self.world, self.links)
        interval: list[Any] = []  # the applied updates' losses; None for a skipped one
        if state.step == 0:
            self._snapshot()  # the untrained weights: where a look at training starts
        last = self._evaluate_pending() or state.step >= cfg.steps
        last = last or self._must_stop(interrupts)
        while not last:
            self._set_lr()
            interval.append(self._update(next(updates)))
            state.step += 1
            report.update()
            if self._every(cfg.snapshot_every):
                self._snapshot()
            last = state.step >= cfg.steps or self._must_stop(interrupts)
            if self._every(cfg.log_every) or last:
                report.set_loss(self._log_interval(interval))
                interval.clear()
            if self._checkpoint():
                return

    def _every(self, period: int) -> bool:
        """Whether the step just taken ends a period of `period` steps (0: no period)."""
        return period > 0 and self.state.step % period == 0

    def _checkpoint(self) -> bool:
        """After each step: what is due. An evaluation (with the best model and the last
        state saved) at the last step, when the clock runs out and every train.eval_every
        steps; else last.safetensors every train.save_every steps. A signal saves at once
        and leaves a due evaluation to the resumed run. True: leave the loop."""
        cfg = self.cfg.train
        due = self.state.step >= cfg.steps or self.out_of_time or self._every(cfg.eval_every)
        if self.stopped_by:
            self.state.eval_pending = due
            self._save_last()
            return True
        if due:
            # An evaluation can take minutes: when the clock runs out during it, this
            # evaluated step is the last, rather than one more step and another evaluation.
            return self._evaluate_and_save() or self._out_of_time()
        if self._every(cfg.save_every):
            self._save_last()
        return False

    def _update(self, step: Step) -> Any:
        """One update; its loss, or None when it was skipped for a non-finite loss or
        gradient. train.max_bad_steps skipped in a row end the run with `TrainingError`."""
        state = self.state
        state.tokens += step.tokens
        loss = self.backend.update(step, state.step)
        if loss is not None:
            state.bad_steps = 0
            return loss
        state.bad_steps += 1
        state.skipped += 1
        log.warning(
            "step %d: non-finite loss or gradient, update skipped (%d in a row)",
            state.step + 1,
            state.bad_steps,
        )
        if state.bad_steps >= self.cfg.train.max_bad_steps:
            raise self._too_many_bad_steps()
        return None

    def _too_many_bad_steps(self) -> TrainingError:
        state, last = self.state, self.run_dir / LAST
        kept = f"{last} holds the last checkpoint" if last.is_file() else "no checkpoint yet"
        return TrainingError(
            f"{state.bad_steps} updates in a row had a non-finite loss or gradient "
            f"(train.max_bad_steps={self.cfg.train.max_bad_steps}), the last at step "
            f"{state.step + 1}; none was applied ({kept}). Try a lower train.lr or "
            "train.clip_norm, or train.precision=float32."
        )

    def _elapsed(self) -> float:
        """Seconds of training so far, across resumptions."""
        return time.perf_counter() - self.start

    def _must_stop(self, interrupts: Interrupts) -> bool:
        """Whether any process was told to stop, or the time is up: one answer for all, from
        one all-reduce that also agrees on the clock (the furthest along), which the
        learning rate of a time-budgeted cosine then reads on every process alike."""
        caught, self.elapsed = self.world.agree(interrupts.caught is not None, self._elapsed())
        if caught and not self.stopped_by:
            self.stopped_by = interrupts.caught or "a signal to another process"
            log.warning(
                "%s: stopping at step %d with a checkpoint", self.stopped_by, self.state.step
            )
        self.out_of_time = 0 < 60 * self.cfg.train.minutes <= self.elapsed
        return bool(caught) or self.out_of_time

    def _out_of_time(self) -> bool:
        """Whether train.minutes has run out, by the clock every process agrees on."""
        (self.elapsed,) = self.world.agree(self._elapsed())
        self.out_of_time = 0 < 60 * self.cfg.train.minutes <= self.elapsed
        return self.out_of_time

    def _set_lr(self) -> None:
        """The learning rate of the step about to be taken."""
        factor = lr_factor(self.cfg.train)(self.state.step, self.elapsed) * self.state.lr_scale
        self.lr = self.cfg.train.lr * factor
        self.backend.set_lr(self.lr)

    def _log_interval(self, interval: list[Any]) -> str:
        """Record the interval's mean loss over every process's tokens; return it as text."""
        loss = self.backend.mean_loss([loss for loss in interval if loss is not None])
        state = self.state
        state.seconds = round(self._elapsed(), 3)
        if self.log:
            self.log.interval(
                {
                    "step": state.step,
                    "loss": loss,
                    "lr": self.lr,
                    "epoch": state.epoch,
                    "seconds": state.seconds,
                    "tokens": state.tokens,
                    "skipped": state.skipped,
                }
            )
        log.info("step %d loss %s", state.step, loss)
        return "skipped" if loss is None else f"{loss:.4f}"

    def _evaluate_pending(self) -> bool:
        """The evaluation due at the step a signal stopped the run; True: stop early."""
        if not self.state.eval_pending:
            return False
        self.state.eval_pending = False
        return self._evaluate_and_save()

    def _evaluate_and_save(self) -> bool:
        """Evaluate (corpus only) on rank 0, keep the best model and the last state; True:
        stop early. Rank 0 decides, and hands the others what the plateau schedule and
        early stopping now read, so that every process goes on with the same rate."""
        stop, state = False, self.state
        if self.text.valid:
            if self.world.main:
                stop = self._evaluate()
            decided = (state.best, state.bad_evals, state.lr_scale, stop)
            state.best, state.bad_evals, state.lr_scale, stop = self.world.broadcast(decided)
        self._save_last()
        return stop

    def _evaluate(self) -> bool:
        record = validate(self.backend, self.text, self.cfg)
        record["step"] = self.state.step
        record["seconds"] = round(self._elapsed(), 3)
        self.log.evaluation(record)
        log.info("step %d valid %s", self.state.step, record)
        if self._improved(record):
            self.backend.save_weights(self.run_dir / WEIGHTS, self.state.step)
        return 0 < self.cfg.train.early_stop <= self.state.bad_evals

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

    def _finish(self) -> None:
        """The last snapshot and, without validation, the model; on rank 0."""
        if not self.world.main:
            return
        if not self.stopped_by:
            self._snapshot()  # the last step, wherever the steps, clock or early stop ended
        if not self.text.valid:
            self.backend.save_weights(self.run_dir / WEIGHTS, self.state.step)

    def _snapshot(self) -> None:
        """Keep this step's weights as a model-only checkpoint, unless it is already kept."""
        path = snapshot_path(self.run_dir, self.state.step)
        if self.world.main and self.cfg.train.snapshot_every and not path.is_file():
            self.backend.save_weights(path, self.state.step)

    def _save_last(self) -> None:
        """The resumable checkpoint; every process hands rank 0 its generator states."""
        self.state.seconds = round(self._elapsed(), 3)  # validation time included
        rngs = self.world.gather(self.backend.rng_state())
        if self.world.main:
            self.backend.save_state(self.run_dir / LAST, self.state, rngs)


def drop_stale_snapshots(run_dir: Path, step: int) -> None:
    """A resumed run drops the snapshots the killed run kept after its last checkpoint,
    which it redoes."""
    for kept in snapshot_steps(run_dir):
        if kept > step:
            snapshot_path(run_dir, kept).unlink()
