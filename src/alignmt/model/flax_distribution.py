"""What a Flax decoder step says of the next token: distribution.py's `LogProbs` in JAX, log p
over the target vocabulary as logits or as log-probabilities, read as the searches and the
loss read it. A NamedTuple, so that it passes through `jit`, `scan` and `while_loop`."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array


class LogProbs(NamedTuple):
    """log p over the vocabulary, (..., V): as logits, or as log-probabilities."""

    logits: Array | None = None  # unnormalised: log p = logits - logsumexp(logits)
    normalised: Array | None = None  # log p itself, where there are no logits

    @property
    def scores(self) -> Array:
        """(..., V) scores whose softmax is p: the logits, or log p where there are none; in
        float32 at least (a bfloat16 model's are read in float32, as PyTorch's under
        autocast are)."""
        return _wide(self.normalised if self.logits is None else self.logits)

    def full(self) -> Array:
        """(..., V) log p, in float32 at least."""
        if self.normalised is not None:
            return _wide(self.normalised)
        return jax.nn.log_softmax(_wide(self.logits), axis=-1)

    def best(self) -> tuple[Array, Array]:
        """Each row's most probable token and its log-probability, (...,) each."""
        top = self.scores.max(axis=-1, keepdims=True)  # log_softmax's argmax is the logits'
        tokens = self.scores.argmax(axis=-1)
        if self.logits is None:
            return tokens, top[..., 0]
        return tokens, -_log_sum_exp_from(_wide(self.logits), top)[..., 0]

    def top(self, k: int, base: Array) -> tuple[Array, Array]:
        """Each row's k most probable tokens, best first: (..., k) their log-probabilities
        plus `base` (..., 1) (beam search's summed scores), and (..., k) ids."""
        top, tokens = jax.lax.top_k(self.scores, k)
        if self.logits is None:
            return base + top, tokens
        # the max again rather than top[..., :1]: a second use of top_k's values makes
        # XLA:CPU sort whole rows instead of selecting, 100x slower at V = 7,865
        logits = _wide(self.logits)
        largest = logits.max(axis=-1, keepdims=True)
        return base + top - largest - _log_sum_exp_from(logits, largest), tokens


def _log_sum_exp_from(logits: Array, largest: Array) -> Array:
    """(..., 1) log sum_v exp(logits_v - largest), `largest` the logits' max."""
    return jnp.log(jnp.exp(logits - largest).sum(axis=-1, keepdims=True))


def _wide(scores: Array) -> Array:
    """`scores` in float32 at least: bfloat16 ones widened, float32 and float64 as they are."""
    return scores.astype(jnp.promote_types(scores.dtype, jnp.float32))
