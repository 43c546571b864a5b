"""PyTorch's default initialisation for Flax layers, so that a Flax model starts from the
same distributions as the PyTorch one (He et al. 2015's uniform with a = sqrt(5), as
nn.Linear uses: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases alike;
nn.GRU / nn.LSTM: U(-1/sqrt(H), 1/sqrt(H)); nn.Embedding: N(0, 1), the padding row 0)."""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp


def uniform(bound: float):
    """An initializer drawing U(-bound, bound)."""

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def torch_dense(features: int, fan_in: int, *, bias: bool = True, bound: float | None = None):
    """nn.Dense(features) initialised as nn.Linear(fan_in, features) is (or U(-bound, bound))."""
    init = uniform(1 / math.sqrt(fan_in) if bound is None else bound)
    return nn.Dense(features, use_bias=bias, kernel_init=init, bias_init=init)


def embedding_init(pad_id: int, std: float = 1.0):
    """N(0, std^2) with the padding row zero, as nn.Embedding(padding_idx=pad_id) starts."""

    def init(key, shape, dtype=jnp.float32):
        return (std * jax.random.normal(key, shape, dtype)).at[pad_id].set(0)

    return init


class SplitDense(nn.Module):
    """A bias-free (in, out) kernel applied to rows [lo, hi) of it only: W [a; b] = W_a a + W_b b
    without concatenating, so the part that does not change can be computed once."""

    features: int
    fan_in: int

    @nn.compact
    def __call__(self, inputs: jax.Array, lo: int, hi: int) -> jax.Array:
        kernel = self.param(
            "kernel", uniform(1 / math.sqrt(self.fan_in)), (self.fan_in, self.features)
        )
        return inputs @ kernel[lo:hi].astype(inputs.dtype)
