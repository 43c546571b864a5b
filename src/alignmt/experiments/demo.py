"""The demo: attention against the bottleneck on a synthetic task, measured live.

Bahdanau et al. (2015) in miniature, in one command: train a vanilla encoder-decoder (one
fixed context, the final encoder state) and an attention model on the same task with the same
budget,
then score both by source length, in and out of the training distribution, and draw what
attention learned. A third model, the same attention with Luong's decoder order (query s_i
after the RNN step, input feeding), is scored against the exactly known gold alignment by
alignment error rate next to the first. Both attention models keep snapshots of their
weights, which answer: at what training step does the attention sharpen? Everything is
written under one output folder:

    OUT/attention/model.safetensors        the attention model (`alignmt translate OUT/attention`)
    OUT/attention_luong/model.safetensors  the same in Luong's order
    OUT/attention*/snapshots/              their weights at step 0, every steps/20, the last
    OUT/vanilla/model.safetensors          the baseline
    OUT/attention.png                      heatmaps of a few inputs, "attention" among them
    OUT/loss.png                           the three training curves
    OUT/sharpening.png                     share of argmax α on the expected position, by step
    OUT/results.json, OUT/table.md         the numbers
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from matplotlib.figure import Figure

from alignmt.analysis.align import AlignmentScore
from alignmt.analysis.plot import attention_grid, loss_curves, save_png
from alignmt.analysis.task_scores import TaskScores, alignment_score, score_task
from alignmt.checkpoint.format import SNAPSHOTS, snapshot_steps
from alignmt.checkpoint.torch_io import load_snapshot
from alignmt.config import Config
from alignmt.decoding.torch_engine.search import decode
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.tasks import ALPHABET
from alignmt.text.vocab import EOS, Vocab
from alignmt.training.cores import threads_to_use
from alignmt.training.run import TrainResult, train

# Inputs drawn in the heatmap: short words, and one longer than any training string.
HEATMAP_WORDS = ("hello", "attention", "bahdanau", "jointlylearning")
ALIGNMENT_NAME = {"reverse": "anti-diagonal", "copy": "diagonal", "sort": "sorted position"}
# The attention models, by run folder, and their decoder orders (`model.order`).
ORDERS = {"attention": "bahdanau", "attention_luong": "luong"}
ORDER_NAME = {"bahdanau": "bahdanau (query s_{i-1})", "luong": "luong (query s_i, input feeding)"}
SNAPSHOTS_PER_RUN = 20  # besides step 0, unless train.snapshot_every says otherwise
SHARP = 0.9  # share of positions whose argmax α is right from which attention counts as sharp
EVAL_SEED = 1234  # the evaluation strings of the table, the AER and the sharpening curve


@dataclass
class DemoResult:
    table: str  # the markdown tables and the sharpening line, as printed
    seconds: dict[str, float]  # training wall time per model
    threads: int  # PyTorch's intra-op threads: train.threads, or those of the cores free
    scores: dict[str, list[TaskScores]]  # per model, one entry per evaluated length
    # per attention model: AER on the in-distribution lengths, (step, share of argmax α on
    # the expected position) per snapshot, and the first step whose share reaches SHARP
    alignment: dict[str, AlignmentScore]
    sharpening: dict[str, list[tuple[int, float]]]
    sharpened_at: dict[str, int | None]
    files: dict[str, Path]  # what was written, by name


def run_demo(
    cfg: Config, *, eval_lengths: tuple[int, ...], samples: int, progress: bool | None = None
) -> DemoResult:
    """Train the attention model `cfg` describes, its vanilla twin and its Luong-order twin;
    score, align and plot them.

    Args:
        cfg: the attention model's config (Bahdanau order); `cfg.out_dir` is the demo's
            output folder.
        eval_lengths: source lengths to score, in and out of [min_len, max_len]; alignment
            error rate and sharpening are measured on those within it.
        samples: strings per length.
        progress: progress bars on stderr; None shows them when stderr is a terminal.
    """
    configs = demo_configs(cfg)
    aligned = in_distribution(eval_lengths, cfg)
    threads = torch.get_num_threads()
    if not cfg.train.threads and cfg.train.device in ("auto", "cpu"):
        # the scoring as well as the trainings: on the cores other processes leave free
        torch.set_num_threads(threads_to_use(threads))
    try:
        return _run(cfg, configs, eval_lengths, aligned, samples, progress)
    finally:
        torch.set_num_threads(threads)


def _run(
    cfg: Config,
    configs: dict[str, Config],
    eval_lengths: tuple[int, ...],
    aligned: tuple[int, ...],
    samples: int,
    progress: bool | None,
) -> DemoResult:
    """`run_demo`'s work, on the threads it chose."""
    started = time.perf_counter()
    runs = {name: _train(c, progress) for name, c in configs.items()}
    scores = {name: _score(run, eval_lengths, samples, cfg) for name, run in runs.items()}
    alignment = {
        name: alignment_score(
            runs[name].model, runs[name].src_vocab, cfg.data.task, aligned, samples, EVAL_SEED
        )
        for name in ORDERS
    }
    sharpening = {
        name: sharpening_curve(
            runs[name].run_dir, cfg.data.task, aligned, samples, device=_device(runs[name].model)
        )
        for name in ORDERS
    }
    sharpened_at = {name: first_sharp(curve) for name, curve in sharpening.items()}
    table = "\n\n".join(
        [
            format_table(scores, cfg),
            format_alignment(alignment, aligned, samples, cfg),
            format_sharpening(sharpening, aligned, configs["attention"].train.snapshot_every, cfg),
        ]
    )
    result = DemoResult(
        table,
        {name: run.seconds for name, run in runs.items()},
        cfg.train.threads or torch.get_num_threads(),
        scores,
        alignment,
        sharpening,
        sharpened_at,
        files={},
    )
    result.files = write_outputs(Path(cfg.out_dir), runs, result, aligned, cfg, started)
    return result


def _train(cfg: Config, progress: bool | None) -> TrainResult:
    """One of the demo's runs, started afresh over an earlier demo's. Ctrl-C or SIGTERM stop
    training with a checkpoint; the demo then stops too, rather than go on to compare a
    half-trained model."""
    result = train(cfg, progress=progress, overwrite=True)
    if result.stopped_by:
        raise KeyboardInterrupt(f"{result.stopped_by}: {cfg.out_dir} kept step {result.step}")
    return result


def _score(
    run: TrainResult, eval_lengths: tuple[int, ...], samples: int, cfg: Config
) -> list[TaskScores]:
    """One run's scores on `samples` strings of each length, under the config's length limit."""
    return [
        score_task(
            run.model,
            run.src_vocab,
            cfg.data.task,
            length,
            n=samples,
            seed=EVAL_SEED,
            max_len_ratio=cfg.search.max_len_ratio,
            max_len_offset=cfg.search.max_len_offset,
        )
        for length in eval_lengths
    ]


def demo_configs(cfg: Config) -> dict[str, Config]:
    """The three runs' configs, by output subfolder; the attention runs keep snapshots."""
    if cfg.model.attention == "none":
        raise ValueError("the demo compares attention with vanilla: pick an attention type")
    if cfg.model.order != "bahdanau":
        raise ValueError(
            "the demo trains both decoder orders (attention: bahdanau, attention_luong: luong); "
            f"leave model.order at bahdanau, got {cfg.model.order!r}"
        )
    out = Path(cfg.out_dir)
    every = cfg.train.snapshot_every or max(1, cfg.train.steps // SNAPSHOTS_PER_RUN)
    snapshotted = replace(cfg, train=replace(cfg.train, snapshot_every=every))
    configs = {
        "vanilla": replace(
            cfg,
            model=replace(cfg.model, attention="none", coverage="none"),
            # no attention to keep snapshots of, or to guide
            train=replace(cfg.train, snapshot_every=0, guided_alignment=""),
            out_dir=str(out / "vanilla"),
        ),
        **{
            name: replace(
                snapshotted, model=replace(cfg.model, order=order), out_dir=str(out / name)
            )
            for name, order in ORDERS.items()
        },
    }
    size = len(Vocab(ALPHABET))
    for config in configs.values():  # fail now (luong has no readout), not after a training
        Seq2Seq.from_config(config.model, src_vocab=size, tgt_vocab=size)
    return configs


def in_distribution(eval_lengths: tuple[int, ...], cfg: Config) -> tuple[int, ...]:
    """The evaluated lengths within the training range, where alignment is measured."""
    lengths = tuple(n for n in eval_lengths if cfg.data.min_len <= n <= cfg.data.max_len)
    if not lengths:
        raise ValueError(
            f"the demo measures alignment on evaluation lengths within the training lengths "
            f"{cfg.data.min_len}-{cfg.data.max_len}; none of {eval_lengths} is"
        )
    return lengths


@torch.no_grad()
def sharpening_curve(
    run_dir: Path, task: str, lengths: tuple[int, ...], n: int, device: torch.device | str = "cpu"
) -> list[tuple[int, float]]:
    """(step, share of positions whose argmax α is the expected source position) for each
    snapshot of the run in `run_dir`, oldest first, scored on `device`; the share is
    `alignment_score`'s recall."""
    curve = []
    for step in snapshot_steps(run_dir):
        snapshot = load_snapshot(run_dir, step, device=device)
        score = alignment_score(snapshot.model, snapshot.src_vocab, task, lengths, n, EVAL_SEED)
        curve.append((step, score.recall))
    return curve


def first_sharp(curve: list[tuple[int, float]]) -> int | None:
    """The first snapshot step whose share reaches `SHARP`; None if none does."""
    return next((step for step, share in curve if share >= SHARP), None)


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
        "TF: teacher-forced, over the string's characters (</s> excluded); "
        "exact match: free-running greedy decoding, which must also stop right after the string."
    )
    return "\n".join(lines)


def format_alignment(
    alignment: dict[str, AlignmentScore], lengths: tuple[int, ...], n: int, cfg: Config
) -> str:
    """Alignment error rate per decoder order, as a markdown table with its note."""
    lines = ["| decoder order | AER | precision | recall |", "|---|---:|---:|---:|"]
    for name, score in alignment.items():
        lines.append(
            f"| {ORDER_NAME[ORDERS[name]]} | {_percent(score.aer)} | "
            f"{_percent(score.precision)} | {_percent(score.recall)} |"
        )
    lines.append(
        f"\nAER (Och & Ney 2003) of the teacher-forced argmax α against the gold alignment, "
        f"each output character's link to its source position ({ALIGNMENT_NAME[cfg.data.task]}),"
        f" on the {n * len(lengths):,} strings of lengths {_join(lengths)}. With one link per "
        "character on both sides, precision = recall = 1 - AER."
    )
    return "\n".join(lines)


def format_sharpening(
    sharpening: dict[str, list[tuple[int, float]]],
    lengths: tuple[int, ...],
    every: int,
    cfg: Config,
) -> str:
    """When attention sharpens: per decoder order, the first snapshot step at which attention
    is sharp, with the share there and at the snapshot before (the answer's resolution)."""
    when = []
    for name, curve in sharpening.items():
        step, order = first_sharp(curve), ORDERS[name]
        if step is None:
            best, share = max(curve, key=lambda point: point[1])
            when.append(
                f"{order} order not within its {cfg.train.steps} steps "
                f"(at most {share:.1%}, at step {best})"
            )
            continue
        k = [s for s, _ in curve].index(step)
        before = f", up from {curve[k - 1][1]:.1%} at step {curve[k - 1][0]}" if k else ""
        when.append(f"{order} order at step {step} ({curve[k][1]:.1%}{before})")
    return (
        f"Attention sharpened (argmax on the {ALIGNMENT_NAME[cfg.data.task]} for ≥ "
        f"{SHARP:.0%} of positions, lengths {_join(lengths)}, snapshots every "
        f"{every} steps): {'; '.join(when)}."
    )


def write_outputs(
    out: Path,
    runs: dict[str, TrainResult],
    result: DemoResult,
    lengths: tuple[int, ...],
    cfg: Config,
    started: float,
) -> dict[str, Path]:
    """Heatmaps, curves, the tables and the raw numbers; returns the paths by name.
    `started`: the demo's start on `time.perf_counter`'s clock, for its time in all."""
    attention = runs["attention"]
    panels = [
        heatmap_panel(attention.model, attention.src_vocab, word, cfg) for word in HEATMAP_WORDS
    ]
    curves = {name: (run.steps, run.losses) for name, run in runs.items()}
    files = {
        "attention model": attention.run_dir / "model.safetensors",
        "luong model": runs["attention_luong"].run_dir / "model.safetensors",
        "vanilla model": runs["vanilla"].run_dir / "model.safetensors",
        "snapshots": attention.run_dir / SNAPSHOTS,
        "luong snapshots": runs["attention_luong"].run_dir / SNAPSHOTS,
        "heatmaps": save_png(attention_grid(panels, ncols=2), out / "attention.png"),
        "loss curves": save_png(loss_curves(curves), out / "loss.png"),
        "sharpening": save_png(sharpening_plot(result.sharpening, cfg), out / "sharpening.png"),
        "table": out / "table.md",
        "results": out / "results.json",
    }
    files["table"].write_text(result.table + "\n")
    numbers = results_json(runs, result, lengths, cfg)
    numbers["seconds"] = time.perf_counter() - started  # trainings, scores and plots
    files["results"].write_text(json.dumps(numbers, indent=2) + "\n")
    return files


def results_json(
    runs: dict[str, TrainResult], result: DemoResult, lengths: tuple[int, ...], cfg: Config
) -> dict[str, Any]:
    """The numbers behind the tables, JSON-ready."""
    return {
        "task": cfg.data.task,
        "train_lengths": [cfg.data.min_len, cfg.data.max_len],
        "steps": cfg.train.steps,
        "threads": result.threads,
        "train_seconds": {name: run.seconds for name, run in runs.items()},
        "scores": {name: [asdict(s) for s in rows] for name, rows in result.scores.items()},
        "alignment_lengths": list(lengths),
        "alignment_error_rate": {
            name: {"order": ORDERS[name], **asdict(score)}
            for name, score in result.alignment.items()
        },
        "sharpening": {
            "threshold": SHARP,
            **{
                name: {
                    "steps": [step for step, _ in curve],
                    "share": [share for _, share in curve],
                    "sharpened_at": result.sharpened_at[name],
                }
                for name, curve in result.sharpening.items()
            },
        },
    }


def sharpening_plot(sharpening: dict[str, list[tuple[int, float]]], cfg: Config) -> Figure:
    """The share of positions with the right argmax α against the training step, per order."""
    curves = {
        f"{ORDERS[name]} order": ([step for step, _ in curve], [share for _, share in curve])
        for name, curve in sharpening.items()
    }
    ylabel = f"share of argmax α on the {ALIGNMENT_NAME[cfg.data.task]}"
    fig = loss_curves(curves, title="attention over training", ylabel=ylabel, log_y=False)
    fig.axes[0].axhline(SHARP, color="grey", linestyle="--", linewidth=1)
    return fig


@torch.no_grad()
def heatmap_panel(model: Seq2Seq, vocab: Vocab, word: str, cfg: Config):
    """(weights, source tokens, output tokens, title) of the model's greedy output on `word`,
    decoded with the same length limit as the scores, on the model's device."""
    src = torch.tensor([vocab.encode(word, add_eos=True)], device=_device(model))
    (hyp,) = decode(
        model,
        src,
        torch.tensor([src.size(1)], device=src.device),
        max_len_ratio=cfg.search.max_len_ratio,
        max_len_offset=cfg.search.max_len_offset,
    )
    output = vocab.decode(hyp.tokens, strip_special=False)
    title = f"{word} -> {''.join(t for t in output if t != EOS)}"
    return hyp.attention, [*word, EOS], output, title


def _device(model: Seq2Seq) -> torch.device:
    return next(model.parameters()).device


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _join(lengths: tuple[int, ...]) -> str:
    return ", ".join(map(str, lengths))
