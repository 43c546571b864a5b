"""What each optimiser step trains on: global micro-batches, and this process's share.

Every process builds the same endless sequence of micro-batches: from a corpus,
length-bucketed batches whose order depends only on (seed, epoch), epoch after epoch; from a
synthetic task, fresh batches drawn from one seeded generator. An update consumes the next
`world.size * accumulate` of them, and rank r trains on the `accumulate` that start at
r * accumulate (fairseq's and Sockeye's way, not one bucketing per rank). So two processes
see exactly the batches one process with `train.accumulate=2` sees, in the same updates.

Each micro-batch's loss is weighted by its share of the update's target tokens (`Step.tokens`,
which every rank knows without asking the others), so an update is the mean over all its
tokens, however they are split between processes and micro-batches.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from alignmt.checkpoint.format import as_tuples
from alignmt.config import DataConfig, TrainConfig
from alignmt.model.batch import Batch, guide_matrix, make_batch
from alignmt.text import tasks
from alignmt.text.guide import TokenLinks
from alignmt.text.prepare import Text
from alignmt.text.split import bucket_batches
from alignmt.text.vocab import Vocab
from alignmt.training.distributed import World


@dataclass
class Progress:
    """Everything besides weights and optimizer that a resumed run needs; JSON-ready."""

    step: int = 0
    epoch: int = 0  # corpus: current epoch, and how many of its micro-batches are done
    batch: int = 0  # (over all processes: a position in the global order)
    lr_scale: float = 1.0  # plateau schedule: product of the halvings so far
    best: float | None = None  # best validation metric, oriented so that higher is better
    bad_evals: int = 0  # evaluations since `best` last improved
    task_rng: object = None  # synthetic task: the data generator's state
    seconds: float = 0.0  # training time so far, across resumptions
    tokens: int = 0  # target tokens trained on so far, all processes together
    bad_steps: int = 0  # updates skipped in a row for a non-finite loss or gradient
    skipped: int = 0  # updates skipped in all
    eval_pending: bool = False  # a signal stopped the run at a step due for evaluation
    world_size: int = 1  # processes x micro-batches per update: checked on resume
    accumulate: int = 1


@dataclass
class Step:
    """One update's data as one process sees it."""

    batches: list[Batch]  # this process's micro-batches, `accumulate` of them, on the CPU
    tokens: int  # target tokens (</s> included) of the update's micro-batches on all ranks


def steps(
    text: Text,
    cfg: DataConfig,
    train: TrainConfig,
    seed: int,
    state: Progress,
    world: World,
    links: TokenLinks | None = None,
) -> Iterator[Step]:
    """The updates of a run from where `state` says it is, for this process; with `links`
    (the training pairs') or `train.guided_alignment=task`, batches carry their guide."""
    if len(text.train):
        return _corpus_steps(text, train, seed, state, world, links)
    return _task_steps(cfg, text.src_vocab, train, state, world)


def _share(world: World, accumulate: int) -> slice:
    return slice(world.rank * accumulate, (world.rank + 1) * accumulate)


def _corpus_steps(
    text: Text,
    cfg: TrainConfig,
    seed: int,
    state: Progress,
    world: World,
    links: TokenLinks | None,
) -> Iterator[Step]:
    lengths = text.train.lengths  # (N, 2): source and target tokens, no specials
    order = corpus_order(text, cfg, seed, state)
    mine = _share(world, cfg.accumulate)
    while True:
        rows = [next(order) for _ in range(world.size * cfg.accumulate)]
        tokens = sum(int(lengths[r, 1].sum()) + len(r) for r in rows)  # + 1 a row: </s>
        batches = [
            make_batch(text.train.pairs(r), text.src_vocab, text.tgt_vocab, copied=text.copy_ids)
            for r in rows[mine]
        ]
        if links is not None:
            for batch, r in zip(batches, rows[mine], strict=True):
                batch.guide = guide_matrix(links.of(r), batch)
        yield Step(batches, tokens)


def corpus_order(text: Text, cfg: TrainConfig, seed: int, state: Progress) -> Iterator[list[int]]:
    """The rows of each global micro-batch, epoch after epoch, from `state`'s position.

    Each epoch's order depends only on (seed, epoch), so a resumed run skips the micro-batches
    it has done and continues with exactly the ones an uninterrupted run would see.
    """
    while True:
        rng = random.Random(f"{seed}/epoch {state.epoch}")
        order = bucket_batches(
            text.train.lengths, batch_size=cfg.batch_size, batch_tokens=cfg.batch_tokens, rng=rng
        )
        while state.batch < len(order):
            state.batch += 1
            yield list(order[state.batch - 1])
        state.epoch, state.batch = state.epoch + 1, 0


def _task_steps(
    cfg: DataConfig, vocab: Vocab, train: TrainConfig, state: Progress, world: World
) -> Iterator[Step]:
    """Fresh synthetic micro-batches; every rank draws all of an update's from the shared
    generator (they are cheap) and keeps its own. The generator's state is copied into
    `state` after each update, for resuming."""
    rng = random.Random()
    rng.setstate(as_tuples(state.task_rng))
    mine = _share(world, train.accumulate)
    while True:
        drawn = [
            tasks.sample_pairs(cfg.task, rng, train.batch_size, cfg.min_len, cfg.max_len)
            for _ in range(world.size * train.accumulate)
        ]
        state.task_rng = rng.getstate()
        tokens = sum(len(t) + 1 for pairs in drawn for _, t in pairs)
        batches = [
            make_batch([(vocab.encode(s), vocab.encode(t)) for s, t in pairs], vocab, vocab)
            for pairs in drawn[mine]
        ]
        if train.guided_alignment == "task":  # each character's link is where it came from
            for batch, pairs in zip(batches, drawn[mine], strict=True):
                links = [
                    [(s, t) for t, s in enumerate(tasks.source_positions(cfg.task, src))]
                    for src, _ in pairs
                ]
                batch.guide = guide_matrix(links, batch)
        yield Step(batches, tokens)
