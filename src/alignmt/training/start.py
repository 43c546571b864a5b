"""What every training run does before its loop, whichever its backend: claim the run
folder (a new run, `--resume` or `--overwrite`, decided alike on every process), seed
Python's and torch's generators, and prepare the data (in turn, when processes share a
token cache). `run._train`, the one start of both backends, does these first.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import torch

from alignmt.checkpoint.format import LAST
from alignmt.checkpoint.rundir import RunFolderError, check_new_run, clear_run
from alignmt.config import Config
from alignmt.text.prepare import Text, prepare_text
from alignmt.training.distributed import World

log = logging.getLogger(__name__)


def claim_folder(run_dir: Path, world: World, resume: bool, overwrite: bool) -> bool:
    """Refuse a new run in a folder that holds another (on every process alike), or clear
    it to overwrite; return whether there is a run to resume."""
    problem = check_new_run(run_dir, resume=resume, overwrite=overwrite) if world.main else None
    problem = world.broadcast(problem)
    if problem:
        raise RunFolderError(problem)
    if overwrite and world.main:
        clear_run(run_dir)
    if resume and not (run_dir / LAST).is_file():
        log.warning(
            "%s holds no %s (stopped before its first checkpoint): starting from step 0",
            run_dir,
            LAST,
        )
        return False
    return resume


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def prepare_in_turn(cfg: Config, world: World, progress: bool | None) -> Text:
    """With the token cache, rank 0 prepares the data first (building the cache if there is
    none) and the others then load it, instead of all building it at once; without it,
    every process prepares its own copy."""
    if world.main or not cfg.data.cache:
        shown = progress if world.main else False
        text = prepare_text(cfg.data, cfg.seed, progress=shown, copy_ids=cfg.model.copy)
    if cfg.data.cache:
        world.wait_for_main()
        if not world.main:
            text = prepare_text(cfg.data, cfg.seed, progress=False, copy_ids=cfg.model.copy)
    return text
