"""Is attention an explanation? Attention beside attribution on trained runs, scored on their
test set (test_2016_flickr for the Multi30k recipe):

- AER against eflomal of each method's teacher-forced argmax links (`alignmt evaluate
  --reference-aligner eflomal --alignment-from METHOD`): attention, shift-att, gradient x
  input, integrated gradients, erasure;
- Kendall's tau between each step's attention and each attribution over the source tokens,
  the references teacher-forced (the mean over target tokens, and the share above 0.5);
- the counterfactual: how often a step of the greedy output writes another word when its
  attention is moved to the word attention ranks second (the explorer's what-if).

    python benchmarks/attribution.py runs/sparse/softmax runs/local/global runs/cgru
    python benchmarks/attribution.py RUN --limit 200     # the first 200 test pairs

Run from the repository root after `alignmt data get multi30k`, with eflomal installed
(`pip install -e '.[align]'`). Prints two markdown tables.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from alignmt.analysis.align import eflomal_reference_links
from alignmt.analysis.attribution import METHODS
from alignmt.analysis.evaluation import read_test_set
from alignmt.analysis.explanation import compare_words, greedy_flips
from alignmt.decoding.door import open_translator
from alignmt.text.links import sentence_words


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR")
    parser.add_argument("--limit", type=int, default=0, help="the first N test pairs; 0: all")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    aer_rows, flip_rows = [], []
    for run in args.runs:
        name, aers, taus, (flipped, tried) = measure(Path(run), args.limit, args.batch_size)
        aer_rows += [(name, method, aers[method], taus.get(method)) for method in METHODS]
        flip_rows.append((name, flipped, tried))
    print("| run | links from | AER vs eflomal | Kendall tau with attention | tau > 0.5 |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, method, aer, tau in aer_rows:
        mean = "—" if tau is None else f"{np.mean(tau):.3f}"
        high = "—" if tau is None else f"{np.mean(tau > 0.5):.1%}"
        print(f"| {name} | {method} | {aer:.3f} | {mean} | {high} |")
    print()
    print("| run | greedy steps tried | word changed with attention on the second word |")
    print("| --- | ---: | ---: |")
    for name, flipped, tried in flip_rows:
        print(f"| {name} | {tried:,} | {flipped / tried:.1%} |")


def measure(run: Path, limit: int, batch_size: int):
    """(the run's name and order, AER per method, taus per attribution, (flipped, tried))."""
    translator = open_translator(run, device="cpu")
    config = translator.origin.header.config
    src, ref = read_test_set(config.data, str(run), "a test set")
    if limit:
        src, ref = src[:limit], ref[:limit]
    sources = [sentence_words(translator.src_tokenizer, line) for line in src]
    references = [sentence_words(translator.tgt_tokenizer, line) for line in ref]
    golds = eflomal_reference_links(
        config.data, translator, [s.words for s in sources], [r.words for r in references]
    )

    def progress(done: int, total: int) -> None:
        print(f"{run.name}: {done:,} of {total:,} pairs", flush=True)

    found = compare_words(translator, sources, references, batch_size=batch_size, progress=progress)
    flips = greedy_flips(translator, src, batch_size=batch_size)
    return f"{run.name} ({config.model.order})", found.aer(golds), found.taus, flips


if __name__ == "__main__":
    main()
