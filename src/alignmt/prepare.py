"""Data preparation: from a data config to tokenizers, vocabularies and id-encoded splits.

Reads the corpus (`corpus`, `data`), trains or builds the tokenizers (`tokenize`), builds
the vocabularies and encodes the training pairs as ids; a synthetic task needs only its
alphabet. Batching the result is `train`'s.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from alignmt import tasks
from alignmt.config import DataConfig
from alignmt.corpus import Pair
from alignmt.data import Vocab, drop_long, read_split
from alignmt.tokenize import CharTokenizer, Tokenizer, build_tokenizer

log = logging.getLogger(__name__)

IdPair = tuple[list[int], list[int]]


@dataclass
class Text:
    """What a run learns from: tokenizers, vocabularies, and the splits as ids."""

    tokenizers: tuple[Tokenizer, Tokenizer]
    src_vocab: Vocab
    tgt_vocab: Vocab
    train: list[IdPair]  # empty for a synthetic task, whose batches are made on the fly
    valid: list[Pair]  # raw validation pairs, for BLEU
    valid_ids: list[IdPair]


def prepare_text(cfg: DataConfig, seed: int) -> Text:
    """Tokenizers, vocabularies and id-encoded splits for a corpus (or the task alphabet)."""
    if cfg.task != "corpus":
        vocab = Vocab(tasks.ALPHABET)
        return Text((CharTokenizer(), CharTokenizer()), vocab, vocab, [], [], [])
    if not cfg.train:
        raise ValueError("data.task=corpus needs data.train (a file PREFIX or a .tsv file)")
    split = dict(src_lang=cfg.src_lang, tgt_lang=cfg.tgt_lang, swap=cfg.tsv_swap)
    train_pairs = read_split(cfg.train, **split, what="data.train")[: cfg.limit or None]
    valid = (
        read_split(cfg.valid, **split, what="data.valid")[: cfg.limit or None] if cfg.valid else []
    )
    tokenizers = tuple(
        build_tokenizer(cfg.tokenizer, lang=lang, lowercase=cfg.lowercase,
                        train_sentences=[getattr(p, side) for p in train_pairs],
                        vocab_size=cfg.spm_vocab_size, model_type=cfg.spm_model_type, seed=seed)
        for side, lang in (("src", cfg.src_lang), ("tgt", cfg.tgt_lang))
    )  # fmt: skip
    tokens = [(tokenizers[0].encode(p.src), tokenizers[1].encode(p.tgt)) for p in train_pairs]
    keep = drop_long(tokens, [p.where for p in train_pairs], cfg.max_tokens)
    tokens = [tokens[i] for i in keep]
    src_vocab = Vocab.build((s for s, _ in tokens), min_freq=cfg.min_freq)
    tgt_vocab = Vocab.build((t for _, t in tokens), min_freq=cfg.min_freq)
    log.info("vocabularies: %d source, %d target tokens", len(src_vocab), len(tgt_vocab))
    encode = lambda s, t: (src_vocab.encode(s), tgt_vocab.encode(t))  # noqa: E731
    valid_ids = [encode(tokenizers[0].encode(p.src), tokenizers[1].encode(p.tgt)) for p in valid]
    return Text(tokenizers, src_vocab, tgt_vocab, [encode(s, t) for s, t in tokens], valid,
                valid_ids)  # fmt: skip
