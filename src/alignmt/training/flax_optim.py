"""Optimisation in JAX (`train.engine=flax`): optax's clipped Adam and one update, compiled.

optim.py's `train_step` for a `FlaxSeq2Seq`: the same loss, clipping and Adam (PyTorch's
defaults), each micro-batch's loss weighted by its share of the update's target tokens, and
the update not applied (weights and Adam's moments kept) when its gradient is not finite. An
update is two compiled functions: the gradient of one micro-batch (the teacher-forced unroll
is an `nn.scan`), and Adam after clipping.

jit compiles once per input shape, so every batch is padded up a short ladder of lengths
(`bucket`) and, with `train.batch_size`, to that many rows: a run compiles a bounded number
of times. Padding rows have no target tokens and cost the loss nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from alignmt.checkpoint.flax_io import Params
from alignmt.config import TrainConfig
from alignmt.model.batch import Batch
from alignmt.model.flax_seq2seq import FlaxSeq2Seq, sequence_loss
from alignmt.text.vocab import Vocab

Arrays = dict[str, np.ndarray]  # src, src_len, tgt_in, tgt_out: a micro-batch, int32


def bucket(length: int) -> int:
    """The padded length of `length`: a multiple of 8 up to 32, of 16 up to 64, then of 32,
    so that a run meets a handful of shapes and each costs one compilation."""
    step = 8 if length <= 32 else 16 if length <= 64 else 32
    return -(-length // step) * step


def padded(batch: Batch, rows: int, eos_id: int) -> Arrays:
    """A micro-batch as numpy arrays of bucketed shape, with `rows` rows (≥ its own).

    Extra rows are a lone </s> source and an all-padding target: no loss, no gradient."""
    tight = (batch.src, batch.src_len, batch.tgt_in, batch.tgt_out)
    return _padded(*(tensor.numpy() for tensor in tight), rows, eos_id)


def teacher_forced(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]], vocabs: tuple[Vocab, Vocab]
) -> Arrays:
    """`padded(make_batch(pairs, *vocabs), bucket(len(pairs)), ...)` without torch: the
    specials added (</s> after the source, <s> before the decoder inputs), then padded."""
    src_vocab, tgt_vocab = vocabs
    src = [[*s, src_vocab.eos_id] for s, _ in pairs]
    tgt_in = [[tgt_vocab.bos_id, *t] for _, t in pairs]
    tgt_out = [[*t, tgt_vocab.eos_id] for _, t in pairs]
    src_len = np.array([len(s) for s in src])
    grids = (_grid(src), src_len, _grid(tgt_in), _grid(tgt_out))
    return _padded(*grids, bucket(len(pairs)), src_vocab.eos_id)


def _grid(rows: list[list[int]]) -> np.ndarray:
    """Id lists as one array, padded with pad_id (0) to the longest."""
    out = np.zeros((len(rows), max(map(len, rows))), np.int32)
    for i, ids in enumerate(rows):
        out[i, : len(ids)] = ids
    return out


def _padded(src, src_len, tgt_in, tgt_out, rows: int, eos_id: int) -> Arrays:
    t_src, t_tgt = bucket(src.shape[1]), bucket(tgt_in.shape[1])

    def grow(tight: np.ndarray, width: int, fill: int) -> np.ndarray:
        out = np.zeros((rows, width), np.int32)  # pad_id is 0
        out[: tight.shape[0], : tight.shape[1]] = tight
        out[tight.shape[0] :, 0] = fill
        return out

    lengths = np.ones(rows, np.int32)
    lengths[: src.shape[0]] = src_len
    return {
        "src": grow(src, t_src, eos_id),
        "src_len": lengths,
        "tgt_in": grow(tgt_in, t_tgt, 0),
        "tgt_out": grow(tgt_out, t_tgt, 0),
    }


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
    """Clipping to cfg.clip_norm (0: none), then Adam with PyTorch's defaults; the learning
    rate is a hyperparameter set before each update, as the PyTorch loop sets its groups'."""

    def adam(learning_rate):
        clip = optax.clip_by_global_norm(cfg.clip_norm) if cfg.clip_norm else optax.identity()
        return optax.chain(clip, optax.adam(learning_rate, b1=0.9, b2=0.999, eps=1e-8))

    return optax.inject_hyperparams(adam)(learning_rate=cfg.lr)


class Updates:
    """The compiled halves of an update, and the shapes they were compiled for."""

    def __init__(
        self,
        model: FlaxSeq2Seq,
        tx: optax.GradientTransformation,
        smoothing: float,
        pick: str | None = None,
    ):
        """`pick`: scheduled sampling's choice of the model's own tokens ("sample" or
        "argmax"), whose rate each `step` is given; None: teacher forcing."""

        def loss(params, arrays, key, teacher=1.0):
            rngs = {"dropout": key}
            if pick is not None:  # a stream of its own; teacher-forced runs keep their masks
                rngs["dropout"], rngs["sampling"] = jax.random.split(key)
            log_probs, _ = model.apply(
                {"params": params},
                arrays["src"],
                arrays["src_len"],
                arrays["tgt_in"],
                train=True,
                teacher=None if pick is None else teacher,
                pick=pick or "sample",
                rngs=rngs,
            )
            # a copying model's extended ids are no words to smooth over
            vocab = model.tgt_vocab if model.cfg.copy else None
            return sequence_loss(log_probs, arrays["tgt_out"], model.pad_id, smoothing, vocab)

        def apply(params, opt_state, grads, lr):
            opt_state.hyperparams["learning_rate"] = lr
            updates, new_state = tx.update(grads, opt_state, params)
            finite = jnp.isfinite(optax.tree.norm(grads))

            def keep(new, old):  # a non-finite update is not applied
                return jnp.where(finite, new, old)

            new_params = optax.apply_updates(params, updates)
            return (
                jax.tree_util.tree_map(keep, new_params, params),
                jax.tree_util.tree_map(keep, new_state, opt_state),
                finite,
            )

        self.grad = jax.jit(jax.value_and_grad(loss))
        self.apply = jax.jit(apply)
        self.loss = jax.jit(loss)
        self.shapes: set[tuple[int, ...]] = set()

    def step(self, params, opt_state, batches, weights, key, lr, teacher: float = 1.0):
        """One update on micro-batches with loss weights `weights`: (params, opt_state,
        weighted loss, finite). `teacher` is scheduled sampling's rate at this update."""
        total, grads = 0.0, None
        teacher = jnp.float32(teacher)  # an argument, not a constant: one compiled program
        for i, (arrays, weight) in enumerate(zip(batches, weights, strict=True)):
            self.shapes.add(arrays["src"].shape + arrays["tgt_in"].shape)
            loss, grad = self.grad(params, arrays, jax.random.fold_in(key, i), teacher)
            grad = jax.tree_util.tree_map(lambda g, w=weight: g * w, grad)
            grads = grad if grads is None else jax.tree_util.tree_map(jnp.add, grads, grad)
            total = total + loss * weight
        # a float32 array, not a Python float (weakly typed): the state keeps one signature
        params, opt_state, finite = self.apply(params, opt_state, grads, jnp.float32(lr))
        return params, opt_state, total, finite


def init_params(model: FlaxSeq2Seq, seed: int) -> Params:
    """Fresh weights, drawn as PyTorch draws them (`model.flax_init`)."""
    ids = jnp.ones((1, 2), jnp.int32)
    # Compiled as one program: run op by op, the forward pass that creates the weights
    # compiles each of its ~120 operations on its own, twice the time on a CPU.
    variables = jax.jit(model.init)(jax.random.key(seed), ids, jnp.array([2]), ids)
    return variables["params"]
