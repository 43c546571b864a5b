"""Raw sentences in, raw translations out: tokenise, encode, search, decode, detokenise.

Owns `Translator`, which binds a model to the tokenizers and vocabularies it was trained
with (all stored in its checkpoint, so a run folder alone translates raw text), sorts input
by length into batches, and returns each sentence's hypotheses with their attention. Search
itself is `search`'s; scoring translations is `evaluate`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import Tensor

from alignmt.checkpoint import Checkpoint
from alignmt.config import SearchConfig
from alignmt.data import EOS, UNK, Vocab, source_batch
from alignmt.model import Seq2Seq
from alignmt.search import Hypothesis, beam_decode_batches, decode_batches
from alignmt.tokenize import Tokenizer

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class Translation:
    text: str  # the detokenised output
    tokens: list[str]  # output tokens, </s> included when produced
    src_tokens: list[str]  # the source as the model read it: tokens (<unk> for unknown) + </s>
    score: float  # summed log-probability
    attention: Tensor | None  # (len(tokens), len(src_tokens)); None for vanilla


class Translator:
    """A trained model with its tokenizers and vocabularies, translating raw text."""

    def __init__(
        self,
        model: Seq2Seq,
        *,
        tokenizers: tuple[Tokenizer, Tokenizer],
        vocabs: tuple[Vocab, Vocab],
        search: SearchConfig,
    ) -> None:
        self.model = model.eval()
        self.src_tokenizer, self.tgt_tokenizer = tokenizers
        self.src_vocab, self.tgt_vocab = vocabs
        self.search = search

    @classmethod
    def from_checkpoint(cls, ckpt: Checkpoint, search: SearchConfig | None = None) -> Translator:
        """The checkpoint's model, searching as `search` says (default: its stored config)."""
        return cls(
            ckpt.model,
            tokenizers=(ckpt.src_tokenizer, ckpt.tgt_tokenizer),
            vocabs=(ckpt.src_vocab, ckpt.tgt_vocab),
            search=search or ckpt.config.search,
        )

    @torch.no_grad()
    def translate(
        self, lines: Sequence[str], *, nbest: int = 1, batch_size: int = 64, warn: bool = True
    ) -> list[list[Translation]]:
        """Translate raw sentences, `nbest` hypotheses each, best first.

        Args:
            lines: raw source sentences; a blank one gets one empty translation, so that
                output lines stay aligned with input lines.
            nbest: hypotheses per sentence, at most the beam size.
            batch_size: the most sentences decoded at once. Sentences go in sorted by length,
                to limit padding, and one that ends hands its rows to the next.
            warn: log a warning counting source tokens outside the vocabulary.

        Returns:
            One list of `nbest` translations per line, in input order.
        """
        tokens = [self.src_tokenizer.encode(line) if line.strip() else [] for line in lines]
        if warn:
            self._warn_unknown(tokens)
        results: list[list[Translation]] = [[] for _ in lines]
        todo = sorted((i for i, t in enumerate(tokens) if t), key=lambda i: len(tokens[i]))
        # Groups of many batches keep the search's rows busy until a group's end (see
        # `decode_batches`) and bound the attention held at once.
        for rows in _chunks(todo, 16 * batch_size):
            hyps = self._search([tokens[i] for i in rows], nbest, batch_size)
            for i, sentence_hyps in zip(rows, hyps, strict=True):
                results[i] = [self._translation(tokens[i], h) for h in sentence_hyps]
        empty = Translation("", [], [EOS], 0.0, None)
        return [r or [empty] * nbest for r in results]

    def _search(
        self, sentences: list[list[str]], nbest: int, batch_size: int
    ) -> list[list[Hypothesis]]:
        batches = [self._source_ids(chunk) for chunk in _chunks(sentences, batch_size)]
        cfg = self.search
        limits = dict(max_len_ratio=cfg.max_len_ratio, max_len_offset=cfg.max_len_offset)
        if cfg.beam_size == 1 and nbest == 1:
            hyps = decode_batches(self.model, batches, width=batch_size, **limits)
            return [[h] for h in hyps]
        return beam_decode_batches(
            self.model, batches, width=batch_size, beam_size=cfg.beam_size, nbest=nbest,
            alpha=cfg.length_penalty, **limits,
        )  # fmt: skip

    def _source_ids(self, sentences: list[list[str]]) -> tuple[Tensor, Tensor]:
        """A padded id batch: src (B, T_src) ending in </s>, and src_len (B,)."""
        device = next(self.model.parameters()).device
        src, src_len = source_batch(sentences, self.src_vocab)
        return src.to(device), src_len.to(device)

    def _translation(self, src_tokens: list[str], hyp: Hypothesis) -> Translation:
        src_seen = self.src_vocab.decode(self.src_vocab.encode(src_tokens), strip_special=False)
        out = self.tgt_vocab.decode(hyp.tokens, strip_special=False)
        attention = None if hyp.attention is None else hyp.attention.float()
        words = self.tgt_vocab.decode(hyp.tokens)
        if self.search.replace_unk and attention is not None:
            words = replace_unknown(words, src_tokens, attention)
        text = self.tgt_tokenizer.decode(words)
        return Translation(text, out, [*src_seen, EOS], hyp.score, attention)

    def _warn_unknown(self, sentences: list[list[str]], shown: int = 3) -> None:
        """Name the lines with tokens the model never saw (they are read as <unk>)."""
        vocab = self.src_vocab.stoi
        unknown = [(n, sorted({t for t in s if t not in vocab})) for n, s in enumerate(sentences)]
        lines = [f"line {n + 1}: {' '.join(words)!r}" for n, words in unknown if words]
        if lines:
            more = f"; and {len(lines) - shown} more lines" if len(lines) > shown else ""
            log.warning(
                "source tokens not in the vocabulary, read as <unk>: %s%s",
                "; ".join(lines[:shown]), more,
            )  # fmt: skip


def replace_unknown(words: list[str], src_tokens: list[str], attention: Tensor) -> list[str]:
    """Replace each output <unk> by the source token its attention weighs most, </s> aside
    (Luong et al. 2015, "Addressing the rare word problem"): names and numbers the
    vocabulary lacks are usually copied across unchanged.

    Args:
        words: output tokens, </s> excluded.
        src_tokens: the source tokens as written (before <unk> mapping), </s> excluded.
        attention: (>= len(words), len(src_tokens) + 1) weights; the last column is </s>.
    """
    best = attention[: len(words), : len(src_tokens)].argmax(dim=-1).tolist()  # (len(words),)
    return [src_tokens[j] if w == UNK else w for w, j in zip(words, best, strict=True)]


def _chunks(items: list[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
