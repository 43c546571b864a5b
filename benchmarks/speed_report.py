"""The tables benchmarks/speed.py prints: its rows, a column per decoding path, and the
arithmetic beside them."""

from __future__ import annotations

import argparse


def training_rows(speed, args: argparse.Namespace) -> list[tuple[str, ...]]:
    if speed is None:
        return []
    return [
        (
            f"training, target tokens/s (median of {args.interval}-step intervals after "
            f"{args.warmup})",
            f"{speed.tokens_per_s:,.0f}",
        ),
        ("training peak RSS", f"{speed.peak_rss_mib:,.0f} MiB"),
    ]


def decoding_rows(decoded, caps, valid, paths, score) -> list[tuple[str, ...]]:
    """Sentences/s, BLEU and the share of the float32 cap of each search, a column per path;
    `score(outputs)` is the test set's BLEU."""
    names = list(caps)

    def per_path(cell) -> tuple[str, ...]:
        return tuple(cell(path) for path in paths)

    rows = [
        (
            f"{name}, sentences/s (batch 64, median of 3)",
            *per_path(lambda p, n=name: f"{decoded[n, p][0]:,.1f}"),
        )
        for name in names
    ]
    rows += [
        (
            f"{name}, share of the float32 cap",
            *per_path(lambda p, n=name: f"{decoded[n, p][0] / caps[n]:.0%}"),
        )
        for name in names
    ]
    scores = lambda p: " / ".join(  # noqa: E731
        f"{score(decoded[n, p][1]):.2f}" for n in names
    )
    rows.append(("BLEU lc test, greedy / beam 5", *per_path(scores)))
    if valid:
        rows.append(
            (
                "BLEU lc val, greedy / beam 5",
                *per_path(lambda p: " / ".join(f"{valid[n, p]:.2f}" for n in names)),
            )
        )
    return rows
