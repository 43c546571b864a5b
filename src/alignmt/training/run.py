"""A training run: `train(cfg)` fits a Seq2Seq and writes a run directory.

It claims the folder and prepares the data (`start`), builds the model and optimizer,
restores a resumed run's state, and hands a `torch_backend.TorchBackend` to `loop.Loop`;
with `train.backend=flax` all of that is `flax_backend.train`'s.

A run directory holds `model.safetensors` (the best model, or the last without validation),
`last.safetensors` (the last model plus everything needed to resume: optimizer moments, RNG
states of every process, position in the global batch order, schedule), `config.yaml`,
`metrics.jsonl` and `curves.png` (`runlog`); with `snapshot_every` also
`snapshots/step_NNNNNN.safetensors`, the weights at step 0, every N steps and the last step;
for a corpus, `shortlist.safetensors`, the lexical shortlist of its training pairs (built
when training ends; decoding uses it when `search.shortlist` asks).
Resuming replays nothing: it restores that state, so a killed and resumed run ends with the
same weights (and snapshots) as an uninterrupted one.
"""

from __future__ import annotations

import logging
import random
from functools import partial
from pathlib import Path

import torch

from alignmt.checkpoint.format import LAST, WEIGHTS, check_same_model
from alignmt.checkpoint.rundir import write_text
from alignmt.checkpoint.shortlist_io import save_shortlist
from alignmt.checkpoint.torch_io import (
    load_checkpoint,
    load_weights,
    restore_train_state,
    set_rng_states,
)
from alignmt.config import Config, dump_config
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.cache import cache_root
from alignmt.text.guide import TokenLinks, eflomal_training_links, pharaoh_training_links
from alignmt.text.prepare import Text, prepare_text
from alignmt.text.shortlist import Shortlist, build_shortlist
from alignmt.training.batches import Progress
from alignmt.training.distributed import World, check_resume, join, leave
from alignmt.training.loop import Loop, TrainResult
from alignmt.training.optim import make_optimizer
from alignmt.training.start import claim_folder, prepare_in_turn, seed_everything
from alignmt.training.torch_backend import TorchBackend

log = logging.getLogger(__name__)


def train(
    cfg: Config, *, progress: bool | None = None, resume: bool = False, overwrite: bool = False
) -> TrainResult:
    """Train the model `cfg` describes and save it to `cfg.out_dir`.

    Under torchrun, this process is one rank of a distributed run (see `distributed`).

    Args:
        cfg: the resolved configuration.
        progress: draw progress bars; None draws them when stderr is a terminal.
        resume: continue from `cfg.out_dir`/last.safetensors instead of starting afresh (from
            step 0 when the run was stopped before it wrote one).
        overwrite: start afresh in a folder that holds an earlier run, deleting its files;
            without it (or `resume`) such a folder is refused with `RunFolderError`.

    Returns:
        The trained model, its vocabularies, the loss curve and the training time (on ranks
        other than 0 the curve is empty: rank 0 keeps the record).
    """
    if cfg.train.backend == "flax":  # imported here: JAX is an optional extra
        from alignmt.training import flax_backend

        return flax_backend.train(cfg, progress=progress, resume=resume, overwrite=overwrite)
    world, device = join(cfg.train.device, cfg.train.wait_minutes)
    threads = torch.get_num_threads()
    try:
        if cfg.train.threads:
            torch.set_num_threads(cfg.train.threads)
        return _train(cfg, world, device, progress, resume, overwrite)
    finally:
        torch.set_num_threads(threads)  # the count is process-wide: give the caller theirs back
        leave(world)


def _train(
    cfg: Config,
    world: World,
    device: torch.device,
    progress: bool | None,
    resume: bool,
    overwrite: bool,
) -> TrainResult:
    if not world.main:  # one voice: the others speak only of problems
        logging.getLogger("alignmt").setLevel(logging.WARNING)
    run_dir = Path(cfg.out_dir)
    resume = claim_folder(run_dir, world, resume, overwrite)
    seed_everything(cfg.seed)
    text = prepare_in_turn(cfg, world, progress)
    links = guided_links(cfg, text, world)
    model = Seq2Seq.from_config(
        cfg.model, src_vocab=len(text.src_vocab), tgt_vocab=len(text.tgt_vocab)
    ).to(device)
    optimizer = make_optimizer(model, cfg.train)
    state = Progress(
        task_rng=random.Random(cfg.seed).getstate(),
        world_size=world.size,
        accumulate=cfg.train.accumulate,
    )
    if world.rank:
        torch.manual_seed(cfg.seed + world.rank)  # its own dropout masks; weights come from 0
    if resume:
        state = resume_state(run_dir, model, optimizer, world, cfg, text, device)
    if world.main:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_text(run_dir / "config.yaml", dump_config(cfg))
    backend = TorchBackend(
        cfg=cfg, model=model, optimizer=optimizer, text=text, world=world, device=device
    )
    loop = Loop(
        cfg=cfg, backend=backend, text=text, state=state, run_dir=run_dir, world=world, links=links
    )
    seconds = loop.run(progress)
    if world.main and len(text.train):
        save_shortlist(run_dir, text_shortlist(text))
    best = run_dir / WEIGHTS
    if best.is_file() and text.valid:
        model.load_state_dict(load_weights(best))
    return loop.result(model.eval(), seconds)


def text_shortlist(text: Text) -> Shortlist:
    """The lexical shortlist of the training pairs (see text/shortlist.py)."""
    vocab = text.tgt_vocab
    sizes = (len(text.src_vocab), len(vocab))
    return build_shortlist(text.train, sizes, always=(vocab.eos_id, vocab.unk_id))


def build_run_shortlist(run_dir: str | Path) -> tuple[Path, Shortlist]:
    """Build and write the shortlist of a run trained before training built one, from its
    config's corpus; refused if the corpus now gives other vocabularies."""
    stored = load_checkpoint(run_dir)
    cfg = stored.config
    if cfg.data.task != "corpus":
        raise ValueError(f"{run_dir}: a synthetic task ({cfg.data.task}) has no corpus to list")
    text = prepare_text(cfg.data, cfg.seed)
    if (text.src_vocab, text.tgt_vocab) != (stored.src_vocab, stored.tgt_vocab):
        raise ValueError(
            f"{run_dir}: {cfg.data.train} now gives other vocabularies than the run's; the "
            "corpus has changed since training"
        )
    shortlist = text_shortlist(text)
    return save_shortlist(run_dir, shortlist), shortlist


def guided_links(cfg: Config, text: Text, world: World) -> TokenLinks | None:
    """The training pairs' word links that `train.guided_alignment` names, as token links;
    None without, or for "task" (whose batches make their own). eflomal's are learnt by
    rank 0 and read from its cache by the others, so that all train towards the same."""
    source, data = cfg.train.guided_alignment, cfg.data
    if source and cfg.model.attention == "none":
        raise ValueError("train.guided_alignment trains attention: model.attention=none has none")
    if source == "task" or not source:
        if source and data.task == "corpus":
            raise ValueError(
                "train.guided_alignment=task is a synthetic task's own alignment; for a "
                "corpus give a Pharaoh file or eflomal"
            )
        return None
    if data.task != "corpus":
        raise ValueError(
            f"train.guided_alignment={source!r} aligns a corpus; data.task={data.task} "
            "knows its alignment: use train.guided_alignment=task"
        )
    vocabs, subwords = (text.src_vocab, text.tgt_vocab), data.tokenizer == "sentencepiece"
    if source != "eflomal":
        return pharaoh_training_links(
            source,
            text.train,
            vocabs,
            subwords=subwords,
            truncated=bool(data.truncate),
            corpus=data.train,
        )
    cache = cache_root(data.cache_dir) if data.cache else None
    learn = partial(eflomal_training_links, text.train, vocabs, subwords=subwords, cache=cache)
    links = learn() if world.main or cache is None else None
    if cache is not None:
        world.wait_for_main()
        if links is None:  # the other ranks read what rank 0 cached
            links = learn()
    return links


def resume_state(
    run_dir: Path,
    model: Seq2Seq,
    optimizer: torch.optim.Optimizer,
    world: World,
    cfg: Config,
    text: Text,
    device: torch.device,
) -> Progress:
    check_same_model(run_dir / LAST, cfg, text.src_vocab, text.tgt_vocab)
    saved, rngs = restore_train_state(run_dir / LAST, model, optimizer)
    check_resume(saved, world, cfg.train.accumulate, str(run_dir))
    if world.rank < len(rngs):
        set_rng_states(rngs[world.rank], device)
    log.info("resuming %s at step %d", run_dir, saved["step"])
    return Progress(**{**saved, "world_size": world.size, "accumulate": cfg.train.accumulate})
