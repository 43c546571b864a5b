"""What scheduled sampling does on string reversal: the demo's attention model (lengths 3-10)
trained with and without it, for the same number of updates, then scored on fresh strings of
the training lengths and of two lengths beyond them (15 and 20): per-character accuracy
teacher-forced and free-running (greedy; the difference is what the model loses when it reads
its own outputs), and greedy exact match.

    python benchmarks/scheduled_sampling.py --steps 2000 --out runs/ss_reverse

Prints a Markdown table. Each run is `alignmt train` on configs/reverse.yaml with
`train.scheduled_sampling` set (Bengio et al. 2015): an inverse sigmoid whose eps passes 0.5
halfway (k ln k = steps / 2), and a linear fall from 1 to 0.25 at the last update.
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from pathlib import Path

import torch

from alignmt.analysis.task_scores import score_task
from alignmt.config import load_config
from alignmt.decoding.torch_engine.search import decode
from alignmt.model.batch import make_batch
from alignmt.text.tasks import eval_set
from alignmt.training.optim import teacher_rate
from alignmt.training.run import train

IN_TRAINING = tuple(range(3, 11))
BEYOND = (15, 20)


def halfway_k(steps: int) -> float:
    """The inverse sigmoid's k whose eps is 0.5 at steps / 2: k ln k = steps / 2."""
    k = 2.0
    for _ in range(50):  # Newton's method on k ln k - steps / 2
        k -= (k * math.log(k) - steps / 2) / (math.log(k) + 1)
    return k


@torch.no_grad()
def free_accuracy(model, vocab, length: int, n: int) -> float:
    """Greedy decoding's per-character accuracy on `score_task`'s strings of `length`:
    position i of the output against position i of the target, over the L characters."""
    pairs = eval_set("reverse", length, n, 1234)
    batch = make_batch([(vocab.encode(s), vocab.encode(t)) for s, t in pairs], vocab, vocab)
    outputs = decode(model.eval(), batch.src, batch.src_len)
    right = 0
    for hypothesis, target in zip(outputs, batch.tgt_out.tolist(), strict=True):
        # a short output counts its missing characters wrong
        right += sum(
            a == b for a, b in zip(hypothesis.tokens[:length], target[:length], strict=False)
        )
    return right / (n * length)


def schedules(steps: int) -> dict[str, list[str]]:
    """Each run's name and its scheduled-sampling overrides."""
    return {
        "teacher forcing": [],
        "inverse sigmoid": [
            "train.scheduled_sampling=inverse_sigmoid",
            f"train.sampling_k={halfway_k(steps):.1f}",
        ],
        "linear to 0.25": [
            "train.scheduled_sampling=linear",
            f"train.sampling_slope={0.75 / steps:.3g}",
            "train.sampling_floor=0.25",
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--out", default="runs/ss_reverse")
    parser.add_argument("--order", default="bahdanau", help="model.order")
    parser.add_argument("--pick", default="sample", help="train.sampling_pick")
    parser.add_argument("--n", type=int, default=500, help="strings per length")
    args = parser.parse_args()
    logging.getLogger("alignmt").setLevel(logging.WARNING)
    print(
        "| training | eps at the end | 3-10: teacher-forced / free-running / exact "
        "| 15: teacher-forced / free-running / exact | 20: teacher-forced / free-running / "
        "exact | training s |"
    )
    print("| --- | ---: | --- | --- | --- | ---: |")
    for name, overrides in schedules(args.steps).items():
        out = Path(args.out) / name.replace(" ", "_")
        cfg = load_config(
            overrides=[
                f"out_dir={out}",
                f"train.steps={args.steps}",
                f"model.order={args.order}",
                f"train.sampling_pick={args.pick}",
                *overrides,
            ]
        )
        started = time.perf_counter()
        result = train(cfg, progress=False, overwrite=True)
        seconds = time.perf_counter() - started
        model, vocab = result.model, result.src_vocab
        groups = [IN_TRAINING, *((n,) for n in BEYOND)]
        cells = [measure(model, vocab, lengths, args.n) for lengths in groups]
        eps = teacher_rate(cfg.train, args.steps - 1)
        print(f"| {name} | {eps:.2f} | {' | '.join(cells)} | {seconds:.0f} |", flush=True)


def measure(model, vocab, lengths: tuple[int, ...], n: int) -> str:
    """Per-character accuracy teacher-forced and free-running, and greedy exact match, over
    strings of `lengths` (characters pooled, exact match averaged), as one table cell."""
    scores = [score_task(model, vocab, "reverse", length, n=n) for length in lengths]
    forced = sum(s.token_accuracy * s.length for s in scores) / sum(lengths)
    free = sum(free_accuracy(model, vocab, length, n) * length for length in lengths)
    exact = sum(s.exact_match for s in scores) / len(scores)
    return f"{forced:.1%} / {free / sum(lengths):.1%} / {exact:.1%}"


if __name__ == "__main__":
    main()
