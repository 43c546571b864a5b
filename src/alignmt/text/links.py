"""Word links between the sentences of a parallel corpus: the Pharaoh format they are read
and written in, the words of a sentence that their indices count, and eflomal (Östling &
Tiedemann 2016, an optional dependency), which learns them from a corpus.

Indices count the words of a sentence as the model's tokenizer cuts it: the
whitespace-separated tokens of its output (Moses words, lowercased, for the Multi30k configs;
characters for the synthetic tasks). For a SentencePiece model a word is a run of pieces from
one that starts with "▁" up to the next, the words of the (normalised) sentence split at
whitespace, and a word pair is linked if any of their pieces are. Scoring links against
attention is `alignmt.analysis.align`'s; training attention towards them is
`alignmt.text.guide`'s (the links as token links) and `alignmt.model.loss`'s.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from alignmt.text.corpus import CorpusError, read_lines
from alignmt.text.tokenize import SPACE, SentencePieceTokenizer, Tokenizer

Link = tuple[int, int]  # (source index i, target index j), 0-based, Pharaoh order "i-j"


# --- Reading gold links --------------------------------------------------------------------

# Where gold sets count words from: Pharaoh files from 0; the "talp" sets (Och & Ney 2003's
# English-French, and others written like them: `1-1 2p3`) from 1.
GOLD_FORMATS = {"pharaoh": 0, "talp": 1}
_LINK = re.compile(r"([0-9]+)([-?p])([0-9]+)")
_NEGATIVE = re.compile(r"(?:^|[-?p])-[0-9]")


def parse_pharaoh(
    line: str, *, where: str, lengths: tuple[int, int] | None = None, gold_format: str = "pharaoh"
) -> tuple[set[Link], set[Link]]:
    """The links of one line: `i-j` is sure, `i?j` and `ipj` possible, counted from 0
    (Pharaoh) or from 1 (`gold_format="talp"`); returned 0-based.

    Args:
        line: space-separated links, source index first; may be empty.
        where: "file:LINE", for messages.
        lengths: (source, target) words of the sentence pair, to check the indices against;
            None: not checked.
        gold_format: "pharaoh" or "talp" (see GOLD_FORMATS).

    Returns:
        (sure, possible), possible including every sure link.
    """
    first = GOLD_FORMATS[gold_format]
    sure: set[Link] = set()
    possible: set[Link] = set()
    for text in line.split():
        match = _LINK.fullmatch(text)
        if match is None:
            problem = "a negative index" if _NEGATIVE.search(text) else "not a link"
            raise CorpusError(
                f"{where}: {text!r} is {problem}; expected i-j (sure) or i?j / ipj "
                f"(possible), {first}-based source and target word indices ({gold_format})"
            )
        i, j = int(match[1]) - first, int(match[3]) - first
        if i < 0 or j < 0:
            raise CorpusError(
                f"{where}: {text!r} has an index 0, but {gold_format} files count words from 1 "
                "(a file that counts from 0 is pharaoh)"
            )
        if lengths is not None and not (i < lengths[0] and j < lengths[1]):
            raise CorpusError(
                f"{where}: link {text!r} lies outside the sentence pair of {lengths[0]} source "
                f"and {lengths[1]} target words"
            )
        (sure if match[2] == "-" else possible).add((i, j))
    return sure, possible | sure


def read_alignments(
    path: str | Path,
    *,
    lengths: Sequence[tuple[int, int]] | None = None,
    pairs_from: str = "the sentence pairs",
    gold_format: str = "pharaoh",
) -> tuple[list[set[Link]], list[set[Link]]]:
    """Gold alignments, one line per sentence pair (`.gz` too), read 0-based.

    Args:
        path: the file.
        lengths: (source, target) words of each sentence pair: the file must have a line per
            pair and every link must fall inside its pair. None: neither is checked.
        pairs_from: where the sentence pairs came from (e.g. "t.en + t.de"), for messages.
        gold_format: "pharaoh" (0-based) or "talp" (1-based).

    Returns:
        (sures, possibles), one set per line, each possible set including the sure links.
    """
    lines = read_lines(path)
    if lengths is not None and len(lines) != len(lengths):
        raise CorpusError(
            f"{path} has {len(lines)} lines of alignments but {pairs_from} has "
            f"{len(lengths)} sentence pairs; they must be line-aligned"
        )
    sures, possibles = [], []
    for n, line in enumerate(lines):
        pair = None if lengths is None else lengths[n]
        where = f"{path}:{n + 1}"
        sure, possible = parse_pharaoh(line, where=where, lengths=pair, gold_format=gold_format)
        sures.append(sure)
        possibles.append(possible)
    return sures, possibles


# --- Words of a sentence --------------------------------------------------------------------


@dataclass(frozen=True)
class Words:
    """A sentence as the model reads it, and the words that alignment indices count."""

    tokens: list[str]  # the model's tokens, without </s>
    words: list[str]  # the words; the tokens themselves unless they are subwords
    word_of: list[int]  # for each token, the index of its word


def sentence_words(tokenizer: Tokenizer, line: str) -> Words:
    """Cut `line` as `tokenizer` does and group its tokens into words (see the module
    docstring); a blank line has none."""
    return token_words(tokenizer, tokenizer.encode(line) if line.strip() else [])


def token_words(tokenizer: Tokenizer, tokens: list[str]) -> Words:
    """`tokens`, cut by `tokenizer`, grouped into words: a SentencePiece model's pieces from
    one that starts a word to the next; any other tokenizer's tokens are its words."""
    if not isinstance(tokenizer, SentencePieceTokenizer):
        return Words(tokens, tokens, list(range(len(tokens))))
    words: list[str] = []
    word_of = []
    for piece in tokens:
        if piece.startswith(SPACE) or not words:
            words.append("")
        words[-1] += piece.removeprefix(SPACE)
        word_of.append(len(words) - 1)
    return Words(tokens, words, word_of)


# --- eflomal ------------------------------------------------------------------------------

EFLOMAL_MISSING = (
    "eflomal is not installed; install it with: .venv/bin/pip install 'eflomal>=2.0' "
    "(or the align extra: .venv/bin/pip install -e '.[align]')"
)


def import_eflomal() -> ModuleType:
    """The eflomal package, or an ImportError that says how to install it."""
    try:
        import eflomal
    except ImportError as exc:
        raise ImportError(EFLOMAL_MISSING) from exc
    return eflomal


def eflomal_links(
    sources: Sequence[Sequence[str]], targets: Sequence[Sequence[str]]
) -> list[set[Link]]:
    """eflomal's forward alignment of a parallel corpus (its default HMM + fertility model).

    Forward links give each target word at most one source word, the same shape as the
    attention's argmax. No symmetrisation: eflomal leaves that to fast_align's `atools`,
    and NLTK's `grow_diag_final_and` (its 2023 source) checks `e_new not in aligned`
    against the dict's two keys, so it returns the union. eflomal's sampler is seeded from
    /dev/urandom, so two runs differ slightly.

    Args:
        sources, targets: the sentences' words, line-aligned. Every sentence to be aligned
            must be in here: eflomal learns from the very text it aligns.

    Returns:
        One set of (source word, target word) links per pair.
    """
    eflomal = import_eflomal()
    if len(sources) != len(targets):
        raise ValueError(f"got {len(sources)} source but {len(targets)} target sentences")
    with tempfile.TemporaryDirectory(prefix="alignmt-eflomal-") as tmp:
        forward = Path(tmp) / "forward.align"
        eflomal.Aligner().align(
            [" ".join(words) + "\n" for words in sources],
            [" ".join(words) + "\n" for words in targets],
            links_filename_fwd=str(forward),
        )
        lines = read_lines(forward) if forward.is_file() else []
    if len(lines) != len(sources):
        raise RuntimeError(f"eflomal wrote {len(lines)} alignments for {len(sources)} pairs")
    return [parse_pharaoh(line, where=f"eflomal output:{n + 1}")[0] for n, line in enumerate(lines)]
