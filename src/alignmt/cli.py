"""The `alignmt` command: demo, train, translate.

The only module that prints to stdout and the only one that imports everything. Each
subcommand builds a `Config` (defaults < YAML file < `key.path=value` overrides, with the
friendly flags below turned into overrides) and hands it to the library.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import torch

from alignmt.checkpoint import load_checkpoint
from alignmt.config import ConfigError, apply_overrides, dump_config, load_config
from alignmt.data import char_detokenize, pad_sequences
from alignmt.demo import run_demo
from alignmt.search import decode
from alignmt.train import train


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    try:
        return args.run(args)
    except (ConfigError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


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
    demo.add_argument("--lengths", metavar="MIN-MAX", help="training string lengths (default 3-10)")
    demo.add_argument(
        "--eval-lengths", default="3,5,7,10,15,20", metavar="N,N,...", help="lengths to score"
    )
    demo.add_argument("--samples", type=int, default=500, help="strings scored per length")
    demo.add_argument("--steps", type=int, help="training steps per model (default 2000)")
    demo.add_argument("--attention", choices=["additive", "dot", "general", "concat", "scaled_dot"])
    demo.add_argument("--cell", choices=["gru", "lstm"], help="recurrent cell (default gru)")
    demo.add_argument("--out", default="runs/demo", help="output folder (default runs/demo)")
    demo.add_argument("--seed", type=int, help="random seed (default 1)")
    demo.add_argument("overrides", nargs="*", metavar="key.path=value", help="config overrides")
    demo.set_defaults(run=run_demo_command)

    train_cmd = commands.add_parser("train", help="train a model from a YAML config")
    train_cmd.add_argument("config", help="YAML file, e.g. configs/reverse.yaml")
    train_cmd.add_argument("overrides", nargs="*", metavar="key.path=value")
    train_cmd.add_argument(
        "--print-config", action="store_true", help="print the resolved config and stop"
    )
    train_cmd.set_defaults(run=run_train_command)

    translate = commands.add_parser(
        "translate", help="greedy-decode stdin line by line with a trained model"
    )
    translate.add_argument("run_dir", help="a run folder (or its model.safetensors)")
    translate.add_argument("--batch-size", type=int, default=64)
    translate.set_defaults(run=run_translate_command)
    return parser


def run_demo_command(args: argparse.Namespace) -> int:
    cfg = apply_overrides(load_config(), demo_overrides(args) + list(args.overrides))
    eval_lengths = tuple(int(n) for n in args.eval_lengths.split(","))
    print(f"Training vanilla and attention models on '{cfg.data.task}' "
          f"({cfg.train.steps} steps each) ...", flush=True)  # fmt: skip
    result = run_demo(cfg, eval_lengths=eval_lengths, samples=args.samples)
    print()
    print(result.table)
    times = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in result.seconds.items())
    print(f"\nTraining time ({cfg.train.steps} steps, batch {cfg.train.batch_size}, "
          f"{torch.get_num_threads()} CPU threads): {times}")  # fmt: skip
    print("\nWritten:")
    for name, path in result.files.items():
        print(f"  {name:16} {path}")
    print(f"\nTry: echo hello | alignmt translate {result.files['attention model'].parent}")
    return 0


def demo_overrides(args: argparse.Namespace) -> list[str]:
    """The demo's flags as config overrides, so they go through the same validation."""
    overrides = [f"out_dir={args.out}"]
    if args.lengths:
        low, _, high = args.lengths.partition("-")
        overrides += [f"data.min_len={low}", f"data.max_len={high or low}"]
    flags = {
        "data.task": args.task,
        "train.steps": args.steps,
        "model.attention": args.attention,
        "model.rnn": args.cell,
        "seed": args.seed,
    }
    return overrides + [f"{key}={value}" for key, value in flags.items() if value is not None]


def run_train_command(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, args.overrides)
    if args.print_config:
        print(dump_config(cfg), end="")
        return 0
    result = train(cfg)
    print(f"trained {cfg.train.steps} steps in {result.seconds:.1f} s; "
          f"final loss {result.losses[-1]:.4f}; run folder {result.run_dir}")  # fmt: skip
    return 0


def run_translate_command(args: argparse.Namespace) -> int:
    checkpoint = load_checkpoint(args.run_dir)
    model, vocab = checkpoint.model, checkpoint.src_vocab
    search = checkpoint.config.search
    lines = [line.rstrip("\n") for line in sys.stdin]
    for number, line in enumerate(lines, start=1):
        unknown = sorted({char for char in line if char not in vocab.stoi})
        if unknown:
            print(f"warning: stdin line {number}: {''.join(unknown)!r} not in the model's "
                  f"vocabulary, read as <unk>", file=sys.stderr)  # fmt: skip
    for start in range(0, len(lines), args.batch_size):
        chunk = [
            vocab.encode(line, add_eos=True) for line in lines[start : start + args.batch_size]
        ]
        src_len = torch.tensor([len(ids) for ids in chunk])
        src = pad_sequences(chunk, vocab.pad_id)
        for hyp in decode(model, src, src_len, max_len_ratio=search.max_len_ratio,
                          max_len_offset=search.max_len_offset):  # fmt: skip
            print(char_detokenize(checkpoint.tgt_vocab.decode(hyp.tokens)))
    return 0
