"""Word alignments: taking a model's from its attention, and scoring them.

Owns the alignment error rate of Och & Ney (2003, "A Systematic Comparison of Various
Statistical Alignment Models", Sec. 5), the hard alignment a model's attention implies for a
given (source, reference) pair, and eflomal's links for a test set as a reference. Reading
links and the words their indices count are `alignmt.text.links`'; free decoding's alignments
are `translate.hard_alignment`'s; the synthetic tasks' alignment accuracy is
`tasks.score_task`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from alignmt.config import DataConfig
from alignmt.decoding.engine import Engine, Method, Pairs
from alignmt.decoding.translator import Translator
from alignmt.text.links import Link, Words, eflomal_links, sentence_words
from alignmt.text.split import read_split

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


# --- Attention's alignments ---------------------------------------------------------------


def argmax_links(scores: Sequence[np.ndarray]) -> list[set[Link]]:
    """Each target token's most-attended real source token, in each pair's relevance matrix.

    Args:
        scores: per pair, (target tokens + 1, source tokens + 1) weights, </s> last on both
            sides (as `Engine.relevance` gives them). </s> takes no part: no link comes from
            its row, and where its column has the most weight, the best real token is taken.

    Returns:
        One set of (source position, target position) links per pair.
    """
    found = []
    for matrix in scores:
        if matrix.shape[1] < 2:  # an empty source: nothing to link to
            found.append(set())
            continue
        best = matrix[:-1, :-1].argmax(axis=-1)  # (target tokens,)
        found.append({(int(j), i) for i, j in enumerate(best)})
    return found


def token_links(
    engine: Engine,
    pairs: Pairs,
    *,
    batch_size: int = 64,
    method: Method = "attention",
) -> list[set[Link]]:
    """Token links from teacher-forcing each reference through the model: for every
    reference token, the source token its attention (or the attribution `method`) weighs
    most (see `argmax_links` and `Engine.relevance`).

    Args:
        engine: the model, on its engine.
        pairs: (source ids, reference ids), encoded without specials.
        batch_size: pairs per forward pass; pairs go in sorted by length, to limit padding.
        method: one of `decoding.engine.METHODS`.

    Returns:
        One set of (source position, reference position) links per pair, in input order.
    """
    if method in ("attention", "shift") and not engine.has_attention:
        raise ValueError("the model has no attention to align with (model.attention=none)")
    return argmax_links(engine.relevance(pairs, method, batch_size=batch_size))


def word_links(
    translator: Translator,
    sources: Sequence[Words],
    references: Sequence[Words],
    *,
    batch_size: int = 64,
    method: Method = "attention",
) -> list[set[Link]]:
    """The model's teacher-forced argmax alignments (`token_links`) between words.

    Args:
        translator: the model with its vocabularies, on its engine.
        sources, references: the sentence pairs, cut by `sentence_words` with the
            translator's source and target tokenizers.
        batch_size: pairs per forward pass.
        method: what is argmaxed: the attention, or an attribution (`engine.METHODS`).

    Returns:
        One set of (source word, reference word) links per pair.
    """
    pairs = token_pairs(translator, sources, references)
    found = token_links(translator.engine, pairs, batch_size=batch_size, method=method)
    return between_words(sources, references, found)


def token_pairs(
    translator: Translator, sources: Sequence[Words], references: Sequence[Words]
) -> list[tuple[list[int], list[int]]]:
    """(source ids, reference ids) of each pair of `sentence_words`, without specials."""
    return [
        (translator.src_vocab.encode(s.tokens), translator.tgt_vocab.encode(r.tokens))
        for s, r in zip(sources, references, strict=True)
    ]


def between_words(
    sources: Sequence[Words], references: Sequence[Words], links: Sequence[set[Link]]
) -> list[set[Link]]:
    """Token links as links between the words the tokens belong to."""
    return [
        {(s.word_of[i], r.word_of[j]) for i, j in found}
        for s, r, found in zip(sources, references, links, strict=True)
    ]


# --- eflomal ---------------------------------------------------------------------------------


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
