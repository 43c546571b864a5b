"""Attention mechanisms on the synthetic tasks, one sitting: for each task (`copy`, which is
monotonic, `reverse`, anti-monotonic, and `sort`, neither) and each mechanism, train the
reversal recipe (configs/reverse.yaml: Bahdanau's order, additive score, 2,000 steps on
lengths 3-10) with that mechanism, then score greedy exact match on fresh strings of each
length (3-10 in distribution, 15 and 20 beyond it) and the argmax alignment's AER against
the task's gold links on lengths 3-10.

    python benchmarks/task_mechanisms.py                          # every task and mechanism
    python benchmarks/task_mechanisms.py --tasks copy --mechanisms softmax monotonic

Run from the repository root with nothing else using the CPU. Prints a markdown table; the
runs are in runs/tasks/TASK-MECHANISM (a comma-separated name with a dash: softmax-luong).
"""

from __future__ import annotations

import argparse
import time

from alignmt.analysis.task_scores import alignment_score, score_task
from alignmt.config import config_path, load_config
from alignmt.training.run import train

# mechanism -> the recipe's overrides
MECHANISMS = {
    "softmax": [],
    "sparsemax": ["model.attention_fn=sparsemax"],
    "local_m": ["model.attention_window=local_m", "model.window=2"],
    "monotonic": ["model.attention_fn=monotonic"],
    # Luong's order, whose query s_i has read y_{i-1}: the walk knows what was just written
    "softmax, luong": ["model.order=luong"],
    "monotonic, luong": ["model.attention_fn=monotonic", "model.order=luong"],
    # four heads of 24 units (Chen et al. 2018) over the additive score, and over the scaled
    # dot product, as the Transformer's heads are
    "4 heads": ["model.heads=4"],
    "4 heads, scaled_dot": ["model.heads=4", "model.attention=scaled_dot"],
    # exact hard monotonic attention (Wu & Cotterell 2019): each word from one position
    "hard_monotonic": ["model.attention_fn=hard_monotonic"],
    # the pointer-generator (See et al. 2017): each letter generated or copied by attention
    "pointer-generator": ["model.copy=true"],
}
TASKS = ("copy", "reverse", "sort")
LENGTHS = (3, 5, 7, 10, 15, 20)
IN_DISTRIBUTION = (3, 5, 7, 10)
SAMPLES, SEED = 500, 1234


def measure(task: str, mechanism: str) -> dict:
    """Train one (task, mechanism) run and score it."""
    folder = f"runs/tasks/{task}-{mechanism.replace(', ', '-')}"
    overrides = [f"data.task={task}", f"out_dir={folder}"]
    cfg = load_config(config_path("reverse"), [*overrides, *MECHANISMS[mechanism]])
    start = time.perf_counter()
    run = train(cfg, progress=False, overwrite=True)
    seconds = time.perf_counter() - start
    vocab = run.src_vocab
    exact = [
        score_task(run.model, vocab, task, n, n=SAMPLES, seed=SEED).exact_match for n in LENGTHS
    ]
    aer = alignment_score(run.model, vocab, task, IN_DISTRIBUTION, SAMPLES, SEED).aer
    return {"exact": exact, "aer": aer, "seconds": seconds}


def table(results: dict[tuple[str, str], dict]) -> str:
    head = " | ".join(f"{n}{'*' if n not in IN_DISTRIBUTION else ''}" for n in LENGTHS)
    lines = [
        f"| task | mechanism | {head} | AER 3-10 | training s |",
        "|---|---|" + "---:|" * (len(LENGTHS) + 2),
    ]
    for (task, mechanism), r in results.items():
        exact = " | ".join(f"{100 * e:.1f}%" for e in r["exact"])
        lines.append(
            f"| {task} | {mechanism} | {exact} | {100 * r['aer']:.1f}% | {r['seconds']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--mechanisms", nargs="+", choices=MECHANISMS, default=list(MECHANISMS))
    args = parser.parse_args()
    results = {}
    for task in args.tasks:
        for mechanism in args.mechanisms:
            results[task, mechanism] = measure(task, mechanism)
            print(f"{task} {mechanism}: {results[task, mechanism]}", flush=True)
    print(table(results))
    print(f"\n* beyond the training lengths (3-10); exact match over {SAMPLES} strings a length")


if __name__ == "__main__":
    main()
