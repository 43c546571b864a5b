"""The `alignmt` command: demo, train, translate, evaluate, compare, average, shortlist, export,
serve, explore.

The only package that prints to stdout, and the only one that imports every layer. Parsing
(`parser`) is cheap; each command's module (`alignmt.cli.COMMAND`, with a `run(args)`) is
imported only once its command is chosen, so `alignmt translate --help` loads no torch.

    average.py    `alignmt average`
    compare.py    `alignmt compare`
    data.py       `alignmt data list`, `get` and `path`
    demo.py       `alignmt demo`
    evaluate.py   `alignmt evaluate`
    explore.py    `alignmt explore`
    export.py     `alignmt export`
    flags.py      flag types and option groups that commands share
    parser.py     every command's flags; cheap
    serve.py      `alignmt serve`
    shortlist.py  `alignmt shortlist`
    train.py      `alignmt train`
    translate.py  `alignmt translate`
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Sequence

from alignmt.cli.parser import build_parser
from alignmt.config import ConfigError
from alignmt.model.allocator import keep_freed_memory
from alignmt.text.corpus import CorpusError

__all__ = ["build_parser", "main"]

# the optional packages a command may need, by the extra that installs each: an environment
# of [runtime] alone translates and serves exported folders, and is told what else to install
EXTRAS = {
    "torch": "torch",
    "matplotlib": "torch",
    "sacrebleu": "torch",
    "jax": "flax",
    "flax": "flax",
    "optax": "flax",
    "onnx": "export",
    "onnxruntime": "runtime",
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _say_as_errors_are_said(args.verbose)
    if args.command != "serve":
        # 10-15% faster training on CPU (see allocator.py); a server's memory must stay flat
        keep_freed_memory()
    try:
        command = importlib.import_module(f"alignmt.cli.{args.command}")
        return command.run(args)
    except ModuleNotFoundError as missing:
        package = (missing.name or "").split(".")[0]
        if package not in EXTRAS:
            raise
        extra = EXTRAS[package]
        print(
            f"error: alignmt {args.command} needs {package}, which this environment "
            f"lacks: pip install 'alignmt[{extra}]'",
            file=sys.stderr,
        )
        return 2
    except (ConfigError, CorpusError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # started, then could not go on (a full disk, say)
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as stop:  # the demo, stopped between its runs
        print(f"interrupted{f' ({stop})' if str(stop) else ''}", file=sys.stderr)
        return 130


class _Tidy(logging.Formatter):
    """`warning: ...`, as errors print `error: ...`; with --verbose, `info: ...` and the
    logger's name, to find where a message came from."""

    def __init__(self, verbose: bool) -> None:
        super().__init__("%(message)s (%(name)s)" if verbose else "%(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {super().format(record)}"


def _say_as_errors_are_said(verbose: bool) -> None:
    """Every message of alignmt and of the libraries under it, Python's own warnings
    included, to stderr in one style (see `_Tidy`)."""
    handler = logging.StreamHandler()
    handler.setFormatter(_Tidy(verbose))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])
    logging.captureWarnings(True)
