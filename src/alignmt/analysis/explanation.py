"""Is attention an explanation? Attention beside every attribution over a set of sentences.

Three measures, after Jain & Wallace (2019):

- each method's alignment: its teacher-forced argmax links (`align.argmax_links`), to be
  scored by AER against gold links or an aligner's;
- rank agreement: Kendall's tau between a step's attention and each attribution over the
  source tokens (`attribution.rank_agreement`);
- the counterfactual: how often a step of the model's own greedy output writes another word
  when its attention is moved to the word it ranks second (`attribution.counterfactual_flips`).

Attention is computed once per batch and reused by the other methods, so the comparison
costs what the attributions cost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from alignmt.analysis.align import (
    alignment_error_rate,
    argmax_links,
    between_words,
    sorted_batches,
    token_pairs,
)
from alignmt.analysis.attribution import (
    METHODS,
    Method,
    counterfactual_flips,
    rank_agreement,
    relevance,
    torch_model,
)
from alignmt.decoding.translator import Translator
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.links import Link, Words
from alignmt.text.vocab import Vocab

Pairs = Sequence[tuple[Sequence[int], Sequence[int]]]


@dataclass(frozen=True)
class Comparison:
    """Every method's links, and how each attribution ranks the source beside attention."""

    links: dict[Method, list[set[Link]]]  # per pair, in input order
    taus: dict[Method, np.ndarray]  # Kendall's tau with attention per target token; not for it

    def aer(
        self, sure: Sequence[set[Link]], possible: Sequence[set[Link]] | None = None
    ) -> dict[Method, float]:
        """Each method's alignment error rate against gold links (`possible`: None when the
        gold set has sure links alone)."""
        return {
            m: alignment_error_rate(found, sure, possible).aer for m, found in self.links.items()
        }


def compare(
    model: Seq2Seq,
    pairs: Pairs,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    *,
    batch_size: int = 32,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> Comparison:
    """Attention and each attribution of `model` over teacher-forced `pairs`.

    Args:
        model: an attention model, in eval mode after this.
        pairs: (source ids, reference ids), encoded without specials.
        src_vocab, tgt_vocab: the model's vocabularies.
        batch_size: pairs per pass.
        progress: told (pairs done, pairs in all) after each batch.

    Returns:
        Token links (source position, reference position) per method, and the taus.
    """
    device = next(model.parameters()).device
    links: dict[Method, list[set[Link]]] = {m: [set() for _ in pairs] for m in METHODS}
    taus: dict[Method, list[float]] = {m: [] for m in METHODS if m != "attention"}
    done = 0
    for rows, batch in sorted_batches(pairs, src_vocab, tgt_vocab, batch_size, device):
        attention = relevance(model, batch, "attention")  # (B, T_tgt, T_src)
        for method in METHODS:
            scores = attention if method == "attention" else relevance(model, batch, method)
            found = argmax_links(scores, batch.src_len - 1, batch.tgt_len - 1)
            for k, token_links in zip(rows, found, strict=True):
                links[method][k] = token_links
            if method != "attention":
                taus[method] += rank_agreement(attention, scores, batch)
        done += len(rows)
        progress(done, len(pairs))
    return Comparison(links, {m: np.array(t) for m, t in taus.items()})


def compare_words(
    translator: Translator,
    sources: Sequence[Words],
    references: Sequence[Words],
    *,
    batch_size: int = 32,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> Comparison:
    """`compare` over sentence pairs cut by `text.links.sentence_words` with the translator's
    tokenizers, its links between words (as `align.word_links` gives them)."""
    pairs = token_pairs(translator, sources, references)
    model = torch_model(translator, "gradient")
    with translator.engine.numerics():
        found = compare(
            model,
            pairs,
            translator.src_vocab,
            translator.tgt_vocab,
            batch_size=batch_size,
            progress=progress,
        )
    words = {m: between_words(sources, references, links) for m, links in found.links.items()}
    return Comparison(words, found.taus)


def greedy_flips(
    translator: Translator, lines: Sequence[str], *, batch_size: int = 32
) -> tuple[int, int]:
    """`attribution.counterfactual_flips` over the translator's greedy translations of raw
    source `lines`: (steps whose word changed, steps tried)."""
    model = torch_model(translator, "attention")
    outputs = translator.translate(list(lines), beam_size=1, batch_size=batch_size, warn=False)
    eos = translator.tgt_vocab.eos_id
    pairs = []
    for line, (best, *_) in zip(lines, outputs, strict=True):
        ids = translator.tgt_vocab.encode(best.tokens)
        body = ids[:-1] if ids and ids[-1] == eos else ids
        pairs.append((translator.src_vocab.encode(translator.source_tokens(line)), body))
    device = next(model.parameters()).device
    flipped = tried = 0
    batches = sorted_batches(pairs, translator.src_vocab, translator.tgt_vocab, batch_size, device)
    with translator.engine.numerics():
        for _, batch in batches:
            changed, steps = counterfactual_flips(model, batch)
            flipped, tried = flipped + changed, tried + steps
    return flipped, tried
