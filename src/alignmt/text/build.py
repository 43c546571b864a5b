"""Building a corpus's training split: from a data config to tokenizers, vocabularies and
arrays of ids.

The split is streamed from disk, never held whole as Python strings: SentencePiece trains on
a seeded sample of it, then worker processes tokenise it a chunk at a time (`parts`), the
merged counts make the vocabularies (or those of a second pass over the whole file,
`data.vocab_from=file`), and the chunks' codes become `cache.TokenArrays` of ids, written
into a folder or kept in memory. Also owns which settings the result depends on, the key of
its cache folder. Whether to build or reuse a cache, and the validation split, are
`prepare`'s.
"""

from __future__ import annotations

import gc
import itertools
import logging
import os
import random
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm  # a widget in a notebook, text in a terminal

from alignmt.config import DataConfig
from alignmt.text import parts
from alignmt.text.cache import Cached
from alignmt.text.corpus import PairStream, ReadReport
from alignmt.text.parts import Part, Seen
from alignmt.text.split import stream_split
from alignmt.text.tokenize import SentencePieceTokenizer, Tokenizer, build_tokenizer

log = logging.getLogger(__name__)

_SPM_MAX_BYTES = 4192  # SentencePiece's max_sentence_length, left at its default


def cut(cfg: DataConfig) -> int:
    """Tokens a side keeps, </s> not counted (it is added to every side later); 0: all."""
    return cfg.truncate - 1 if cfg.truncate else 0


def train_stream(cfg: DataConfig) -> PairStream:
    """The `data.train` file's pairs, streamed; its report says what was read."""
    return stream_split(
        cfg.train,
        src_lang=cfg.src_lang,
        tgt_lang=cfg.tgt_lang,
        swap=cfg.tsv_swap,
        what="data.train",
    )


def _rows(cfg: DataConfig) -> tuple[Iterator[tuple[int, str, str]], PairStream]:
    """The training rows up to `cfg.limit`, and the stream that reports on them."""
    stream = train_stream(cfg)
    return itertools.islice(stream, cfg.limit or None), stream


def split_settings(cfg: DataConfig, seed: int, copy_ids: bool = False) -> dict[str, Any]:
    """Everything besides the corpus files that the training arrays depend on; `copy_ids`:
    whether they are a copying model's (alignmt.text.copy)."""
    keys = (
        "tokenizer",
        "src_lang",
        "tgt_lang",
        "tsv_swap",
        "lowercase",
        "min_freq",
        "max_tokens",
        "limit",
        "max_len_ratio",
        "valid_rows",
        "truncate",
        "vocab_from",
    )
    settings: dict[str, Any] = {key: getattr(cfg, key) for key in keys}
    # A tokenizer library's new release may cut the same text differently.
    if cfg.tokenizer == "sentencepiece":
        settings |= dict(
            spm_vocab_size=cfg.spm_vocab_size,
            spm_model_type=cfg.spm_model_type,
            spm_sample=cfg.spm_sample,
            seed=seed,
            library=version("sentencepiece"),
        )
    elif cfg.tokenizer == "moses":
        settings["library"] = version("sacremoses")
    elif cfg.tokenizer == "space":  # only here, so the other kinds' folders keep their keys
        settings["unescape"] = cfg.unescape
    # likewise only where set, so that the folders built before these keys keep theirs
    if cfg.max_vocab:
        settings["max_vocab"] = cfg.max_vocab
    if copy_ids:
        settings["copy_ids"] = True
    return settings


def build_split(
    cfg: DataConfig, seed: int, folder: Path | None, show: bool, copy_ids: bool = False
) -> Cached:
    """Tokenizers, vocabularies and arrays of the training split, written into `folder`
    (memory-mapped), or in memory for None; with `copy_ids`, a copying model's ids."""
    start = time.perf_counter()
    workers = cfg.workers or _cpus()
    with _no_gc():
        tokenizers = _tokenizers(cfg, seed, workers, show)
        done, seen, stream = _tokenise(cfg, tokenizers, folder, workers, show)
        counted = _count_file(cfg, tokenizers, workers, show) if cfg.vocab_from == "file" else seen
    report = stream.report
    empty = [int(where.rsplit(":", 1)[1]) for where in report.empty[: parts.SHOWN]]
    dropped = dict(
        empty=dict(count=len(report.empty), first=empty),
        **{kind: parts.dropped(done, kind) for kind in ("long", "ratio")},
    )
    if not any(part.kept for part in done):
        raise nothing_left(report, {kind: d["count"] for kind, d in dropped.items()})
    vocabs = tuple(side.vocab(cfg.min_freq, cfg.max_vocab or None) for side in counted)
    copying = dict(copy_ids=copy_ids, longest=cfg.max_tokens)
    arrays = parts.assemble(done, seen, vocabs, folder, **copying)
    meta = dict(
        settings=split_settings(cfg, seed, copy_ids),
        dropped=dropped,
        read=dict(corpus=report.path, lines=report.read, pairs=sum(p.read for p in done)),
        tokens=[int(arrays.src_offsets[-1]), int(arrays.tgt_offsets[-1])],
        pairs=len(arrays),
        vocab_sizes=[len(v) for v in vocabs],
    )
    log.info(
        "data.train: tokenised %d pairs in %.1f s with %d worker(s)",
        len(arrays),
        time.perf_counter() - start,
        workers,
    )
    return Cached(arrays, tokenizers, vocabs, meta)


def nothing_left(report: ReadReport, dropped: dict[str, int]) -> ValueError:
    """The error for a training split that leaves no pair, naming its files."""
    counts = ", ".join(f"{count} {kind}" for kind, count in dropped.items())
    return ValueError(
        f"data.train: {report.path}: no pair is left to train on of the {report.read} "
        f"lines read ({counts}): see data.max_tokens, data.max_len_ratio"
    )


def _cpus() -> int:
    """The CPUs this process may run on: in a container, often far fewer than the machine's
    that os.cpu_count() gives."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@contextmanager
def _no_gc() -> Iterator[None]:
    """Turn the cycle collector off while reading a corpus: the millions of row tuples made
    would trigger collections that scan every object alive (torch's many), more than
    doubling the time to read; the rows form no cycles to collect."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _tokenizers(
    cfg: DataConfig, seed: int, workers: int, show: bool
) -> tuple[Tokenizer, Tokenizer]:
    langs = (cfg.src_lang, cfg.tgt_lang)
    if cfg.tokenizer != "sentencepiece":
        options = dict(lowercase=cfg.lowercase, unescape=cfg.unescape)
        return tuple(build_tokenizer(cfg.tokenizer, lang=lang, **options) for lang in langs)
    sample = _spm_sample(cfg, seed, show)
    log.info("data.train: training SentencePiece on %d sentences a side", len(sample[0]))
    options = dict(
        vocab_size=cfg.spm_vocab_size,
        model_type=cfg.spm_model_type,
        lowercase=cfg.lowercase,
        seed=seed,
    )
    sides = [f"data.train: {train_stream(cfg).report.path}, the {lang} side" for lang in langs]
    if workers > 1 and len(sample[0]) >= parts.CHUNK_PAIRS:  # worth two processes' start-up
        with parts.processes(2) as pool:
            futures = [
                pool.submit(_train_spm, *args, options) for args in zip(sample, sides, strict=True)
            ]
            models = [future.result() for future in futures]
    else:
        models = [_train_spm(*args, options) for args in zip(sample, sides, strict=True)]
    return tuple(SentencePieceTokenizer(model=m, lowercase=cfg.lowercase) for m in models)


def _train_spm(sentences: list[str], side: str, options: dict[str, Any]) -> bytes:
    """The SentencePiece model of one side's sentences; where SentencePiece cannot train
    (its error, a failed internal check, names no file), a ValueError naming `side`."""
    try:
        return SentencePieceTokenizer.train(sentences, **options).model
    except RuntimeError as error:
        raise ValueError(
            f"{side}: SentencePiece cannot learn from it ({error}); it skips sentences over "
            f"{_SPM_MAX_BYTES} bytes, and normalises some characters away (zero-width spaces)"
        ) from None


def _spm_sample(cfg: DataConfig, seed: int, show: bool) -> tuple[list[str], list[str]]:
    """SentencePiece's training sentences: every training pair, or a uniform sample of
    `cfg.spm_sample` pairs (reservoir sampling in one pass, seeded), in corpus order."""
    size = cfg.spm_sample or sys.maxsize
    rng = random.Random(f"{seed}/sentencepiece sample")
    sample: list[tuple[str, str]] = []
    index: list[int] = []
    rows, stream = _rows(cfg)
    with tqdm(
        desc="sampling for SentencePiece", unit=" pairs", disable=not show, file=sys.stderr
    ) as bar:
        for i, (_, src, tgt) in enumerate(rows):
            if i < size:
                sample.append((src, tgt))
                index.append(i)
            elif (j := int(rng.random() * (i + 1))) < size:
                sample[j], index[j] = (src, tgt), i
            if i % 8192 == 0:
                bar.update(i - bar.n)
    if not sample:  # SentencePiece would fail with an internal error that names no file
        raise nothing_left(stream.report, dict(empty=len(stream.report.empty), long=0, ratio=0))
    order = sorted(range(len(sample)), key=index.__getitem__)
    return [sample[i][0] for i in order], [sample[i][1] for i in order]


def _tokenise(
    cfg: DataConfig,
    tokenizers: tuple[Tokenizer, Tokenizer],
    folder: Path | None,
    workers: int,
    show: bool,
) -> tuple[list[Part], tuple[Seen, Seen], PairStream]:
    """Every training pair tokenised, in corpus order, as parts (their codes in files in
    `folder`, or in memory for None); every token seen, counted; and the stream, whose
    report says what was read."""
    rows, stream = _rows(cfg)
    done, seen = [], (Seen(), Seen())
    tokenised = parts.tokenise(rows, tokenizers, **_limits(cfg), folder=folder, workers=workers)
    with tqdm(desc="tokenising", unit=" pairs", disable=not show, file=sys.stderr) as bar:
        for part, tables, counts in tokenised:
            part.numbers = tuple(s.add(t, c) for s, t, c in zip(seen, tables, counts, strict=True))
            done.append(part)
            bar.update(part.read)
    return done, seen, stream


def _limits(cfg: DataConfig) -> dict[str, Any]:
    """How `parts.tokenise` cuts and drops pairs."""
    return dict(max_tokens=cfg.max_tokens, max_ratio=cfg.max_len_ratio, cut=cut(cfg))


def _count_file(
    cfg: DataConfig, tokenizers: tuple[Tokenizer, Tokenizer], workers: int, show: bool
) -> tuple[Seen, Seen]:
    """The tokens of every pair of the training file, cut and dropped as training pairs are
    but past `data.limit` too: the counts of `data.vocab_from=file`. A second pass over the
    training rows, so that the parts' numbering stays that of the training pairs alone."""
    seen = (Seen(), Seen())
    rows = train_stream(cfg)
    tokenised = parts.tokenise(rows, tokenizers, **_limits(cfg), folder=None, workers=workers)
    with tqdm(desc="counting the file", unit=" pairs", disable=not show, file=sys.stderr) as bar:
        for part, tables, counts in tokenised:
            for side, table, count in zip(seen, tables, counts, strict=True):
                side.add(table, count)
            bar.update(part.read)
    return seen
