"""Training on many processes: torchrun's environment, DistributedDataParallel, and the
decisions every process must take together.

`torchrun --nproc-per-node N -m alignmt train CONFIG` starts N copies of the command with
RANK, WORLD_SIZE, LOCAL_RANK and a rendezvous address in their environment. `join` turns
that into a process group (gloo on the CPU, NCCL on CUDA), or into a world of one process
when the variables are absent, so that a plain `alignmt train` runs as it always has.

How the work is shared is `batches`' (every rank builds the same global micro-batches and
takes its share); gradients are averaged by DDP. Every decision that ends the loop goes
through `World.any` or `World.broadcast`: a process that stopped on its own would leave the
others waiting in their next all-reduce. A process that dies makes the others' next
collective fail (gloo and NCCL notice the closed connection), and a process that hangs makes
it time out after `train.wait_minutes`; either way they exit with `PeerLost`, never a hang.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from alignmt.model.batch import Batch
from alignmt.model.decoder import Sampling
from alignmt.model.device import pick_device
from alignmt.model.seq2seq import Seq2Seq

log = logging.getLogger(__name__)


PATIENCE_HOURS = 12  # how long the other ranks wait for rank 0 to prepare the data


class PeerLost(RuntimeError):
    """Another process of a distributed run died or stopped answering."""


@dataclass(frozen=True)
class World:
    """This process's place among the processes of a run; one process when `size` is 1."""

    rank: int = 0
    size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))  # collectives'
    patient: Any = None  # a gloo group with a long timeout, for waiting on rank 0's data

    @property
    def main(self) -> bool:
        """Rank 0 alone validates, logs and writes the run folder."""
        return self.rank == 0

    def agree(self, *values: float) -> list[float]:
        """The maximum over ranks of each value: one all-reduce for several decisions (a
        flag raised anywhere, the furthest clock)."""
        if self.size == 1:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        _collective(dist.all_reduce, tensor, op=dist.ReduceOp.MAX)
        return tensor.tolist()

    def sum(self, value: Tensor) -> float:
        """The sum over ranks of a scalar tensor."""
        if self.size == 1:
            return float(value)
        tensor = value.detach().to(self.device, torch.float64).reshape(1)
        _collective(dist.all_reduce, tensor, op=dist.ReduceOp.SUM)
        return float(tensor.item())

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` (picklable), on every rank."""
        if self.size == 1:
            return obj
        box = [obj]
        _collective(dist.broadcast_object_list, box, src=0)
        return box[0]

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj` (picklable), in rank order, on every rank."""
        if self.size == 1:
            return [obj]
        gathered: list[Any] = [None] * self.size
        _collective(dist.all_gather_object, gathered, obj)
        return gathered

    def wait_for_main(self) -> None:
        """A barrier that waits as long as rank 0 needs to build a corpus's cache (hours for
        the largest), where ordinary collectives give up after `train.wait_minutes`; a rank
        that dies still breaks it at once."""
        if self.size > 1:
            _collective(dist.barrier, group=self.patient)


def _collective(fn, *args, **kwargs) -> None:
    with talking_to_peers():
        fn(*args, **kwargs)


@contextmanager
def talking_to_peers() -> Iterator[None]:
    """Around collectives, ours and DDP's (its all-reduce runs inside backward): a broken
    connection or a timeout becomes `PeerLost`; any other error passes unchanged."""
    try:
        yield
    except RuntimeError as err:
        if not dist.is_initialized() or not _COMMUNICATION.search(str(err)):
            raise
        raise _lost(err) from err


# What gloo and NCCL say when the other end is gone or silent
_COMMUNICATION = re.compile(r"gloo|nccl|connection (closed|reset)|timed? ?out", re.IGNORECASE)


def _lost(err: RuntimeError) -> PeerLost:
    # gloo says "Connection closed by peer" and NCCL "unhandled system error"; both mean
    # that this run cannot go on, so say that, not only the backend's words.
    return PeerLost(
        f"rank {dist.get_rank()}: another process of this run died or stopped answering "
        f"({str(err).splitlines()[0]}); stopping. Resume the run with --resume."
    )


def join(device_name: str, wait_minutes: float) -> tuple[World, torch.device]:
    """Join the run torchrun describes in the environment, or be a world of one.

    Args:
        device_name: train.device ("auto", "cpu", "cuda"); on CUDA each process takes the
            GPU of its LOCAL_RANK.
        wait_minutes: how long a collective waits for the other processes.

    Returns:
        (world, the device this process trains on).
    """
    size = int(os.environ.get("WORLD_SIZE", "1"))
    device = pick_device(device_name, flag="train.device")
    if size == 1:
        return World(device=device), device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=timedelta(minutes=wait_minutes))
    patient = dist.new_group(backend="gloo", timeout=timedelta(hours=PATIENCE_HOURS))
    world = World(dist.get_rank(), dist.get_world_size(), device, patient)
    log.info("rank %d of %d (%s) on %s", world.rank, world.size, backend, device)
    return world, device


def leave(world: World) -> None:
    """Leave the process group, if this process joined one."""
    if world.size > 1 and dist.is_initialized():
        dist.destroy_process_group()


class Objective(nn.Module):
    """The model's training loss as `forward`: DDP synchronises gradients only for what runs
    through the `forward` of the module it wraps."""

    def __init__(self, model: Seq2Seq) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: Tensor, src_len: Tensor, tgt_in: Tensor, tgt_out: Tensor, **options):
        """`Seq2Seq.loss`; `options` are its label smoothing and guide."""
        return self.model.loss(src, src_len, tgt_in, tgt_out, **options)


def wrap(model: Seq2Seq, world: World) -> nn.Module:
    """The module a training step calls: the loss, inside DDP when there are many processes.
    DDP copies rank 0's weights to every rank here, so all start from the same model."""
    objective = Objective(model)
    if world.size == 1:
        return objective
    ids = [world.device.index] if world.device.type == "cuda" else None
    return DistributedDataParallel(objective, device_ids=ids)


def loss_of(
    objective: nn.Module,
    batch: Batch,
    label_smoothing: float,
    guide_weight: float = 0.0,
    guide_cost: str = "ce",
    sampling: Sampling | None = None,
) -> Tensor:
    """The objective's loss on `batch`, guided by its links when it has them, and with
    scheduled sampling when `sampling` says so."""
    return objective(
        batch.src,
        batch.src_len,
        batch.tgt_in,
        batch.tgt_out,
        label_smoothing=label_smoothing,
        guide=batch.guide,
        guide_weight=guide_weight,
        guide_cost=guide_cost,
        sampling=sampling,
    )


def no_sync(objective: nn.Module, last: bool) -> AbstractContextManager:
    """Skip DDP's all-reduce on every accumulated micro-batch but the last: the gradients
    add up locally and are averaged once."""
    if last or not isinstance(objective, DistributedDataParallel):
        return nullcontext()
    return objective.no_sync()


class Interrupts:
    """Catch SIGTERM and SIGINT while training, so that the loop can stop at the end of the
    step, write a checkpoint and exit 0 (what a cluster scheduler's pre-emption expects).
    A second Ctrl-C interrupts at once, for someone who does not want to wait.

    Handlers can only be set in the main thread; elsewhere (a server, a test thread) the
    signals keep their behaviour and `caught` stays None.
    """

    def __init__(self) -> None:
        self.caught: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame) -> None:
        if self.caught and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.caught = signal.Signals(signum).name  # the loop logs it: no I/O in a handler


def check_resume(saved: dict[str, Any], world: World, accumulate: int, where: str) -> None:
    """Refuse to resume with a different number of micro-batches per update: the position in
    the global batch order would still be right, but each update would average over a
    different number of sentences, a silent change of the optimisation."""
    size, acc = saved.get("world_size", 1), saved.get("accumulate", 1)
    if size * acc == world.size * accumulate:
        if size != world.size:
            log.warning(
                "%s: trained on %d processes, continuing on %d with train.accumulate=%d",
                where,
                size,
                world.size,
                accumulate,
            )
        return
    raise ValueError(
        f"{where}: this run was trained with {size} process(es) x train.accumulate={acc} "
        f"= {size * acc} micro-batches per update; resuming with {world.size} x {accumulate} "
        f"would change the optimisation. Resume with N processes and train.accumulate=K "
        f"where N x K = {size * acc}."
    )
