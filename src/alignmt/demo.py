"""The demo: attention against the bottleneck on a synthetic task, measured live.

Seed 001 (chapter 37) in one command: train a vanilla encoder-decoder (one fixed context,
the final encoder state) and an attention model on the same task with the same budget,
then score both by source length, in and out of the training distribution, and draw what
attention learned. Everything is written under one output folder:

    OUT/attention/model.safetensors   the attention model (`alignmt translate OUT/attention`)
    OUT/vanilla/model.safetensors     the baseline
    OUT/attention.png                 heatmaps of a few inputs, "attention" among them
    OUT/loss.png                      both training curves
    OUT/results.json, OUT/table.md    the numbers
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from alignmt.config import Config
from alignmt.data import EOS, Vocab
from alignmt.model import Seq2Seq
from alignmt.plot import attention_grid, loss_curves, save_png
from alignmt.search import decode
from alignmt.tasks import TaskScores, score_task
from alignmt.train import TrainResult, train

# Inputs drawn in the heatmap: the seed's words, and one longer than any training string.
HEATMAP_WORDS = ("hello", "attention", "bahdanau", "jointlylearning")
ALIGNMENT_NAME = {"reverse": "anti-diagonal", "copy": "diagonal", "sort": "sorted position"}


@dataclass
class DemoResult:
    table: str  # the markdown table, as printed
    seconds: dict[str, float]  # training wall time per model
    scores: dict[str, list[TaskScores]]  # per model, one entry per evaluated length
    files: dict[str, Path]  # what was written, by name


def run_demo(
    cfg: Config, *, eval_lengths: tuple[int, ...], samples: int, progress: bool | None = None
) -> DemoResult:
    """Train the attention model `cfg` describes and its vanilla twin, score and plot both.

    Args:
        cfg: the attention model's config; `cfg.out_dir` is the demo's output folder.
        eval_lengths: source lengths to score, in and out of [min_len, max_len].
        samples: strings per length.
        progress: progress bars on stderr; None shows them when stderr is a terminal.
    """
    if cfg.model.attention == "none":
        raise ValueError("the demo compares attention with vanilla: pick an attention type")
    out = Path(cfg.out_dir)
    configs = {
        "vanilla": replace(
            cfg, model=replace(cfg.model, attention="none"), out_dir=str(out / "vanilla")
        ),
        "attention": replace(cfg, out_dir=str(out / "attention")),
    }
    runs = {name: train(c, progress=progress) for name, c in configs.items()}
    scores = {
        name: [
            score_task(run.model, run.src_vocab, cfg.data.task, length, n=samples,
                       max_len_ratio=cfg.search.max_len_ratio,
                       max_len_offset=cfg.search.max_len_offset)
            for length in eval_lengths
        ]
        for name, run in runs.items()
    }  # fmt: skip
    table = format_table(scores, cfg)
    files = write_outputs(out, runs, scores, table, cfg)
    return DemoResult(table, {name: run.seconds for name, run in runs.items()}, scores, files)


def format_table(scores: dict[str, list[TaskScores]], cfg: Config) -> str:
    """The comparison as a markdown table; out-of-distribution lengths are starred."""
    aligned = f"attention argmax on {ALIGNMENT_NAME[cfg.data.task]}"
    header = [
        "length",
        "vanilla TF per-token acc",
        "vanilla greedy exact match",
        "attention TF per-token acc",
        "attention greedy exact match",
        aligned,
    ]
    rows = []
    for vanilla, attention in zip(scores["vanilla"], scores["attention"], strict=True):
        ood = not cfg.data.min_len <= vanilla.length <= cfg.data.max_len
        rows.append(
            [
                f"{vanilla.length}{'*' if ood else ''}",
                _percent(vanilla.token_accuracy),
                _percent(vanilla.exact_match),
                _percent(attention.token_accuracy),
                _percent(attention.exact_match),
                _percent(attention.alignment),
            ]
        )
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines.append(
        f"\n* out of distribution: trained on lengths {cfg.data.min_len}-{cfg.data.max_len}. "
        "TF: teacher-forced, over the string's characters (</s> excluded, as in seed 001); "
        "exact match: free-running greedy decoding, which must also stop right after the string."
    )
    return "\n".join(lines)


def write_outputs(
    out: Path,
    runs: dict[str, TrainResult],
    scores: dict[str, list[TaskScores]],
    table: str,
    cfg: Config,
) -> dict[str, Path]:
    """Heatmaps, loss curves, the table and the raw numbers; returns the paths by name."""
    attention = runs["attention"]
    panels = [
        heatmap_panel(attention.model, attention.src_vocab, word, cfg) for word in HEATMAP_WORDS
    ]
    curves = {name: (run.steps, run.losses) for name, run in runs.items()}
    files = {
        "attention model": attention.run_dir / "model.safetensors",
        "vanilla model": runs["vanilla"].run_dir / "model.safetensors",
        "heatmaps": save_png(attention_grid(panels, ncols=2), out / "attention.png"),
        "loss curves": save_png(loss_curves(curves), out / "loss.png"),
        "table": out / "table.md",
        "results": out / "results.json",
    }
    files["table"].write_text(table + "\n")
    results = {
        "task": cfg.data.task,
        "train_lengths": [cfg.data.min_len, cfg.data.max_len],
        "steps": cfg.train.steps,
        "train_seconds": {name: run.seconds for name, run in runs.items()},
        "scores": {name: [asdict(s) for s in rows] for name, rows in scores.items()},
    }
    files["results"].write_text(json.dumps(results, indent=2) + "\n")
    return files


@torch.no_grad()
def heatmap_panel(model: Seq2Seq, vocab: Vocab, word: str, cfg: Config):
    """(weights, source tokens, output tokens, title) of the model's greedy output on `word`,
    decoded with the same length limit as the scores."""
    src = torch.tensor([vocab.encode(word, add_eos=True)])
    (hyp,) = decode(
        model,
        src,
        torch.tensor([src.size(1)]),
        max_len_ratio=cfg.search.max_len_ratio,
        max_len_offset=cfg.search.max_len_offset,
    )
    output = vocab.decode(hyp.tokens, strip_special=False)
    title = f"{word} -> {''.join(t for t in output if t != EOS)}"
    return hyp.attention.numpy(), [*word, EOS], output, title


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"
