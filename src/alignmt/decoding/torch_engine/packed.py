"""Decoding matmuls on weights prepared once: MKL's packed GEMM for the Linears of a decoder
in float32 (`packed_linears`), or int8 products (`int8_linears`, see int8.py).

A decoder step multiplies a few dozen rows by each weight matrix. Ordinary sgemm re-lays out
the weight for its kernel on every call, and with so few rows that copy is a large part of
the call; `cblas_sgemm_pack` does it once, and `cblas_sgemm_compute` then reads the packed
copy. PyTorch exposes the pair as `torch.ops.mkl._mkl_reorder_linear_weight` and
`_mkl_linear` (its compiler uses them for frozen CPU models). The result is the same sgemm
arithmetic: on the benchmark model greedy and beam search gave the same 1,000 outputs.

Measured on the matched Multi30k model of benchmarks/speed.py, 2 threads, interleaved in
one process (sentences/s): greedy 421 / 445 / 434 plain against 478 / 470 / 492 packed,
beam 5 116 / 126 against 129 / 145, with the same outputs. A 512 x 7,865 projection of 64
rows: 2.24 ms plain, 1.68 ms packed.

Only float32 CPU Linears with MKL are packed, and only outside autocast: `_mkl_linear` is
not an op autocast knows, so under `--precision bfloat16` it would quietly run the matmuls
in float32. Anything else runs as it was, and so does a Linear whose forward is already
replaced (by `int8_linears`, entered first).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from alignmt.decoding.torch_engine.int8 import Int8Weight, int8_linear, quantize

# Fewer outputs than this stay float32: quantising a Linear's input costs as much as its
# product when it has few outputs, as the additive score's v (A -> 1) over every source
# position, which ran 1.7 times slower in int8 (0.017 against 0.010 s a greedy pass).
INT8_MIN_UNITS = 16


def mkl_packing_available() -> bool:
    """Whether this PyTorch build has MKL and its packed-GEMM linear ops."""
    ops = getattr(torch.ops, "mkl", None)
    return torch.backends.mkl.is_available() and all(
        hasattr(ops, op) for op in ("_mkl_reorder_linear_weight", "_mkl_linear")
    )


@contextmanager
def packed_linears(module: nn.Module, rows: int) -> Iterator[None]:
    """Inside the block, run each float32 CPU `nn.Linear` of `module` on a weight packed
    once, for inputs of `rows` rows (others still work). For inference only: the weights
    must not change inside the block, and no gradient flows to them. Entered under CPU
    autocast, it packs nothing (see the module docstring).

    Args:
        module: the model part whose Linears to pack (a decoder).
        rows: the rows the packing is tuned for: the batch of one decoding step.
    """
    if not mkl_packing_available():
        yield
        return
    packed = {}  # one packing per weight: a tied weight is shared by two modules

    def pack(linear: nn.Linear) -> Callable[[Tensor], Tensor]:
        key = id(linear.weight)
        if key not in packed:
            packed[key] = torch.ops.mkl._mkl_reorder_linear_weight(linear.weight, rows)
        return _packed_forward(linear, packed[key], rows)

    with _replaced_forwards(module, pack):
        yield


@contextmanager
def int8_linears(module: nn.Module) -> Iterator[None]:
    """Inside the block, each float32 CPU `nn.Linear` of `module` with at least
    INT8_MIN_UNITS outputs multiplies in int8 (see int8.py): its weight is quantised once and
    kept until the weight changes, its input at each call. For inference only, as
    `packed_linears`; under CPU autocast it changes nothing."""
    with _replaced_forwards(module, _int8_forward, units=INT8_MIN_UNITS):
        yield


@contextmanager
def _replaced_forwards(
    module: nn.Module, make: Callable[[nn.Linear], Callable[[Tensor], Tensor]], units: int = 1
) -> Iterator[None]:
    """Run each float32 CPU Linear of `module` with at least `units` outputs whose forward is
    still nn.Linear's on `make(linear)` inside the block; nothing where gradients flow or
    under CPU autocast."""
    linears = [
        m
        for m in module.modules()
        if isinstance(m, nn.Linear)
        and m.out_features >= units
        and m.weight.dtype == torch.float32
        and m.weight.device.type == "cpu"
        and "forward" not in vars(m)  # already replaced by an outer block
    ]
    if torch.is_grad_enabled() or torch.is_autocast_enabled("cpu"):
        linears = []
    for linear in linears:
        linear.forward = make(linear)
    try:
        yield
    finally:
        for linear in linears:
            del linear.forward  # back to nn.Linear.forward


def _packed_forward(linear: nn.Linear, packed: Tensor, rows: int):
    plain = nn.Linear.forward.__get__(linear)

    def forward(x: Tensor) -> Tensor:  # (..., in) -> (..., out)
        if x.dtype != torch.float32:
            return plain(x)
        return torch.ops.mkl._mkl_linear(x, packed, linear.weight, linear.bias, rows)

    return forward


# id(weight) -> (the weight, its version when quantised, the result); a weak reference, so
# that a freed model's entry is dropped, and a new tensor at a reused id is not mistaken
# for it. The server and `Translator` decode many batches with the same weights.
_QUANTISED: dict[int, tuple[weakref.ref, int, Int8Weight]] = {}


def quantised(linear: nn.Linear) -> Int8Weight:
    """`linear`'s weight and bias in int8, quantised at the first call and again only after
    the weight changes (its in-place version counter moves)."""
    weight, key = linear.weight, id(linear.weight)
    found = _QUANTISED.get(key)
    if found is not None and found[0]() is weight and found[1] == weight._version:
        return found[2]
    result = quantize(weight, linear.bias)
    drop = weakref.ref(weight, lambda _: _QUANTISED.pop(key, None))
    _QUANTISED[key] = (drop, weight._version, result)
    return result


def _int8_forward(linear: nn.Linear) -> Callable[[Tensor], Tensor]:
    plain = nn.Linear.forward.__get__(linear)
    weight = quantised(linear)

    def forward(x: Tensor) -> Tensor:  # (..., in) -> (..., out)
        return int8_linear(x, weight) if x.dtype == torch.float32 else plain(x)

    return forward
