"""`alignmt demo`: the reversal experiment (`alignmt.experiments.demo`), printed."""

from __future__ import annotations

import argparse

import torch

from alignmt.cli.flags import failed
from alignmt.config import apply_overrides, load_config
from alignmt.experiments.demo import run_demo
from alignmt.model.device import pick_device
from alignmt.training.distributed import PeerLost
from alignmt.training.loop import TrainingError


def run(args: argparse.Namespace) -> int:
    cfg = apply_overrides(load_config(), demo_overrides(args) + list(args.overrides))
    flag = "--device" if args.device else "train.device"
    hardware = _hardware(pick_device(cfg.train.device, flag=flag))  # fails before any training
    print(
        f"Training vanilla, attention and Luong-order attention models on "
        f"'{cfg.data.task}' ({cfg.train.steps} steps each) ...",
        flush=True,
    )
    try:
        result = run_demo(cfg, eval_lengths=tuple(args.eval_lengths), samples=args.samples)
    except (TrainingError, PeerLost) as error:
        return failed(error)
    print()
    print(result.table)
    times = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in result.seconds.items())
    print(
        f"\nTraining time ({cfg.train.engine}, {cfg.train.steps} steps, "
        f"batch {cfg.train.batch_size}, "
        f"{hardware or f'{result.threads} CPU threads'}): {times}"
    )
    print("\nWritten:")
    for name, path in result.files.items():
        print(f"  {name:16} {path}")
    print(f"\nTry: echo hello | alignmt translate {result.files['attention model'].parent}")
    return 0


def demo_overrides(args: argparse.Namespace) -> list[str]:
    """The demo's flags as config overrides, so they go through the same validation."""
    overrides = [f"out_dir={args.out}"]
    if args.lengths:
        low, high = args.lengths
        overrides += [f"data.min_len={low}", f"data.max_len={high}"]
    flags = {
        "data.task": args.task,
        "train.steps": args.steps,
        "model.attention": args.attention,
        "model.rnn": args.cell,
        "seed": args.seed,
        "train.device": args.device,
    }
    return overrides + [f"{key}={value}" for key, value in flags.items() if value is not None]


def _hardware(device: torch.device) -> str | None:
    """A GPU's name; None on the CPU, where the demo chooses its threads as it starts."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None
