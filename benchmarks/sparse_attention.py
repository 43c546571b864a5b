"""Softmax, sparsemax and 1.5-entmax attention on Multi30k English→German, one sitting: train
the 15-minute recipe (configs/multi30k_en_de.yaml) with each `model.attention_fn`, then score
each on test_2016_flickr: lowercased BLEU (beam 5), AER of its teacher-forced argmax
alignments against eflomal's, and the share of attention weights (over real source tokens,
of every output token of the beam's best translations) that are exactly zero.

    python benchmarks/sparse_attention.py                       # ~50 minutes on 2 CPU cores
    python benchmarks/sparse_attention.py --skip-training       # score runs/sparse/* again

Run from the repository root after `alignmt data get multi30k`, with nothing else using the
CPU. Prints a markdown table; the runs are in runs/sparse/FN.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

from alignmt.analysis.align import alignment_error_rate, eflomal_reference_links, word_links
from alignmt.analysis.evaluation import read_test_set, translate_and_score
from alignmt.decoding.door import open_translator
from alignmt.text.links import sentence_words

FNS = ("softmax", "sparsemax", "entmax15")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/sparse", help="where the runs go")
    parser.add_argument("--skip-training", action="store_true", help="score existing runs")
    args = parser.parse_args()
    rows = []
    for fn in FNS:
        run = Path(args.out) / fn
        if not args.skip_training:
            train(run, fn)
        rows.append(score(run, fn))
    print("| model.attention_fn | steps | BLEU lc (beam 5) | AER vs eflomal | weights exactly 0 |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for fn, steps, bleu, aer, zeros in rows:
        print(f"| {fn} | {steps:,} | {bleu:.1f} | {aer:.3f} | {zeros:.1%} |")


def train(run: Path, fn: str) -> None:
    command = [sys.executable, "-m", "alignmt", "train", "multi30k_en_de"]
    command += [f"model.attention_fn={fn}", f"out_dir={run}", "--overwrite"]
    print(" ".join(command[1:]), file=sys.stderr, flush=True)
    subprocess.run(command, check=True)


def score(run: Path, fn: str) -> tuple[str, int, float, float, float]:
    """(fn, steps trained, lowercased BLEU, AER against eflomal, share of zero weights)."""
    translator = open_translator(run)  # the config's search: beam 5
    config = translator.origin.header.config
    src, ref = read_test_set(config.data, str(run), "a test set")
    result, best = translate_and_score(fn, translator, src, ref, config.data.tgt_lang)
    weights = np.concatenate([t.attention[:, : len(t.src_tokens)].ravel() for t in best])
    sources = [sentence_words(translator.src_tokenizer, line) for line in src]
    references = [sentence_words(translator.tgt_tokenizer, line) for line in ref]
    hyps = word_links(translator, sources, references)
    links = eflomal_reference_links(
        config.data, translator, [s.words for s in sources], [r.words for r in references]
    )
    aer = alignment_error_rate(hyps, links, links).aer
    steps = translator.origin.header.step
    return fn, steps, result.lowercased.bleu, aer, float((weights == 0).mean())


if __name__ == "__main__":
    main()
