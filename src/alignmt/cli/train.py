"""`alignmt train CONFIG`: train a model, or continue one (`--resume`)."""

from __future__ import annotations

import argparse

from alignmt.cli.flags import failed
from alignmt.config import config_path, dump_config, load_config
from alignmt.training.distributed import PeerLost
from alignmt.training.loop import TrainingError
from alignmt.training.run import train


def run(args: argparse.Namespace) -> int:
    cfg = load_config(config_path(args.config), args.overrides)
    if args.print_config:
        print(dump_config(cfg), end="")
        return 0
    try:
        result = train(cfg, resume=args.resume, overwrite=args.overwrite)
    except (TrainingError, PeerLost) as error:
        return failed(error)
    if not result.main:  # a rank > 0 of a torchrun run: rank 0 reports
        return 0
    if result.stopped_by:
        print(
            f"stopped by {result.stopped_by} at step {result.step}, with a checkpoint; "
            f"continue with: alignmt train {args.config} ... --resume"
        )
        return 0
    loss = f"{result.losses[-1]:.4f}" if result.losses else "none (every update skipped)"
    print(
        f"trained to step {result.step} in {result.seconds:.1f} s; "
        f"final loss {loss}; run folder {result.run_dir}"
    )
    for record in result.evals[-1:]:
        print(f"validation: loss {record['valid_loss']:.4f}, greedy BLEU {record['bleu']:.2f}")
    return 0
