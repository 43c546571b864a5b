"""Word links for the training pairs, as links between their tokens: what guided alignment
(Chen et al. 2016) trains attention towards.

Links come from a Pharaoh file with a line per line of the training corpus (word indices
as the run's tokenizer cuts the sentences, see `links`), or from eflomal learnt on the
training pairs as the model reads them, cached beside the token cache. A subword piece
takes its word's links: every piece of source word i is linked to every piece of target
word j when the words are. `TokenLinks` holds them in flat arrays, a pair's at a time.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from alignmt.text.cache import TokenArrays, rename_into_place
from alignmt.text.corpus import CorpusError
from alignmt.text.links import Link, eflomal_links, read_alignments
from alignmt.text.tokenize import SPACE
from alignmt.text.vocab import Vocab

log = logging.getLogger(__name__)


class TokenLinks:
    """N pairs' token links: pair r's are (src[k], tgt[k]) for k in offsets[r]:offsets[r+1],
    0-based source and target token positions (specials not counted)."""

    def __init__(self, src: np.ndarray, tgt: np.ndarray, offsets: np.ndarray) -> None:
        self.src, self.tgt, self.offsets = src, tgt, offsets

    @classmethod
    def from_sets(cls, pairs: Sequence[set[Link]]) -> TokenLinks:
        """The arrays of each pair's set of (source token, target token) links."""
        flat = [sorted(links) for links in pairs]
        lengths = np.fromiter(map(len, flat), dtype=np.int64, count=len(flat))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        both = np.array([link for links in flat for link in links], dtype=np.int32)
        both = both.reshape(-1, 2)
        return cls(both[:, 0].copy(), both[:, 1].copy(), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def of(self, rows: Sequence[int]) -> list[list[Link]]:
        """The links of pairs `rows`, in that order."""
        out = []
        for r in rows:
            start, stop = self.offsets[r], self.offsets[r + 1]
            pair = zip(self.src[start:stop].tolist(), self.tgt[start:stop].tolist(), strict=True)
            out.append(list(pair))
        return out

    def save(self, path: Path) -> None:
        np.savez(path, src=self.src, tgt=self.tgt, offsets=self.offsets)

    @classmethod
    def load(cls, path: Path) -> TokenLinks:
        with np.load(path) as data:
            return cls(data["src"], data["tgt"], data["offsets"])


def word_of(ids: Sequence[int], vocab: Vocab, subwords: bool) -> list[int]:
    """Each token's word: itself, or for SentencePiece pieces the run of pieces from one
    that starts with "▁" up to the next (as `links.sentence_words` groups them)."""
    if not subwords:
        return list(range(len(ids)))
    words, out = -1, []
    for i in ids:
        if vocab.itos[i].startswith(SPACE) or words < 0:
            words += 1
        out.append(words)
    return out


def token_links(word_links: set[Link], src_words: list[int], tgt_words: list[int]) -> set[Link]:
    """Word links as the links of their tokens: each piece inherits its word's links."""
    pieces_src: dict[int, list[int]] = {}
    pieces_tgt: dict[int, list[int]] = {}
    for position, word in enumerate(src_words):
        pieces_src.setdefault(word, []).append(position)
    for position, word in enumerate(tgt_words):
        pieces_tgt.setdefault(word, []).append(position)
    return {
        (s, t) for i, j in word_links for s in pieces_src.get(i, ()) for t in pieces_tgt.get(j, ())
    }


def pharaoh_training_links(
    path: str,
    arrays: TokenArrays,
    vocabs: tuple[Vocab, Vocab],
    *,
    subwords: bool,
    truncated: bool,
    corpus: str,
) -> TokenLinks:
    """The training pairs' token links from a Pharaoh file line-aligned with the corpus.

    Args:
        path: the file: line L holds the links of line L of the training corpus.
        arrays: the training pairs, with the line each was read from.
        vocabs: source and target vocabularies, to find SentencePiece word starts.
        subwords: the tokenizer cuts words into pieces (SentencePiece).
        truncated: the pairs were cut to `data.truncate` tokens; links to words cut off are
            dropped instead of refused.
        corpus: the training corpus's name, for messages.

    Raises:
        CorpusError: the file has fewer lines than the corpus's last training pair, or a link
            lies outside its sentence pair (naming the file and line).
    """
    _, possibles = read_alignments(path)  # sure links are among the possible ones
    last = int(arrays.lines[-1]) if len(arrays) else 0
    if len(possibles) < last:
        raise CorpusError(
            f"{path} has {len(possibles)} lines of links but {corpus} has training pairs up "
            f"to line {last}; the file needs a line per line of the corpus"
        )
    found = []
    for row, (src, tgt) in enumerate(arrays.pairs(range(len(arrays)))):
        line = int(arrays.lines[row])
        src_words, tgt_words = word_of(src, vocabs[0], subwords), word_of(tgt, vocabs[1], subwords)
        words = possibles[line - 1]
        sizes = (max(src_words, default=-1) + 1, max(tgt_words, default=-1) + 1)
        outside = sorted(link for link in words if not (link[0] < sizes[0] and link[1] < sizes[1]))
        if outside and not truncated:
            raise CorpusError(
                f"{path}:{line}: link {outside[0][0]}-{outside[0][1]} lies outside the "
                f"sentence pair of {sizes[0]} source and {sizes[1]} target words ({corpus}:{line})"
            )
        found.append(token_links(words, src_words, tgt_words))
    return TokenLinks.from_sets(found)


def eflomal_training_links(
    arrays: TokenArrays, vocabs: tuple[Vocab, Vocab], *, subwords: bool, cache: Path | None
) -> TokenLinks:
    """eflomal's forward links of the training pairs as the model reads them (words made of
    its tokens, <unk> included), as token links; read from `cache` when it has them,
    written there after learning them. None: no cache."""
    path = None if cache is None else cache / f"eflomal-{_digest(arrays)}.npz"
    if path is not None and path.is_file():
        log.info("guided alignment: eflomal's links of the training pairs from %s", path)
        return TokenLinks.load(path)
    pairs = arrays.pairs(range(len(arrays)))
    sides = []
    for side, vocab in enumerate(vocabs):
        sides.append([_words([vocab.itos[i] for i in pair[side]], subwords) for pair in pairs])
    log.info("guided alignment: eflomal on the %d training pairs", len(pairs))
    links = eflomal_links(*sides)
    found = [
        token_links(
            words,
            word_of(src, vocabs[0], subwords),
            word_of(tgt, vocabs[1], subwords),
        )
        for words, (src, tgt) in zip(links, pairs, strict=True)
    ]
    result = TokenLinks.from_sets(found)
    if path is not None:  # written beside and renamed: a reader sees all of it or none
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".building.npz")
        result.save(partial)
        rename_into_place(partial, path)
        log.info("guided alignment: links cached in %s", path)
    return result


def _words(tokens: list[str], subwords: bool) -> list[str]:
    """A sentence's words from its tokens (pieces joined for SentencePiece)."""
    if not subwords:
        return tokens
    words: list[str] = []
    for piece in tokens:
        if piece.startswith(SPACE) or not words:
            words.append("")
        words[-1] += piece.removeprefix(SPACE)
    return words


def _digest(arrays: TokenArrays) -> str:
    """The training pairs' ids, as a key: links belong to exactly these sentences."""
    digest = hashlib.blake2b(digest_size=20)
    for name, array in arrays.arrays().items():
        if name != "lines":
            digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()
