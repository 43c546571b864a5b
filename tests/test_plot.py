"""Tests for alignmt.plot: figures show the data given, PNGs have the promised size, and the
module leaves global matplotlib state (backend, rcParams, pyplot) alone."""

from __future__ import annotations

import importlib
import os
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import numpy as np
import pytest

import alignmt.analysis.plot as plot


def png_size(path: Path) -> tuple[int, int]:
    # PNG: 8-byte signature, then the IHDR chunk whose data starts with big-endian uint32
    # width and height at bytes 16-24.
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def reversal(word: str) -> tuple[np.ndarray, list[str], list[str]]:
    """Hard anti-diagonal attention for reversing `word`: output i looks at source n-1-i."""
    src, tgt = [*word, "</s>"], list(reversed(word))
    weights = np.zeros((len(tgt), len(src)))
    weights[np.arange(len(word)), np.arange(len(word))[::-1]] = 1.0
    return weights, src, tgt


def test_heatmap_png_is_figsize_times_dpi_pixels(tmp_path):
    weights, src, tgt = reversal("hello")
    fig = plot.attention_heatmap(weights, src, tgt, title="hello")
    path = plot.save_png(fig, tmp_path / "nested" / "dir" / "hello.png", dpi=80)
    assert path == tmp_path / "nested" / "dir" / "hello.png"
    assert path.stat().st_size > 1000
    width_in, height_in = fig.get_size_inches()
    assert png_size(path) == (round(width_in * 80), round(height_in * 80))


def test_longer_sentences_get_a_larger_figure_not_smaller_cells():
    short = plot.attention_heatmap(*reversal("ab"))
    long = plot.attention_heatmap(*reversal("abcdefghijklmnopqrst"))
    (ws, hs), (wl, hl) = short.get_size_inches(), long.get_size_inches()
    # 18 more tokens each way: at least a quarter inch per extra token.
    assert wl - ws >= 18 * 0.25
    assert hl - hs >= 18 * 0.25


def test_heatmap_image_holds_the_weights_and_ticks_hold_the_tokens():
    rng = np.random.default_rng(0)
    weights = rng.dirichlet(np.ones(4), size=3)  # (T_tgt=3, T_src=4), rows sum to 1
    src, tgt = ["le", "chat", "noir", "</s>"], ["the", "black", "cat"]
    fig = plot.attention_heatmap(weights, src, tgt)
    ax = fig.axes[0]
    image = ax.images[0]
    np.testing.assert_array_equal(image.get_array(), weights)
    assert image.get_clim() == (0.0, 1.0)
    assert [t.get_text() for t in ax.get_xticklabels()] == src
    assert [t.get_text() for t in ax.get_yticklabels()] == tgt
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("source", "output")
    assert fig.axes[1].get_ylabel() == "α"  # the colorbar


def test_heatmap_accepts_a_nested_list_like_a_tensor_tolist():
    fig = plot.attention_heatmap([[0.25, 0.75]], ["a", "b"], ["x"])
    np.testing.assert_array_equal(fig.axes[0].images[0].get_array(), [[0.25, 0.75]])


def test_only_cells_above_the_threshold_are_annotated_in_readable_colours():
    weights = np.array([[0.95, 0.05, 0.0], [0.1, 0.4, 0.5]])
    fig = plot.attention_heatmap(weights, ["a", "b", "c"], ["x", "y"], annotate_above=0.3)
    texts = {(t.get_position(), t.get_text()): t.get_color() for t in fig.axes[0].texts}
    # Bright yellow cell -> dark text; dark teal/purple cells -> light text.
    assert texts == {
        ((0, 0), "0.95"): "black",
        ((1, 1), "0.40"): "white",
        ((2, 1), "0.50"): "white",
    }


@pytest.mark.parametrize(("n", "annotated"), [(30, 30), (31, 0)])
def test_only_matrices_up_to_30_tokens_are_annotated(n, annotated):
    tokens = [f"w{i}" for i in range(n)]
    fig = plot.attention_heatmap(np.eye(n), tokens, tokens)
    assert len(fig.axes[0].texts) == annotated


def test_tokens_are_shown_literally_not_as_mathtext(tmp_path):
    src, tgt = ["$x^$", "costs", "$5"], ["$y$", "_z_"]
    fig = plot.attention_heatmap(np.full((2, 3), 1 / 3), src, tgt)
    labels = fig.axes[0].get_xticklabels() + fig.axes[0].get_yticklabels()
    assert not any(label.get_parse_math() for label in labels)
    plot.save_png(fig, tmp_path / "dollars.png")  # "$x^$" is invalid mathtext if parsed


@pytest.mark.parametrize(
    ("weights", "src", "tgt"),
    [
        (np.zeros((3, 4)), ["a", "b", "c"], ["x", "y", "z"]),  # one source token short
        (np.zeros((4, 3)), ["a", "b", "c"], ["x", "y", "z"]),  # one output row too many
        (np.zeros(3), ["a", "b", "c"], ["x"]),  # 1-D
    ],
)
def test_shape_mismatch_raises_naming_weights_and_both_shapes(weights, src, tgt):
    with pytest.raises(ValueError, match="weights") as info:
        plot.attention_heatmap(weights, src, tgt)
    assert str(weights.shape) in str(info.value)
    assert str((len(tgt), len(src))) in str(info.value)


def test_heatmap_draws_into_a_given_axes_and_returns_its_figure():
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot()
    assert plot.attention_heatmap(*reversal("ab"), ax=ax) is fig
    assert len(ax.images) == 1


def test_grid_has_one_titled_image_per_panel():
    words = ["hello", "attention", "sequence", "outofdistributionstring"]
    panels = [(*reversal(word), word) for word in words]
    fig = plot.attention_grid(panels, ncols=2)
    heatmaps = [ax for ax in fig.axes if ax.images and ax.get_title()]
    assert [ax.get_title() for ax in heatmaps] == words
    cells = [
        (ax.get_subplotspec().rowspan.start, ax.get_subplotspec().colspan.start) for ax in heatmaps
    ]
    assert cells == [(0, 0), (0, 1), (1, 0), (1, 1)]  # row-major, two per row, no overlap
    for ax, (weights, *_) in zip(heatmaps, panels, strict=True):
        assert len(ax.images) == 1
        np.testing.assert_array_equal(ax.images[0].get_array(), weights)


def test_grid_rejects_no_panels():
    with pytest.raises(ValueError, match="panel"):
        plot.attention_grid([])


def test_loss_curves_draw_one_labelled_line_per_run_on_a_log_axis():
    curves = {"attention": ([0, 10, 20], [3.0, 1.0, 0.1]), "vanilla": ([0, 10], [3.0, 2.5])}
    fig = plot.loss_curves(curves)
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["attention", "vanilla"]
    for line, (steps, values) in zip(ax.get_lines(), curves.values(), strict=True):
        np.testing.assert_array_equal(line.get_xdata(), steps)
        np.testing.assert_array_equal(line.get_ydata(), values)
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["attention", "vanilla"]
    assert ax.get_yscale() == "log"
    assert plot.loss_curves(curves, log_y=False).axes[0].get_yscale() == "linear"


def test_loss_curves_with_unequal_lengths_raise_naming_the_run():
    with pytest.raises(ValueError, match="'vanilla'"):
        plot.loss_curves({"attention": ([0, 1], [2.0, 1.0]), "vanilla": ([0, 1, 2], [2.0, 1.0])})


def test_importing_plot_leaves_backend_and_rcparams_alone():
    # rcdefaults() first, so an import-time rcParams edit that the test session's first import
    # already made is made again, visibly, by the reload. rc_context undoes both afterwards.
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        backend = matplotlib.get_backend()
        rc_before = matplotlib.rcParams.copy()
        importlib.reload(plot)
        plot.attention_heatmap(*reversal("ab"))
        assert matplotlib.get_backend() == backend
        assert dict(matplotlib.rcParams) == dict(rc_before)


def test_a_fresh_import_and_use_never_import_pyplot_or_touch_rcparams(tmp_path):
    # A fresh interpreter: pyplot imported by another test in this process cannot hide it, and
    # the import really is the first. rcParams.copy() holds the backend as set, unresolved
    # (matplotlib.get_backend() would resolve it by importing pyplot), so use() shows up here.
    code = (
        "import sys, matplotlib, numpy as np\n"
        "before = matplotlib.rcParams.copy()\n"
        "import alignmt.analysis.plot as p\n"
        "fig = p.attention_heatmap(np.eye(2), ['a', 'b'], ['x', 'y'])\n"
        "p.save_png(fig, sys.argv[1])\n"
        "p.save_png(p.attention_grid([(np.eye(2), ['a', 'b'], ['x', 'y'], 't')]), sys.argv[1])\n"
        "p.save_png(p.loss_curves({'r': ([0, 1], [2.0, 1.0])}), sys.argv[1])\n"
        "p.save_png(p.bleu_by_length_plot({'r': ([2, 7], [30.0, 20.0])}), sys.argv[1])\n"
        "p.save_png(p.bucket_bars({'r': [('< 10', 30.0), ('> 20', None)]}), sys.argv[1])\n"
        "print(matplotlib.rcParams.copy() == before, 'matplotlib.pyplot' in sys.modules)\n"
    )
    src_dir = str(Path(plot.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src_dir, os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "out.png")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rc_unchanged, pyplot_imported = result.stdout.split()
    assert rc_unchanged == "True"
    assert pyplot_imported == "False"
    assert (tmp_path / "out.png").stat().st_size > 0


def test_bleu_by_length_draws_one_marked_line_per_run_from_zero(tmp_path):
    curves = {
        "attention": ([2.0, 7.0, 12.0], [30.0, 28.5, 27.0]),
        "vanilla": ([2.0, 7.0], [29.0, 15.0]),
    }
    fig = plot.bleu_by_length_plot(curves)
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["attention", "vanilla"]
    for line, (lengths, bleus) in zip(ax.get_lines(), curves.values(), strict=True):
        np.testing.assert_array_equal(line.get_xdata(), lengths)
        np.testing.assert_array_equal(line.get_ydata(), bleus)
        assert line.get_marker() not in (None, "None", "", " ")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["attention", "vanilla"]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("source length (tokens)", "BLEU")
    assert ax.get_ylim()[0] == 0.0
    path = plot.save_png(fig, tmp_path / "bleu_by_length.png", dpi=100)
    assert path.stat().st_size > 1000
    assert png_size(path) == (640, 400)


def test_bleu_by_length_with_unequal_lengths_raises_naming_the_run():
    with pytest.raises(ValueError, match="'vanilla'"):
        plot.bleu_by_length_plot({"attention": ([2], [30.0]), "vanilla": ([2, 7], [30.0])})


def bucket(name: str, bleu: float | None, sentences: int = 10) -> SimpleNamespace:
    """Stands in for evaluate.BucketScore, which plot must not need to import."""
    return SimpleNamespace(name=name, bleu=bleu, sentences=sentences)


def test_bucket_bars_group_one_labelled_bar_per_run_and_bucket(tmp_path):
    rows = {
        "attention": [bucket("< 10", 31.0), bucket("10–20", 27.24), bucket("> 20", 24.0)],
        "vanilla": [("< 10", 30.0), ("10–20", 21.0), ("> 20", 12.5)],  # plain pairs work too
    }
    fig = plot.bucket_bars(rows)
    ax = fig.axes[0]
    assert len(ax.patches) == 6
    heights = [p.get_height() for p in ax.patches]
    assert heights == [31.0, 27.24, 24.0, 30.0, 21.0, 12.5]
    # Within each bucket's slot the runs sit side by side, attention left of vanilla.
    centres = [p.get_x() + p.get_width() / 2 for p in ax.patches]
    np.testing.assert_allclose(centres, [-0.2, 0.8, 1.8, 0.2, 1.2, 2.2])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["< 10", "10–20", "> 20"]
    assert [t.get_text() for t in ax.texts] == ["31.0", "27.2", "24.0", "30.0", "21.0", "12.5"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["attention", "vanilla"]
    assert ax.get_ylim()[1] > 31.0  # room for the tallest bar's label
    path = plot.save_png(fig, tmp_path / "buckets.png", dpi=100)
    assert path.stat().st_size > 1000
    assert png_size(path) == (640, 400)


def test_an_empty_bucket_gets_no_bar_but_an_na_label():
    fig = plot.bucket_bars({"attention": [("< 10", 31.0), ("> 20", None)]})
    ax = fig.axes[0]
    assert len(ax.patches) == 1
    assert sorted(t.get_text() for t in ax.texts) == ["31.0", "n/a"]


def test_bucket_bars_reject_runs_with_different_buckets():
    with pytest.raises(ValueError, match="'vanilla'"):
        plot.bucket_bars({"attention": [("< 10", 31.0)], "vanilla": [("> 20", 12.0)]})
