"""The search rules both frameworks read: the length limit as PyTorch's float32 arithmetic
gives it, GNMT's length penalty, and the stopping bound written without a `maximum`."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from alignmt.decoding.rules import (
    cannot_improve,
    check_search_args,
    length_penalty,
    max_output_len,
)


@pytest.mark.parametrize("ratio, offset", [(2.0, 10), (1.5, 10), (1.1, 0), (0.7, 3), (0.3, -2)])
def test_the_length_limit_is_a_float32_tensors_product_truncated(ratio, offset):
    lengths = torch.arange(0, 400)
    torch_limit = ((lengths.float() * ratio).long() + offset).clamp(min=1)
    assert max_output_len(lengths.tolist(), ratio, offset).tolist() == torch_limit.tolist()


def test_the_length_limit_is_at_least_one_token():
    assert max_output_len([1, 10], 2.0, 10).tolist() == [12, 30]
    assert max_output_len([0, 2], 0.0, 0).tolist() == [1, 1]


def test_the_length_penalty_is_gnmts_on_numbers_and_on_arrays():
    assert length_penalty(1, 0.7) == 1.0  # (5 + 1) / 6 = 1 whatever alpha
    assert length_penalty(7, 1.0) == 2.0
    np.testing.assert_allclose(length_penalty(np.array([1, 13]), 0.5), [1.0, math.sqrt(3.0)])


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0, -0.5])
@pytest.mark.parametrize("array", [torch.from_numpy, np.asarray], ids=["torch", "numpy"])
def test_the_stopping_bound_is_the_score_over_the_larger_penalty(alpha, array):
    """The bound without `maximum` gives what score / max(lp now, lp at the limit) gives, bit
    for bit, for live scores <= 0 (and -inf), in each framework's own arithmetic."""
    rng = np.random.default_rng(0)
    n = 4000
    live = (-rng.random(n) * 30).astype(np.float32)
    live[:50], live[50:100] = -np.inf, 0.0
    length = rng.integers(1, 60, n).astype(np.float32)
    limit = length + rng.integers(0, 60, n).astype(np.float32)
    live, length, limit = array(live), array(length), array(limit)
    now, at_limit = length_penalty(length, alpha), length_penalty(limit, alpha)
    maximum = torch.maximum if isinstance(now, torch.Tensor) else np.maximum
    bound = live / maximum(now, at_limit)
    toward_zero = np.nextafter(np.asarray(bound), np.float32(0))
    away = np.nextafter(np.asarray(bound), np.float32(-np.inf))
    # ended scores right at, just above and just below the bound, and far from it
    verdicts = []
    for ended in (bound, array(toward_zero), array(away), live):
        expected = np.asarray(ended >= bound)
        got = np.asarray(cannot_improve(ended, live, length, limit, alpha))
        np.testing.assert_array_equal(got, expected)
        verdicts.append(int(expected.sum()))
    assert verdicts[:2] == [n, n] and verdicts[2] < n  # one ulp below the bound is not enough


@pytest.mark.parametrize(
    "args, message",
    [((0, 1, 1), "beam_size"), ((2, 0, 1), "nbest"), ((2, 3, 1), "nbest"), ((2, 1, 0), "width")],
)
def test_bad_search_sizes_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        check_search_args(*args)
    check_search_args(2, 2, 1)  # and good ones pass
