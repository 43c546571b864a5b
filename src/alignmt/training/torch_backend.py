"""Training in PyTorch (`train.engine=torch`, the default): the `loop.Backend` that updates
a `Seq2Seq` with `optim.train_step`, inside DistributedDataParallel when torchrun starts
several processes, measures it for `validate` and writes its checkpoints with
`checkpoint.torch_io`. Deciding what happens when (and skipping what is not finite) is the
loop's.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import torch
from torch import Tensor

from alignmt.checkpoint.format import WEIGHTS, check_same_model
from alignmt.checkpoint.torch_io import (
    capture_train_state,
    load_weights,
    restore_train_state,
    rng_states,
    save_checkpoint,
    set_rng_states,
)
from alignmt.config import Config, SearchConfig
from alignmt.decoding.torch_engine.engine import TorchEngine
from alignmt.model.batch import make_batch
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.copy import copy_table
from alignmt.text.prepare import Text
from alignmt.training.batches import Progress, Step
from alignmt.training.distributed import World, check_resume, talking_to_peers, wrap
from alignmt.training.graphs import GraphedObjective, check_graphs
from alignmt.training.optim import guide_weight, make_optimizer, sampling_at, train_step

log = logging.getLogger(__name__)


class TorchBackend:
    """A `loop.Backend` over a PyTorch model and optimizer, on this process's `device`."""

    compiles = None  # eager: the first update runs as the others do

    def __init__(
        self,
        *,
        cfg: Config,
        model: Seq2Seq,
        optimizer: torch.optim.Optimizer,
        text: Text,
        world: World,
        device: torch.device,
    ) -> None:
        self.cfg, self.model, self.optimizer, self.text = cfg, model, optimizer, text
        self.world, self.device = world, device
        if cfg.train.cuda_graphs:
            check_graphs(cfg, device, world.size)
            self.objective = GraphedObjective(model)
        else:
            self.objective = wrap(model, world)  # DDP copies rank 0's weights to every rank here

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def update(self, step: Step, index: int) -> Tensor | None:
        """See `loop.Backend.update`: the loss is left on the device, unread."""
        batches = [batch.to(self.device) for batch in step.batches]
        with talking_to_peers():
            loss, finite = train_step(
                self.objective,
                batches,
                step.tokens,
                self.optimizer,
                self.cfg.train,
                self.world.size,
                guide_weight(self.cfg.train, index),
                sampling_at(self.cfg.train, index),
            )
        return loss if finite else None

    def mean_loss(self, losses: list[Tensor]) -> float | None:
        # every process skipped the same updates, so len(losses) is the same on all
        total = self.world.sum(torch.stack(losses).sum() if losses else torch.zeros(()))
        return total / len(losses) if losses else None

    @torch.no_grad()
    def valid_loss(self, pairs: list[tuple[list[int], list[int]]]) -> tuple[float, int]:
        self.model.eval()
        vocabs = (self.text.src_vocab, self.text.tgt_vocab)
        batch = make_batch(pairs, *vocabs, copied=self.text.copy_ids).to(self.device)
        loss = self.model.loss(batch.src, batch.src_len, batch.tgt_in, batch.tgt_out)
        return float(loss), batch.num_tgt_tokens

    def engine(self, search: SearchConfig) -> TorchEngine:
        vocabs = (self.text.src_vocab, self.text.tgt_vocab)
        return TorchEngine(
            self.model, search=search, vocabs=vocabs, precision=self.cfg.train.precision
        )

    def rng_state(self) -> dict[str, Tensor]:
        return rng_states(self.device)

    def save_weights(self, path: Path, step: int) -> None:
        self._save(path, step, train_state=None)

    def save_state(self, path: Path, progress: Progress, rngs: list[dict[str, Tensor]]) -> None:
        self._save(path, progress.step, capture_train_state(self.optimizer, asdict(progress), rngs))

    def _save(self, path: Path, step: int, train_state: tuple | None) -> None:
        self.model.eval()
        text = self.text
        save_checkpoint(
            path,
            self.model,
            self.cfg,
            text.src_vocab,
            text.tgt_vocab,
            step,
            tokenizers=text.tokenizers,
            train_state=train_state,
        )

    def trained_model(self, run_dir: Path) -> Seq2Seq:
        """The model, with the best weights validation kept (model.safetensors) put back."""
        best = run_dir / WEIGHTS
        if best.is_file() and self.text.valid:
            self.model.load_state_dict(load_weights(best))
        return self.model.eval()


@contextmanager
def begin(
    cfg: Config, text: Text, world: World, last: Path | None, *, device: torch.device
) -> Iterator[tuple[TorchBackend, Progress]]:
    """A new model and optimizer on `device`, or those of the run whose last checkpoint is
    `last`, restored; the backend over them, and the run's progress."""
    model = Seq2Seq.from_config(
        cfg.model, src_vocab=len(text.src_vocab), tgt_vocab=len(text.tgt_vocab)
    ).to(device)
    if model.copies:
        model.set_copy_table(copy_table(text.src_vocab, text.tgt_vocab))
    optimizer = make_optimizer(model, cfg.train)
    state = Progress(
        task_rng=random.Random(cfg.seed).getstate(),
        world_size=world.size,
        accumulate=cfg.train.accumulate,
    )
    if world.rank:
        torch.manual_seed(cfg.seed + world.rank)  # its own dropout masks; weights come from 0
    if last is not None:
        state = resume_state(last, model, optimizer, world, cfg, text, device)
    backend = TorchBackend(
        cfg=cfg, model=model, optimizer=optimizer, text=text, world=world, device=device
    )
    yield backend, state


def resume_state(
    last: Path,
    model: Seq2Seq,
    optimizer: torch.optim.Optimizer,
    world: World,
    cfg: Config,
    text: Text,
    device: torch.device,
) -> Progress:
    """The progress of the run whose last checkpoint is `last`, with its weights, optimizer
    state and this process's generator states restored."""
    check_same_model(last, cfg, text.src_vocab, text.tgt_vocab)
    saved, rngs = restore_train_state(last, model, optimizer)
    check_resume(saved, world, cfg.train.accumulate, str(last.parent))
    if world.rank < len(rngs):
        set_rng_states(rngs[world.rank], device)
    log.info("resuming %s at step %d", last.parent, saved["step"])
    return Progress(**{**saved, "world_size": world.size, "accumulate": cfg.train.accumulate})
