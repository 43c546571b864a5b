"""The rules every search follows, whatever runs it: how long an output may grow, how ended
hypotheses are ranked, and when a sentence's beam can stop. Every engine's search (in
torch_engine/, flax_engine/ and onnx_engine/) reads them from here, so the frameworks
cannot drift apart.

Nothing here imports torch or JAX. The functions take Python numbers, NumPy arrays, or a
framework's arrays where they only use arithmetic and comparison operators, which every
array library overloads alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


def max_output_len(src_len: Any, ratio: float, offset: int) -> np.ndarray:
    """The most tokens (</s> included) each sentence may output: ratio * |x| + offset,
    truncated, and at least one.

    The product is taken in float32, as a float32 tensor times a Python float is in
    PyTorch, so that every search gives a sentence the same limit.

    Args:
        src_len: (B,) source lengths (</s> included), any integer array or list.
        ratio, offset: the limit's slope and intercept.

    Returns:
        (B,) int64.
    """
    product = np.asarray(src_len, np.float32) * np.float32(ratio)
    return np.maximum(product.astype(np.int64) + offset, 1)


def length_penalty(length: Any, alpha: Any) -> Any:
    """GNMT's length penalty lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, eq. 14).

    Beam search ranks ended hypotheses by score / lp: alpha = 0 gives lp = 1 (raw summed
    log-probability); a larger alpha divides long outputs' (negative) scores by more, which
    favours them.

    Args:
        length: |Y|, a number or an array of lengths.
        alpha: the exponent.

    Returns:
        lp, shaped as `length`.
    """
    return ((5 + length) / 6) ** alpha


def coverage_penalty(covered: np.ndarray, beta: float) -> np.ndarray:
    """GNMT's coverage penalty cp = beta * sum_j log(min(sum_i alpha_ij, 1)) (Wu et al. 2016,
    eq. 14), in NumPy (the torch engine's is torch_engine/beam.py's, on its device): 0 once
    every source word has had a whole unit of attention, ever more negative as words are left
    with less. `covered` (N, T_src): each row's attention summed so far, 0 at padding, which
    is left out (as is a real word whose weight underflowed to exactly 0). Returns (N,)."""
    logs = np.log(np.where(covered > 0, np.minimum(covered, 1.0), 1.0))  # log 1 = 0: padding
    return beta * logs.sum(axis=1)


def cannot_improve(nth_ended: Any, best_live: Any, length: Any, limit: Any, alpha: Any) -> Any:
    """Whether a sentence's n-th best ended hypothesis ranks at least as high as its best live
    beam ever could, so that its search may stop.

    A live beam's summed log-probability only falls as it grows, and lp is monotone in the
    length, so the best it can reach is its score over the larger lp, at the current length
    or at the limit. With a score <= 0, dividing by the larger lp gives the larger quotient:
    the bound holds against both quotients at once, which needs no framework's `maximum`.

    Args:
        nth_ended: (B,) the n-th best ended hypothesis' score / lp (-inf: fewer ended).
        best_live: (B,) the best live beam's summed log-probability (<= 0).
        length: (B,) or () float, the live beams' length now.
        limit: (B,) float, the sentences' length limits.
        alpha: the length penalty's exponent.

    Returns:
        (B,) bool.
    """
    now, at_limit = length_penalty(length, alpha), length_penalty(limit, alpha)
    return (nth_ended >= best_live / now) & (nth_ended >= best_live / at_limit)


def check_search_args(beam_size: int, nbest: int, width: int) -> None:
    """Raise ValueError unless beam_size >= 1, 1 <= nbest <= beam_size and width >= 1."""
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    if not 1 <= nbest <= beam_size:
        raise ValueError(f"nbest must lie in [1, beam_size = {beam_size}], got {nbest}")
    if width < 1:
        raise ValueError(f"width must be at least 1, got {width}")


def sentence_limit(src_tokens: int, search: Any) -> int:
    """`max_output_len` of one sentence of `src_tokens` tokens (before its </s>), with the
    ratio and offset of `search` (a SearchConfig)."""
    return int(max_output_len([src_tokens + 1], search.max_len_ratio, search.max_len_offset)[0])


@dataclass(frozen=True)
class Sampling:
    """How to sample (torch_engine/sample.py): the reshaping of each step's distribution,
    and how many draws. Here, without torch, so that a server checks a request's settings before any
    framework is loaded."""

    temperature: float = 1.0  # < 1 sharpens the distribution, > 1 flattens it
    top_k: int = 0  # draw among the k most probable tokens; 0: all
    top_p: float = 1.0  # draw among the fewest tokens whose probability reaches p
    samples: int = 1  # outputs drawn per sentence
    seed: int = 0  # of the generator that draws them

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"the sampling temperature must be positive, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top-k must be 0 (off) or positive, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top-p must be in (0, 1], got {self.top_p}")
        if self.samples < 1:
            raise ValueError(f"samples must be at least 1, got {self.samples}")
