"""Flag types and option groups that several commands share.

Cheap to import, like the parser: `alignmt COMMAND --help` must load no torch or matplotlib.
"""

from __future__ import annotations

import argparse
import math
import sys

from alignmt.config import DEVICES, PRECISIONS, WEIGHTS

REPLACE_UNK = "copy the most-attended source word into each output <unk>"


def failed(error: Exception) -> int:
    """Report a command that started and could not go on; its exit status."""
    print(f"error: {error}", file=sys.stderr)
    return 1


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """A run folder to decode with, and how: beam, batch size, <unk> replacement, device."""
    parser.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="a run folder (or a .safetensors checkpoint); several decode as an ensemble, "
        "averaging their log-probabilities at each step",
    )
    parser.add_argument("--beam", type=positive, help="beam size, 1 = greedy (default: run config)")
    parser.add_argument(
        "--batch-size", type=positive, default=64, help="the most sentences decoded at once"
    )
    parser.add_argument("--replace-unk", action="store_true", help=REPLACE_UNK)
    parser.add_argument(
        "--coverage-penalty",
        type=at_least_zero,
        metavar="BETA",
        help="beam search ranks ended hypotheses by score / lp + BETA * sum_j "
        "log(min(attention on word j, 1)) (GNMT); 0 = none (default: run config)",
    )
    add_device_options(parser)
    add_speed_options(parser)


def add_engine_option(parser: argparse.ArgumentParser) -> None:
    """--engine (or --backend, its older name): the framework a run folder decodes on."""
    parser.add_argument(
        "--engine",
        "--backend",
        dest="engine",
        choices=["torch", "flax"],
        default="torch",
        help="decode a run folder with PyTorch, or with JAX/Flax (the [flax] extra; compiled "
        "once per padded batch shape); an exported folder runs on ONNX Runtime whatever this "
        "says (default torch)",
    )


def add_speed_options(parser: argparse.ArgumentParser) -> None:
    """int8 matmuls and the lexical shortlist: faster CPU decoding, at a measured cost."""
    parser.add_argument(
        "--weights",
        choices=WEIGHTS,
        help="int8: the decoder's matmuls in int8 on the CPU (default: run config)",
    )
    parser.add_argument(
        "--shortlist",
        type=count_or_zero,
        metavar="K",
        help="score only each source token's K likeliest translations and the frequent "
        "words (the run's shortlist.safetensors); 0 = every word (default: run config)",
    )


def add_device_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        default="auto",
        metavar="DEVICE",
        help=f"where the model runs: {DEVICES} (default auto: CUDA when present)",
    )
    parser.add_argument(
        "--precision",
        default="float32",
        choices=PRECISIONS,
        help="bfloat16: decode under autocast, on the CPU or a GPU that has it (default float32)",
    )


def add_test_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--src", help="source sentences, one per line (default: data.test)")
    parser.add_argument("--ref", help="reference translations, line-aligned with --src")
    parser.add_argument("--out", help="folder for translations, scores and plots")


def count_or_zero(text: str) -> int:
    """argparse type of a count where 0 turns the option off, as `--shortlist 0`."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive(text: str) -> int:
    """argparse type of a count or size: an integer of at least 1, checked before any work."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_list(text: str) -> list[int]:
    """argparse type of `--heatmaps` and `--eval-lengths`: comma-separated integers >= 1."""
    numbers = [positive(part) for part in text.split(",") if part.strip()]
    if not numbers:
        raise argparse.ArgumentTypeError(f"expected N,N,... (at least one), got {text!r}")
    return numbers


def length_range(text: str) -> tuple[int, int]:
    """argparse type of `--lengths`: MIN-MAX (or one length), 1 <= MIN <= MAX."""
    low, _, high = text.partition("-")
    low, high = positive(low), positive(high or low)
    if low > high:
        raise argparse.ArgumentTypeError(f"MIN must not exceed MAX, got {text!r}")
    return low, high


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def above_zero(text: str) -> float:
    """argparse type of a time limit or a sampling temperature: a finite number above 0."""
    value = _number(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text!r}")
    return value


def at_least_zero(text: str) -> float:
    """argparse type of a penalty's weight: a finite number, 0 or more."""
    value = _number(text)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number, 0 or more, got {text!r}")
    return value


def share(text: str) -> float:
    """argparse type of `--top-p`: a share of probability, 0 < P <= 1."""
    value = _number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1, got {text!r}")
    return value


def port(text: str) -> int:
    """argparse type of `--port`: 1 to 65535."""
    value = positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a TCP port is at most 65535, got {value}")
    return value
