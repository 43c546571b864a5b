"""int8 matmuls for decoding: weights quantised once per output unit, activations per row at
each call, the product in int8 with int32 sums (`torch._int_mm`, PyTorch's int8 GEMM, which
runs on the CPU's VNNI dot-product instructions where it has them).

Symmetric quantisation (Jacob et al. 2018, with the zero point at 0): a weight row w_o
becomes round(w_o / s_o) in [-127, 127] with s_o = max|w_o| / 127, and an input row x_m
round(x_m / r_m) with r_m = max|x_m| / 127, so that

    y_mo = r_m s_o sum_k q(x)_mk q(w)_ok + b_o

Scaling each row and each output unit by its own largest value keeps the rounding error of
a row near 1/254 of its largest entry, whatever the spread between rows or units.

Measured on the 2-core VM of docs/benchmarks.md (torch 2.13, AVX-512 VNNI), 64 rows:
the 256 x 7,865 projection 1.41 ms float32 against 0.29 ms int8, a 512 x 1,536 gate
0.56 against 0.14 ms, with a largest error of 0.7-1.1% of the largest output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

_LEVELS = 127  # symmetric int8: -127..127, so that negating a value never overflows


@dataclass(frozen=True)
class Int8Weight:
    """A Linear's weight in int8, laid out for `torch._int_mm`."""

    values: Tensor  # (in, out) int8: the transposed, quantised weight
    scales: Tensor  # (out,) float32: each output unit's step s_o
    bias: Tensor | None  # (out,) float32, as it was

    def units(self, index: Tensor) -> Int8Weight:
        """Only the output units `index` ((S,) int64): a vocabulary projection's rows for
        a shortlist, taken from the quantised weight with no new rounding."""
        bias = None if self.bias is None else self.bias.index_select(0, index)
        values = self.values.index_select(1, index)
        return Int8Weight(values, self.scales.index_select(0, index), bias)


def quantize(weight: Tensor, bias: Tensor | None) -> Int8Weight:
    """A float Linear's (out, in) weight and its bias as an `Int8Weight`."""
    weight = weight.detach().float()
    scales = weight.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny) / _LEVELS
    values = (weight / scales[:, None]).round_().to(torch.int8)  # (out, in)
    bias = None if bias is None else bias.detach().float()
    return Int8Weight(values.t().contiguous(), scales, bias)


def int8_linear(x: Tensor, weight: Int8Weight) -> Tensor:
    """x W^T + b, the product in int8.

    Args:
        x: (..., in) float32.
        weight: from `quantize`.

    Returns:
        (..., out) float32.
    """
    rows = x.reshape(-1, x.size(-1))  # (M, in)
    step = rows.abs().amax(dim=1, keepdim=True).clamp(min=torch.finfo(x.dtype).tiny) / _LEVELS
    codes = (rows / step).round_().to(torch.int8)  # (M, in)
    out = torch._int_mm(codes, weight.values).float().mul_(weight.scales)  # (M, out)
    # One pass fewer than scaling by each in turn: at 320 x 7,865, 0.33 against 0.48 ms.
    out = out.mul_(step) if weight.bias is None else torch.addcmul(weight.bias, out, step)
    return out.view(*x.shape[:-1], out.size(-1))
