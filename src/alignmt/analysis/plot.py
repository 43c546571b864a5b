"""Attention heatmaps, learning curves and BLEU plots as matplotlib Figures, ready for PNG.

Owns turning arrays into figures: the alignment matrix of Bahdanau et al. (2015), Fig. 3
(source along the top, output down the side, one row of weights α_ij per output token),
loss-per-step curves comparing runs, and BLEU against source length as a curve (after the
paper's Fig. 2) or as grouped bars per length bucket. Does not own the model, the data, the
metrics (`evaluate` computes them; this module never imports it) or files: it takes
NumPy arrays or plain Python data (tensors are converted) and returns a `Figure`; `save_png`
is the only function that writes. Figures are built with `matplotlib.figure.Figure`, never
pyplot, and nothing here touches global matplotlib state (backend, rcParams), so importing
this module from a server or a test changes nothing for its caller.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

# Inches per matrix cell: about four 10-pt characters, so a token per tick stays legible
# however long the sentence. 1/16-inch multiples keep pixel sizes exact at common dpis.
_CELL_IN = 0.375
_ANNOTATE_MAX_CELLS = 30  # past this, cell values are too small to read; the colours suffice
_ROTATE_LONGER_THAN = 4  # characters that fit across one cell without rotating


def _to_numpy(values: Any) -> np.ndarray:
    # Model attention is often a torch tensor on the GPU with requires_grad, which
    # np.asarray refuses; duck-type on .detach() so this module need not import torch.
    if hasattr(values, "detach"):
        values = values.detach().cpu().float()
    return np.asarray(values, dtype=np.float64)


def _heatmap_figsize(src_tokens: Sequence[str], tgt_tokens: Sequence[str]) -> tuple[float, float]:
    # Fixed margins for the colorbar, the axis labels and the title, plus one cell per token;
    # rotated source labels need height for their longest token.
    longest = max((len(t) for t in src_tokens), default=0)
    label_height = 0.0625 * longest if longest > _ROTATE_LONGER_THAN else 0.25
    width = 2.25 + _CELL_IN * len(src_tokens)
    height = 1.5 + label_height + _CELL_IN * len(tgt_tokens)
    return max(width, 3.0), max(height, 2.5)


def attention_heatmap(
    weights: Any,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    *,
    title: str | None = None,
    ax: Axes | None = None,
    annotate_above: float = 0.3,
    scale: str = "α",
) -> Figure:
    """Draw one sentence's attention weights as a heatmap (Bahdanau et al. 2015, Fig. 3).

    Args:
        weights: (T_tgt, T_src) array-like (NumPy or torch); row i holds α_i, the weights of
            output token i over the source tokens, each in [0, 1].
        src_tokens: T_src source tokens, shown along the top.
        tgt_tokens: T_tgt output tokens, shown down the left side.
        title: optional axes title.
        ax: axes to draw into (e.g. one panel of a grid); a new figure sized from the token
            counts is created when None.
        annotate_above: cells with a weight above this show its value, if the matrix is at
            most 30×30.
        scale: what the colour bar measures, for a matrix other than attention's in [0, 1].

    Returns:
        The Figure holding the heatmap (`ax.figure` when `ax` is given).

    Raises:
        ValueError: if `weights` is not 2-D of shape (len(tgt_tokens), len(src_tokens)).
    """
    weights = _to_numpy(weights)
    expected = (len(tgt_tokens), len(src_tokens))
    if weights.shape != expected:
        raise ValueError(
            f"weights has shape {weights.shape}; expected (T_tgt, T_src) = {expected} "
            "from len(tgt_tokens), len(src_tokens)"
        )
    if ax is None:
        fig = Figure(figsize=_heatmap_figsize(src_tokens, tgt_tokens), layout="constrained")
        ax = fig.add_subplot()
    image = ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", origin="upper")
    _label_axes(ax, src_tokens, tgt_tokens)
    if max(expected) <= _ANNOTATE_MAX_CELLS:
        for i, j in zip(*np.nonzero(weights > annotate_above), strict=True):
            # Dark text on the bright (yellow) end of viridis, light text on the dark end.
            r, g, b, _ = image.to_rgba(weights[i, j])
            colour = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
            ax.text(
                j, i, f"{weights[i, j]:.2f}", ha="center", va="center", fontsize=7, color=colour
            )
    if title is not None:
        ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, label=scale, fraction=0.08, pad=0.03)
    return ax.figure


def _label_axes(ax: Axes, src_tokens: Sequence[str], tgt_tokens: Sequence[str]) -> None:
    # parse_math=False: corpus tokens such as "$x$" must show literally, not as mathtext
    # (and one such as "$x^$" would make drawing the figure raise).
    rotate = max((len(t) for t in src_tokens), default=0) > _ROTATE_LONGER_THAN
    rotation = 90 if rotate else 0
    ax.set_xticks(range(len(src_tokens)), list(src_tokens), parse_math=False, rotation=rotation)
    ax.set_yticks(range(len(tgt_tokens)), labels=list(tgt_tokens), parse_math=False)
    # Source on top, as in the paper: the matrix reads like the sentence above it.
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xlabel("source")
    ax.set_ylabel("output")


def attention_grid(
    panels: Sequence[tuple[Any, Sequence[str], Sequence[str], str]],
    *,
    ncols: int = 4,
    scales: Sequence[str] | None = None,
) -> Figure:
    """Draw several attention heatmaps side by side, e.g. short inputs next to a long one.

    Args:
        panels: (weights, src_tokens, tgt_tokens, title) per heatmap, with weights
            (T_tgt, T_src) as in `attention_heatmap`; sizes may differ between panels.
        ncols: panels per row; fewer columns are used when there are fewer panels.
        scales: each panel's colour bar label (`attention_heatmap`'s `scale`); α for all
            when None.

    Returns:
        A Figure with one heatmap (and its colorbar) per panel, in row-major order.

    Raises:
        ValueError: if `panels` is empty, `ncols` < 1, or a panel's shapes disagree.
    """
    if not panels or ncols < 1:
        raise ValueError(f"need at least one panel and ncols >= 1; got {len(panels)}, {ncols}")
    ncols = min(ncols, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    # Every cell of the grid gets the largest panel's size so no panel's tokens get squeezed.
    sizes = [_heatmap_figsize(src, tgt) for _, src, tgt, _ in panels]
    cell_w, cell_h = max(w for w, _ in sizes), max(h for _, h in sizes)
    fig = Figure(figsize=(ncols * cell_w, nrows * cell_h), layout="constrained")
    scales = ["α"] * len(panels) if scales is None else scales
    for k, ((weights, src, tgt, title), scale) in enumerate(zip(panels, scales, strict=True)):
        ax = fig.add_subplot(nrows, ncols, k + 1)
        attention_heatmap(weights, src, tgt, title=title, ax=ax, scale=scale)
    return fig


def weights_grid(
    alpha: Any,
    weights: Any,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    label: str,
    title: str = "",
) -> Figure:
    """Heatmaps of α and, beside it, the weights over the source a mechanism shows with it:
    multi-head attention's heads (α is their mean), the pointer-generator's copying.

    Args:
        alpha: (T_tgt, T_src) α.
        weights: (N, T_tgt, T_src) the mechanism's N rows of weights.
        label: what one row is ("head": "head 1", "head 2", ...; one row: the label alone).
        title: what the panels' titles start with ("line 4"), or nothing.
    """
    name = f"{title}: " if title else ""
    panels = [(alpha, src_tokens, tgt_tokens, f"{name}α")]
    for n, w in enumerate(weights):
        row = f"{label} {n + 1}" if len(weights) > 1 else label
        panels.append((w, src_tokens, tgt_tokens, f"{name}{row}"))
    return attention_grid(panels)


def _lines(
    curves: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    names: tuple[str, str],
    marker: str | None = None,
) -> tuple[Figure, Axes]:
    """A figure with one labelled line per run; `names` say what x and y are, for errors."""
    if not curves:
        raise ValueError("curves is empty; need at least one run")
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.add_subplot()
    for name, (xs, ys) in curves.items():
        xs, ys = _to_numpy(xs), _to_numpy(ys)
        if xs.ndim != 1 or xs.shape != ys.shape:
            raise ValueError(
                f"run {name!r}: {names[0]} has shape {xs.shape} but {names[1]} has shape "
                f"{ys.shape}; expected two 1-D sequences of equal length"
            )
        ax.plot(xs, ys, marker=marker, label=name)
    return fig, ax


def loss_curves(
    curves: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    *,
    title: str = "training loss",
    ylabel: str = "cross-entropy",
    log_y: bool = True,
) -> Figure:
    """Plot loss against step, one line per named run (e.g. attention vs. vanilla).

    Args:
        curves: run name -> (steps, values), two 1-D sequences of equal length N.
        title: axes title.
        ylabel: y-axis label.
        log_y: log-scale y axis; losses fall over orders of magnitude on the toy tasks.

    Returns:
        A Figure with one labelled line per run, a legend and a grid.

    Raises:
        ValueError: if `curves` is empty or a run's steps and values differ in shape.
    """
    fig, ax = _lines(curves, ("steps", "values"))
    if log_y:
        ax.set_yscale("log")
    ax.set(title=title, xlabel="step", ylabel=ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return fig


def save_png(fig: Figure, path: str | Path, *, dpi: int = 120) -> Path:
    """Write `fig` as a PNG, creating parent directories.

    Args:
        fig: the figure to save.
        path: destination file.
        dpi: pixels per inch; the image is figsize × dpi pixels (no tight bounding box).

    Returns:
        The path written, as a Path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=dpi)
    return path


def bleu_by_length_plot(
    curves: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    *,
    title: str = "BLEU by source length",
) -> Figure:
    """Plot BLEU against source-sentence length, one marked line per run.

    In the spirit of Bahdanau et al. (2015), Fig. 2: a model that squeezes the source into
    one vector falls off as sentences grow, an attention model much less. Feed it the
    (centres, bleus) of `evaluate.bleu_by_length` for each run.

    Args:
        curves: run name -> (source lengths in tokens, BLEU at each), two 1-D sequences of
            equal length N.
        title: axes title.

    Returns:
        A Figure with one labelled line (with markers) per run, a legend and a grid; the
        y axis starts at 0 so that runs are compared on their absolute level.

    Raises:
        ValueError: if `curves` is empty or a run's lengths and scores differ in shape.
    """
    fig, ax = _lines(curves, ("lengths", "BLEU"), marker="o")
    ax.set_ylim(bottom=0.0)
    ax.set(title=title, xlabel="source length (tokens)", ylabel="BLEU")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return fig


def _name_and_bleu(bucket: Any) -> tuple[str, float | None]:
    # Duck-typed so this module need not import evaluate: an evaluate.BucketScore (.name,
    # .bleu) or a plain (name, bleu) pair.
    if hasattr(bucket, "name") and hasattr(bucket, "bleu"):
        return bucket.name, bucket.bleu
    name, bleu = bucket
    return name, bleu


def bucket_bars(
    rows: Mapping[str, Sequence[Any]],
    *,
    title: str = "BLEU by source length",
) -> Figure:
    """Grouped bars of BLEU per source-length bucket: buckets along x, one bar per run.

    Args:
        rows: run name -> its buckets in order, each a (name, bleu) pair or an object with
            `.name` and `.bleu` (such as `evaluate.BucketScore`); bleu None for an empty
            bucket, which gets no bar and an "n/a" label instead. Every run must list the
            same bucket names.
        title: axes title.

    Returns:
        A Figure with one bar per run and non-empty bucket, each labelled with its BLEU to
        one decimal, bucket names as x tick labels, and a legend of runs.

    Raises:
        ValueError: if `rows` is empty or the runs' bucket names differ.
    """
    if not rows:
        raise ValueError("rows is empty; need at least one run")
    runs = {run: [_name_and_bleu(b) for b in buckets] for run, buckets in rows.items()}
    names = [name for name, _ in next(iter(runs.values()))]
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.add_subplot()
    # The runs share each bucket's unit-wide slot, leaving a fifth of it as the gap between.
    bar_width = 0.8 / len(runs)
    for k, (run, buckets) in enumerate(runs.items()):
        if [name for name, _ in buckets] != names:
            raise ValueError(
                f"run {run!r} has buckets {[name for name, _ in buckets]}; expected {names} "
                "like the first run"
            )
        offset = (k - (len(runs) - 1) / 2) * bar_width
        shown = [(i, bleu) for i, (_, bleu) in enumerate(buckets) if bleu is not None]
        bars = ax.bar(
            [i + offset for i, _ in shown],
            [bleu for _, bleu in shown],
            width=bar_width,
            label=run,
        )
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
        for i, (_, bleu) in enumerate(buckets):
            if bleu is None:
                ax.text(i + offset, 0, "n/a", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(names)), names)
    # Headroom above the tallest bar for its value label.
    ax.set_ylim(
        0.0, max([b for bs in runs.values() for _, b in bs if b is not None] + [1.0]) * 1.15
    )
    ax.set(title=title, xlabel="source length (tokens)", ylabel="BLEU")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    return fig
