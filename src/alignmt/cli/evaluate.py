"""`alignmt evaluate RUN_DIR`: BLEU and chrF of a test set, by source length, with plots and
heatmaps; or, with --gold-alignments / --reference-aligner, the attention scored as word
alignment (precision, recall and AER; Och & Ney 2003)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from alignmt.analysis.align import alignment_error_rate, eflomal_reference_links, word_links
from alignmt.analysis.coverage import COVERED, CoverageRates, coverage_rates
from alignmt.analysis.evaluation import read_test_set, translate_and_score
from alignmt.analysis.plot import (
    attention_heatmap,
    bleu_by_length_plot,
    bucket_bars,
    save_png,
    weights_grid,
)
from alignmt.analysis.scores import Evaluation, sentence_bleu_d2l
from alignmt.analysis.tables import format_bucket_table, format_gap_table, format_scores_table
from alignmt.cli.translate import translator_for
from alignmt.config import Config
from alignmt.decoding.door import open_translator
from alignmt.decoding.results import Translation
from alignmt.decoding.translator import Translator
from alignmt.model.attention.registry import compose
from alignmt.text.corpus import CorpusError, read_lines
from alignmt.text.links import Link, import_eflomal, read_alignments, sentence_words
from alignmt.text.vocab import EOS

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def load_test_set(
    args: argparse.Namespace, run_dir: str, cfg: Config
) -> tuple[list[str], list[str], str]:
    """(sources, references, source language) from --src/--ref or the data.test of the run
    in `run_dir`, whose config is `cfg`."""
    if bool(args.src) != bool(args.ref):
        raise ValueError("--src and --ref go together")
    if args.src:
        src, ref = read_lines(args.src), read_lines(args.ref)
        if len(src) != len(ref):
            raise CorpusError(f"{args.src} has {len(src)} lines but {args.ref} has {len(ref)}")
        return src, ref, cfg.data.src_lang
    return (*read_test_set(cfg.data, run_dir, "--src and --ref"), cfg.data.src_lang)


def run(args: argparse.Namespace) -> int:
    if args.gold_alignments or args.reference_aligner:
        return run_alignment_evaluation(args)
    if args.alignment_from:
        raise ValueError(
            "--alignment-from chooses the links that --gold-alignments or "
            "--reference-aligner score: give one of them"
        )
    run_dir = args.run_dirs[0]  # an ensemble's first run names its test set and folder
    translator = translator_for(args.run_dirs, args)
    src, ref, lang = load_test_set(args, run_dir, translator.origin.header.config)
    beyond = [number for number in args.heatmaps if number > len(src)]
    if beyond:  # said before translating the whole test set, not after
        raise ValueError(f"--heatmaps: the test set has {len(src)} lines, not {beyond[0]}")
    name = "+".join(Path(run).name for run in args.run_dirs)
    result, best = translate_and_score(name, translator, src, ref, lang, args.batch_size)
    out = Path(args.out or Path(run_dir) / ("eval" if len(args.run_dirs) == 1 else "eval_ensemble"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "hyps.txt").write_text("".join(h + "\n" for h in result.hyps))
    coverage = coverage_rates(best)
    scores = result.as_dict() | {"coverage": asdict(coverage)}
    (out / "scores.json").write_text(json.dumps(scores, indent=2) + "\n")
    print_scores({name: result}, translator.search.beam_size)
    print_coverage(coverage)
    files = write_plots({name: result}, out)
    for number in args.heatmaps:
        fig = _heatmap(translator, src[number - 1], best[number - 1], f"line {number}")
        files.append(save_png(fig, out / f"heatmap_{number}.png"))
    if args.sentence_bleu:
        _print_sentence_bleu(translator, src, ref, best)
    if args.attention:
        _dump_attention(Path(args.attention), best)
        files.append(Path(args.attention))
    written = [out / "hyps.txt", out / "scores.json", *files]
    print("\nWritten: " + ", ".join(str(f) for f in written))
    return 0


def _heatmap(translator: Translator, line: str, best: Translation, title: str) -> Figure:
    """The attention of `line`'s translation `best`; for one model that shows weights beside
    it (heads, copying), those too, stepping through the decoder (which records them) with
    its beam."""
    if best.attention is None:
        raise ValueError(f"--heatmaps: {title} has no attention to draw")
    composition = compose(translator.origin.header.config.model)
    stepping = "stepping through the decoder" in translator.engine.features  # not ensembles
    if composition is None or not composition.weights or not stepping:
        return attention_heatmap(best.attention, best.src_tokens, best.tokens, title=title)
    stepped = translator.step_through(line, beam_size=translator.search.beam_size)
    shown = composition.weights[0]
    out, weights = stepped.translation, stepped.weights(shown.slot)
    return weights_grid(out.attention, weights, out.src_tokens, out.tokens, shown.label, title)


def run_alignment_evaluation(args: argparse.Namespace) -> int:
    """Precision, recall and AER of the attention's alignments of the test set (Och & Ney
    2003) against gold links and/or eflomal's; nothing is translated."""
    if len(args.run_dirs) > 1:
        raise ValueError("--gold-alignments and --reference-aligner score one run, not an ensemble")
    run_dir = args.run_dirs[0]
    if args.heatmaps or args.attention or args.sentence_bleu:
        raise ValueError(
            "--heatmaps, --attention and --sentence-bleu need translations: "
            "run them without --gold-alignments and --reference-aligner"
        )
    if args.reference_aligner:
        try:  # before any work, so that a missing install fails at once
            import_eflomal()
        except ImportError as error:
            raise ValueError(str(error)) from None
    translator = open_translator(run_dir, device=args.device, precision=args.precision)
    config = translator.origin.header.config
    src, ref, _ = load_test_set(args, run_dir, config)
    sources = [sentence_words(translator.src_tokenizer, line) for line in src]
    references = [sentence_words(translator.tgt_tokenizer, line) for line in ref]
    method = args.alignment_from or "attention"
    hyps = word_links(translator, sources, references, batch_size=args.batch_size, method=method)
    golds: dict[str, tuple[list[set[Link]], list[set[Link]]]] = {}
    if args.gold_alignments:
        lengths = [(len(s.words), len(r.words)) for s, r in zip(sources, references, strict=True)]
        pairs_from = f"{args.src} + {args.ref}" if args.src else config.data.test
        golds[args.gold_alignments] = read_alignments(
            args.gold_alignments,
            lengths=lengths,
            pairs_from=pairs_from,
            gold_format=args.gold_format,
        )
    if args.reference_aligner:
        start = time.perf_counter()
        links = eflomal_reference_links(
            config.data,
            translator,
            [s.words for s in sources],
            [r.words for r in references],
            progress=lambda stage: print(
                f"[{time.perf_counter() - start:5.1f} s] {stage}", file=sys.stderr, flush=True
            ),
        )
        golds["eflomal (forward links, all sure)"] = (links, links)
    _print_alignment_scores(f"{FROM[method]} of {Path(run_dir).name}", hyps, golds)
    return 0


# how each --alignment-from names its links
FROM = {
    "attention": "Attention",
    "shift": "Attention one step later (shift-att)",
    "gradient": "Gradient x input",
    "integrated": "Integrated gradients",
    "erasure": "Erasure",
}


def _print_alignment_scores(
    what: str, hyps: list[set[Link]], golds: dict[str, tuple[list[set[Link]], list[set[Link]]]]
) -> None:
    print(
        f"{what}, teacher-forced argmax over {len(hyps):,} sentence pairs "
        f"({sum(map(len, hyps)):,} links):\n"
    )
    print("| reference | sure links | sure + possible | precision | recall | AER |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, (sures, possibles) in golds.items():
        score = alignment_error_rate(hyps, sures, possibles)
        print(
            f"| {name} | {sum(map(len, sures)):,} | {sum(map(len, possibles)):,} | "
            f"{score.precision:.1%} | {score.recall:.1%} | {score.aer:.1%} |"
        )
    print(
        "\nA: the attention's links, S: sure, P: sure + possible; counts summed over the "
        "corpus (Och & Ney 2003): precision |A∩P|/|A|, recall |A∩S|/|S|, "
        "AER 1 - (|A∩S| + |A∩P|)/(|A| + |S|)"
    )


def print_scores(results: dict[str, Evaluation], beam: int | None) -> None:
    print(format_scores_table({n: (r.lowercased, r.cased) for n, r in results.items()}))
    print("\nLowercased BLEU by source length (Moses tokens):\n")
    buckets = {n: r.buckets for n, r in results.items()}
    print(format_bucket_table(buckets))
    if len(results) > 1:
        first = next(iter(results))
        print(f"\nHow far each run trails {first}: its BLEU minus theirs (their share of it):\n")
        print(format_gap_table(buckets))
    times = ", ".join(f"{n} {r.seconds:.1f} s" for n, r in results.items())
    print(f"\nTranslation time (beam {beam or 'from config'}): {times}")


def print_coverage(rates: CoverageRates) -> None:
    """The over- and under-translation rates (`analysis.coverage`) of one run's outputs."""
    under = (
        "no attention to read"
        if rates.under is None
        else f"{rates.under:.1%} of {rates.source_tokens:,} source tokens get under "
        f"{COVERED} of attention in all"
    )
    print(
        f"\nCoverage: over-translation {rates.over:.1%} of outputs repeat a bigram more often "
        f"than their source; under-translation {under}"
    )


def write_plots(results: dict[str, Evaluation], out: Path) -> list[Path]:
    buckets = bucket_bars({n: r.buckets for n, r in results.items()})
    curves = bleu_by_length_plot({n: r.curve for n, r in results.items()})
    return [save_png(buckets, out / "buckets.png"), save_png(curves, out / "bleu_by_length.png")]


def _print_sentence_bleu(
    translator: Translator, src: list[str], ref: list[str], best: list[Translation]
) -> None:
    """The d2l book's printout, `source => [tokens], bleu`, with its BLEU over the target
    tokenizer's tokens (so "J'ai perdu." and "j'ai perdu ." match, as in d2l)."""
    print()
    for line, reference, t in zip(src, ref, best, strict=True):
        hyp = [tok for tok in t.tokens if tok != EOS]
        label = " ".join(translator.tgt_tokenizer.encode(reference))
        print(f"{line} => {hyp}, bleu {sentence_bleu_d2l(' '.join(hyp), label):.3f}")


def _dump_attention(path: Path, best: list[Translation]) -> None:
    rows = [
        {
            "line": i + 1,
            "source": t.src_tokens,
            "output": t.tokens,
            "attention": None if t.attention is None else t.attention.round(decimals=4).tolist(),
        }
        for i, t in enumerate(best)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, ensure_ascii=False) + "\n")
