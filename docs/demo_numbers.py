"""The demo's figures on the README and the getting-started page, written from its results.

    python docs/demo_numbers.py write            # the pages' figures, from docs/results/demo.json
    python docs/demo_numbers.py                  # exit 1 if a page differs from what write writes
    python docs/demo_numbers.py check RESULTS    # a fresh demo's results.json against the pages

docs/results/demo.json holds the results.json of the full demo under four float32 roundings
(benchmarks/demo_spread.py writes it). Each figure on the pages is the roundings' common
value or, where they differ, their range; nothing between the markers
`<!-- demo-numbers: NAME -->` and `<!-- /demo-numbers -->` is typed by hand. CI holds the
pages to the code: it runs the README's demo as written (docs/shell_blocks.py), and `check`
asks that each of its figures lies within TOLERANCE points of the range the pages show (a CPU
none of the four roundings imitates may round differently still), and each sharpening step
within one snapshot.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

from alignmt.experiments.demo import ORDER_NAME, ORDERS

ROOT = Path(__file__).resolve().parents[1]
SPREAD = ROOT / "docs/results/demo.json"
PAGES = ("README.md", "docs/getting-started.md")
TOLERANCE = 3.0  # percentage points outside the range shown
FRAGMENT = re.compile(r"(<!-- demo-numbers: (\S+) -->\n)(.*?)(<!-- /demo-numbers -->)", re.S)
METRICS = ("token_accuracy", "exact_match", "alignment")


def figures(results: dict) -> dict[str, float]:
    """Every figure the pages show, by a name: percentages, and sharpening steps."""
    found = {}
    for model in ("vanilla", "attention"):
        for row in results["scores"][model]:
            for metric in METRICS:
                if row[metric] is not None:
                    found[f"{model} {metric} at {row['length']}"] = 100 * row[metric]
    for model, score in results["alignment_error_rate"].items():
        for metric in ("aer", "precision", "recall"):
            found[f"{model} {metric}"] = 100 * score[metric]
    for model in ORDERS:
        curve = results["sharpening"][model]
        step = curve["sharpened_at"]
        if step is None:  # never sharp
            continue
        found[f"{model} sharpened at"] = float(step)
        k = curve["steps"].index(step)
        found[f"{model} share when sharp"] = 100 * curve["share"][k]
        if k:
            found[f"{model} share before"] = 100 * curve["share"][k - 1]
    return found


def ranges(spread: dict) -> dict[str, tuple[float, float]]:
    """Each figure's (lowest, highest) over the roundings."""
    each = [figures(r["results"]) for r in spread["roundings"].values()]
    return {name: (min(f[name] for f in each), max(f[name] for f in each)) for name in each[0]}


def percent(span: tuple[float, float]) -> str:
    low, high = (f"{value:.1f}" for value in span)
    return f"{low}%" if low == high else f"{low}–{high}%"


def as_is(spread: dict) -> dict:
    return spread["roundings"]["as is"]["results"]


def readme(spread: dict) -> str:
    span, results = ranges(spread), as_is(spread)
    low, high = results["train_lengths"]
    rows = ["| length | vanilla | attention |", "|---:|---:|---:|"]
    shown = [
        row["length"] for row in results["scores"]["attention"] if low <= row["length"] <= high
    ]
    for n in shown:
        cells = [percent(span[f"{m} exact_match at {n}"]) for m in ("vanilla", "attention")]
        rows.append(f"| {n} | {' | '.join(cells)} |")
    diagonal = [span[f"attention alignment at {n}"] for n in shown]
    on_diagonal = percent((min(s[0] for s in diagonal), max(s[1] for s in diagonal)))
    said = f"The attention model's argmax α lies on the anti-diagonal for {on_diagonal} of"
    said += f" positions at these lengths. {_source(spread)}"
    return "\n".join(rows) + f"\n\n{_wrap(said)}\n"


def full_table(spread: dict) -> str:
    span, results = ranges(spread), as_is(spread)
    low, high = results["train_lengths"]
    header = (
        "| length | vanilla TF per-token acc | vanilla greedy exact match | attention TF per-token"
        " acc | attention greedy exact match | attention argmax on anti-diagonal |\n"
        "|---:|---:|---:|---:|---:|---:|"
    )
    rows = [header]
    for row in results["scores"]["attention"]:
        n = row["length"]
        star = "" if low <= n <= high else "*"
        cells = [
            span[f"vanilla token_accuracy at {n}"],
            span[f"vanilla exact_match at {n}"],
            span[f"attention token_accuracy at {n}"],
            span[f"attention exact_match at {n}"],
            span[f"attention alignment at {n}"],
        ]
        rows.append(f"| {n}{star} | {' | '.join(map(percent, cells))} |")
    return "\n".join(rows) + f"\n\n{_wrap(_source(spread))}\n"


def alignment(spread: dict) -> str:
    span = ranges(spread)
    rows = ["| decoder order | AER | precision | recall |", "|---|---:|---:|---:|"]
    for model, order in ORDERS.items():
        cells = [percent(span[f"{model} {metric}"]) for metric in ("aer", "precision", "recall")]
        rows.append(f"| {ORDER_NAME[order]} | {' | '.join(cells)} |")
    return "\n".join(rows) + "\n"


def sharpening(spread: dict) -> str:
    """When each order sharpened: a step, or, where the roundings differ, each step with how
    many sharpened there."""
    results, roundings = as_is(spread), spread["roundings"].values()
    every = results["sharpening"]["attention"]["steps"][1]
    said = []
    for model, order in ORDERS.items():
        by_step: dict[float, list[dict]] = {}
        for rounding in roundings:
            found = figures(rounding["results"])
            by_step.setdefault(found.get(f"{model} sharpened at", -1.0), []).append(found)
        parts = []
        for step, found in sorted(by_step.items()):
            share = percent(_span(found, f"{model} share when sharp"))
            before = _span(found, f"{model} share before")
            up = f", up from {percent(before)} at step {step - every:.0f}" if before else ""
            many = "" if len(by_step) == 1 else f" in {len(found)} of {len(roundings)} roundings"
            parts.append(f"at step {step:.0f}{many} ({share}{up})" if step >= 0 else "never")
        said.append(f"{order} order {', and '.join(parts)}")
    return (
        _wrap(
            f"> Attention sharpened (argmax on the anti-diagonal for ≥"
            f" {results['sharpening']['threshold']:.0%} of positions, lengths"
            f" {', '.join(map(str, results['alignment_lengths']))}, snapshots every {every} steps):"
            f" {'; '.join(said)}."
        ).replace("\n", "\n> ")
        + "\n"
    )


def _span(found: list[dict], name: str) -> tuple[float, float] | None:
    values = [f[name] for f in found if name in f]
    return (min(values), max(values)) if values else None


def times(spread: dict) -> str:
    results, machine = as_is(spread), spread["machine"]
    took, seconds = results["train_seconds"], results["seconds"]
    return (
        _wrap(
            f"On {machine['cores']} cores of an {machine['cpu']} ({machine['date']}), training"
            " took "
            f"{took['vanilla']:.1f} s (vanilla), {took['attention']:.1f} s (attention) and "
            f"{took['attention_luong']:.1f} s (Luong order), and the demo {_minutes(seconds)}"
            " in all, scoring and plots included."
        )
        + "\n"
    )


def _source(spread: dict) -> str:
    machine = spread["machine"]
    return (
        f"Each figure is the demo's own, on {machine['cores']} cores of an {machine['cpu']};"
        f" a range is where {len(spread['roundings'])} float32 roundings of the same run differ,"
        " as CPUs do (`benchmarks/demo_spread.py`), and CI reruns the demo and holds it to"
        f" these ranges within {TOLERANCE:.0f} points. The demo took"
        f" {_minutes(as_is(spread)['seconds'])} there."
    )


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=96, break_on_hyphens=False)


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:.0f} s"


RENDER = {
    "readme": readme,
    "table": full_table,
    "alignment": alignment,
    "sharpening": sharpening,
    "times": times,
}


def written(page: str, spread: dict) -> str:
    """The page with every fragment written from `spread`."""
    text = (ROOT / page).read_text()

    def fill(match: re.Match) -> str:  # blank lines keep a table apart from the markers
        return f"{match.group(1)}\n{RENDER[match.group(2)](spread)}\n{match.group(4)}"

    return FRAGMENT.sub(fill, text)


def check(fresh: dict, spread: dict) -> list[str]:
    """The fresh demo's figures that lie outside the pages' ranges by more than the
    tolerance (a snapshot, for a step)."""
    every = as_is(spread)["sharpening"]["attention"]["steps"][1]
    outside, found = [], figures(fresh)
    for name, (low, high) in ranges(spread).items():
        slack = every if name.endswith("sharpened at") else TOLERANCE
        value = found.get(name)
        if value is None or not low - slack <= value <= high + slack:
            said = "none" if value is None else f"{value:.1f}"
            outside.append(f"{name}: {said}, the pages say {low:.1f}–{high:.1f}")
    return outside


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    spread = json.loads(SPREAD.read_text())
    if argv == ["write"]:
        for page in PAGES:
            (ROOT / page).write_text(written(page, spread))
        return 0
    if argv[:1] == ["check"] and len(argv) == 2:
        outside = check(json.loads(Path(argv[1]).read_text()), spread)
        print("\n".join(outside) or f"the demo's figures lie within the pages' ranges ({argv[1]})")
        return 1 if outside else 0
    if argv:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    stale = [page for page in PAGES if written(page, spread) != (ROOT / page).read_text()]
    print(
        "\n".join(f"{page}: not as `python docs/demo_numbers.py write` writes it" for page in stale)
    )
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
