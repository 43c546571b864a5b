"""Decoding matmuls on weights packed once: MKL's packed GEMM for the Linears of a decoder.

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
in float32. Anything else runs as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn


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
    linears = [
        m
        for m in module.modules()
        if isinstance(m, nn.Linear)
        and m.weight.dtype == torch.float32
        and m.weight.device.type == "cpu"
    ]
    skip = torch.is_grad_enabled() or torch.is_autocast_enabled("cpu")
    if skip or not linears or not mkl_packing_available():
        yield
        return
    packed = {}  # one packing per weight: a tied weight is shared by two modules
    for linear in linears:
        key = id(linear.weight)
        if key not in packed:
            packed[key] = torch.ops.mkl._mkl_reorder_linear_weight(linear.weight, rows)
        linear.forward = _packed_forward(linear, packed[key], rows)
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
