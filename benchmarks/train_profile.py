"""Where a training step's time goes, by operator group, on the matched Multi30k model of
benchmarks/speed.py: PyTorch's profiler over N steps after warm-up, each operator's own
(self) CPU time put in one group, for the decoder step's eager operators and for its
hand-written paths (model/fused.py), alternated `--rounds` times in one process so that the
machine's drift falls on both alike:

    python benchmarks/train_profile.py --steps 20          # about 3 minutes on two cores

- matmuls: mm, addmm, bmm and their kin, forward and backward;
- attention per-element and GRU per-element: the element-wise work (tanh, sigmoid, the
  masked softmax, products and sums, their backward) inside the attention module or the
  recurrent cells. The forward is attributed by module (a profiler scope around each
  module's forward); the backward by the autograd node that ran it, whose forward op is
  named in its scope (TanhBackward0, ...), and by the module of that forward op;
- loss: the cross-entropy's own work (softmax, log-sum-exp, its gradient), forward and
  backward; the output layer's products count as matmuls;
- optimizer: everything inside Adam's step;
- copies and shapes: cat, copy_, index, stack, embedding and the like;
- other operators; and Python: the wall time no operator accounts for.

Prints one table: for each path, milliseconds per step and share of the profiled step, and
the step's time with and without the profiler. Run from the repository root after `alignmt
data get multi30k`, with nothing else using the CPU.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed import matched_config  # beside this script

from alignmt.config import Config
from alignmt.model import fused
from alignmt.model.allocator import keep_freed_memory
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.prepare import prepare_text
from alignmt.training.batches import Progress, steps
from alignmt.training.distributed import Objective, World
from alignmt.training.optim import make_optimizer, train_step
from alignmt.training.start import seed_everything

MATMULS = {"aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm", "aten::mv"}
MATMULS |= {"aten::addmv_"}  # what torch.mv runs
# the output layer and cross-entropy are one autograd Function (model/loss.py), whose forward
# and backward the profiler names; its products count as matmuls
LOSS = ("_LinearCrossEntropy", "autograd::engine::evaluate_function: _LinearCrossEntropy")
SHAPES = (
    "cat", "copy_", "index", "stack", "embedding", "gather", "scatter", "clone", "contiguous",
    "select", "slice", "narrow", "fill_", "zero_", "zeros", "empty", "to", "_to_copy", "split",
    "unbind", "view", "reshape", "transpose", "t", "expand", "permute", "squeeze", "unsqueeze",
    "as_strided", "masked_fill", "where", "new_zeros", "flip", "pad",
)  # fmt: skip
# module scopes by the class name they match -> the group of the element-wise work inside
SCOPES = {"attention": "attention per-element", "cell": "GRU per-element", "encoder": "encoder"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="N batches, the same for both")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the two paths")
    args = parser.parse_args()
    trained = warmed_up(args.warmup, args.steps)
    scoped(trained.model)
    totals = {path: Totals() for path in PATHS}
    for _ in range(args.rounds):
        for path, context in PATHS.items():
            with context():
                totals[path].add(profiled(trained.run))
    report(totals, args.rounds * args.steps)


PATHS = {"eager": fused.eager, "fused": nullcontext}  # eager operators, model/fused.py's


@dataclass
class Trained:
    """The matched model after warm-up, and `run`: a training step on each of the same
    timed batches, whichever path is on."""

    cfg: Config
    text: Any
    model: Seq2Seq
    run: Callable[[], None]


def warmed_up(warmup: int, batches: int) -> Trained:
    """The matched model of benchmarks/speed.py on two threads, trained `warmup` steps, with
    glibc keeping freed memory as `alignmt train` does, and the next `batches` batches set
    aside to time."""
    keep_freed_memory()
    cfg = matched_config(warmup + batches, "cpu")
    torch.set_num_threads(cfg.train.threads)
    seed_everything(cfg.seed)
    text = prepare_text(cfg.data, cfg.seed)
    model = Seq2Seq.from_config(
        cfg.model, src_vocab=len(text.src_vocab), tgt_vocab=len(text.tgt_vocab)
    )
    optimizer, objective = make_optimizer(model, cfg.train), Objective(model)
    updates = steps(text, cfg.data, cfg.train, cfg.seed, Progress(), World())
    for _ in range(warmup):
        update = next(updates)
        train_step(objective, update.batches, update.tokens, optimizer, cfg.train)
    timed = [next(updates) for _ in range(batches)]

    def run() -> None:
        for update in timed:
            train_step(objective, update.batches, update.tokens, optimizer, cfg.train)

    return Trained(cfg, text, model, run)


@dataclass
class Totals:
    """Seconds over the profiled steps: per group, wall time profiled, and without."""

    groups: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    wall: float = 0.0
    plain: float = 0.0

    def add(self, other: Totals) -> None:
        for name, value in other.groups.items():
            self.groups[name] += value
        self.wall += other.wall
        self.plain += other.plain


def profiled(run) -> Totals:
    """`run` without the profiler (its time), then under it (groups and time)."""
    start = time.perf_counter()
    run()
    plain = time.perf_counter() - start
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        run()
        wall = time.perf_counter() - start
    return Totals(groups(prof.events()), wall, plain)


def scoped(model: Seq2Seq) -> None:
    """A profiler scope around the forward of each attention module (`attention`), the
    decoder's recurrent cell (`cell`) and the encoder (`encoder`), so that their
    element-wise operators can be told apart."""
    for module in model.modules():
        kind = type(module).__name__.lower()
        scope = next((s for s in SCOPES if s in kind), None)
        if scope is not None:
            module.register_forward_pre_hook(partial(_enter, scope))
            module.register_forward_hook(_exit)


def _enter(scope: str, module: nn.Module, _inputs) -> None:
    module.__dict__.setdefault("_scopes", []).append(record_function(scope).__enter__())


def _exit(module: nn.Module, *_) -> None:
    module.__dict__["_scopes"].pop().__exit__(None, None, None)


def groups(events) -> dict[str, float]:
    """Seconds of own CPU time per group over the profiled steps (see the module's list)."""
    forward_scope = {}  # a forward op's sequence number -> the module scope it ran in
    for event in events:
        scope = _enclosing(event, SCOPES)
        if scope and event.sequence_nr >= 0:
            forward_scope.setdefault(event.sequence_nr, scope)
    seconds: dict[str, float] = defaultdict(float)
    for event in events:
        own = event.self_cpu_time_total / 1e6
        if own <= 0 or not (event.name.startswith("aten::") or "Backward" in event.name):
            continue  # scopes and the autograd engine's wrappers: their own time is Python's
        seconds[_group(event, forward_scope)] += own
    return seconds


def _group(event, forward_scope: dict) -> str:
    name = event.name
    if name in MATMULS:
        return "matmuls"
    if _enclosing(event, {"Optimizer.step": 1}):
        return "optimizer"
    if _enclosing(event, dict.fromkeys(LOSS)):
        return "loss"
    scope = _enclosing(event, SCOPES) or forward_scope.get(_backward_of(event))
    if scope:
        return SCOPES[scope]
    if name.removeprefix("aten::") in SHAPES:
        return "copies and shapes"
    return "other operators"


def _enclosing(event, names) -> str | None:
    """The first of `names` that an ancestor scope of `event` starts with, or None."""
    parent = event.cpu_parent
    while parent is not None:
        for name in names:
            if parent.name.startswith(name):
                return name
        parent = parent.cpu_parent
    return None


def _backward_of(event) -> int:
    """The sequence number of the forward op whose backward `event` runs in, or -1."""
    parent = event
    while parent is not None:
        if "Backward" in parent.name and parent.sequence_nr >= 0:
            return parent.sequence_nr
        parent = parent.cpu_parent
    return -1


def report(totals: dict[str, Totals], n: int) -> None:
    """One table: ms a step and share of the profiled step per group, for each path."""
    for total in totals.values():
        total.groups["Python and the rest"] = total.wall - sum(total.groups.values())
    print(f"\n{n} training steps of the matched model a path, interleaved\n")
    print("| group | " + " | ".join(f"{p}, ms a step | share" for p in totals) + " |")
    print("| --- |" + " ---: | ---: |" * len(totals))
    first = next(iter(totals.values()))
    for name in sorted(first.groups, key=lambda g: -first.groups[g]):
        cells = [
            f"{t.groups[name] / n * 1000:.1f} | {t.groups[name] / t.wall:.1%}"
            for t in totals.values()
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    for label, attr in (("step, profiled", "wall"), ("step, without the profiler", "plain")):
        cells = [f"{getattr(t, attr) / n * 1000:.1f} |" for t in totals.values()]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
