"""Data preparation: from a data config to tokenizers, vocabularies and id-encoded splits.

A synthetic task needs only its alphabet. A corpus's training split is built once (`build`)
and kept in a cache folder keyed by the corpus's contents and the settings, so that a later
run, or the other processes of this one, maps it instead of building it again. What the build
read and dropped is logged, again on a cache hit, in terms of today's files. The validation
split is small and stays in memory: a file of its own, or the pairs of the training file
right after the training pairs (`data.valid_rows`, d2l.ai's split of one file). Batching is
`alignmt.training.batches`'.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alignmt.config import DataConfig
from alignmt.text import copy, tasks
from alignmt.text.build import build_split, cut, split_settings, train_stream
from alignmt.text.cache import (
    Cached,
    IdPair,
    TokenArrays,
    cache_key,
    cache_root,
    load_cache,
    rename_into_place,
    write_cache,
)
from alignmt.text.corpus import Pair, locations
from alignmt.text.split import read_split
from alignmt.text.tokenize import CharTokenizer, Tokenizer
from alignmt.text.vocab import Vocab

log = logging.getLogger(__name__)


@dataclass
class Text:
    """What a run learns from: tokenizers, vocabularies, and the splits as ids."""

    tokenizers: tuple[Tokenizer, Tokenizer]
    src_vocab: Vocab
    tgt_vocab: Vocab
    train: TokenArrays  # empty for a synthetic task, whose batches are made on the fly
    valid: list[Pair]  # raw validation pairs, for BLEU
    valid_ids: list[IdPair]
    copy_ids: bool = False  # the ids are a copying model's (alignmt.text.copy)


def prepare_text(
    cfg: DataConfig, seed: int, *, progress: bool | None = None, copy_ids: bool = False
) -> Text:
    """Tokenizers, vocabularies and id-encoded splits for a corpus (or the task alphabet).

    Args:
        cfg: the data config; `cache`, `cache_dir` and `workers` say where and how the
            training split is tokenised.
        seed: the run's seed (SentencePiece's training and sample).
        progress: draw a progress bar while tokenising; None draws one when stderr is a
            terminal.
        copy_ids: encode the splits as a copying model reads and writes them
            (`model.copy`; alignmt.text.copy).

    Returns:
        The text. `train` is memory-mapped from the cache folder unless `cfg.cache` is off.
    """
    if cfg.task != "corpus":
        vocab = Vocab(tasks.ALPHABET)
        empty = TokenArrays.from_pairs([])
        return Text((CharTokenizer(), CharTokenizer()), vocab, vocab, empty, [], [])
    if not cfg.train:
        raise ValueError("data.task=corpus needs data.train (a file PREFIX or a .tsv file)")
    if cfg.unescape and cfg.tokenizer != "space":
        log.warning(
            "data.unescape: only data.tokenizer=space unescapes; %s ignores it", cfg.tokenizer
        )
    show = sys.stderr.isatty() if progress is None else progress
    if cfg.cache:
        built = _cached(cfg, seed, show, copy_ids)
    else:
        built = build_split(cfg, seed, None, show, copy_ids)
    _log_summary(cfg, built.meta)
    tokenizers, (src_vocab, tgt_vocab) = built.tokenizers, built.vocabs
    valid = _valid(cfg)
    keep = cut(cfg) or None  # the loss sees validation pairs cut as training pairs are
    valid_ids = [
        _ids(
            tokenizers[0].encode(p.src)[:keep], tokenizers[1].encode(p.tgt)[:keep], built, copy_ids
        )
        for p in valid
    ]
    return Text(tokenizers, src_vocab, tgt_vocab, built.arrays, valid, valid_ids, copy_ids)


def _ids(src: list[str], tgt: list[str], built: Cached, copy_ids: bool) -> IdPair:
    """A pair's ids, as a copying model reads and writes them where `copy_ids`."""
    src_vocab, tgt_vocab = built.vocabs
    if copy_ids:
        return copy.source_ids(src, src_vocab), copy.target_ids(src, tgt, src_vocab, tgt_vocab)
    return src_vocab.encode(src), tgt_vocab.encode(tgt)


def _valid(cfg: DataConfig) -> list[Pair]:
    """The validation pairs: `data.valid_rows` pairs of the training file after its first
    `data.limit`, the `data.valid` file's (its first `limit`), or none."""
    if cfg.valid_rows:
        stream = train_stream(cfg)
        rows = itertools.islice(stream, cfg.limit, cfg.limit + cfg.valid_rows)
        valid = [Pair(src, tgt, f"{stream.origin}:{line}") for line, src, tgt in rows]
        if len(valid) < cfg.valid_rows:
            log.warning(
                "data.valid_rows: %s has %d pairs after the first %d, not %d",
                stream.report.path,
                len(valid),
                cfg.limit,
                cfg.valid_rows,
            )
        return valid
    if not cfg.valid:
        return []
    split = dict(src_lang=cfg.src_lang, tgt_lang=cfg.tgt_lang, swap=cfg.tsv_swap)
    return read_split(cfg.valid, **split, what="data.valid")[: cfg.limit or None]


# --- The cache, and what its build read -----------------------------------------------------


def _cached(cfg: DataConfig, seed: int, show: bool, copy_ids: bool) -> Cached:
    """The training split from its cache folder, built there first if it is not."""
    root = cache_root(cfg.cache_dir)
    folder = root / cache_key(split_settings(cfg, seed, copy_ids), train_stream(cfg).files)
    if folder.is_dir():
        log.info("data.train: reusing the tokenised corpus in %s", folder)
        return load_cache(folder)
    root.mkdir(parents=True, exist_ok=True)
    for other in root.glob(f".{folder.name}.*.building"):
        log.warning(
            "%s: another process is building this cache, or was killed doing it and "
            "left this behind (delete it then)",
            other,
        )
    # Built beside its final place and renamed into it when complete: a concurrent reader
    # never sees half a cache, and a killed build leaves only this ".building" folder.
    building = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".building", dir=root))
    try:
        built = build_split(cfg, seed, building, show, copy_ids)
        write_cache(building, built.arrays, built.tokenizers, built.vocabs, built.meta)
        del built  # unmaps the arrays before the folder moves
        rename_into_place(building, folder)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    log.info("data.train: tokenised corpus cached in %s", folder)
    return load_cache(folder)


def _log_summary(cfg: DataConfig, meta: dict[str, Any]) -> None:
    """What the build read and dropped (again on a cache hit), located in today's files."""
    stream, read, dropped = train_stream(cfg), meta["read"], meta["dropped"]

    def where(kind: str) -> str:
        first = [f"{stream.origin}:{line}" for line in dropped[kind]["first"]]
        return locations(first, dropped[kind]["count"])

    empty = dropped["empty"]["count"]
    summary = f"{stream.report.path}: {read['lines']} lines, {read['pairs']} kept, "
    summary += f"{empty} dropped as empty" + (f" ({where('empty')})" if empty else "")
    log.log(logging.WARNING if empty else logging.INFO, "%s", summary)
    for kind, rule in (
        ("long", f"longer than {cfg.max_tokens} tokens (data.max_tokens)"),
        (
            "ratio",
            f"with one side over {cfg.max_len_ratio:g} times as long as "
            "the other (data.max_len_ratio)",
        ),
    ):
        if dropped[kind]["count"]:
            log.warning(
                "dropped %d of %d pairs %s: %s",
                dropped[kind]["count"],
                read["pairs"],
                rule,
                where(kind),
            )
    log.info(
        "data.train: %d pairs; vocabularies: %d source, %d target tokens",
        meta["pairs"],
        *meta["vocab_sizes"],
    )
