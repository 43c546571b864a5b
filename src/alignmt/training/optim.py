"""Optimisation: Adam, the learning-rate schedule, and one update over micro-batches.

`train_step` is the update the training loop repeats: forward and backward over this
process's micro-batches (gradients accumulated, and averaged over processes by DDP, each loss
weighted by its share of the update's target tokens), clipping, and the optimizer step,
skipped when the gradient is not finite.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from alignmt.config import TrainConfig
from alignmt.model.decoder import Sampling
from alignmt.model.device import autocast
from alignmt.model.seq2seq import Seq2Seq
from alignmt.training.distributed import loss_of, no_sync


def make_optimizer(model: Seq2Seq, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam at cfg.lr; `fused` updates all parameters in one kernel instead of a dozen ops
    per tensor, which is 5% of a training step on 2 CPU cores."""
    return torch.optim.Adam(model.parameters(), lr=cfg.lr, fused=True)


def train_step(
    objective: nn.Module,
    batches: list,
    tokens: int,
    optimizer: torch.optim.Optimizer,
    cfg: TrainConfig,
    world_size: int = 1,
    guide_weight: float = 0.0,
    sampling: Sampling | None = None,
) -> tuple[Tensor, bool]:
    """One update on micro-batches `batches`, unless its gradient is not finite.

    Args:
        objective: the loss module (`distributed.wrap`; DDP averages gradients over ranks).
        batches: this process's micro-batches, on the model's device.
        tokens: target tokens of the update's micro-batches on all processes together.
        optimizer: steps only when the gradient norm is finite; after DDP's all-reduce it is
            the same on every rank, so all skip the same updates.
        cfg: clip_norm and label_smoothing.
        world_size: processes; undoes DDP's averaging, since each loss is already weighted.
        guide_weight: guided alignment's lambda at this step (batches with links only).
        sampling: scheduled sampling at this step (`sampling_at`); None: teacher forcing.

    Returns:
        This process's share of the update's mean loss (detached, left on the device), and
        whether the update was applied: reading that is the step's one host sync.
    """
    objective.train()
    optimizer.zero_grad(set_to_none=True)
    share = torch.zeros((), device=batches[0].src.device)
    for i, batch in enumerate(batches):
        weight = batch.num_tgt_tokens / tokens
        with no_sync(objective, last=i == len(batches) - 1):
            with autocast(batch.src.device, cfg.precision):  # the forward pass only
                loss = loss_of(
                    objective, batch, cfg.label_smoothing, guide_weight, cfg.guided_cost, sampling
                )
            (loss * (weight * world_size)).backward()
        share += loss.detach().float() * weight
    params = [p for p in objective.parameters() if p.grad is not None]
    norm = torch.nn.utils.clip_grad_norm_(params, cfg.clip_norm or math.inf, foreach=True)
    finite = bool(torch.isfinite(norm))
    if finite:
        optimizer.step()
    return share, finite


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


def guide_weight(cfg: TrainConfig, step: int) -> float:
    """Guided alignment's lambda at `step` (0-based): `guided_weight`, halved every
    `guided_half_life` steps (0: never); 0 without guided alignment."""
    if not cfg.guided_alignment:
        return 0.0
    if not cfg.guided_half_life:
        return cfg.guided_weight
    return cfg.guided_weight * 0.5 ** (step / cfg.guided_half_life)


def teacher_rate(cfg: TrainConfig, step: int) -> float:
    """Scheduled sampling's eps at update `step` (0-based): the probability that a target
    position reads the true previous token (Bengio et al. 2015, §2.4); 1 when it is off."""
    k, schedule = cfg.sampling_k, cfg.scheduled_sampling
    if schedule == "linear":
        return max(cfg.sampling_floor, k - cfg.sampling_slope * step)
    if schedule == "exponential":
        return k**step
    if schedule == "inverse_sigmoid":
        return k / (k + math.exp(min(step / k, 700.0)))  # exp overflows a float past ~709
    return 1.0


def sampling_at(cfg: TrainConfig, step: int) -> Sampling | None:
    """What the update at `step` feeds back, or None for plain teacher forcing."""
    if cfg.scheduled_sampling == "none":
        return None
    return Sampling(teacher_rate(cfg, step), cfg.sampling_pick)
