"""Raw sentences to token strings and back, for one language side.

Owns the five tokenisers a corpus can be cut with (Moses words, characters, SentencePiece
subwords, d2l.ai's space-split words, and the tokens of a corpus that arrives tokenised),
SentencePiece training, and the JSON that rebuilds a tokeniser from a checkpoint. Does not
own token ids: `data.Vocab` maps tokens to ids and unknown tokens to `<unk>`
(`encode_batch`'s codes index a table of tokens, a compact form for big corpora).
Bahdanau et al. (2015, Sec. 4.1) used words "after a usual tokenization", which
`MosesTokenizer` reproduces; subwords and characters serve the corpora and models since;
`D2lTokenizer` reproduces the d2l.ai book's chapters (Zhang et al., "Dive into Deep
Learning", §10.5 and §11.4). `SpaceTokenizer` keeps the tokens of data that was tokenised
before it arrived, as most preprocessed translation data is, by the Moses scripts (Koehn et
al. 2007).
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, get_args

import numpy as np
import sentencepiece

from alignmt.text.escape import moses_escape, moses_unescape
from alignmt.text.vocab import UNK

TokenizerKind = Literal["moses", "char", "sentencepiece", "d2l", "space"]
KINDS: tuple[str, ...] = get_args(TokenizerKind)

SPACE = "\u2581"  # "▁", the visible space of CharTokenizer (SentencePiece's own marker)


@dataclass
class TokenCodes:
    """Many sentences' tokens as integer codes into a table, the form that stores compactly.

    Layout: the codes of sentence i follow those of sentence i - 1:
        codes    3 0 1  2 0       (sum(lengths),) int32, indices into `table`
        lengths  3      2         (n,) int64, tokens per sentence
    """

    codes: np.ndarray
    lengths: np.ndarray
    table: list[str]  # code -> token; codes may leave entries unused


class Tokenizer(ABC):
    """Turns a sentence into tokens and tokens back into a sentence."""

    kind: ClassVar[str]

    @abstractmethod
    def encode(self, text: str) -> list[str]:
        """The tokens of one raw sentence."""

    def encode_batch(self, texts: Sequence[str]) -> TokenCodes:
        """The tokens of many raw sentences, each exactly as `encode` cuts it, as codes.

        Args:
            texts: raw sentences.

        Returns:
            Their tokens as codes into a table of the tokens seen, in order of appearance.
        """
        table: dict[str, int] = {}
        codes: list[int] = []
        lengths = np.empty(len(texts), dtype=np.int64)
        for i, text in enumerate(texts):
            tokens = self.encode(text)
            lengths[i] = len(tokens)
            codes += [table.setdefault(token, len(table)) for token in tokens]
        return TokenCodes(np.array(codes, dtype=np.int32), lengths, list(table))

    @abstractmethod
    def decode(self, tokens: Sequence[str]) -> str:
        """A raw-looking sentence from tokens: the inverse of `encode`, up to normalisation."""

    @abstractmethod
    def to_json(self) -> str:
        """Everything `tokenizer_from_json` needs to rebuild this tokeniser."""


class MosesTokenizer(Tokenizer):
    """Words and punctuation split by the Moses rules of `lang` (sacremoses)."""

    kind = "moses"

    def __init__(self, *, lang: str, lowercase: bool = False) -> None:
        self.lang = lang
        self.lowercase = lowercase
        # Imported here: defining sacremoses' classes compiles their rules (0.36 s), which a
        # run of characters or SentencePiece pieces never needs
        from sacremoses import MosesDetokenizer
        from sacremoses import MosesTokenizer as SacreMosesTokenizer

        # Built once: they hold the language's compiled rules and nonbreaking prefixes.
        self._tokenizer = SacreMosesTokenizer(lang=lang)
        self._detokenizer = MosesDetokenizer(lang=lang)

    def encode(self, text: str) -> list[str]:
        if self.lowercase:
            text = text.lower()
        # escape=False: tokens stay as written ("'s", not "&apos;s"), so that vocabularies,
        # attention heatmaps and BLEU all see the characters of the corpus.
        return self._tokenizer.tokenize(text, escape=False)

    def decode(self, tokens: Sequence[str]) -> str:
        # unescape=False is the inverse of escape=False: a literal "&amp;" in the
        # output must not turn into "&". "<unk>" passes through untouched either way.
        return self._detokenizer.detokenize(list(tokens), unescape=False)

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, "lang": self.lang, "lowercase": self.lowercase})

    def __repr__(self) -> str:
        return f"MosesTokenizer(lang={self.lang!r}, lowercase={self.lowercase})"


class CharTokenizer(Tokenizer):
    """Characters, with each space kept as the token "▁" so that decoding restores it.

    Example: "a b" -> ["a", "▁", "b"]. A "▁" already in the text decodes as a space.
    """

    kind = "char"

    def __init__(self, *, lowercase: bool = False) -> None:
        self.lowercase = lowercase

    def encode(self, text: str) -> list[str]:
        if self.lowercase:
            text = text.lower()
        return list(text.replace(" ", SPACE))

    def decode(self, tokens: Sequence[str]) -> str:
        return "".join(tokens).replace(SPACE, " ")

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, "lowercase": self.lowercase})

    def __repr__(self) -> str:
        return f"CharTokenizer(lowercase={self.lowercase})"


class D2lTokenizer(Tokenizer):
    """The words of d2l.ai's `MTFraEng` (Zhang et al., "Dive into Deep Learning", §10.5).

    Non-breaking spaces (U+202F, U+00A0) become spaces, a space goes before each of , . ! ?
    that follows a non-space, and the text is split on spaces. Apostrophes stay inside words,
    unlike Moses': "I'm home." -> ["i'm", "home", "."] when lowercased.
    """

    kind = "d2l"
    _NBSP = str.maketrans({"\u202f": " ", "\xa0": " "})
    _PUNCT = re.compile(r"(?<=[^ ])([,.!?])")  # d2l's no_space(char, prev_char)

    def __init__(self, *, lowercase: bool = False) -> None:
        self.lowercase = lowercase

    def encode(self, text: str) -> list[str]:
        if self.lowercase:
            text = text.lower()
        spaced = self._PUNCT.sub(r" \1", text.translate(self._NBSP))
        # split(" "), not split(): d2l splits on spaces alone, dropping the empty strings
        # that two spaces in a row leave.
        return [token for token in spaced.split(" ") if token]

    def decode(self, tokens: Sequence[str]) -> str:
        return " ".join(tokens)  # as the book prints its translations: "va !"

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, "lowercase": self.lowercase})

    def __repr__(self) -> str:
        return f"D2lTokenizer(lowercase={self.lowercase})"


class SpaceTokenizer(Tokenizer):
    """The tokens of a corpus tokenised before it arrived: its lines split on spaces alone.

    Such data is usually Moses-tokenised with its special characters escaped
    ("Parliament &apos;s prerogative , &quot;"); Moses would cut it a second time, "&apos;s"
    into "& apos ; s". With `unescape`, Moses' entities become their characters in the tokens
    ("'s"), so that vocabularies and heatmaps read as text, and `decode` escapes them again:
    its output keeps the corpus's form, the form the references it is scored against are in.
    """

    kind = "space"

    def __init__(self, *, lowercase: bool = False, unescape: bool = False) -> None:
        self.lowercase = lowercase
        self.unescape = unescape

    def encode(self, text: str) -> list[str]:
        # Unescaped before lowercasing: "&AMP;" is no entity of Moses', so it stays text.
        if self.unescape:
            text = moses_unescape(text)
        if self.lowercase:
            text = text.lower()
        # Spaces alone, not str.split(): a no-break space inside a token is part of it.
        return [token for token in text.split(" ") if token]

    def decode(self, tokens: Sequence[str]) -> str:
        if self.unescape:  # <unk> is the vocabulary's, not text to escape
            tokens = [token if token == UNK else moses_escape(token) for token in tokens]
        return " ".join(tokens)

    def to_json(self) -> str:
        spec = {"kind": self.kind, "lowercase": self.lowercase, "unescape": self.unescape}
        return json.dumps(spec)

    def __repr__(self) -> str:
        return f"SpaceTokenizer(lowercase={self.lowercase}, unescape={self.unescape})"


class SentencePieceTokenizer(Tokenizer):
    """SentencePiece subwords (Kudo & Richardson 2018), BPE or unigram.

    `model` is the serialised SentencePiece model, as `train` makes it; it travels inside
    `to_json` (base64), so a checkpoint needs no side file.
    """

    kind = "sentencepiece"

    def __init__(self, *, model: bytes, lowercase: bool = False) -> None:
        self.model = model
        self.lowercase = lowercase
        self._sp = sentencepiece.SentencePieceProcessor(model_proto=model)

    @classmethod
    def train(
        cls,
        sentences: Iterable[str],
        *,
        vocab_size: int,
        model_type: Literal["bpe", "unigram"] = "bpe",
        lowercase: bool = False,
        seed: int = 1,
    ) -> SentencePieceTokenizer:
        """A model trained in memory on `sentences`; nothing is written to disk.

        Args:
            sentences: raw training sentences, one per item.
            vocab_size: pieces wanted, `<unk>` included; a soft limit, so a corpus too small
                for it gives fewer pieces instead of an error.
            model_type: "bpe" or "unigram".
            lowercase: lowercase the sentences before training (and later before encoding).
            seed: SentencePiece's random seed. Note that it is process-wide in SentencePiece.

        Returns:
            The tokeniser. The same sentences and arguments give the same model bytes.
        """
        if model_type not in ("bpe", "unigram"):
            raise ValueError(f"model_type must be 'bpe' or 'unigram', got {model_type!r}")
        sentencepiece.set_random_generator_seed(seed)
        model = io.BytesIO()
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=(s.lower() if lowercase else s for s in sentences),
            model_writer=model,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=1.0,
            # Only <unk> (id 0) is a SentencePiece special: data.Vocab owns <pad>, <s>, </s>.
            unk_id=0,
            bos_id=-1,
            eos_id=-1,
            pad_id=-1,
            hard_vocab_limit=False,
            # Determinism: every sentence, in the order given, and one thread (two threads
            # give a different, equally good, model for the same input).
            input_sentence_size=0,
            shuffle_input_sentence=False,
            num_threads=1,
            minloglevel=2,
        )
        return cls(model=model.getvalue(), lowercase=lowercase)

    def encode(self, text: str) -> list[str]:
        if self.lowercase:
            text = text.lower()
        return self._sp.encode(text, out_type=str)

    def encode_batch(self, texts: Sequence[str]) -> TokenCodes:
        # Ids for the whole batch in one call are several times faster than string pieces
        # sentence by sentence; the piece table turns them back into those same pieces.
        if self.lowercase:
            texts = [text.lower() for text in texts]
        ids = self._sp.encode(list(texts), out_type=int, num_threads=1)
        table = [self._sp.id_to_piece(i) for i in range(self._sp.get_piece_size())]
        extra: dict[str, int] = {}
        for row, sentence in enumerate(ids):
            if 0 in sentence:
                # An unknown piece (id 0) is its own surface text in `encode`, not "<unk>":
                # keep that text as a token of its own, as `encode` does.
                pieces = self._sp.encode(texts[row], out_type=str)
                ids[row] = [
                    self._sp.piece_to_id(piece) or extra.setdefault(piece, len(table) + len(extra))
                    for piece in pieces
                ]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        codes = np.fromiter(
            itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum())
        )
        return TokenCodes(codes, lengths, table + list(extra))

    def decode(self, tokens: Sequence[str]) -> str:
        # Through ids, so that a piece the model lacks (Vocab's "<unk>" is its id 0 anyway)
        # becomes SentencePiece's " ⁇ " instead of leaking its raw "▁" into the text.
        return self._sp.decode([self._sp.piece_to_id(token) for token in tokens])

    def to_json(self) -> str:
        model = base64.b64encode(self.model).decode("ascii")
        return json.dumps({"kind": self.kind, "lowercase": self.lowercase, "model": model})

    def __repr__(self) -> str:
        size = self._sp.get_piece_size()
        return f"SentencePieceTokenizer(pieces={size}, lowercase={self.lowercase})"


def tokenizer_from_json(text: str) -> Tokenizer:
    """The tokeniser that `Tokenizer.to_json` described."""
    spec = json.loads(text)
    kind = spec.get("kind")
    if kind == "moses":
        return MosesTokenizer(lang=spec["lang"], lowercase=spec["lowercase"])
    if kind == "char":
        return CharTokenizer(lowercase=spec["lowercase"])
    if kind == "d2l":
        return D2lTokenizer(lowercase=spec["lowercase"])
    if kind == "space":
        return SpaceTokenizer(lowercase=spec["lowercase"], unescape=spec["unescape"])
    if kind == "sentencepiece":
        model = base64.b64decode(spec["model"])
        return SentencePieceTokenizer(model=model, lowercase=spec["lowercase"])
    raise ValueError(f"unknown tokenizer kind {kind!r}; expected one of {KINDS}")


def build_tokenizer(
    kind: TokenizerKind,
    *,
    lang: str,
    lowercase: bool,
    unescape: bool = False,
    train_sentences: Sequence[str] | None = None,
    vocab_size: int = 8000,
    model_type: str = "bpe",
    seed: int = 1,
) -> Tokenizer:
    """The tokeniser a data config asks for, trained on `train_sentences` if it needs training.

    Args:
        kind: "moses", "char", "sentencepiece", "d2l" or "space".
        lang: language code for Moses' rules (ignored by the others).
        lowercase: lowercase every sentence before tokenising.
        unescape: "space" only: read Moses' entities as their characters, and write them
            back when decoding (see `SpaceTokenizer`).
        train_sentences: raw training sentences; required for "sentencepiece", ignored
            otherwise.
        vocab_size, model_type, seed: SentencePiece training options (see
            `SentencePieceTokenizer.train`).

    Returns:
        The tokeniser.
    """
    if kind == "moses":
        return MosesTokenizer(lang=lang, lowercase=lowercase)
    if kind == "char":
        return CharTokenizer(lowercase=lowercase)
    if kind == "d2l":
        return D2lTokenizer(lowercase=lowercase)
    if kind == "space":
        return SpaceTokenizer(lowercase=lowercase, unescape=unescape)
    if kind == "sentencepiece":
        if train_sentences is None:
            raise ValueError("train_sentences: required to train a sentencepiece tokenizer")
        return SentencePieceTokenizer.train(
            train_sentences,
            vocab_size=vocab_size,
            model_type=model_type,  # checked by train()
            lowercase=lowercase,
            seed=seed,
        )
    raise ValueError(f"kind: unknown tokenizer kind {kind!r}; expected one of {KINDS}")
