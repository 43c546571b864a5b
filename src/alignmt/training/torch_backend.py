"""Training in PyTorch (`train.backend=torch`, the default): the `loop.Backend` that updates
a `Seq2Seq` with `optim.train_step`, inside DistributedDataParallel when torchrun starts
several processes, validates it with `validate` and writes its checkpoints with
`checkpoint.torch_io`. Deciding what happens when (and skipping what is not finite) is the
loop's.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch
from torch import Tensor

from alignmt.checkpoint.torch_io import capture_train_state, rng_states, save_checkpoint
from alignmt.config import Config
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.prepare import Text
from alignmt.training.batches import Progress, Step
from alignmt.training.distributed import World, talking_to_peers, wrap
from alignmt.training.graphs import GraphedObjective, check_graphs
from alignmt.training.optim import guide_weight, sampling_at, train_step
from alignmt.training.validate import validate


class TorchBackend:
    """A `loop.Backend` over a PyTorch model and optimizer, on this process's `device`."""

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

    def validate(self) -> dict[str, float]:
        return validate(self.model, self.text, self.cfg)

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
