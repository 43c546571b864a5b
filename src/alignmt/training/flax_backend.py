"""Training in Flax (`train.backend=flax`): the `loop.Backend` that trains a `FlaxSeq2Seq`
with the same model, loss, schedule, clipping and Adam as the PyTorch backend, jit-compiled
(`flax_optim`), and writes the same run folder. `loop.Loop` runs it as it runs PyTorch's:
steps, the clock, evaluation and checkpoint cadence, early stopping, signals, snapshots, the
run log and the skipping of non-finite updates are the loop's.

Validation is JAX's too: the teacher-forced loss, and BLEU of the greedy translations of
`FlaxTranslator` (each validation compiles its search afresh, as the weights it searches
with are new).

The checkpoint holds the weights in PyTorch's names and layouts (`checkpoint.flax_io`), so
every command reads a Flax-trained run; `last.safetensors` adds optax's Adam state and the
dropout key under `_train.flax.`, and a resume by the other backend is refused.
"""

from __future__ import annotations

import logging
import os
import random
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from alignmt.analysis.scores import corpus_scores
from alignmt.checkpoint.flax_io import Params, build_model, load_flax_train_state, save_flax
from alignmt.checkpoint.format import LAST, as_tuples, check_same_model
from alignmt.checkpoint.rundir import write_text
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.config import Config, dump_config
from alignmt.decoding.flax_translator import FlaxTranslator
from alignmt.model.flax_seq2seq import FlaxSeq2Seq, sequence_loss
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
from alignmt.training.loop import Loop, TrainResult
from alignmt.training.optim import teacher_rate
from alignmt.training.start import claim_folder, prepare_in_turn, seed_everything

log = logging.getLogger(__name__)

STATE = "flax."  # training-state tensors of this backend, after `format.TRAIN_PREFIX`


class FlaxBackend:
    """A `loop.Backend` over a Flax model, its parameters, optax's state and a dropout key,
    in one process."""

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
        self.valid_loss = jax.jit(_valid_loss(model))
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

    def validate(self, batch_size: int = 64) -> dict[str, float]:
        """Validation loss (teacher-forced, no smoothing) and BLEU of greedy translations,
        as `validate.validate` measures them in PyTorch."""
        text, vocabs = self.text, (self.text.src_vocab, self.text.tgt_vocab)
        total, tokens = 0.0, 0
        for start in range(0, len(text.valid_ids), batch_size):
            pairs = text.valid_ids[start : start + batch_size]
            real = sum(len(tgt) + 1 for _, tgt in pairs)  # + </s>
            total += float(self.valid_loss(self.params, teacher_forced(pairs, vocabs))) * real
            tokens += real
        translator = FlaxTranslator(
            self.model,
            self.params,
            tokenizers=text.tokenizers,
            vocabs=vocabs,
            search=replace(self.cfg.search, beam_size=1),
        )
        found = translator.translate([p.src for p in text.valid], warn=False)
        hyps = [translations[0].text for translations in found]
        refs = [p.tgt for p in text.valid]
        bleu = corpus_scores(hyps, refs, lowercase=self.cfg.data.lowercase).bleu
        return {"valid_loss": total / tokens, "bleu": bleu}

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
        logits, _ = model.apply({"params": params}, src, src_len, tgt_in)
        return sequence_loss(logits, arrays["tgt_out"], model.pad_id)

    return loss


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


def train(cfg: Config, *, progress: bool | None, resume: bool, overwrite: bool) -> TrainResult:
    """`run.train` for `train.backend=flax`: one process, on JAX's default device (or the
    CPU with train.device=cpu). Returns a `TrainResult` whose `model` is the trained weights
    in a PyTorch Seq2Seq, as every command reads them."""
    if cfg.train.guided_alignment:
        raise ValueError(
            "train.guided_alignment is trained by the PyTorch backend only: use train.backend=torch"
        )
    if cfg.train.cuda_graphs:
        raise ValueError(
            "train.cuda_graphs captures PyTorch's unroll; XLA compiles the Flax step whole "
            "already: leave it false with train.backend=flax"
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
        backend = FlaxBackend(
            cfg=cfg, model=model, tx=tx, params=params, opt_state=opt_state, key=key, text=text
        )
        loop = Loop(cfg=cfg, backend=backend, text=text, state=state, run_dir=run_dir, world=world)
        seconds = loop.run(progress)
    log.info("flax: compiled the update for %d batch shapes", len(backend.updates.shapes))
    return loop.result(load_checkpoint(run_dir).model, seconds)


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
