"""Where a model runs and in what precision: `--device` and `--precision` made into a
`torch.device` and an autocast context.

Owns the choice, not the moves: callers put models and tensors on the device they get here.
Precision is autocast's (weights stay float32; matmuls and RNNs run in bfloat16), never a
conversion of the weights, so one checkpoint serves every precision. Search casts the
log-probabilities back to float32 before ranking (`LogProbs.float`, in
`alignmt.decoding.torch_engine.steps`), and MKL's packed
weights stay out of autocast (`alignmt.decoding.torch_engine.packed`).
"""

from __future__ import annotations

import re
from contextlib import AbstractContextManager, nullcontext

import torch

from alignmt.config import DEVICES, PRECISIONS

_CUDA_INDEX = re.compile(r"cuda:(\d+)")


def pick_device(name: str, *, flag: str = "--device") -> torch.device:
    """The device `name` asks for. "auto" takes CUDA when present; asking for CUDA without
    one is an error, not a silent fallback to the CPU.

    Args:
        name: "auto", "cpu", "cuda" or "cuda:N".
        flag: what set `name` (a command-line flag or a config key), for the error message.

    Returns:
        The device; "auto" gives cuda (the current GPU) or cpu.

    Raises:
        ValueError: an unknown name, CUDA asked for where torch sees none, or a GPU index
            past the last GPU.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    index = _CUDA_INDEX.fullmatch(name)
    if name != "cuda" and index is None:
        raise ValueError(f"{flag}={name}: expected {DEVICES}")
    if not torch.cuda.is_available():
        raise ValueError(
            f"{flag}={name}, but torch sees no CUDA device (torch.cuda.is_available() is False); "
            "use auto or cpu"
        )
    if index is not None and int(index[1]) >= torch.cuda.device_count():
        raise ValueError(
            f"{flag}={name}, but torch sees {torch.cuda.device_count()} CUDA device(s), "
            f"cuda:0 to cuda:{torch.cuda.device_count() - 1}"
        )
    return torch.device(name)


def check_precision(device: torch.device, precision: str) -> None:
    """Refuse a precision that `device` cannot run, naming it.

    bfloat16 runs on the CPU (autocast's CPU path, often slower than float32 without AMX)
    and on GPUs that support it (Ampere and later; `torch.cuda.is_bf16_supported`).

    Raises:
        ValueError: an unknown precision, or bfloat16 on a GPU without it.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    if precision == "bfloat16" and device.type == "cuda":
        with torch.cuda.device(device):
            if not torch.cuda.is_bf16_supported():
                raise ValueError(
                    f"precision bfloat16: {torch.cuda.get_device_name(device)} ({device}) does "
                    "not support bfloat16; use float32"
                )


def autocast(device: torch.device, precision: str) -> AbstractContextManager:
    """A context in which the model runs at `precision` on `device`.

    Args:
        device: where the model is.
        precision: "float32" (nothing changes) or "bfloat16" (`torch.autocast` to bfloat16:
            matmuls, RNNs and their outputs in bfloat16, weights untouched).

    Returns:
        The context manager; enter it around forward passes only: backward runs in the
        dtypes the forward chose, and the optimizer step stays float32.

    Raises:
        ValueError: see `check_precision`.
    """
    check_precision(device, precision)
    if precision == "float32":
        return nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)
