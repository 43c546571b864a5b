"""What a decoder step says of the next token: its log-probabilities over the target
vocabulary, log p(y_i | y_<i, x), as one value, `LogProbs`, and the ways searches read it.

From a plain output projection (`Decoder.plain_projection`) a `LogProbs` holds the logits z,
and log p = z - logsumexp(z) is made only as far as a reader needs it: greedy search needs
the largest logit's alone, beam search each row's 2K best, and only sampling, constraints,
the step-through and export the whole row, whose log_softmax PyTorch makes in one pass.
Where the distribution is not a softmax of logits (a mixture, as a copy mechanism's is) it
holds log p itself, and every reader works with either.

The log-sum-exp is taken from the largest logit, which greedy and beam search find anyway:
torch.logsumexp would find it again, and on a 64 x 7,865 step this is over twice as fast.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class LogProbs(NamedTuple):
    """log p over the vocabulary, (..., V): as logits, or as log-probabilities."""

    logits: Tensor | None = None  # unnormalised: log p = logits - logsumexp(logits)
    normalised: Tensor | None = None  # log p itself, where there are no logits

    @property
    def scores(self) -> Tensor:
        """(..., V) scores whose softmax is p: the logits, or log p where there are none."""
        return self.normalised if self.logits is None else self.logits

    def full(self) -> Tensor:
        """(..., V) log p."""
        return self.logits.log_softmax(dim=-1) if self.logits is not None else self.normalised

    def best(self) -> tuple[Tensor, Tensor]:
        """Each row's most probable token and its log-probability, (...,) each."""
        top, tokens = self.scores.max(dim=-1)  # log_softmax's argmax is the logits'
        if self.logits is None:
            return tokens, top
        return tokens, -_log_sum_exp_from(self.logits, top.unsqueeze(-1)).squeeze(-1)

    def top(self, k: int, base: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Each row's k most probable tokens, best first: (..., k) their log-probabilities
        (plus `base` (..., 1) where given, beam search's summed scores) and (..., k) ids."""
        top, tokens = self.scores.topk(k, dim=-1)
        if self.logits is not None:
            largest = top[..., :1]
            top = top - largest - _log_sum_exp_from(self.logits, largest)
        return top if base is None else base + top, tokens

    def at(self, index: tuple) -> LogProbs:
        """The rows `index` picks of every tensor it holds (`[:, 0]`: the first step's)."""
        return LogProbs(*(None if t is None else t[index] for t in self))

    def float(self) -> LogProbs:
        """In float32 at least: a bfloat16 step's (autocast's) log-probabilities sum and rank
        as they do without autocast."""
        return LogProbs(*(None if t is None else _at_least_float32(t) for t in self))

    def forced(self, token: int) -> LogProbs:
        """The distribution with every token but `token` ruled out: log p(token) = 0."""
        if self.logits is not None:  # its logit kept: normalised, it is 0
            return LogProbs(logits=_only(self.logits, token, self.logits[..., token]))
        return LogProbs(normalised=_only(self.normalised, token, 0.0))


def _log_sum_exp_from(logits: Tensor, largest: Tensor) -> Tensor:
    """log sum_v exp(logits_v - largest), (..., 1), with `largest` (..., 1) the logits' max:
    a token's log-probability is its logit - largest - this."""
    return (logits - largest).exp_().sum(dim=-1, keepdim=True).log_()


def _at_least_float32(t: Tensor) -> Tensor:
    return t.to(torch.promote_types(t.dtype, torch.float32))


def _only(scores: Tensor, token: int, value: Tensor | float) -> Tensor:
    """-inf everywhere but at `token`, which holds `value`."""
    kept = torch.full_like(scores, float("-inf"))
    kept[..., token] = value
    return kept
