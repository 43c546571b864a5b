"""The `alignmt` command line: every command's flags, and nothing that runs them.

Each command's code lives in its own module (`alignmt.cli.translate` for `alignmt translate`)
and is imported only when that command runs, so parsing, `--help` included, loads neither
torch nor matplotlib.
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from alignmt.answers.limits import Limits
from alignmt.cli.flags import (
    REPLACE_UNK,
    above_zero,
    add_device_options,
    add_engine_option,
    add_run_options,
    add_speed_options,
    add_test_options,
    at_least_zero,
    length_range,
    port,
    positive,
    positive_list,
    share,
)
from alignmt.config import SCORES

Commands = "argparse._SubParsersAction[argparse.ArgumentParser]"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="alignmt",
        description="Attention-based RNN encoder-decoders (Bahdanau et al. 2015, Luong 2015).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    commands = parser.add_subparsers(required=True, metavar="COMMAND", dest="command")
    for add in (
        _demo,
        _data,
        _train,
        _translate,
        _evaluate,
        _compare,
        _average,
        _shortlist,
        _export,
        _serve,
        _explore,
    ):
        add(commands)
    return parser


def _demo(commands: Commands) -> None:
    demo = commands.add_parser(
        "demo",
        help="attention vs. vanilla seq2seq on string reversal (no data needed)",
        description="Train a vanilla and an attention model on a synthetic task, print their "
        "accuracy by length, and write heatmaps, loss curves and the attention checkpoint.",
    )
    demo.add_argument("--task", choices=["reverse", "copy", "sort"], help="default: reverse")
    demo.add_argument(
        "--lengths", type=length_range, metavar="MIN-MAX", help="training string lengths (3-10)"
    )
    demo.add_argument(
        "--eval-lengths",
        type=positive_list,
        default=[3, 5, 7, 10, 15, 20],
        metavar="N,N,...",
        help="lengths to score",
    )
    demo.add_argument("--samples", type=positive, default=500, help="strings scored per length")
    demo.add_argument("--steps", type=positive, help="training steps per model (default 2000)")
    # every score but location (by position alone) and none (the demo trains vanilla anyway)
    scores = [score for score in SCORES if score not in ("location", "none")]
    demo.add_argument("--attention", choices=scores)
    demo.add_argument("--cell", choices=["gru", "lstm"], help="recurrent cell (default gru)")
    demo.add_argument("--out", default="runs/demo", help="output folder (default runs/demo)")
    demo.add_argument("--seed", type=int, help="random seed (default 1)")
    demo.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        help="where the models train and are scored (train.device; default auto: CUDA when "
        "present)",
    )
    demo.add_argument("overrides", nargs="*", metavar="key.path=value", help="config overrides")


def _train(commands: Commands) -> None:
    train = commands.add_parser("train", help="train a model from a YAML config")
    train.add_argument(
        "config", help="YAML file (configs/reverse.yaml) or a shipped config's name (reverse)"
    )
    train.add_argument("overrides", nargs="*", metavar="key.path=value")
    train.add_argument(
        "--print-config", action="store_true", help="print the resolved config and stop"
    )
    start = train.add_mutually_exclusive_group()
    start.add_argument(
        "--resume", action="store_true", help="continue the run in out_dir from last.safetensors"
    )
    start.add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh in an out_dir that holds a run, deleting its checkpoints and logs",
    )


def _translate(commands: Commands) -> None:
    translate = commands.add_parser("translate", help="translate stdin line by line to stdout")
    add_run_options(translate)
    translate.add_argument(
        "--nbest", type=positive, default=1, help="hypotheses per line, tab-joined"
    )
    translate.add_argument(
        "--alignment",
        nargs="?",
        const="tokens",
        choices=["tokens", "words"],
        help="after each hypothesis, a tab and its hard alignment (Pharaoh source-output "
        "pairs) between tokens, or with `--alignment words` between words: a subword model's "
        "pieces joined into the words they make",
    )
    _add_sampling_options(translate)
    translate.add_argument(
        "--constraints",
        metavar="FILE",
        help="lexically constrained beam search: FILE holds a JSON object per input line, "
        '{"include": ["phrase", ...], "exclude": ["phrase", ...]}, phrases that line\'s '
        "output must contain and must not (an empty line: none); with --jsonl each hypothesis "
        "says which include phrases it met",
    )
    translate.add_argument(
        "--jsonl",
        action="store_true",
        help="a JSON list per line instead: each hypothesis' text, tokens, the probability of "
        "each token (word-level confidence), score and, with --alignment, alignment",
    )
    translate.add_argument(
        "--max-source-tokens",
        type=positive,
        default=Limits.max_source_tokens,
        metavar="N",
        help="refuse input with a line longer than this, in the model's source tokens, before "
        f"translating anything (default {Limits.max_source_tokens}, as `alignmt serve`)",
    )
    add_engine_option(translate)


def _add_sampling_options(translate: argparse.ArgumentParser) -> None:
    """`alignmt translate`'s sampling group: draw each output token instead of searching."""
    sample = translate.add_argument_group(
        "sampling", "draw each output token from the model instead of searching"
    )
    sample.add_argument("--sample", action="store_true", help="sample instead of searching")
    sample.add_argument(
        "--temperature", type=above_zero, metavar="T", help="<1 sharpens, >1 flattens (default 1)"
    )
    sample.add_argument(
        "--top-k", type=positive, metavar="K", help="draw among the K most probable tokens"
    )
    sample.add_argument(
        "--top-p", type=share, metavar="P", help="draw among the fewest tokens holding P"
    )
    sample.add_argument(
        "--samples", type=positive, metavar="N", help="outputs per line, tab-joined (default 1)"
    )
    sample.add_argument(
        "--seed", type=int, metavar="S", help="the same seed, input and batch size draw alike"
    )


def _evaluate(commands: Commands) -> None:
    evaluate = commands.add_parser(
        "evaluate", help="BLEU and chrF (lowercased and cased), length buckets, heatmaps"
    )
    add_run_options(evaluate)
    add_test_options(evaluate)
    evaluate.add_argument("--attention", metavar="FILE", help="write every alignment as JSON")
    evaluate.add_argument(
        "--heatmaps",
        type=positive_list,
        default=[],
        metavar="N,N,...",
        help="source line numbers to draw (1-based)",
    )
    evaluate.add_argument(
        "--sentence-bleu",
        action="store_true",
        help="also print each line with the d2l book's sentence BLEU (k=2) on its tokens",
    )
    evaluate.add_argument(
        "--gold-alignments",
        metavar="FILE",
        help="instead of BLEU, score the attention's teacher-forced argmax links against these "
        "(i-j sure, i?j or ipj possible; word indices as the model tokenizes)",
    )
    evaluate.add_argument(
        "--gold-format",
        choices=["pharaoh", "talp"],  # text.links.GOLD_FORMATS, not imported: --help stays light
        default="pharaoh",
        help="how --gold-alignments counts words: pharaoh from 0, talp from 1 (default: pharaoh)",
    )
    evaluate.add_argument(
        "--reference-aligner",
        choices=["eflomal"],
        help="instead of BLEU, score them against eflomal's links, learnt on data.train + "
        "the test set",
    )
    evaluate.add_argument(
        "--alignment-from",
        # attribution.METHODS, not imported: --help stays light
        choices=["attention", "shift", "gradient", "integrated", "erasure"],
        help="the links those score: each target word's most-attended source word (attention, "
        "the default), the next step's (shift), or its most relevant by gradient x input, "
        "integrated gradients or erasure (PyTorch only)",
    )


def _compare(commands: Commands) -> None:
    compare = commands.add_parser("compare", help="score several runs on one test set, with plots")
    compare.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    compare.add_argument("--beam", type=positive, help="beam size (default: each run's config)")
    compare.add_argument("--batch-size", type=positive, default=64)
    compare.add_argument("--replace-unk", action="store_true", help=REPLACE_UNK)
    compare.add_argument(
        "--coverage-penalty", type=at_least_zero, metavar="BETA", help="as in evaluate"
    )
    add_test_options(compare)
    add_device_options(compare)
    add_speed_options(compare)


def _data(commands: Commands) -> None:
    data = commands.add_parser(
        "data",
        help="list, get and locate the corpora the shipped configs name",
        description="The corpora alignmt knows by name (a config's data.train: multi30k:train), "
        "kept in $ALIGNMT_DATA or the user cache folder. Every file's size and SHA-256 are "
        "pinned; a download resumes where an interrupted one stopped.",
    )
    actions = data.add_subparsers(required=True, metavar="ACTION", dest="action")
    actions.add_parser("list", help="each corpus: its files, sizes, licence and citation")
    get = actions.add_parser(
        "get",
        help="download a corpus into the data folder, or copy it from a mirror (--from)",
        description="Downloads (or, with --from, copies) a corpus's files, checks each "
        "against its pinned size and SHA-256, and only then puts it in the data folder.",
    )
    get.add_argument("names", nargs="+", metavar="NAME", help="a corpus: alignmt data list")
    get.add_argument(
        "--all", action="store_true", help="every file published, not only what configs read"
    )
    get.add_argument(
        "--from",
        dest="mirror",
        metavar="DIR",
        help="copy from this folder (DIR/NAME/FILE or DIR/FILE) instead of downloading",
    )
    path = actions.add_parser(
        "path", help="where a corpus, or a part as a config names it, is in the data folder"
    )
    path.add_argument("name", metavar="NAME[:PART]")


def _average(commands: Commands) -> None:
    average = commands.add_parser(
        "average",
        help="average a run's last checkpoints into a new run folder",
        description="The element-wise mean of the weights the run kept at its last N steps "
        "(its snapshots and last checkpoint), written as OUT/model.safetensors: a run folder "
        "that translate, evaluate and serve load.",
    )
    average.add_argument("run_dir", metavar="RUN_DIR")
    average.add_argument(
        "--last", type=positive, required=True, metavar="N", help="how many kept steps (≥ 2)"
    )
    average.add_argument("--out", required=True, metavar="NEW_RUN", help="the folder to write")
    average.add_argument(
        "--overwrite", action="store_true", help="replace the run a NEW_RUN folder holds"
    )


def _export(commands: Commands) -> None:
    export = commands.add_parser(
        "export",
        help="write a run's model as ONNX graphs that ONNX Runtime runs without PyTorch",
        description="The encoder and one decoder step as ONNX graphs (OUT/encoder.onnx, "
        "OUT/step.onnx), with OUT/manifest.json: the config, vocabularies, tokenizers and the "
        "graphs' inputs and outputs. Every architecture alignmt trains, from PyTorch- and "
        "Flax-trained run folders alike.",
    )
    export.add_argument("run_dir", metavar="RUN_DIR")
    export.add_argument("--out", required=True, metavar="DIR", help="the folder to write")
    export.add_argument(
        "--int8",
        action="store_true",
        help="also write int8 copies of the graphs (ONNX Runtime's dynamic quantization), "
        "which `translate DIR --weights int8` and `serve DIR --weights int8` run",
    )
    export.add_argument(
        "--web",
        action="store_true",
        help="make OUT a static site: OUT/index.html runs the explorer on the model in the "
        "browser (ONNX Runtime Web), with nothing installed; any static file host serves it. "
        "Its graphs compute in float32 (the faster arithmetic in the browser); where the "
        "site would weigh over 30 MB, they store their weights in int8 if that keeps every "
        "probability within 0.02 of float32's. The tokenizers must be char, space, d2l or "
        "Moses' rules for en, de or fr",
    )
    export.add_argument(
        "--float32",
        action="store_true",
        help="with --web: keep the weights in float32 whatever the site weighs",
    )


def _shortlist(commands: Commands) -> None:
    shortlist = commands.add_parser(
        "shortlist",
        help="build a run's lexical shortlist (training builds it; this is for older runs)",
        description="Count which target tokens co-occur with each source token in the run's "
        "training pairs and write RUN_DIR/shortlist.safetensors: each source token's best "
        "translations by the Dice coefficient, and the most frequent target tokens. "
        "translate, evaluate and serve use it with --shortlist K.",
    )
    shortlist.add_argument("run_dir", metavar="RUN_DIR")


def _serve(commands: Commands) -> None:
    serve = commands.add_parser(
        "serve",
        help="serve models over HTTP: translations, steps, beams, attention",
        description="A FastAPI service of the run folders given, each named by its folder. "
        "The API is described at http://HOST:PORT/docs. A folder that `alignmt export` wrote "
        "is served by ONNX Runtime, without PyTorch: it translates (/v1/translate), greedy "
        "or with a beam.",
    )
    serve.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="the first is the default; RUN_A+RUN_B serves an ensemble (translate only); "
        "an exported folder (alignmt export) is served by ONNX Runtime",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=port, default=8000, help="default 8000")
    add_engine_option(serve)
    for limit in fields(Limits):
        is_time = isinstance(limit.default, float)
        serve.add_argument(
            "--" + limit.name.replace("_", "-"),
            default=limit.default,
            type=above_zero if is_time else positive,
            metavar="SECONDS" if is_time else "N",
            help=f"{limit.metadata['help']} (default {limit.default})",
        )
    add_device_options(serve)
    add_speed_options(serve)


def _explore(commands: Commands) -> None:
    explore = commands.add_parser(
        "explore",
        help="write the explorer as one HTML page that needs no server",
        description="Decode each input sentence with each run (step by step with candidates, "
        "and the beam) and write the explorer with all of it inline: one file that opens "
        "offline. What-if (forcing a token, moving attention) needs `alignmt serve`.",
    )
    explore.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="several: side by side")
    explore.add_argument("--input", required=True, metavar="FILE", help="one sentence per line")
    explore.add_argument("--out", required=True, metavar="PAGE.html", help="the page to write")
    add_engine_option(explore)
    explore.add_argument(
        "--beam", type=positive, help="beam size of the beam tree (default: run's)"
    )
    explore.add_argument(
        "--top-k", type=positive, default=5, help="candidates per step (default 5)"
    )
    add_device_options(explore)
