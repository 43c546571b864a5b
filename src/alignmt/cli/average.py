"""`alignmt average RUN --last N --out NEW_RUN`: a run's last checkpoints, averaged."""

from __future__ import annotations

import argparse

from alignmt.checkpoint.average import average_run


def run(args: argparse.Namespace) -> int:
    averaged = average_run(args.run_dir, args.last, args.out, overwrite=args.overwrite)
    steps = ", ".join(map(str, averaged.steps))
    print(f"averaged the weights of steps {steps} of {args.run_dir} into {averaged.path}")
    return 0
