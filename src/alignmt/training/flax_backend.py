"""Training in Flax (`train.engine=flax`): the `loop.Backend` that trains a `FlaxSeq2Seq`
with the same model, loss, schedule, clipping and Adam as the PyTorch backend, jit-compiled
(`flax_optim`), and writes the same run folder. `loop.Loop` runs it as it runs PyTorch's:
steps, the clock, evaluation and checkpoint cadence, early stopping, signals, snapshots, the
run log and the skipping of non-finite updates are the loop's.

Validation is JAX's too: the teacher-forced loss, and the greedy translations of the flax
engine, which `validate.validate` scores as it scores PyTorch's (each validation compiles
its search afresh, as the weights it searches with are new).

The checkpoint holds the weights in PyTorch's names and layouts (`checkpoint.flax_io`), so
every command reads a Flax-trained run; `last.safetensors` adds optax's Adam state and the
dropout key under `_train.flax.`, and a resume by the other backend is refused.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from alignmt.checkpoint.flax_io import Params, build_model, load_flax_train_state, save_flax
from alignmt.checkpoint.format import as_tuples, check_same_model
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.config import Config, SearchConfig
from alignmt.decoding.flax_engine.engine import FlaxEngine
from alignmt.model.flax_device import jax_device
from alignmt.model.flax_seq2seq import FlaxSeq2Seq, sequence_loss
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.prepare import Text
from alignmt.training.batches import Progress, Step
from alignmt.training.distributed import World
from alignmt.training.flax_optim import (
    Arrays,
    Updates,
    bucket,
    init_params,
    make_optimizer,
    padded,
    teacher_forced,
)
from alignmt.training.optim import teacher_rate

log = logging.getLogger(__name__)

STATE = "flax."  # training-state tensors of this backend, after `format.TRAIN_PREFIX`


class FlaxBackend:
    """A `loop.Backend` over a Flax model, its parameters, optax's state and a dropout key,
    in one process."""

    compiles = "jax.jit"  # once per batch shape (flax_optim.py), the first before step 1

    def __init__(
        self,
        *,
        cfg: Config,
        model: FlaxSeq2Seq,
        tx: optax.GradientTransformation,
        params: Params,
        opt_state: optax.OptState,
        key: jax.Array,
        text: Text,
    ) -> None:
        self.cfg, self.model, self.text = cfg, model, text
        self.params, self.opt_state, self.key = params, opt_state, key
        sampled = cfg.train.scheduled_sampling != "none"
        self.updates = Updates(
            model, tx, cfg.train.label_smoothing, cfg.train.sampling_pick if sampled else None
        )
        self.valid_loss_of = jax.jit(_valid_loss(model))
        self.lr = cfg.train.lr

    def set_lr(self, lr: float) -> None:
        self.lr = lr

    def update(self, step: Step, index: int) -> jax.Array | None:
        """See `loop.Backend.update`: `Updates.apply` keeps the parameters and optax's
        state of an update that is not finite; the loss is left on the device, unread."""
        cfg = self.cfg.train
        rows = cfg.batch_size if not cfg.batch_tokens else None
        eos = self.text.tgt_vocab.eos_id
        arrays = [padded(b, rows or bucket(b.src.size(0)), eos) for b in step.batches]
        weights = [b.num_tgt_tokens / step.tokens for b in step.batches]
        key = jax.random.fold_in(self.key, index)
        self.params, self.opt_state, loss, finite = self.updates.step(
            self.params, self.opt_state, arrays, weights, key, self.lr, teacher_rate(cfg, index)
        )
        return loss if bool(finite) else None

    def mean_loss(self, losses: list[jax.Array]) -> float | None:
        return float(sum(losses)) / len(losses) if losses else None

    def valid_loss(self, pairs: list[tuple[list[int], list[int]]]) -> tuple[float, int]:
        vocabs = (self.text.src_vocab, self.text.tgt_vocab)
        real = sum(len(tgt) + 1 for _, tgt in pairs)  # + </s>
        return float(self.valid_loss_of(self.params, teacher_forced(pairs, vocabs))), real

    def engine(self, search: SearchConfig) -> FlaxEngine:
        """The current parameters on the flax engine: a new engine, whose search compiles
        afresh, as the weights it searches with are new."""
        return FlaxEngine(self.model, self.params)

    def trained_model(self, run_dir: Path) -> Seq2Seq:
        """The run's best (or last) weights as a PyTorch Seq2Seq, read back from its folder."""
        return load_checkpoint(run_dir).model

    def rng_state(self) -> dict[str, Any]:
        return {}  # the dropout key is a tensor of the train state; Python's is saved there

    def save_weights(self, path: Path, step: int) -> None:
        self._save(path, step, train_state=None)

    def save_state(self, path: Path, progress: Progress, rngs: list[dict[str, Any]]) -> None:
        self._save(path, progress.step, train_state=self._train_state(progress))

    def _save(self, path: Path, step: int, train_state: tuple | None) -> None:
        text = self.text
        save_flax(
            path,
            jax.device_get(self.params),
            self.cfg,
            text.src_vocab,
            text.tgt_vocab,
            step,
            tokenizers=text.tokenizers,
            train_state=train_state,
        )

    def _train_state(self, progress: Progress) -> tuple[dict[str, np.ndarray], dict]:
        tensors = {
            STATE + "opt" + jax.tree_util.keystr(path): np.asarray(leaf)
            for path, leaf in jax.tree_util.tree_flatten_with_path(self.opt_state)[0]
        }
        tensors[STATE + "key"] = np.asarray(jax.random.key_data(self.key))
        values = {
            "backend": "flax",
            "progress": asdict(progress),
            "python_rng": random.getstate(),
            "compiled_shapes": len(self.updates.shapes),
        }
        return tensors, values


def _valid_loss(model: FlaxSeq2Seq):
    """The teacher-forced loss of a padded batch, without dropout or smoothing."""

    def loss(params: Params, arrays: Arrays) -> jax.Array:
        src, src_len, tgt_in = arrays["src"], arrays["src_len"], arrays["tgt_in"]
        log_probs, _ = model.apply({"params": params}, src, src_len, tgt_in)
        return sequence_loss(log_probs, arrays["tgt_out"], model.pad_id)

    return loss


def restore(path: Path, tx: optax.GradientTransformation, cfg: Config, text: Text):
    """(params, opt_state, key, progress) of the Flax run whose last checkpoint is `path`."""
    check_same_model(path, cfg, text.src_vocab, text.tgt_vocab)
    params, tensors, values = load_flax_train_state(path)
    if values.get("backend") != "flax":
        raise ValueError(
            f"{path}: was trained with train.engine=torch, whose optimiser state (PyTorch's "
            "Adam) train.engine=flax cannot resume; resume it with train.engine=torch, or "
            "start a new run"
        )
    leaves, tree = jax.tree_util.tree_flatten_with_path(tx.init(params))
    # The file holds optax's scalars (step counts, the rate) as (1,) arrays; back in their own
    # shape (), or the updates compile to other code that rounds otherwise, and a resumed run
    # drifts from an uninterrupted one by a few ulps.
    opt = [
        jnp.asarray(tensors[STATE + "opt" + jax.tree_util.keystr(p)]).reshape(leaf.shape)
        for p, leaf in leaves
    ]
    key = jax.random.wrap_key_data(jnp.asarray(tensors[STATE + "key"]))
    random.setstate(as_tuples(values["python_rng"]))
    params = jax.tree_util.tree_map(jnp.array, params)  # XLA's own (aligned) buffers
    return params, jax.tree_util.tree_unflatten(tree, opt), key, values["progress"]


def one_process(cfg: Config) -> World:
    """The one process Flax trains in, once the config is one it trains: refused, naming
    why, before the run claims its folder."""
    if cfg.train.guided_alignment:
        raise ValueError(
            "train.guided_alignment is trained by the PyTorch backend only: use train.engine=torch"
        )
    if cfg.train.cuda_graphs:
        raise ValueError(
            "train.cuda_graphs captures PyTorch's unroll; XLA compiles the Flax step whole "
            "already: leave it false with train.engine=flax"
        )
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError("train.engine=flax trains in one process; run it without torchrun")
    if cfg.train.precision != "float32":
        raise ValueError(
            f"train.precision={cfg.train.precision}: train.engine=flax trains in float32 only"
        )
    return World()


@contextmanager
def begin(
    cfg: Config, text: Text, world: World, last: Path | None
) -> Iterator[tuple[FlaxBackend, Progress]]:
    """New parameters on JAX's device for train.device (by default JAX's default), or those
    of the run whose last checkpoint is `last`, restored; inside, that device is JAX's
    default, so that the loop's arrays go there too."""
    model = build_model(cfg.model, text.src_vocab, text.tgt_vocab)
    tx = make_optimizer(cfg.train)
    state = Progress(task_rng=random.Random(cfg.seed).getstate(), accumulate=cfg.train.accumulate)
    with jax.default_device(jax_device(cfg.train.device, flag="train.device")):
        if last is not None:
            params, opt_state, key, saved = restore(last, tx, cfg, text)
            state = Progress(**{**saved, "accumulate": cfg.train.accumulate})
            log.info("resuming %s at step %d", last.parent, state.step)
        else:
            params = init_params(model, cfg.seed)
            opt_state, key = tx.init(params), jax.random.key(cfg.seed + 1)
        backend = FlaxBackend(
            cfg=cfg, model=model, tx=tx, params=params, opt_state=opt_state, key=key, text=text
        )
        yield backend, state
    log.info("flax: compiled the update for %d batch shapes", len(backend.updates.shapes))
