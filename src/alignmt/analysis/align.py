"""Word alignments: reading gold ones, taking a model's from its attention, scoring them.

Owns the link type, Pharaoh-format reading with file:line errors, the alignment error rate
of Och & Ney (2003, "A Systematic Comparison of Various Statistical Alignment Models",
Sec. 5), the hard alignment a model's attention implies for a given (source, reference)
pair, and eflomal (Östling & Tiedemann 2016, an optional dependency) as a reference aligner.
Free decoding's alignments are `translate.hard_alignment`'s; the synthetic tasks' alignment
accuracy is `tasks.score_task`'s.

Indices, in gold files as in the links made here, count the words of a sentence as the
model's tokenizer cuts it: the whitespace-separated tokens of its output (Moses words,
lowercased, for the Multi30k configs; characters for the synthetic tasks). For a
SentencePiece model a word is a run of pieces from one that starts with "▁" up to the
next, the words of the (normalised) sentence split at whitespace, and a word pair is linked
if any of their pieces are.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

from alignmt.config import DataConfig
from alignmt.decoding.translator import Translator
from alignmt.model.batch import make_batch
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.corpus import CorpusError, read_lines
from alignmt.text.split import read_split
from alignmt.text.tokenize import SPACE, SentencePieceTokenizer, Tokenizer
from alignmt.text.vocab import Vocab

Link = tuple[int, int]  # (source index i, target index j), 0-based, Pharaoh order "i-j"

# --- Scoring ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AlignmentScore:
    """Och & Ney's (2003) measures, with every count summed over the corpus (micro)."""

    precision: float  # |A∩P| / |A|
    recall: float  # |A∩S| / |S|
    aer: float  # 1 - (|A∩S| + |A∩P|) / (|A| + |S|)
    sentences: int


def alignment_error_rate(
    hyps: Sequence[set[Link]],
    sures: Sequence[set[Link]],
    possibles: Sequence[set[Link]] | None = None,
) -> AlignmentScore:
    """Precision, recall and AER of hypothesis links against sure and possible gold links.

    Args:
        hyps: A, the hypothesis links of each sentence.
        sures: S, the sure gold links of each sentence.
        possibles: P, the possible gold links of each sentence; the sure ones are added to
            them here (P ⊇ S by definition). None: P = S.

    Returns:
        The scores. A corpus with no hypothesis link has precision 0 (as sklearn's
        `zero_division=0`), one with no sure link recall 0.
    """
    if possibles is None:
        possibles = sures
    if not len(hyps) == len(sures) == len(possibles):
        raise ValueError(
            f"hyps, sures and possibles must have one entry per sentence, got "
            f"{len(hyps)}, {len(sures)} and {len(possibles)}"
        )
    a = s = a_s = a_p = 0
    for hyp, sure, possible in zip(hyps, sures, possibles, strict=True):
        a, s = a + len(hyp), s + len(sure)
        a_s += len(hyp & sure)
        a_p += len(hyp & (possible | sure))
    if a + s == 0:
        raise ValueError("neither the hypotheses nor the sure gold links have a link: AER is 0/0")
    return AlignmentScore(
        precision=a_p / a if a else 0.0,
        recall=a_s / s if s else 0.0,
        aer=1 - (a_s + a_p) / (a + s),
        sentences=len(hyps),
    )


# --- Reading Pharaoh files ----------------------------------------------------------------

_LINK = re.compile(r"([0-9]+)([-?p])([0-9]+)")
_NEGATIVE = re.compile(r"(?:^|[-?p])-[0-9]")


def parse_pharaoh(
    line: str, *, where: str, lengths: tuple[int, int] | None = None
) -> tuple[set[Link], set[Link]]:
    """The links of one line of Pharaoh format: `i-j` is sure, `i?j` and `ipj` possible.

    Args:
        line: space-separated links, source index first, 0-based; may be empty.
        where: "file:LINE", for messages.
        lengths: (source, target) words of the sentence pair, to check the indices against;
            None: not checked.

    Returns:
        (sure, possible), possible including every sure link.
    """
    sure: set[Link] = set()
    possible: set[Link] = set()
    for text in line.split():
        match = _LINK.fullmatch(text)
        if match is None:
            problem = "a negative index" if _NEGATIVE.search(text) else "not a link"
            raise CorpusError(
                f"{where}: {text!r} is {problem}; expected i-j (sure) or i?j / ipj "
                "(possible), 0-based source and target word indices"
            )
        i, j = int(match[1]), int(match[3])
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
) -> tuple[list[set[Link]], list[set[Link]]]:
    """Gold alignments from a Pharaoh file, one line per sentence pair (`.gz` too).

    Args:
        path: the file.
        lengths: (source, target) words of each sentence pair: the file must have a line per
            pair and every link must fall inside its pair. None: neither is checked.
        pairs_from: where the sentence pairs came from (e.g. "t.en + t.de"), for messages.

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
        sure, possible = parse_pharaoh(line, where=f"{path}:{n + 1}", lengths=pair)
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
    tokens = tokenizer.encode(line) if line.strip() else []
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


# --- Attention's alignments ---------------------------------------------------------------


def argmax_links(attention: Tensor, src_len: Tensor, tgt_len: Tensor) -> list[set[Link]]:
    """Each target token's most-attended real source token.

    Args:
        attention: (B, T_tgt, T_src) weights; each source ends in </s>.
        src_len: (B,) source tokens without </s>, the columns a link may point to. </s>
            takes no part: where it has the most weight, the best real token is taken.
        tgt_len: (B,) target tokens without </s>, the rows that get a link.

    Returns:
        B sets of (source position, target position) links.
    """
    columns = torch.arange(attention.size(-1), device=attention.device)
    real = columns < src_len[:, None]  # (B, T_src)
    best = attention.masked_fill(~real[:, None, :], float("-inf")).argmax(-1)  # (B, T_tgt)
    rows = zip(best.tolist(), src_len.tolist(), tgt_len.tolist(), strict=True)
    return [{(i, j) for j, i in enumerate(row[:m])} if n else set() for row, n, m in rows]


@torch.no_grad()
def attention_links(
    model: Seq2Seq,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    *,
    batch_size: int = 64,
) -> list[set[Link]]:
    """Token links from teacher-forcing each reference through the model: for every
    reference token, the source token its attention weighs most (see `argmax_links`).

    Args:
        model: an attention model (switched to eval mode here).
        pairs: (source ids, reference ids), encoded without specials.
        src_vocab, tgt_vocab: the model's vocabularies.
        batch_size: pairs per forward pass; pairs go in sorted by length, to limit padding.

    Returns:
        One set of (source position, reference position) links per pair, in input order.
    """
    if not model.has_attention:
        raise ValueError("the model has no attention to align with (model.attention=none)")
    model.eval()
    device = next(model.parameters()).device
    order = sorted(range(len(pairs)), key=lambda k: (len(pairs[k][0]), len(pairs[k][1])))
    links: list[set[Link]] = [set() for _ in pairs]
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        batch = make_batch([pairs[k] for k in rows], src_vocab, tgt_vocab).to(device)
        attention = model(batch.src, batch.src_len, batch.tgt_in).attention
        found = argmax_links(attention, batch.src_len - 1, batch.tgt_len - 1)
        for k, sentence_links in zip(rows, found, strict=True):
            links[k] = sentence_links
    return links


def word_links(
    translator: Translator,
    sources: Sequence[Words],
    references: Sequence[Words],
    *,
    batch_size: int = 64,
) -> list[set[Link]]:
    """The model's teacher-forced argmax alignments (`attention_links`) between words.

    Args:
        translator: the model with its vocabularies, on its device and at its precision.
        sources, references: the sentence pairs, cut by `sentence_words` with the
            translator's source and target tokenizers.
        batch_size: pairs per forward pass.

    Returns:
        One set of (source word, reference word) links per pair.
    """
    pairs = [
        (translator.src_vocab.encode(s.tokens), translator.tgt_vocab.encode(r.tokens))
        for s, r in zip(sources, references, strict=True)
    ]
    with translator.autocast():
        found = attention_links(
            translator.model,
            pairs,
            translator.src_vocab,
            translator.tgt_vocab,
            batch_size=batch_size,
        )
    return [
        {(s.word_of[i], r.word_of[j]) for i, j in links}
        for s, r, links in zip(sources, references, found, strict=True)
    ]


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


def eflomal_reference_links(
    data: DataConfig,
    translator: Translator,
    sources: Sequence[Sequence[str]],
    references: Sequence[Sequence[str]],
    progress: Callable[[str], None] = lambda stage: None,
) -> list[set[Link]]:
    """eflomal's links for test pairs' words, learnt on a run's training corpus (`data.train`)
    cut as the model cuts it, with the test pairs appended: eflomal aligns only what it
    learns on. `progress` is told each stage as it starts."""
    if not data.train:
        raise ValueError("--reference-aligner: the run's config names no data.train")
    pairs = read_split(
        data.train,
        src_lang=data.src_lang,
        tgt_lang=data.tgt_lang,
        swap=data.tsv_swap,
        what="data.train",
    )
    progress(f"tokenizing the {len(pairs):,} pairs of {data.train}")
    train_src = [sentence_words(translator.src_tokenizer, p.src).words for p in pairs]
    train_ref = [sentence_words(translator.tgt_tokenizer, p.tgt).words for p in pairs]
    progress(f"eflomal on {len(pairs) + len(sources):,} pairs (training + test)")
    links = eflomal_links(train_src + list(sources), train_ref + list(references))
    progress("eflomal done")
    return links[len(pairs) :]
