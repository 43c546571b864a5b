"""Raw sentences in, raw translations out, with a Flax model and no torch.

`FlaxTranslator` is translator.py's `Translator` for `flax_search.FlaxSearch`: the same
tokenizers and vocabularies (a run folder's, through `checkpoint.flax_io.load_flax`), the
same blank-line, unknown-token and <unk>-replacement handling, the same output text. Its
translations hold attention as numpy arrays. translator.py imports torch, so its few
torch-free helpers are restated here on numpy.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import numpy as np

from alignmt.checkpoint.flax_io import FlaxCheckpoint, Params
from alignmt.config import DEVICES, SearchConfig
from alignmt.decoding.flax_search import FlaxHypothesis, FlaxSearch
from alignmt.decoding.words import hard_alignment, replace_unknown, source_as_read, warn_unknown
from alignmt.model.flax_seq2seq import FlaxSeq2Seq
from alignmt.text.tokenize import Tokenizer
from alignmt.text.vocab import EOS, Vocab

log = logging.getLogger(__name__)


@dataclass
class FlaxTranslation:
    """translator.Translation, with its attention in numpy."""

    text: str  # the detokenised output
    tokens: list[str]  # output tokens, </s> included when produced
    src_tokens: list[str]  # the source as the model read it: tokens (<unk> for unknown) + </s>
    score: float  # summed log-probability
    attention: np.ndarray | None  # (len(tokens), len(src_tokens)); None for vanilla

    @property
    def alignment(self) -> str | None:
        """The hard alignment in Pharaoh format; None for vanilla (see `hard_alignment`)."""
        return None if self.attention is None else hard_alignment(self.attention, self.tokens)


class FlaxTranslator:
    """A Flax model with its tokenizers and vocabularies, translating raw text."""

    def __init__(
        self,
        model: FlaxSeq2Seq,
        params: Params,
        *,
        tokenizers: tuple[Tokenizer, Tokenizer],
        vocabs: tuple[Vocab, Vocab],
        search: SearchConfig,
    ) -> None:
        self.model, self.params = model, params
        self.src_tokenizer, self.tgt_tokenizer = tokenizers
        self.src_vocab, self.tgt_vocab = vocabs
        self.search = search
        self._searches: dict[tuple[int, int], FlaxSearch] = {}  # (nbest, batch size) -> search

    @classmethod
    def from_checkpoint(
        cls, ckpt: FlaxCheckpoint, search: SearchConfig | None = None, *, device: str = "auto"
    ) -> FlaxTranslator:
        """The checkpoint's model on `device` (see `jax_device`), searching as `search`
        says (default: its stored config)."""
        search = search or ckpt.config.search
        if search.coverage_penalty:
            raise ValueError(
                "the Flax search has no coverage penalty: use --backend torch, or "
                "--coverage-penalty 0"
            )
        if search.weights != "float32" or search.shortlist:
            raise ValueError(
                "the Flax search decodes in float32 over the whole vocabulary: use --backend "
                "torch for --weights int8 and --shortlist"
            )
        params = jax.device_put(ckpt.params, jax_device(device))
        return cls(
            ckpt.model,
            params,
            tokenizers=(ckpt.src_tokenizer, ckpt.tgt_tokenizer),
            vocabs=(ckpt.src_vocab, ckpt.tgt_vocab),
            search=search,
        )

    @property
    def compilations(self) -> int:
        """How many times this translator's searches have been compiled."""
        return sum(search.compilations for search in self._searches.values())

    def source_tokens(self, line: str) -> list[str]:
        """The source tokenizer's tokens of a raw sentence; none for a blank one."""
        return self.src_tokenizer.encode(line) if line.strip() else []

    def translate(
        self, lines: Sequence[str], *, nbest: int = 1, batch_size: int = 64, warn: bool = True
    ) -> list[list[FlaxTranslation]]:
        """Translate raw sentences, `nbest` hypotheses each, best first; see
        `Translator.translate` (a blank line gets one empty translation)."""
        return self.translate_tokens(
            [self.source_tokens(line) for line in lines],
            nbest=nbest,
            batch_size=batch_size,
            warn=warn,
        )

    def translate_tokens(
        self, tokens: list[list[str]], *, nbest: int = 1, batch_size: int = 64, warn: bool = True
    ) -> list[list[FlaxTranslation]]:
        """`translate` for sentences already split by `source_tokens`."""
        if warn:
            warn_unknown(tokens, self.src_vocab)
        todo = [i for i, t in enumerate(tokens) if t]
        search = self._search(nbest, batch_size)
        before = search.compilations
        hyps = search([self.src_vocab.encode(tokens[i], add_eos=True) for i in todo])
        log.info("flax search: %d jit compilations", search.compilations - before)
        results: list[list[FlaxTranslation]] = [[] for _ in tokens]
        for i, sentence_hyps in zip(todo, hyps, strict=True):
            results[i] = [self._translation(tokens[i], h) for h in sentence_hyps]
        empty = FlaxTranslation("", [], [EOS], 0.0, None)
        return [r or [empty] * nbest for r in results]

    def _search(self, nbest: int, batch_size: int) -> FlaxSearch:
        """The search for these settings, made once so that it compiles once per shape."""
        key = (nbest, batch_size)
        if key not in self._searches:
            options = dict(nbest=nbest, batch_size=batch_size)
            self._searches[key] = FlaxSearch(self.model, self.params, self.search, **options)
        return self._searches[key]

    def source_as_read(self, src_tokens: list[str]) -> list[str]:
        """The source tokens as the model reads them (see `words.source_as_read`)."""
        return source_as_read(src_tokens, self.src_vocab)

    def _translation(self, src_tokens: list[str], hyp: FlaxHypothesis) -> FlaxTranslation:
        ids = [*hyp.tokens, *[self.tgt_vocab.eos_id] * hyp.ended]
        out = self.tgt_vocab.decode(ids, strip_special=False)
        words = self.tgt_vocab.decode(ids)
        if self.search.replace_unk and hyp.attention is not None:
            words = replace_unknown(words, src_tokens, hyp.attention)
        text = self.tgt_tokenizer.decode(words)
        return FlaxTranslation(text, out, self.source_as_read(src_tokens), hyp.score, hyp.attention)


def jax_device(name: str) -> jax.Device:
    """The JAX device that --device `name` asks for: "auto" is JAX's default (a GPU when
    jax has one), "cpu", "cuda" or "cuda:N"; asking for a GPU without one is an error."""
    if name == "auto":
        return jax.devices()[0]
    if name == "cpu":
        return jax.devices("cpu")[0]
    index = re.fullmatch(r"cuda(?::(\d+))?", name)
    if index is None:
        raise ValueError(f"--device={name}: expected {DEVICES}")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    number = int(index[1] or 0)
    if number >= len(gpus):
        raise ValueError(f"--device={name}, but JAX sees {len(gpus)} GPU(s); use auto or cpu")
    return gpus[number]
