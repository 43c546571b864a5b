"""The `alignmt` command: demo, train, translate, evaluate, compare, serve, explore.

The only module that prints to stdout and the only one that imports everything. Each
subcommand builds a `Config` (defaults < YAML file < `key.path=value` overrides, with the
friendly flags below turned into overrides) and hands it to the library.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import fields, replace
from pathlib import Path

import torch

from alignmt.analysis.align import (
    Link,
    alignment_error_rate,
    eflomal_reference_links,
    import_eflomal,
    read_alignments,
    sentence_words,
    word_links,
)
from alignmt.analysis.plot import attention_heatmap, bleu_by_length_plot, bucket_bars, save_png
from alignmt.analysis.scores import Evaluation, score_translations, sentence_bleu_d2l
from alignmt.analysis.tables import format_bucket_table, format_gap_table, format_scores_table
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.config import ConfigError, apply_overrides, dump_config, load_config
from alignmt.decoding.translator import Translation, Translator
from alignmt.experiments.demo import run_demo
from alignmt.model.allocator import keep_freed_memory
from alignmt.model.device import DEVICES, PRECISIONS, pick_device
from alignmt.serve.limits import Limits
from alignmt.text.corpus import CorpusError, input_lines, read_lines
from alignmt.text.split import read_split
from alignmt.text.tokenize import MosesTokenizer
from alignmt.text.vocab import EOS
from alignmt.training.distributed import PeerLost
from alignmt.training.loop import TrainingError, train


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    if args.run is not run_serve_command:
        # 10-15% faster training on CPU (see allocator.py); a server's memory must stay flat
        keep_freed_memory()
    try:
        return args.run(args)
    except (ConfigError, CorpusError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (TrainingError, PeerLost, OSError) as error:  # started, then could not go on
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as stop:  # the demo, stopped between its runs
        print(f"interrupted{f' ({stop})' if str(stop) else ''}", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="alignmt",
        description="Attention-based RNN encoder-decoders (Bahdanau et al. 2015, Luong 2015).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="attention vs. vanilla seq2seq on string reversal (no data needed)",
        description="Train a vanilla and an attention model on a synthetic task, print their "
        "accuracy by length, and write heatmaps, loss curves and the attention checkpoint.",
    )
    demo.add_argument("--task", choices=["reverse", "copy", "sort"], help="default: reverse")
    demo.add_argument(
        "--lengths", type=_length_range, metavar="MIN-MAX",
        help="training string lengths (default 3-10)",
    )  # fmt: skip
    demo.add_argument(
        "--eval-lengths", type=_positive_list, default=[3, 5, 7, 10, 15, 20], metavar="N,N,...",
        help="lengths to score",
    )  # fmt: skip
    demo.add_argument("--samples", type=_positive, default=500, help="strings scored per length")
    demo.add_argument("--steps", type=_positive, help="training steps per model (default 2000)")
    demo.add_argument("--attention", choices=["additive", "dot", "general", "concat", "scaled_dot"])
    demo.add_argument("--cell", choices=["gru", "lstm"], help="recurrent cell (default gru)")
    demo.add_argument("--out", default="runs/demo", help="output folder (default runs/demo)")
    demo.add_argument("--seed", type=int, help="random seed (default 1)")
    demo.add_argument(
        "--device", choices=["auto", "cpu", "cuda"],
        help="where the models train and are scored (train.device; default auto: CUDA when "
        "present)",
    )  # fmt: skip
    demo.add_argument("overrides", nargs="*", metavar="key.path=value", help="config overrides")
    demo.set_defaults(run=run_demo_command)

    train_cmd = commands.add_parser("train", help="train a model from a YAML config")
    train_cmd.add_argument("config", help="YAML file, e.g. configs/reverse.yaml")
    train_cmd.add_argument("overrides", nargs="*", metavar="key.path=value")
    train_cmd.add_argument(
        "--print-config", action="store_true", help="print the resolved config and stop"
    )
    start = train_cmd.add_mutually_exclusive_group()
    start.add_argument(
        "--resume", action="store_true", help="continue the run in out_dir from last.safetensors"
    )
    start.add_argument(
        "--overwrite", action="store_true",
        help="start afresh in an out_dir that holds a run, deleting its checkpoints and logs",
    )  # fmt: skip
    train_cmd.set_defaults(run=run_train_command)

    translate = commands.add_parser("translate", help="translate stdin line by line to stdout")
    _add_run_options(translate)
    translate.add_argument(
        "--nbest", type=_positive, default=1, help="hypotheses per line, tab-joined"
    )
    translate.add_argument(
        "--alignment", action="store_true",
        help="after each hypothesis, a tab and its hard alignment (Pharaoh source-output pairs)",
    )  # fmt: skip
    translate.set_defaults(run=run_translate_command)

    evaluate = commands.add_parser(
        "evaluate", help="BLEU and chrF (lowercased and cased), length buckets, heatmaps"
    )
    _add_run_options(evaluate)
    _add_test_options(evaluate)
    evaluate.add_argument("--attention", metavar="FILE", help="write every alignment as JSON")
    evaluate.add_argument(
        "--heatmaps",
        type=_positive_list,
        default=[],
        metavar="N,N,...",
        help="source line numbers to draw (1-based)",
    )
    evaluate.add_argument(
        "--sentence-bleu", action="store_true",
        help="also print each line with the seeds' d2l sentence BLEU (k=2) on its tokens",
    )  # fmt: skip
    evaluate.add_argument(
        "--gold-alignments", metavar="FILE",
        help="instead of BLEU, score the attention's teacher-forced argmax links against these "
        "(Pharaoh: i-j sure, i?j possible; word indices as the model tokenizes)",
    )  # fmt: skip
    evaluate.add_argument(
        "--reference-aligner", choices=["eflomal"],
        help="instead of BLEU, score them against eflomal's links, learnt on data.train + "
        "the test set",
    )  # fmt: skip
    evaluate.set_defaults(run=run_evaluate_command)

    compare = commands.add_parser("compare", help="score several runs on one test set, with plots")
    compare.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    compare.add_argument("--beam", type=_positive, help="beam size (default: each run's config)")
    compare.add_argument("--batch-size", type=_positive, default=64)
    compare.add_argument("--replace-unk", action="store_true", help=_REPLACE_UNK)
    _add_test_options(compare)
    _add_device_options(compare)
    compare.set_defaults(run=run_compare_command)

    serve = commands.add_parser(
        "serve", help="serve models over HTTP: translations, steps, beams, attention",
        description="A FastAPI service of the run folders given, each named by its folder. "
        "The API is described at http://HOST:PORT/docs.",
    )  # fmt: skip
    serve.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="the first is the default")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8000, help="default 8000")
    for limit in fields(Limits):
        serve.add_argument(
            "--" + limit.name.replace("_", "-"), default=limit.default,
            type=_seconds if isinstance(limit.default, float) else _positive,
            metavar="SECONDS" if isinstance(limit.default, float) else "N",
            help=f"{limit.metadata['help']} (default {limit.default})",
        )  # fmt: skip
    _add_device_options(serve)
    serve.set_defaults(run=run_serve_command)

    explore = commands.add_parser(
        "explore", help="write the explorer as one HTML page that needs no server",
        description="Decode each input sentence with each run (step by step with candidates, "
        "and the beam) and write the explorer with all of it inline: one file that opens "
        "offline. What-if (forcing a token, moving attention) needs `alignmt serve`.",
    )  # fmt: skip
    explore.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="several: side by side")
    explore.add_argument("--input", required=True, metavar="FILE", help="one sentence per line")
    explore.add_argument("--out", required=True, metavar="PAGE.html", help="the page to write")
    explore.add_argument(
        "--beam", type=_positive, help="beam size of the beam tree (default: run's)"
    )
    explore.add_argument(
        "--top-k", type=_positive, default=5, help="candidates per step (default 5)"
    )
    _add_device_options(explore)
    explore.set_defaults(run=run_explore_command)
    return parser


_REPLACE_UNK = "copy the most-attended source word into each output <unk>"


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="a run folder (or a .safetensors checkpoint)")
    parser.add_argument(
        "--beam", type=_positive, help="beam size, 1 = greedy (default: run config)"
    )
    parser.add_argument(
        "--batch-size", type=_positive, default=64, help="the most sentences decoded at once"
    )
    parser.add_argument("--replace-unk", action="store_true", help=_REPLACE_UNK)
    _add_device_options(parser)


def _add_device_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device", default="auto", metavar="DEVICE",
        help=f"where the model runs: {DEVICES} (default auto: CUDA when present)",
    )  # fmt: skip
    parser.add_argument(
        "--precision", default="float32", choices=PRECISIONS,
        help="bfloat16: decode under autocast, on the CPU or a GPU that has it (default float32)",
    )  # fmt: skip


def _add_test_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--src", help="source sentences, one per line (default: data.test)")
    parser.add_argument("--ref", help="reference translations, line-aligned with --src")
    parser.add_argument("--out", help="folder for translations, scores and plots")


def _positive(text: str) -> int:
    """argparse type of a count or size: an integer of at least 1, checked before any work."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_list(text: str) -> list[int]:
    """argparse type of `--heatmaps` and `--eval-lengths`: comma-separated integers >= 1."""
    numbers = [_positive(part) for part in text.split(",") if part.strip()]
    if not numbers:
        raise argparse.ArgumentTypeError(f"expected N,N,... (at least one), got {text!r}")
    return numbers


def _length_range(text: str) -> tuple[int, int]:
    """argparse type of `--lengths`: MIN-MAX (or one length), 1 <= MIN <= MAX."""
    low, _, high = text.partition("-")
    low, high = _positive(low), _positive(high or low)
    if low > high:
        raise argparse.ArgumentTypeError(f"MIN must not exceed MAX, got {text!r}")
    return low, high


def _seconds(text: str) -> float:
    """argparse type of a time limit: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text!r}")
    return value


def _port(text: str) -> int:
    """argparse type of `--port`: 1 to 65535."""
    value = _positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a TCP port is at most 65535, got {value}")
    return value


def run_demo_command(args: argparse.Namespace) -> int:
    cfg = apply_overrides(load_config(), demo_overrides(args) + list(args.overrides))
    eval_lengths = tuple(args.eval_lengths)
    flag = "--device" if args.device else "train.device"
    hardware = _hardware(pick_device(cfg.train.device, flag=flag))  # fails before any training
    print(f"Training vanilla, attention and Luong-order attention models on "
          f"'{cfg.data.task}' ({cfg.train.steps} steps each) ...", flush=True)  # fmt: skip
    result = run_demo(cfg, eval_lengths=eval_lengths, samples=args.samples)
    print()
    print(result.table)
    times = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in result.seconds.items())
    print(f"\nTraining time ({cfg.train.steps} steps, batch {cfg.train.batch_size}, "
          f"{hardware}): {times}")  # fmt: skip
    print("\nWritten:")
    for name, path in result.files.items():
        print(f"  {name:16} {path}")
    print(f"\nTry: echo hello | alignmt translate {result.files['attention model'].parent}")
    return 0


def demo_overrides(args: argparse.Namespace) -> list[str]:
    """The demo's flags as config overrides, so they go through the same validation."""
    overrides = [f"out_dir={args.out}"]
    if args.lengths:
        low, high = args.lengths
        overrides += [f"data.min_len={low}", f"data.max_len={high}"]
    flags = {
        "data.task": args.task,
        "train.steps": args.steps,
        "model.attention": args.attention,
        "model.rnn": args.cell,
        "seed": args.seed,
        "train.device": args.device,
    }
    return overrides + [f"{key}={value}" for key, value in flags.items() if value is not None]


def run_train_command(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, args.overrides)
    if args.print_config:
        print(dump_config(cfg), end="")
        return 0
    result = train(cfg, resume=args.resume, overwrite=args.overwrite)
    if not result.main:  # a rank > 0 of a torchrun run: rank 0 reports
        return 0
    if result.stopped_by:
        print(f"stopped by {result.stopped_by} at step {result.step}, with a checkpoint; "
              f"continue with: alignmt train {args.config} ... --resume")  # fmt: skip
        return 0
    loss = f"{result.losses[-1]:.4f}" if result.losses else "none (every update skipped)"
    print(f"trained to step {result.step} in {result.seconds:.1f} s; "
          f"final loss {loss}; run folder {result.run_dir}")  # fmt: skip
    for record in result.evals[-1:]:
        print(f"validation: loss {record['valid_loss']:.4f}, greedy BLEU {record['bleu']:.2f}")
    return 0


def _hardware(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{torch.get_num_threads()} CPU threads"


def _translator(run: str, args: argparse.Namespace) -> Translator:
    """The model of `run` on --device at --precision, searching with --beam and --replace-unk."""
    ckpt = load_checkpoint(run, device=pick_device(args.device))
    beam = args.beam
    search = ckpt.config.search if beam is None else replace(ckpt.config.search, beam_size=beam)
    search = replace(search, replace_unk=search.replace_unk or args.replace_unk)
    if search.beam_size < 1:
        raise ValueError(f"--beam must be at least 1, got {search.beam_size}")
    return Translator.from_checkpoint(ckpt, search, precision=args.precision)


def run_translate_command(args: argparse.Namespace) -> int:
    translator = _translator(args.run_dir, args)
    if not 1 <= args.nbest <= translator.search.beam_size:
        raise ValueError(f"--nbest must be in [1, beam size {translator.search.beam_size}]")
    lines = input_lines(sys.stdin.buffer)
    results = translator.translate(lines, nbest=args.nbest, batch_size=args.batch_size)
    # Input is read as UTF-8 whatever the locale, so output is written as UTF-8 too: in an
    # ASCII or cp1252 locale the first line it could not hold would end the output there.
    sys.stdout.reconfigure(encoding="utf-8")
    for hyps in results:
        if args.alignment:
            print("\t".join(f"{h.text}\t{h.alignment or ''}" for h in hyps))
        else:
            print("\t".join(h.text for h in hyps))
    return 0


def run_serve_command(args: argparse.Namespace) -> int:
    import uvicorn

    from alignmt.serve.app import create_app
    from alignmt.serve.registry import load_models

    limits = Limits(**{f.name: getattr(args, f.name) for f in fields(Limits)})
    models = load_models(args.run_dirs, device=pick_device(args.device), precision=args.precision)
    logging.getLogger("alignmt.serve").setLevel(logging.INFO)
    url = f"http://{args.host}:{args.port}"
    print(f"serving {', '.join(models)}: the explorer at {url}/, the API at {url}/docs",
          flush=True)  # fmt: skip
    uvicorn.run(create_app(models, limits), host=args.host, port=args.port, access_log=False)
    return 0


def run_explore_command(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from alignmt.serve.page import precompute, self_contained
    from alignmt.serve.registry import load_models

    device = pick_device(args.device)
    sentences = read_lines(args.input)
    for number, line in enumerate(sentences, 1):
        if not line.strip():
            raise ValueError(f"{args.input}:{number}: empty line; give one sentence per line")
    if not sentences:
        raise ValueError(f"{args.input}: no sentences")
    models = load_models(args.run_dirs, device=device, precision=args.precision)
    beam = args.beam or next(iter(models.values())).translator.search.beam_size
    with tqdm(total=len(sentences), unit="sentence", disable=None, file=sys.stderr) as bar:
        data = precompute(
            models,
            sentences,
            beam_size=beam,
            top_k=args.top_k,
            progress=lambda done: bar.update(done - bar.n),
            where=args.input,
        )
    command = " ".join(["alignmt explore", *args.run_dirs, "--input", args.input])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(self_contained(data, command), encoding="utf-8")
    size = out.stat().st_size
    print(f"wrote {out}: {len(sentences)} sentences, {len(models)} model(s), beam {beam}, "
          f"{size / 1e6:.2f} MB; open it in a browser (no server needed)")  # fmt: skip
    return 0


def _test_set(args: argparse.Namespace, run_dir: str) -> tuple[list[str], list[str], str]:
    """(sources, references, source language) from --src/--ref or the run's data.test."""
    cfg = load_checkpoint(run_dir).config
    if bool(args.src) != bool(args.ref):
        raise ValueError("--src and --ref go together")
    if args.src:
        src, ref = read_lines(args.src), read_lines(args.ref)
        if len(src) != len(ref):
            raise CorpusError(f"{args.src} has {len(src)} lines but {args.ref} has {len(ref)}")
        return src, ref, cfg.data.src_lang
    if not cfg.data.test:
        raise ValueError(f"{run_dir}: its config names no data.test; pass --src and --ref")
    pairs = read_split(cfg.data.test, src_lang=cfg.data.src_lang, tgt_lang=cfg.data.tgt_lang,
                       swap=cfg.data.tsv_swap, what="data.test")  # fmt: skip
    return [p.src for p in pairs], [p.tgt for p in pairs], cfg.data.src_lang


def _evaluate(
    name: str, translator: Translator, src: list[str], ref: list[str], lang: str, batch_size: int
) -> tuple[Evaluation, list[Translation]]:
    start = time.perf_counter()
    best = [hyps[0] for hyps in translator.translate(src, batch_size=batch_size)]
    seconds = time.perf_counter() - start
    # Buckets count Moses words of the source, whatever the model's own tokens are, so that
    # runs with different tokenizers share buckets.
    moses = MosesTokenizer(lang=lang)
    lengths = [len(moses.encode(line)) for line in src]
    return score_translations(name, [t.text for t in best], ref, lengths, seconds), best


def run_evaluate_command(args: argparse.Namespace) -> int:
    if args.gold_alignments or args.reference_aligner:
        return run_alignment_evaluation(args)
    translator = _translator(args.run_dir, args)
    src, ref, lang = _test_set(args, args.run_dir)
    beyond = [number for number in args.heatmaps if number > len(src)]
    if beyond:  # said before translating the whole test set, not after
        raise ValueError(f"--heatmaps: the test set has {len(src)} lines, not {beyond[0]}")
    name = Path(args.run_dir).name
    result, best = _evaluate(name, translator, src, ref, lang, args.batch_size)
    out = Path(args.out or Path(args.run_dir) / "eval")
    out.mkdir(parents=True, exist_ok=True)
    (out / "hyps.txt").write_text("".join(h + "\n" for h in result.hyps))
    (out / "scores.json").write_text(json.dumps(result.as_dict(), indent=2) + "\n")
    _print_scores({name: result}, translator.search.beam_size)
    files = _write_plots({name: result}, out)
    for number in args.heatmaps:
        if best[number - 1].attention is None:
            raise ValueError(f"--heatmaps: line {number} has no attention to draw")
        t = best[number - 1]
        fig = attention_heatmap(t.attention, t.src_tokens, t.tokens, title=f"line {number}")
        files.append(save_png(fig, out / f"heatmap_{number}.png"))
    if args.sentence_bleu:
        _print_sentence_bleu(translator, src, ref, best)
    if args.attention:
        _dump_attention(Path(args.attention), best)
        files.append(Path(args.attention))
    written = [out / "hyps.txt", out / "scores.json", *files]
    print("\nWritten: " + ", ".join(str(f) for f in written))
    return 0


def run_alignment_evaluation(args: argparse.Namespace) -> int:
    """Precision, recall and AER of the attention's alignments of the test set (Och & Ney
    2003) against gold links and/or eflomal's; nothing is translated."""
    if args.heatmaps or args.attention or args.sentence_bleu:
        raise ValueError("--heatmaps, --attention and --sentence-bleu need translations: "
                         "run them without --gold-alignments and --reference-aligner")  # fmt: skip
    if args.reference_aligner:
        try:  # before any work, so that a missing install fails at once
            import_eflomal()
        except ImportError as error:
            raise ValueError(str(error)) from None
    ckpt = load_checkpoint(args.run_dir, device=pick_device(args.device))
    translator = Translator.from_checkpoint(ckpt, precision=args.precision)
    src, ref, _ = _test_set(args, args.run_dir)
    sources = [sentence_words(translator.src_tokenizer, line) for line in src]
    references = [sentence_words(translator.tgt_tokenizer, line) for line in ref]
    hyps = word_links(translator, sources, references, batch_size=args.batch_size)
    golds: dict[str, tuple[list[set[Link]], list[set[Link]]]] = {}
    if args.gold_alignments:
        lengths = [(len(s.words), len(r.words)) for s, r in zip(sources, references, strict=True)]
        pairs_from = f"{args.src} + {args.ref}" if args.src else ckpt.config.data.test
        golds[args.gold_alignments] = read_alignments(
            args.gold_alignments, lengths=lengths, pairs_from=pairs_from
        )
    if args.reference_aligner:
        start = time.perf_counter()
        links = eflomal_reference_links(
            ckpt.config.data, translator, [s.words for s in sources],
            [r.words for r in references],
            progress=lambda stage: print(f"[{time.perf_counter() - start:5.1f} s] {stage}",
                                         file=sys.stderr, flush=True),
        )  # fmt: skip
        golds["eflomal (forward links, all sure)"] = (links, links)
    _print_alignment_scores(Path(args.run_dir).name, hyps, golds)
    return 0


def _print_alignment_scores(
    name: str, hyps: list[set[Link]], golds: dict[str, tuple[list[set[Link]], list[set[Link]]]]
) -> None:
    print(f"Attention of {name}, teacher-forced argmax over {len(hyps):,} sentence pairs "
          f"({sum(map(len, hyps)):,} links):\n")  # fmt: skip
    print("| reference | sure links | sure + possible | precision | recall | AER |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, (sures, possibles) in golds.items():
        score = alignment_error_rate(hyps, sures, possibles)
        print(f"| {name} | {sum(map(len, sures)):,} | {sum(map(len, possibles)):,} | "
              f"{score.precision:.1%} | {score.recall:.1%} | {score.aer:.1%} |")  # fmt: skip
    print("\nA: the attention's links, S: sure, P: sure + possible; counts summed over the "
          "corpus (Och & Ney 2003): precision |A∩P|/|A|, recall |A∩S|/|S|, "
          "AER 1 - (|A∩S| + |A∩P|)/(|A| + |S|)")  # fmt: skip


def run_compare_command(args: argparse.Namespace) -> int:
    src, ref, lang = _test_set(args, args.run_dirs[0])
    results = {}
    for run in args.run_dirs:
        name = Path(run).name if Path(run).name not in results else run
        translator = _translator(run, args)
        results[name] = _evaluate(name, translator, src, ref, lang, args.batch_size)[0]
    _print_scores(results, args.beam)
    out = Path(args.out or "runs/compare")
    files = _write_plots(results, out)
    (out / "scores.json").write_text(json.dumps([r.as_dict() for r in results.values()],
                                                indent=2) + "\n")  # fmt: skip
    print("\nExamples (longest first of every 100th line):")
    for i in sorted(range(0, len(src), 100), key=lambda i: -len(src[i]))[:3]:
        print(f"\n  source    {src[i]}\n  reference {ref[i]}")
        for name, result in results.items():
            print(f"  {name:9} {result.hyps[i]}")
    print("\nWritten: " + ", ".join(str(f) for f in [*files, out / "scores.json"]))
    return 0


def _print_scores(results: dict[str, Evaluation], beam: int | None) -> None:
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


def _write_plots(results: dict[str, Evaluation], out: Path) -> list[Path]:
    buckets = bucket_bars({n: r.buckets for n, r in results.items()})
    curves = bleu_by_length_plot({n: r.curve for n, r in results.items()})
    return [save_png(buckets, out / "buckets.png"), save_png(curves, out / "bleu_by_length.png")]


def _print_sentence_bleu(
    translator: Translator, src: list[str], ref: list[str], best: list[Translation]
) -> None:
    """Seed 003's printout: `source => [tokens], bleu` with d2l's BLEU over the target
    tokenizer's tokens (so "J'ai perdu." and "j'ai perdu ." match, as in d2l)."""
    print()
    for line, reference, t in zip(src, ref, best, strict=True):
        hyp = [tok for tok in t.tokens if tok != EOS]
        label = " ".join(translator.tgt_tokenizer.encode(reference))
        print(f"{line} => {hyp}, bleu {sentence_bleu_d2l(' '.join(hyp), label):.3f}")


def _dump_attention(path: Path, best: list[Translation]) -> None:
    rows = [
        {"line": i + 1, "source": t.src_tokens, "output": t.tokens,
         "attention": None if t.attention is None else t.attention.round(decimals=4).tolist()}
        for i, t in enumerate(best)
    ]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, ensure_ascii=False) + "\n")
