"""Training in Flax (`train.backend=flax`): the same model, loss, schedule, clipping and Adam as
the PyTorch loop, jit-compiled, writing the same run folder.

`FlaxLoop` is `loop.Loop` with the update, the learning rate, the validation and the saving
done in JAX; everything else (steps, the clock, evaluation and checkpoint cadence, early
stopping, signals, snapshots, the run log) is the PyTorch loop's own code. An update is two
compiled functions: the gradient of one micro-batch (the teacher-forced unroll is an
`nn.scan`), and Adam after clipping, skipped when the gradient is not finite.

jit compiles once per input shape, so every batch is padded up a short ladder of lengths
(`bucket`) and, with `train.batch_size`, to that many rows: a run compiles a bounded number
of times, which it logs. Padding rows have no target tokens and cost the loss nothing.

The checkpoint holds the weights in PyTorch's names and layouts (`checkpoint.flax_io`), so
every command reads a Flax-trained run; `last.safetensors` adds optax's Adam state and the
dropout key under `_train.flax.`, and a resume by the other backend is refused.
"""

from __future__ import annotations

import logging
import os
import random
from dataclasses import asdict
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch

from alignmt.checkpoint.flax_io import (
    Params,
    build_model,
    load_flax_train_state,
    save_flax,
    tensors_from_params,
)
from alignmt.checkpoint.format import LAST, as_tuples, check_same_model
from alignmt.checkpoint.rundir import write_text
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.config import Config, TrainConfig, dump_config
from alignmt.model.batch import Batch
from alignmt.model.flax_seq2seq import FlaxSeq2Seq, sequence_loss
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.prepare import Text
from alignmt.training.batches import Progress, Step
from alignmt.training.distributed import World
from alignmt.training.loop import Loop
from alignmt.training.validate import validate

log = logging.getLogger(__name__)

STATE = "flax."  # training-state tensors of this backend, after `format.TRAIN_PREFIX`


def bucket(length: int) -> int:
    """The padded length of `length`: a multiple of 8 up to 32, of 16 up to 64, then of 32,
    so that a run meets a handful of shapes and each costs one compilation."""
    step = 8 if length <= 32 else 16 if length <= 64 else 32
    return -(-length // step) * step


def padded(batch: Batch, rows: int, eos_id: int) -> dict[str, np.ndarray]:
    """A micro-batch as numpy arrays of bucketed shape, with `rows` rows (≥ its own).

    Extra rows are a lone </s> source and an all-padding target: no loss, no gradient."""
    t_src, t_tgt = bucket(batch.src.size(1)), bucket(batch.tgt_in.size(1))

    def grow(tensor, width: int, fill: int) -> np.ndarray:
        out = np.zeros((rows, width), np.int32)  # pad_id is 0
        out[: tensor.size(0), : tensor.size(1)] = tensor.numpy()
        out[tensor.size(0) :, 0] = fill
        return out

    src_len = np.ones(rows, np.int32)
    src_len[: batch.src.size(0)] = batch.src_len.numpy()
    return {
        "src": grow(batch.src, t_src, eos_id),
        "src_len": src_len,
        "tgt_in": grow(batch.tgt_in, t_tgt, 0),
        "tgt_out": grow(batch.tgt_out, t_tgt, 0),
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

    def __init__(self, model: FlaxSeq2Seq, tx: optax.GradientTransformation, smoothing: float):
        def loss(params, arrays, key):
            logits, _ = model.apply(
                {"params": params},
                arrays["src"],
                arrays["src_len"],
                arrays["tgt_in"],
                train=True,
                rngs={"dropout": key},
            )
            return sequence_loss(logits, arrays["tgt_out"], model.pad_id, smoothing)

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

    def step(self, params, opt_state, batches, weights, key, lr):
        """One update on micro-batches with loss weights `weights`: (params, opt_state,
        weighted loss, finite)."""
        total, grads = 0.0, None
        for i, (arrays, weight) in enumerate(zip(batches, weights, strict=True)):
            self.shapes.add(arrays["src"].shape + arrays["tgt_in"].shape)
            loss, grad = self.grad(params, arrays, jax.random.fold_in(key, i))
            grad = jax.tree_util.tree_map(lambda g, w=weight: g * w, grad)
            grads = grad if grads is None else jax.tree_util.tree_map(jnp.add, grads, grad)
            total = total + loss * weight
        # a float32 array, not a Python float (weakly typed): the state keeps one signature
        params, opt_state, finite = self.apply(params, opt_state, grads, jnp.float32(lr))
        return params, opt_state, total, finite


def init_params(model: FlaxSeq2Seq, seed: int) -> Params:
    """Fresh weights, drawn as PyTorch draws them (`model.flax_init`)."""
    ids = jnp.ones((1, 2), jnp.int32)
    variables = model.init(jax.random.key(seed), ids, jnp.array([2]), ids)
    return variables["params"]


class FlaxLoop(Loop):
    """`Loop` with the update, learning rate, validation and checkpoints in JAX."""

    def __init__(self, *, params: Params, opt_state, key, **common) -> None:
        self.params, self.opt_state, self.key = params, opt_state, key
        super().__init__(**common)  # `model` is the FlaxSeq2Seq; `optimizer` optax's
        self.updates = Updates(self.model, self.optimizer, self.cfg.train.label_smoothing)
        self.lr = self.cfg.train.lr

    def _wrap(self):
        return None  # one process: no DDP

    def _set_lr(self) -> None:
        self.lr = self._scheduled_lr()

    def _lr(self) -> float:
        return self.lr

    def _update(self, step: Step):
        state, cfg = self.state, self.cfg.train
        state.tokens += step.tokens
        rows = cfg.batch_size if not cfg.batch_tokens else None
        arrays = [
            padded(b, rows or bucket(b.src.size(0)), self.text.tgt_vocab.eos_id)
            for b in step.batches
        ]
        weights = [b.num_tgt_tokens / step.tokens for b in step.batches]
        key = jax.random.fold_in(self.key, state.step)
        self.params, self.opt_state, loss, finite = self.updates.step(
            self.params, self.opt_state, arrays, weights, key, self.lr
        )
        if bool(finite):
            state.bad_steps = 0
            return loss
        return self._skipped()

    def _mean_loss(self, done) -> float | None:
        return float(sum(done)) / len(done) if done else None

    def _validate(self) -> dict[str, float]:
        return validate(self.torch_model(), self.text, self.cfg)

    def torch_model(self) -> Seq2Seq:
        """The current weights in a PyTorch Seq2Seq (validation reads them there)."""
        text = self.text
        model = Seq2Seq.from_config(
            self.cfg.model, src_vocab=len(text.src_vocab), tgt_vocab=len(text.tgt_vocab)
        )
        tensors = tensors_from_params(jax.device_get(self.params), self.cfg.model)
        model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in tensors.items()})
        return model.eval()

    def _rng_states(self) -> dict:
        return {}

    def _save(self, path: Path, *, with_state: bool, rngs: list | None = None) -> None:
        text = self.text
        save_flax(
            path,
            jax.device_get(self.params),
            self.cfg,
            text.src_vocab,
            text.tgt_vocab,
            self.state.step,
            tokenizers=text.tokenizers,
            train_state=self._train_state() if with_state else None,
        )

    def _train_state(self) -> tuple[dict[str, np.ndarray], dict]:
        tensors = {
            STATE + "opt" + jax.tree_util.keystr(path): np.asarray(leaf)
            for path, leaf in jax.tree_util.tree_flatten_with_path(self.opt_state)[0]
        }
        tensors[STATE + "key"] = np.asarray(jax.random.key_data(self.key))
        values = {
            "backend": "flax",
            "progress": asdict(self.state),
            "python_rng": random.getstate(),
            "compiled_shapes": len(self.updates.shapes),
        }
        return tensors, values


def restore(path: Path, tx: optax.GradientTransformation, cfg: Config, text: Text):
    """(params, opt_state, key, progress) of the Flax run whose last checkpoint is `path`."""
    check_same_model(path, cfg, text.src_vocab, text.tgt_vocab)
    params, tensors, values = load_flax_train_state(path)
    if values.get("backend") != "flax":
        raise ValueError(
            f"{path}: was trained with train.backend=torch, whose optimiser state (PyTorch's "
            "Adam) train.backend=flax cannot resume; resume it with train.backend=torch, or "
            "start a new run"
        )
    leaves, tree = jax.tree_util.tree_flatten_with_path(tx.init(params))
    opt = [jnp.asarray(tensors[STATE + "opt" + jax.tree_util.keystr(p)]) for p, _ in leaves]
    key = jax.random.wrap_key_data(jnp.asarray(tensors[STATE + "key"]))
    random.setstate(as_tuples(values["python_rng"]))
    params = jax.tree_util.tree_map(jnp.array, params)  # XLA's own (aligned) buffers: see below
    return params, jax.tree_util.tree_unflatten(tree, opt), key, values["progress"]


def train(cfg: Config, *, progress: bool | None, resume: bool, overwrite: bool):
    """`run.train` for `train.backend=flax`: one process, on JAX's default device (or the
    CPU with train.device=cpu). Returns a `run.TrainResult` whose `model` is the trained
    weights in a PyTorch Seq2Seq, as every command reads them."""
    from alignmt.training.run import claim_folder, finished, prepare_in_turn, seed_everything

    if cfg.train.guided_alignment:
        raise ValueError(
            "train.guided_alignment is trained by the PyTorch backend only: use train.backend=torch"
        )
    world = _one_process(cfg)
    run_dir = Path(cfg.out_dir)
    resume = claim_folder(run_dir, world, resume, overwrite)
    seed_everything(cfg.seed)
    text = prepare_in_turn(cfg, world, progress)
    model = build_model(cfg.model, text.src_vocab, text.tgt_vocab)
    tx = make_optimizer(cfg.train)
    state = Progress(task_rng=random.Random(cfg.seed).getstate(), accumulate=cfg.train.accumulate)
    with jax.default_device(_device(cfg.train.device)):
        if resume:
            params, opt_state, key, saved = restore(run_dir / LAST, tx, cfg, text)
            state = Progress(**{**saved, "accumulate": cfg.train.accumulate})
            log.info("resuming %s at step %d", run_dir, state.step)
        else:
            params = init_params(model, cfg.seed)
            opt_state, key = tx.init(params), jax.random.key(cfg.seed + 1)
        run_dir.mkdir(parents=True, exist_ok=True)
        write_text(run_dir / "config.yaml", dump_config(cfg))
        loop = FlaxLoop(
            params=params,
            opt_state=opt_state,
            key=key,
            cfg=cfg,
            model=model,
            optimizer=tx,
            text=text,
            state=state,
            run_dir=run_dir,
            world=world,
            device=torch.device("cpu"),
        )
        seconds = loop.run(progress)
    log.info("flax: compiled the update for %d batch shapes", len(loop.updates.shapes))
    return finished(loop, load_checkpoint(run_dir).model, seconds)


def _one_process(cfg: Config) -> World:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError("train.backend=flax trains in one process; run it without torchrun")
    if cfg.train.precision != "float32":
        raise ValueError(
            f"train.precision={cfg.train.precision}: train.backend=flax trains in float32 only"
        )
    return World()


def _device(name: str) -> jax.Device:
    """train.device for JAX: auto is JAX's default (a GPU when its plugin sees one)."""
    if name == "auto":
        return jax.devices()[0]
    platform = "gpu" if name == "cuda" else "cpu"
    try:
        return jax.devices(platform)[0]
    except RuntimeError as err:
        raise ValueError(f"train.device={name}: JAX sees no {platform} ({err})") from None
