"""Training: `train(cfg)` fits a Seq2Seq and writes a run directory.

The loop is the classic one of Bahdanau et al. (2015) with today's defaults: teacher forcing,
token-level cross-entropy that ignores padding (optionally label-smoothed), Adam, gradient-norm
clipping, and a learning-rate schedule with optional linear warm-up: cosine to zero, constant,
or halved when the validation metric plateaus. What each update trains on is `batches`'
(length-bucketed corpus batches, or fresh synthetic ones), and running as one of many
processes under torchrun is `distributed`'s; this module is the loop itself.

On a corpus the model is evaluated every `eval_every` steps (validation loss, and BLEU of
greedy translations); the best model by `metric` is kept and training can stop early. A run
directory holds `model.safetensors` (the best model, or the last without validation),
`last.safetensors` (the last model plus everything needed to resume: optimizer moments, RNG
states of every process, position in the global batch order, schedule), `config.yaml`,
`metrics.jsonl` and `curves.png` (`runlog`); with `snapshot_every` also
`snapshots/step_NNNNNN.safetensors`, the weights at step 0, every N steps and the last step.
Resuming replays nothing: it restores that state, so a killed and resumed run ends with the
same weights (and snapshots) as an uninterrupted one.

The loop stops at `steps`, at the time budget, on early stopping, on SIGTERM or SIGINT (with
a checkpoint of the current step: exit 0, resume later) or after `max_bad_steps` updates in a
row with a non-finite loss or gradient (an error; the weights never take such an update).
Each of these is decided by all processes together.
Progress is a tqdm bar on stderr, shown only when stderr is a terminal.
"""

from __future__ import annotations

import logging
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import Tensor
from tqdm import tqdm

from alignmt.checkpoint.format import LAST, WEIGHTS, check_same_model, snapshot_path, snapshot_steps
from alignmt.checkpoint.rundir import RunFolderError, check_new_run, clear_run, write_text
from alignmt.checkpoint.torch_io import (
    capture_train_state,
    load_weights,
    restore_train_state,
    rng_states,
    save_checkpoint,
    set_rng_states,
)
from alignmt.config import Config, dump_config
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.prepare import Text, prepare_text
from alignmt.text.vocab import Vocab
from alignmt.training.batches import Progress, Step, steps
from alignmt.training.distributed import (
    Interrupts,
    World,
    check_resume,
    join,
    leave,
    talking_to_peers,
    wrap,
)
from alignmt.training.optim import lr_factor, make_optimizer, train_step
from alignmt.training.runlog import RunLog
from alignmt.training.validate import validate

log = logging.getLogger(__name__)


class TrainingError(RuntimeError):
    """Training cannot go on (too many non-finite updates in a row)."""


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


def train(cfg: Config, *, progress: bool | None = None, resume: bool = False,
          overwrite: bool = False) -> TrainResult:  # fmt: skip
    """Train the model `cfg` describes and save it to `cfg.out_dir`.

    Under torchrun, this process is one rank of a distributed run (see `distributed`).

    Args:
        cfg: the resolved configuration.
        progress: draw progress bars; None draws them when stderr is a terminal.
        resume: continue from `cfg.out_dir`/last.safetensors instead of starting afresh (from
            step 0 when the run was stopped before it wrote one).
        overwrite: start afresh in a folder that holds an earlier run, deleting its files;
            without it (or `resume`) such a folder is refused with `RunFolderError`.

    Returns:
        The trained model, its vocabularies, the loss curve and the training time (on ranks
        other than 0 the curve is empty: rank 0 keeps the record).
    """
    world, device = join(cfg.train.device, cfg.train.wait_minutes)
    try:
        return _train(cfg, world, device, progress, resume, overwrite)
    finally:
        leave(world)


def _train(cfg: Config, world: World, device: torch.device, progress: bool | None,
           resume: bool, overwrite: bool) -> TrainResult:  # fmt: skip
    if not world.main:  # one voice: the others speak only of problems
        logging.getLogger("alignmt").setLevel(logging.WARNING)
    run_dir = Path(cfg.out_dir)
    resume = _claim(run_dir, world, resume, overwrite)
    seed_everything(cfg.seed)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    text = _prepare_in_turn(cfg, world, progress)
    model = Seq2Seq.from_config(
        cfg.model, src_vocab=len(text.src_vocab), tgt_vocab=len(text.tgt_vocab)
    ).to(device)
    optimizer = make_optimizer(model, cfg.train)
    state = Progress(task_rng=random.Random(cfg.seed).getstate(), world_size=world.size,
                     accumulate=cfg.train.accumulate)  # fmt: skip
    if world.rank:
        torch.manual_seed(cfg.seed + world.rank)  # its own dropout masks; weights come from 0
    if resume:
        state = _resume(run_dir, model, optimizer, world, cfg, text, device)
    if world.main:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_text(run_dir / "config.yaml", dump_config(cfg))
    loop = _Loop(cfg, model, optimizer, text, state, run_dir, world, device)
    seconds = loop.run(progress)
    best = run_dir / WEIGHTS
    if best.is_file() and text.valid:
        model.load_state_dict(load_weights(best))
    model.eval()
    kept = loop.log  # rank 0's record; the other ranks keep none
    logged, losses, evals = (kept.steps, kept.losses, kept.evals) if kept else ([], [], [])
    return TrainResult(run_dir, model, text.src_vocab, text.tgt_vocab, logged, losses, seconds,
                       evals, loop.stopped_by, state.step, world.main)  # fmt: skip


def _prepare_in_turn(cfg: Config, world: World, progress: bool | None) -> Text:
    """With the token cache, rank 0 prepares the data first (building the cache if there is
    none) and the others then load it, instead of all building it at once; without it,
    every process prepares its own copy."""
    if world.main or not cfg.data.cache:
        text = prepare_text(cfg.data, cfg.seed, progress=progress if world.main else False)
    if cfg.data.cache:
        world.wait_for_main()
        if not world.main:
            text = prepare_text(cfg.data, cfg.seed, progress=False)
    return text


def _claim(run_dir: Path, world: World, resume: bool, overwrite: bool) -> bool:
    """Refuse a new run in a folder that holds another (on every process alike), or clear
    it to overwrite; return whether there is a run to resume."""
    problem = check_new_run(run_dir, resume=resume, overwrite=overwrite) if world.main else None
    problem = world.broadcast(problem)
    if problem:
        raise RunFolderError(problem)
    if overwrite and world.main:
        clear_run(run_dir)
    if resume and not (run_dir / LAST).is_file():
        log.warning("%s holds no %s (stopped before its first checkpoint): starting from "
                    "step 0", run_dir, LAST)  # fmt: skip
        return False
    return resume


def _resume(run_dir: Path, model: Seq2Seq, optimizer: torch.optim.Optimizer, world: World,
            cfg: Config, text: Text, device: torch.device) -> Progress:  # fmt: skip
    check_same_model(run_dir / LAST, cfg, text.src_vocab, text.tgt_vocab)
    saved, rngs = restore_train_state(run_dir / LAST, model, optimizer)
    check_resume(saved, world, cfg.train.accumulate, str(run_dir))
    if world.rank < len(rngs):
        set_rng_states(rngs[world.rank], device)
    log.info("resuming %s at step %d", run_dir, saved["step"])
    return Progress(**{**saved, "world_size": world.size, "accumulate": cfg.train.accumulate})


class _Loop:
    """The training loop and its bookkeeping, split into short methods."""

    def __init__(self, cfg, model, optimizer, text, state, run_dir, world, device) -> None:
        self.cfg, self.model, self.optimizer, self.text = cfg, model, optimizer, text
        self.state, self.run_dir, self.world, self.device = state, run_dir, world, device
        self.objective = wrap(model, world)
        self.log = RunLog(run_dir, state.step, tensorboard=cfg.train.tensorboard) if world.main \
            else None  # fmt: skip
        if world.main:
            _drop_stale_snapshots(run_dir, state.step)
        self.stopped_by: str | None = None

    def run(self, progress: bool | None) -> float:
        cfg, state = self.cfg.train, self.state
        show = self.world.main and (sys.stderr.isatty() if progress is None else progress)
        bar = tqdm(total=cfg.steps, initial=state.step, desc=f"train {self.run_dir.name}",
                   disable=not show, file=sys.stderr)  # fmt: skip
        interval, start = [], time.perf_counter()
        self.start = start - state.seconds
        self.elapsed, self.out_of_time = state.seconds, False
        updates = steps(self.text, self.cfg.data, cfg, self.cfg.seed, state, self.world)
        try:
            with Interrupts() as interrupts:
                if state.step == 0:
                    self._snapshot()  # the untrained weights: where a look at training starts
                last = self._evaluate_pending() or state.step >= cfg.steps
                last = last or self._must_stop(interrupts)
                while not last:
                    self._set_lr()
                    interval.append(self._update(next(updates)))
                    state.step += 1
                    bar.update()
                    if cfg.snapshot_every and state.step % cfg.snapshot_every == 0:
                        self._snapshot()
                    last = state.step >= cfg.steps or self._must_stop(interrupts)
                    if state.step % cfg.log_every == 0 or last:
                        bar.set_postfix(loss=self._log_interval(interval))
                        interval.clear()
                    periodic = cfg.eval_every and state.step % cfg.eval_every == 0
                    due = state.step >= cfg.steps or self.out_of_time or periodic
                    if self.stopped_by:  # checkpoint now; what was due is done on resuming
                        state.eval_pending = bool(due)
                        self._save_last()
                        break
                    if due and self._evaluate_and_save():
                        break  # early stop
                    if not due and cfg.save_every and state.step % cfg.save_every == 0:
                        self._save_last()
            self._finish()
        finally:
            bar.close()
            if self.log:
                self.log.close()
        return time.perf_counter() - start

    def _update(self, step: Step) -> Tensor | None:
        """One update on this process's share of `step`; its part of the update's loss, or
        None when the update was skipped for a non-finite loss or gradient."""
        state = self.state
        state.tokens += step.tokens
        batches = [batch.to(self.device) for batch in step.batches]
        with talking_to_peers():
            loss, finite = train_step(self.objective, batches, step.tokens, self.optimizer,
                                      self.cfg.train, self.world.size)  # fmt: skip
        if finite:
            state.bad_steps = 0
            return loss
        state.bad_steps += 1
        state.skipped += 1
        log.warning("step %d: non-finite loss or gradient, update skipped (%d in a row)",
                    state.step + 1, state.bad_steps)  # fmt: skip
        if state.bad_steps >= self.cfg.train.max_bad_steps:
            last = self.run_dir / LAST
            kept = f"{last} holds the last checkpoint" if last.is_file() else "no checkpoint yet"
            raise TrainingError(
                f"{state.bad_steps} updates in a row had a non-finite loss or gradient "
                f"(train.max_bad_steps={self.cfg.train.max_bad_steps}), the last at step "
                f"{state.step + 1}; none was applied ({kept}). Try a lower train.lr or "
                "train.clip_norm, or train.precision=float32."
            )
        return None

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
            log.warning("%s: stopping at step %d with a checkpoint", self.stopped_by,
                        self.state.step)  # fmt: skip
        self.out_of_time = 0 < 60 * self.cfg.train.minutes <= self.elapsed
        return bool(caught) or self.out_of_time

    def _set_lr(self) -> None:
        factor = lr_factor(self.cfg.train)(self.state.step, self.elapsed) * self.state.lr_scale
        for group in self.optimizer.param_groups:
            group["lr"] = self.cfg.train.lr * factor

    def _log_interval(self, interval: list[Tensor | None]) -> str:
        """Record the interval's mean loss over every process's tokens; return it as text."""
        done = [loss for loss in interval if loss is not None]
        # every process skipped the same updates, so len(done) is the same on all
        total = self.world.sum(torch.stack(done).sum() if done else torch.zeros(()))
        loss = total / len(done) if done else None
        state = self.state
        state.seconds = round(self._elapsed(), 3)
        if self.log:
            self.log.interval({
                "step": state.step, "loss": loss, "lr": self.optimizer.param_groups[0]["lr"],
                "epoch": state.epoch, "seconds": state.seconds, "tokens": state.tokens,
                "skipped": state.skipped,
            })  # fmt: skip
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
        record = validate(self.model, self.text, self.cfg)
        record["step"] = self.state.step
        record["seconds"] = round(self._elapsed(), 3)
        self.log.evaluation(record)
        log.info("step %d valid %s", self.state.step, record)
        if self._improved(record):
            self._save(self.run_dir / WEIGHTS, with_state=False)
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
            self._save(self.run_dir / WEIGHTS, with_state=False)

    def _snapshot(self) -> None:
        """Keep this step's weights as a model-only checkpoint, unless it is already kept."""
        path = snapshot_path(self.run_dir, self.state.step)
        if self.world.main and self.cfg.train.snapshot_every and not path.is_file():
            self._save(path, with_state=False)

    def _save_last(self) -> None:
        """The resumable checkpoint; every process hands rank 0 its generator states."""
        self.state.seconds = round(self._elapsed(), 3)  # validation time included
        rngs = self.world.gather(rng_states(self.device))
        if self.world.main:
            self._save(self.run_dir / LAST, with_state=True, rngs=rngs)

    def _save(self, path: Path, *, with_state: bool, rngs: list | None = None) -> None:
        self.model.eval()
        text = self.text
        train_state = (capture_train_state(self.optimizer, asdict(self.state), rngs)
                       if with_state else None)  # fmt: skip
        save_checkpoint(path, self.model, self.cfg, text.src_vocab, text.tgt_vocab,
                        self.state.step, tokenizers=text.tokenizers,
                        train_state=train_state)  # fmt: skip


def _drop_stale_snapshots(run_dir: Path, step: int) -> None:
    """A resumed run drops the snapshots the killed run kept after its last checkpoint,
    which it redoes."""
    for kept in snapshot_steps(run_dir):
        if kept > step:
            snapshot_path(run_dir, kept).unlink()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
