"""How decoding trades exactness for speed on the CPU: the decoder's matmuls in int8
(int8.py, through packed.py's `int8_linears`), and a lexical shortlist (shortlist.py).
`Speed` holds the choice; `check_speed` makes it from a search config, refusing what cannot
be; `fast_step` puts it in place around a search's step function."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from alignmt.config import Precision, SearchConfig
from alignmt.decoding.shortlisted import fitting
from alignmt.decoding.torch_engine.packed import int8_linears, packed_linears
from alignmt.decoding.torch_engine.shortlist import Shortlisted
from alignmt.decoding.torch_engine.steps import StepFn
from alignmt.text.shortlist import Shortlist
from alignmt.text.vocab import Vocab

log = logging.getLogger(__name__)
# CPU kinds (torch.backends.cpu.get_cpu_capability) whose int8 GEMM is fast: on AVX2 alone,
# torch._int_mm of (320, 512) x (512, 7,865) took 1.2 s against float32's 29 ms, and beam 5
# on the Multi30k model ran 9x slower than float32 (a 2-core AMD EPYC VM, torch 2.13)
FAST_INT8 = ("AVX512",)

# join(src (B, T_src), memory) -> the memory a step wrapper reads, or None: as encoded
Join = Callable[[Tensor, Any], Any] | None


@dataclass(frozen=True)
class Speed:
    """The decoder's matmuls in int8 (CPU float32 Linears only), and the words each sentence
    may output (None: the whole vocabulary)."""

    int8: bool = False
    shortlist: Shortlist | None = None


def check_speed(
    search: SearchConfig,
    shortlist: Shortlist | None,
    vocabs: tuple[Vocab, Vocab],
    device: torch.device,
    precision: Precision,
    model: Any,
) -> Speed:
    """What `search.weights` and `search.shortlist` ask for, given the run's `shortlist`;
    refused where it cannot be: int8 off the CPU or under bfloat16, a shortlist the run lacks
    or that does not fit its vocabularies, either for a `model` (a Seq2Seq or an Ensemble)
    whose output layer is not a plain projection (`Decoder.plain_projection`)."""
    int8 = search.weights == "int8"
    if (int8 or search.shortlist) and not all(d.plain_projection for d in _decoders(model)):
        asked = "search.weights=int8" if int8 else f"search.shortlist={search.shortlist}"
        raise ValueError(
            f"{asked} holds for a plain output projection (log p = log_softmax(W h + b)), "
            "and this model's decoder declares another output layer: decode it without"
        )
    if int8 and (device.type != "cpu" or precision != "float32"):
        raise ValueError(
            f"search.weights=int8 runs the CPU's int8 matmuls in place of float32 ones; "
            f"it cannot decode on {device} at precision {precision}"
        )
    if int8 and torch.backends.cpu.get_cpu_capability() not in FAST_INT8:
        log.warning(
            "search.weights=int8: PyTorch's int8 GEMM has no fast kernel for this CPU (%s), "
            "where it decodes several times slower than float32; an exported model's int8 "
            "(`alignmt export --int8`, ONNX Runtime) is fast here",
            torch.backends.cpu.get_cpu_capability(),
        )
    k = search.shortlist
    if not k:
        return Speed(int8=int8)
    return Speed(int8=int8, shortlist=fitting(k, shortlist, vocabs, None))


@contextmanager
def fast_step(model: Any, speed: Speed, rows: int) -> Iterator[tuple[StepFn, Join]]:
    """Inside the block, `model`'s step as `speed` asks, and the memory `join` it needs.
    On the CPU the decoder's float32 Linears run in int8 when asked and the others on
    weights packed for `rows` rows (see packed.py); with a shortlist, the projection (each
    ensemble member's) scores the step's words only.

    Args:
        model: a Seq2Seq or an Ensemble.
        speed: the choice.
        rows: the rows of a full step: width x beam size.
    """
    step: StepFn = model.decode_step
    join: Join = None
    with ExitStack() as stack:
        if speed.shortlist is not None:  # first: the projection is then the shortlist's
            step = Shortlisted(
                step, _projections(model), speed.shortlist, pad_id=model.pad_id, int8=speed.int8
            )
            stack.enter_context(step.active())
            join = step.join
        if speed.int8:
            stack.enter_context(int8_linears(model.decoder))
        stack.enter_context(packed_linears(model.decoder, rows=rows))
        yield step, join


def _projections(model: Any) -> list[nn.Linear]:
    """The vocabulary projection of the model's decoder, or of each ensemble member's."""
    return [decoder.projection for decoder in _decoders(model)]


def _decoders(model: Any) -> list[nn.Module]:
    """The model's decoder, or each ensemble member's."""
    return list(model.decoder) if isinstance(model.decoder, nn.ModuleList) else [model.decoder]
