"""What the translator makes of a search's output in words, whichever engine searched, on
plain arrays: the hard alignment (of tokens, or of words), <unk> replacement, the warning
about unknown source words, and the target ids of a constraint's phrase."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np

from alignmt.text.links import token_words
from alignmt.text.tokenize import Tokenizer
from alignmt.text.vocab import BOS, EOS, PAD, SPECIALS, UNK, Vocab

log = logging.getLogger(__name__)


def hard_alignment(attention: np.typing.ArrayLike, tokens: Sequence[str]) -> str:
    """Each output token's most-attended source token, in Pharaoh format: `j-i` pairs of
    a source position j and an output position i, space-separated, as fairseq's
    `--print-alignment` and Marian's `--alignment hard` write them. As there, </s> takes
    no part on either side: the last output token if it is </s>, and the last source
    column (always </s>).

    Args:
        attention: (len(tokens), T_src) weights, T_src including the source's </s>.
        tokens: the output tokens.
    """
    attention = np.asarray(attention)
    rows = len(tokens) - (1 if tokens and tokens[-1] == EOS else 0)
    if rows == 0 or attention.shape[1] < 2:
        return ""
    best = attention[:rows, :-1].argmax(axis=-1).tolist()  # (rows,)
    return " ".join(f"{j}-{i}" for i, j in enumerate(best))


def word_alignment(
    attention: np.typing.ArrayLike,
    src_tokens: Sequence[str],
    tokens: Sequence[str],
    tokenizers: tuple[Tokenizer, Tokenizer],
) -> str:
    """`hard_alignment` between words instead of tokens: each side's subword pieces are
    grouped into words (`text.links.token_words`) and two words are linked if any of their
    pieces are, each link once, in the order of the output words. For tokenizers whose
    tokens are words it is `hard_alignment` itself.

    Args:
        attention: (len(tokens), T_src) weights, T_src including the source's </s>.
        src_tokens: the source tokens (a </s> among them is left out).
        tokens: the output tokens.
        tokenizers: (source, target) tokenizers, which cut the tokens.
    """
    token_links = hard_alignment(attention, tokens)
    src_words = token_words(tokenizers[0], [t for t in src_tokens if t != EOS]).word_of
    out_words = token_words(tokenizers[1], [t for t in tokens if t != EOS]).word_of
    links = {
        (out_words[int(i)], src_words[int(j)])
        for j, i in (link.split("-") for link in token_links.split())
    }
    return " ".join(f"{j}-{i}" for i, j in sorted(links))


def replace_unknown(
    words: list[str], src_tokens: list[str], attention: np.typing.ArrayLike
) -> list[str]:
    """Replace each output <unk> by the source token its attention weighs most, </s> aside
    (Luong et al. 2015, "Addressing the rare word problem"): names and numbers the
    vocabulary lacks are usually copied across unchanged.

    Args:
        words: output tokens, </s> excluded.
        src_tokens: the source tokens as written (before <unk> mapping), </s> excluded.
        attention: (>= len(words), len(src_tokens) + 1) weights; the last column is </s>.
    """
    attention = np.asarray(attention)
    best = attention[: len(words), : len(src_tokens)].argmax(axis=-1).tolist()
    return [src_tokens[j] if w == UNK else w for w, j in zip(words, best, strict=True)]


def warn_unknown(
    sentences: list[list[str]], vocab: Vocab, shown: int = 3, copies: bool = False
) -> None:
    """Name the lines with tokens the model never saw (they are read as <unk>; a copying
    model may still write them, by copying)."""
    known = vocab.stoi
    unknown = [(n, sorted({t for t in s if t not in known})) for n, s in enumerate(sentences)]
    lines = [f"line {n + 1}: {' '.join(words)!r}" for n, words in unknown if words]
    if lines:
        more = f"; and {len(lines) - shown} more lines" if len(lines) > shown else ""
        shown_lines = "; ".join(lines[:shown])
        read = (
            "read as <unk> and copied where the model points at them" if copies else "read as <unk>"
        )
        log.warning("source tokens not in the vocabulary, %s: %s%s", read, shown_lines, more)


def phrase_ids(kind: str, phrase: str, *, tokenizer: Tokenizer, vocab: Vocab) -> tuple[int, ...]:
    """The target ids of a constraint's phrase of raw text, split by the target `tokenizer`
    into the units the model writes (words, or subword pieces). One that splits into nothing,
    or into a token outside `vocab`, is a ValueError naming it and its `kind`."""
    tokens = tokenizer.encode(phrase) if phrase.strip() else []
    if not tokens:
        raise ValueError(f"{kind} phrase {phrase!r} has no tokens")
    unknown = [t for t in tokens if t not in vocab.stoi or t in SPECIALS]
    if unknown:
        raise ValueError(
            f"{kind} phrase {phrase!r}: tokens not in the target vocabulary: {unknown}"
        )
    return tuple(vocab.stoi[t] for t in tokens)


def prefix_ids(
    tokens: Sequence[str], vocab: Vocab, copied: Mapping[str, int] | None = None
) -> list[int]:
    """Ids of target tokens that a caller forces, a copying model's `copied` source words by
    their extended ids (alignmt.text.copy.copied_to); unknown ones, and specials other than a
    final </s>, are a ValueError naming them."""
    copied = copied or {}
    unknown = [t for t in tokens if not (t in vocab.stoi or t in copied) or t in (PAD, BOS)]
    if unknown:
        raise ValueError(f"prefix: tokens not in the target vocabulary: {unknown}")
    if EOS in tokens[:-1]:
        raise ValueError("prefix: </s> may only come last")
    return [copied.get(t, vocab.stoi.get(t)) for t in tokens]


def source_as_read(tokens: Sequence[str], vocab: Vocab) -> list[str]:
    """Source tokens as the model reads them: <unk> for unknown ones, then </s>."""
    return [*vocab.decode(vocab.encode(list(tokens)), strip_special=False), EOS]
