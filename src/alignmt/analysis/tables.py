"""Markdown tables of scores: corpus BLEU and chrF per run, BLEU per source-length bucket,
and how far each run trails the first, bucket by bucket."""

from __future__ import annotations

from collections.abc import Sequence

from alignmt.analysis.scores import BucketScore, CorpusScores


def _markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    # Run names left-aligned, numbers right-aligned.
    lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def format_scores_table(rows: dict[str, tuple[CorpusScores, CorpusScores]]) -> str:
    """A markdown table of corpus scores, one row per run, with the signatures below it.

    Columns: run | BLEU lc | BLEU cased | chrF cased | sentences, scores to one decimal.
    Below the table, one "BLEU lc signature: ...", "BLEU cased signature: ..." and
    "chrF cased signature: ..." line per distinct signature (normally one each).

    Args:
        rows: run name -> (lowercased scores, cased scores) of that run on one test set.

    Returns:
        The table and signature lines, newline-separated, without a trailing newline.

    Raises:
        ValueError: if `rows` is empty, a pair is not (lowercased, cased) in that order, or
            its two halves count different sentences.
    """
    if not rows:
        raise ValueError("rows is empty; need at least one run")
    table, signatures = [], {}
    for name, (lc, cased) in rows.items():
        if not lc.lowercase or cased.lowercase:
            raise ValueError(
                f"run {name!r}: expected (lowercased, cased) scores; got lowercase="
                f"({lc.lowercase}, {cased.lowercase})"
            )
        if lc.sentences != cased.sentences:
            raise ValueError(
                f"run {name!r}: lowercased scores cover {lc.sentences} sentences but cased "
                f"scores {cased.sentences}; both must come from the same test set"
            )
        table.append(
            [name, f"{lc.bleu:.1f}", f"{cased.bleu:.1f}", f"{cased.chrf:.1f}", str(cased.sentences)]
        )
        # A dict keeps first-seen order and drops duplicates: one line per distinct signature.
        signatures[("BLEU lc", lc.bleu_signature)] = None
        signatures[("BLEU cased", cased.bleu_signature)] = None
        signatures[("chrF cased", cased.chrf_signature)] = None
    header = ["run", "BLEU lc", "BLEU cased", "chrF cased", "sentences"]
    lines = [f"{kind} signature: {signature}" for kind, signature in signatures]
    return _markdown_table(header, table) + "\n\n" + "\n".join(lines)


def format_bucket_table(rows: dict[str, list[BucketScore]]) -> str:
    """A markdown table of BLEU per source-length bucket, one row per run.

    Columns: run, then one per bucket; each cell holds the BLEU to one decimal and the
    bucket's sentence count, e.g. "23.4 (n=120)", or "– (n=0)" for an empty bucket.

    Args:
        rows: run name -> that run's `bucket_scores`, all with the same buckets.

    Returns:
        The table, newline-separated, without a trailing newline.

    Raises:
        ValueError: if `rows` is empty or the runs' bucket names differ.
    """
    names = _bucket_names(rows)
    table = []
    for run, buckets in rows.items():
        cells = [
            ("–" if b.bleu is None else f"{b.bleu:.1f}") + f" (n={b.sentences})" for b in buckets
        ]
        table.append([run, *cells])
    return _markdown_table(["run", *names], table)


def format_gap_table(rows: dict[str, list[BucketScore]]) -> str:
    """How far each run trails the first, per source-length bucket: a markdown table with
    one row per run after the first.

    Each cell is the first run's BLEU minus the run's, then the run's BLEU as a share of
    the first's, e.g. "14.2 (61%)"; "–" where a bucket is empty or the first run scores 0.
    Bahdanau et al. (2015, figure 2) see the gap between a model without attention and one
    with it grow with sentence length; the share tells the same story where every model
    scores lower on long sentences.

    Args:
        rows: run name -> that run's `bucket_scores`, all with the same buckets; the first
            run is the one the others are measured against.

    Returns:
        The table, newline-separated, without a trailing newline.

    Raises:
        ValueError: if there are fewer than two runs or the runs' bucket names differ.
    """
    names = _bucket_names(rows)
    if len(rows) < 2:
        raise ValueError(f"rows has {len(rows)} run; need the first run and one to compare")
    (_, first), *others = rows.items()
    table = []
    for run, buckets in others:
        cells = []
        for ref, b in zip(first, buckets, strict=True):
            usable = ref.bleu is not None and b.bleu is not None and ref.bleu > 0
            cells.append(f"{ref.bleu - b.bleu:.1f} ({b.bleu / ref.bleu:.0%})" if usable else "–")
        table.append([run, *cells])
    return _markdown_table(["run", *names], table)


def _bucket_names(rows: dict[str, list[BucketScore]]) -> list[str]:
    """The bucket names every run shares; a ValueError if `rows` is empty or they differ."""
    if not rows:
        raise ValueError("rows is empty; need at least one run")
    names = [b.name for b in next(iter(rows.values()))]
    for run, buckets in rows.items():
        if [b.name for b in buckets] != names:
            raise ValueError(
                f"run {run!r} has buckets {[b.name for b in buckets]}; expected {names} "
                "like the first run"
            )
    return names
