"""Teacher-forced attribution on the flax engine: what it answers for `Engine.relevance`'s
"gradient", "integrated" and "erasure" (attention and shift-att are read over any engine's
step, decoding/forced.py). The methods are the torch engine's (its relevance.py says what
each is); here the gradients are `jax.grad`'s of the model's teacher-forced log-probability
f_i = log p(y_i | y_<i, x) with respect to the source's embeddings x_j (E,), which the
encoder reads in place of the ids' (`FlaxSeq2Seq.encode`'s `embedded`):

- "gradient": |x_j . df_i/dx_j|, one gradient per output position, `vmap`ped over them.
- "integrated": |sum_e IG_je| from a source of zero embeddings (the embedding of <pad>),
  over `steps` points of Gauss-Legendre quadrature on [0, 1]: the rule Captum's integrated
  gradients (the torch engine's) uses by default, so that both engines take the same points.
- "erasure": f_i(x) - f_i(x with x_j = 0), one teacher-forced pass per source position.

Each method is one compiled program per padded batch shape.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from alignmt.checkpoint.flax_io import Params
from alignmt.decoding.engine import Method, Pairs
from alignmt.decoding.flax_engine.batch import pad_batch
from alignmt.model.flax_seq2seq import FlaxSeq2Seq

Array = jax.Array


def pair_relevance(
    model: FlaxSeq2Seq,
    params: Params,
    pairs: Pairs,
    method: Method,
    *,
    batch_size: int = 64,
    steps: int = 16,
) -> list[np.ndarray]:
    """`Engine.relevance` of each (source ids, output ids) pair (without specials), in input
    order: (len(output) + 1, len(source) + 1) float32, </s> last on both sides."""
    found: list[np.ndarray] = [np.zeros(0)] * len(pairs)
    run = jax.jit(partial(_relevance, model, method=method, steps=steps))
    for rows, srcs, outs in _batches(model, pairs, batch_size):
        src, src_len = pad_batch(srcs, len(srcs), model)
        tgt_in, tgt_out = _targets(model, outs)
        with jax.default_matmul_precision("highest"):
            scores = np.asarray(run(params, src, src_len, tgt_in, tgt_out), np.float32)
        for b, k in enumerate(rows):
            found[k] = scores[b, : len(outs[b]), : len(srcs[b])]
    return found


def _batches(model: FlaxSeq2Seq, pairs: Pairs, batch_size: int) -> Iterator[tuple]:
    """(the pairs' indices, their sources and outputs each ending in </s>), `batch_size` at a
    time, in order of length."""
    order = sorted(range(len(pairs)), key=lambda k: (len(pairs[k][0]), len(pairs[k][1])))
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        srcs = [[*pairs[k][0], model.eos_id] for k in rows]
        outs = [[*pairs[k][1], model.eos_id] for k in rows]
        yield rows, srcs, outs


def _targets(model: FlaxSeq2Seq, outs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """The decoder's inputs (<s> y_1 ..) and the tokens it is scored on (y_1 .. </s>),
    (B, T_tgt) int32 each, padded with <pad>."""
    width = max(len(out) for out in outs)
    tgt_in = np.full((len(outs), width), model.pad_id, np.int32)
    tgt_out = np.full((len(outs), width), model.pad_id, np.int32)
    for b, out in enumerate(outs):
        tgt_in[b, : len(out)] = [model.bos_id, *out[:-1]]
        tgt_out[b, : len(out)] = out
    return tgt_in, tgt_out


def _relevance(
    model: FlaxSeq2Seq,
    params: Params,
    src: Array,
    src_len: Array,
    tgt_in: Array,
    tgt_out: Array,
    *,
    method: Method,
    steps: int,
) -> Array:
    """(B, T_tgt, T_src) how much each source token moved each target token by `method`."""
    table = params["encoder"]["embed"]["embedding"]  # (V_src, E)
    x = table[model.known_source(src)]  # (B, T_src, E) the source's embeddings

    def f(embedded: Array) -> Array:  # (B, T_tgt) f_i of every sentence
        log_probs, _ = model.apply({"params": params}, src, src_len, tgt_in, embedded=embedded)
        return jnp.take_along_axis(log_probs.full(), tgt_out[..., None], axis=-1)[..., 0]

    def grad_at(embedded: Array, i: Array) -> Array:  # (B, T_src, E) df_i/dx, each sentence's
        return jax.grad(lambda e: f(e)[:, i].sum())(embedded)

    positions = jnp.arange(tgt_out.shape[1])
    if method == "gradient":
        grads = jax.vmap(grad_at, in_axes=(None, 0))(x, positions)  # (T_tgt, B, T_src, E)
        return jnp.abs((grads * x).sum(-1)).transpose(1, 0, 2)
    if method == "integrated":
        alphas, weights = _gauss_legendre(steps)

        def integrated(i: Array) -> Array:  # (B, T_src)
            grads = jax.vmap(lambda a: grad_at(a * x, i))(alphas)  # (steps, B, T_src, E)
            return jnp.abs((x * jnp.tensordot(weights, grads, axes=1)).sum(-1))

        return jax.lax.map(integrated, positions).transpose(1, 0, 2)
    full = f(x)  # erasure
    erased = jax.lax.map(lambda j: full - f(x.at[:, j].set(0.0)), jnp.arange(src.shape[1]))
    return erased.transpose(1, 2, 0)  # (T_src, B, T_tgt) -> (B, T_tgt, T_src)


def _gauss_legendre(steps: int) -> tuple[Any, Any]:
    """The quadrature's points on [0, 1] and their weights, which sum to 1."""
    points, weights = np.polynomial.legendre.leggauss(steps)
    return jnp.asarray(0.5 * (1 + points), jnp.float32), jnp.asarray(0.5 * weights, jnp.float32)
