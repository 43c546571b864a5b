"""A training run: `train(cfg)` fits a Seq2Seq and writes a run directory.

Every run starts the same way, whichever its backend: it claims the folder and prepares
the data (`start`), has the backend begin (torch_backend.py or flax_backend.py: the model
and optimizer, new or restored from a resumed run) and hands it to `loop.Loop`, which
validates with `validate`; at the end it builds the shortlist of the training pairs.

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
from functools import partial
from pathlib import Path

import torch

from alignmt.checkpoint.format import LAST
from alignmt.checkpoint.rundir import write_text
from alignmt.checkpoint.shortlist_io import save_shortlist
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.config import Config, dump_config
from alignmt.text.cache import cache_root
from alignmt.text.guide import TokenLinks, eflomal_training_links, pharaoh_training_links
from alignmt.text.prepare import Text, prepare_text
from alignmt.text.shortlist import Shortlist, build_shortlist
from alignmt.training import torch_backend
from alignmt.training.cores import threads_to_use
from alignmt.training.distributed import World, join, leave
from alignmt.training.loop import Begin, Loop, TrainResult
from alignmt.training.start import claim_folder, prepare_in_turn, seed_everything

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
    if cfg.train.engine == "flax":  # imported here: JAX is an optional extra
        from alignmt.training import flax_backend

        world = flax_backend.one_process(cfg)  # refuses what Flax does not train, first
        return _train(cfg, world, flax_backend.begin, progress, resume, overwrite)
    world, device = join(cfg.train.device, cfg.train.wait_minutes)
    threads = torch.get_num_threads()
    try:
        # a distributed run's processes share the cores by design (train.threads=1 each)
        if cfg.train.threads:
            torch.set_num_threads(cfg.train.threads)
        elif world.size == 1 and device.type == "cpu":
            torch.set_num_threads(threads_to_use(threads, "training"))
        begin = partial(torch_backend.begin, device=device)
        return _train(cfg, world, begin, progress, resume, overwrite)
    finally:
        torch.set_num_threads(threads)  # the count is process-wide: give the caller theirs back
        leave(world)


def _train(
    cfg: Config,
    world: World,
    begin: Begin,
    progress: bool | None,
    resume: bool,
    overwrite: bool,
) -> TrainResult:
    """Every run, whichever its backend: claim the folder, seed, prepare the data and the
    guided-alignment links, `begin` the backend (a new model, or the resumed one), write the
    config, run the loop, and build the shortlist of the training pairs."""
    if not world.main:  # one voice: the others speak only of problems
        logging.getLogger("alignmt").setLevel(logging.WARNING)
    run_dir = Path(cfg.out_dir)
    resume = claim_folder(run_dir, world, resume, overwrite)
    seed_everything(cfg.seed)
    text = prepare_in_turn(cfg, world, progress)
    links = guided_links(cfg, text, world)
    with begin(cfg, text, world, run_dir / LAST if resume else None) as (backend, state):
        if world.main:
            run_dir.mkdir(parents=True, exist_ok=True)
            write_text(run_dir / "config.yaml", dump_config(cfg))
        loop = Loop(
            cfg=cfg,
            backend=backend,
            text=text,
            state=state,
            run_dir=run_dir,
            world=world,
            links=links,
        )
        seconds = loop.run(progress)
    if world.main and len(text.train) and not text.copy_ids:  # copying takes no shortlist
        save_shortlist(run_dir, text_shortlist(text))
    return loop.result(backend.trained_model(run_dir), seconds)


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
    text = prepare_text(cfg.data, cfg.seed, copy_ids=cfg.model.copy)
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
    if source and cfg.model.attention_fn != "softmax" and cfg.train.guided_cost == "ce":
        raise ValueError(
            f"train.guided_cost=ce takes log alpha, which model.attention_fn="
            f"{cfg.model.attention_fn} makes infinite where it is exactly 0 (and gives "
            "those weights no gradient): use train.guided_cost=mse"
        )
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
