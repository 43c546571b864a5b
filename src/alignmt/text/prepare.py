"""Data preparation: from a data config to tokenizers, vocabularies and id-encoded splits.

A synthetic task needs only its alphabet. A corpus's training split is streamed from disk,
never held whole as Python strings: SentencePiece trains on a seeded sample of it, then
worker processes tokenise it a chunk at a time (`parts`), the merged counts make the
vocabularies (or those of a second pass over the whole file, `data.vocab_from=file`), and the
chunks' codes become `cache.TokenArrays` of ids. The result is kept in a cache folder keyed
by the corpus's contents and the settings, so that a later run, or the other processes of
this one, maps it instead of building it again. The validation split is small and stays in
memory: a file of its own, or the pairs of the training file right after the training pairs
(`data.valid_rows`, d2l.ai's split of one file). Batching is `alignmt.training.batches`'.
"""

from __future__ import annotations

import gc
import itertools
import logging
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from tqdm import tqdm

from alignmt.config import DataConfig
from alignmt.text import parts, tasks
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
from alignmt.text.corpus import Pair, PairStream, ReadReport, locations
from alignmt.text.parts import Part, Seen
from alignmt.text.split import read_split, stream_split
from alignmt.text.tokenize import (
    CharTokenizer,
    SentencePieceTokenizer,
    Tokenizer,
    build_tokenizer,
)
from alignmt.text.vocab import Vocab

log = logging.getLogger(__name__)

_SPM_MAX_BYTES = 4192  # SentencePiece's max_sentence_length, left at its default


@dataclass
class Text:
    """What a run learns from: tokenizers, vocabularies, and the splits as ids."""

    tokenizers: tuple[Tokenizer, Tokenizer]
    src_vocab: Vocab
    tgt_vocab: Vocab
    train: TokenArrays  # empty for a synthetic task, whose batches are made on the fly
    valid: list[Pair]  # raw validation pairs, for BLEU
    valid_ids: list[IdPair]


def prepare_text(cfg: DataConfig, seed: int, *, progress: bool | None = None) -> Text:
    """Tokenizers, vocabularies and id-encoded splits for a corpus (or the task alphabet).

    Args:
        cfg: the data config; `cache`, `cache_dir` and `workers` say where and how the
            training split is tokenised.
        seed: the run's seed (SentencePiece's training and sample).
        progress: draw a progress bar while tokenising; None draws one when stderr is a
            terminal.

    Returns:
        The text. `train` is memory-mapped from the cache folder unless `cfg.cache` is off.
    """
    if cfg.task != "corpus":
        vocab = Vocab(tasks.ALPHABET)
        empty = TokenArrays.from_pairs([])
        return Text((CharTokenizer(), CharTokenizer()), vocab, vocab, empty, [], [])
    if not cfg.train:
        raise ValueError("data.task=corpus needs data.train (a file PREFIX or a .tsv file)")
    show = sys.stderr.isatty() if progress is None else progress
    built = _cached(cfg, seed, show) if cfg.cache else _build(cfg, seed, None, show)
    _log_summary(cfg, built.meta)
    tokenizers, (src_vocab, tgt_vocab) = built.tokenizers, built.vocabs
    valid = _valid(cfg)
    keep = _cut(cfg) or None  # the loss sees validation pairs cut as training pairs are
    valid_ids = [
        (
            src_vocab.encode(tokenizers[0].encode(p.src)[:keep]),
            tgt_vocab.encode(tokenizers[1].encode(p.tgt)[:keep]),
        )
        for p in valid
    ]
    return Text(tokenizers, src_vocab, tgt_vocab, built.arrays, valid, valid_ids)


def _valid(cfg: DataConfig) -> list[Pair]:
    """The validation pairs: `data.valid_rows` pairs of the training file after its first
    `data.limit`, the `data.valid` file's (its first `limit`), or none."""
    if cfg.valid_rows:
        stream = _stream(cfg)
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


def _cut(cfg: DataConfig) -> int:
    """Tokens a side keeps, </s> not counted (it is added to every side later); 0: all."""
    return cfg.truncate - 1 if cfg.truncate else 0


def _stream(cfg: DataConfig) -> PairStream:
    return stream_split(
        cfg.train,
        src_lang=cfg.src_lang,
        tgt_lang=cfg.tgt_lang,
        swap=cfg.tsv_swap,
        what="data.train",
    )


def _rows(cfg: DataConfig) -> tuple[Iterator[tuple[int, str, str]], PairStream]:
    """The training rows up to `cfg.limit`, and the stream that reports on them."""
    stream = _stream(cfg)
    return itertools.islice(stream, cfg.limit or None), stream


# --- The cache ------------------------------------------------------------------------------


def _settings(cfg: DataConfig, seed: int) -> dict[str, Any]:
    """Everything besides the corpus files that the training arrays depend on."""
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
    return settings


def _cached(cfg: DataConfig, seed: int, show: bool) -> Cached:
    """The training split from its cache folder, built there first if it is not."""
    root = cache_root(cfg.cache_dir)
    folder = root / cache_key(_settings(cfg, seed), _stream(cfg).files)
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
        built = _build(cfg, seed, building, show)
        write_cache(building, built.arrays, built.tokenizers, built.vocabs, built.meta)
        del built  # unmaps the arrays before the folder moves
        rename_into_place(building, folder)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    log.info("data.train: tokenised corpus cached in %s", folder)
    return load_cache(folder)


def _log_summary(cfg: DataConfig, meta: dict[str, Any]) -> None:
    """What the build read and dropped (again on a cache hit), located in today's files."""
    stream, read, dropped = _stream(cfg), meta["read"], meta["dropped"]

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


# --- Building -------------------------------------------------------------------------------


def _build(cfg: DataConfig, seed: int, folder: Path | None, show: bool) -> Cached:
    """Tokenizers, vocabularies and arrays of the training split, written into `folder`
    (memory-mapped), or in memory for None."""
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
        raise _nothing_left(report, {kind: d["count"] for kind, d in dropped.items()})
    vocabs = tuple(side.vocab(cfg.min_freq) for side in counted)
    arrays = parts.assemble(done, seen, vocabs, folder)
    meta = dict(
        settings=_settings(cfg, seed),
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


def _nothing_left(report: ReadReport, dropped: dict[str, int]) -> ValueError:
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
        return tuple(
            build_tokenizer(cfg.tokenizer, lang=lang, lowercase=cfg.lowercase) for lang in langs
        )
    sample = _spm_sample(cfg, seed, show)
    log.info("data.train: training SentencePiece on %d sentences a side", len(sample[0]))
    options = dict(
        vocab_size=cfg.spm_vocab_size,
        model_type=cfg.spm_model_type,
        lowercase=cfg.lowercase,
        seed=seed,
    )
    sides = [f"data.train: {_stream(cfg).report.path}, the {lang} side" for lang in langs]
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
        raise _nothing_left(stream.report, dict(empty=len(stream.report.empty), long=0, ratio=0))
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
    return dict(max_tokens=cfg.max_tokens, max_ratio=cfg.max_len_ratio, cut=_cut(cfg))


def _count_file(
    cfg: DataConfig, tokenizers: tuple[Tokenizer, Tokenizer], workers: int, show: bool
) -> tuple[Seen, Seen]:
    """The tokens of every pair of the training file, cut and dropped as training pairs are
    but past `data.limit` too: the counts of `data.vocab_from=file`. A second pass over the
    training rows, so that the parts' numbering stays that of the training pairs alone."""
    seen = (Seen(), Seen())
    rows = _stream(cfg)
    tokenised = parts.tokenise(rows, tokenizers, **_limits(cfg), folder=None, workers=workers)
    with tqdm(desc="counting the file", unit=" pairs", disable=not show, file=sys.stderr) as bar:
        for part, tables, counts in tokenised:
            for side, table, count in zip(seen, tables, counts, strict=True):
                side.add(table, count)
            bar.update(part.read)
    return seen
