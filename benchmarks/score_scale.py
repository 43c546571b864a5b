"""How sharp a run's attention scores grew as it trained: at each snapshot of each run
(`train.snapshot_every`), greedy translations of the first sentences of its test set, with
every step's raw scores e_ij recorded, and per step over the real source positions:

- the range of e (max - min) and the gap between the two best scores, as medians;
- the largest weight alpha_ij, and the share of weights that are exactly 0 in float32 (a
  softmax underflows there once a score trails the best by more than about 104), as means;
- the entropy of alpha in nats, as a mean; and the score's learned scale g where it has one;
- the norms of the query s and of the real encoder states h_j, as means: a score such as
  s^T W h_j grows with both.

    python benchmarks/score_scale.py runs/luong/general runs/luong/scaled_general

Prints a markdown table. A score whose range grows into the hundreds has a one-hot softmax,
which passes back almost no gradient: its attention stops learning where it first fell.
"""

from __future__ import annotations

import argparse
import os

os.environ["ALIGNMT_FUSED"] = "0"  # every score through its module, where the hook sees it

import numpy as np
import torch

from alignmt.analysis.evaluation import read_test_set
from alignmt.checkpoint.format import snapshot_steps
from alignmt.decoding.door import open_translator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders with snapshots")
    parser.add_argument("--sentences", type=int, default=200, help="test sentences per snapshot")
    args = parser.parse_args()
    columns = "range of e | best - second | max alpha | alpha = 0 | entropy | g | norm s | norm h"
    print(f"| run | step | {columns} |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for run in args.runs:
        opened = open_translator(run, beam_size=1)
        config = opened.origin.header.config
        lines = read_test_set(config.data, run, "a test set")[0][: args.sentences]
        for step in snapshot_steps(run):
            row = measure(opened.snapshot(step), lines)
            print(f"| {os.path.basename(run)} | {step:,} | " + " | ".join(row) + " |")


def measure(translator, lines: list[str]) -> list[str]:
    """The table's columns for one snapshot, its score hooked while it translates `lines`."""
    score = translator.engine.model.decoder.attention.score
    steps: list[tuple[torch.Tensor, torch.Tensor]] = []  # (B, T_src) scores and mask per step
    norms: list[tuple[torch.Tensor, torch.Tensor]] = []  # |s| (B,) and |h_j| (real j) per step

    def hook(module, inputs, out) -> None:
        query, memory = inputs[0], inputs[1]
        steps.append((out.detach().double(), memory.mask))
        norms.append((query.norm(dim=-1), memory.states.norm(dim=-1)[memory.mask]))

    handle = score.register_forward_hook(hook)
    with torch.no_grad():
        translator.translate(lines, warn=False)
    handle.remove()
    ranges, gaps, peaks, zeros, entropies = [], [], [], [], []
    for scores, mask in steps:
        for e in (row[keep] for row, keep in zip(scores, mask, strict=True)):
            if e.numel() < 2:
                continue
            best = torch.sort(e, descending=True).values
            ranges.append((best[0] - best[-1]).item())
            gaps.append((best[0] - best[1]).item())
            alpha = torch.softmax(e.float(), dim=0)  # as the model computes it
            peaks.append(alpha.max().item())
            zeros.append((alpha == 0).double().mean().item())
            p = alpha.double()[alpha > 0]
            entropies.append(-(p * p.log()).sum().item())
    g = getattr(score, "g", None)
    return [
        f"{np.median(ranges):.1f}",
        f"{np.median(gaps):.2f}",
        f"{np.mean(peaks):.3f}",
        f"{np.mean(zeros):.1%}",
        f"{np.mean(entropies):.2f}",
        "—" if g is None else f"{g.item():.4f}",
        f"{torch.cat([s for s, _ in norms]).mean().item():.1f}",
        f"{torch.cat([h for _, h in norms]).mean().item():.1f}",
    ]


if __name__ == "__main__":
    main()
