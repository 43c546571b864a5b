"""Is attention an explanation? Attention beside every attribution over a set of sentences.

Three measures, after Jain & Wallace (2019):

- each method's alignment: its teacher-forced argmax links (`align.argmax_links`), to be
  scored by AER against gold links or an aligner's;
- rank agreement: Kendall's tau between a step's attention and each attribution over the
  source tokens (`attribution.rank_agreement`);
- the counterfactual: how often a step of the model's own greedy output writes another word
  when its attention is moved to the word it ranks second (`Engine.flips`).

Each asks the translator's engine (`Engine.relevance`, teacher-forced); attention is computed
once and reused by the other methods, so the comparison costs what the attributions cost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from alignmt.analysis.align import (
    alignment_error_rate,
    argmax_links,
    between_words,
    token_pairs,
)
from alignmt.analysis.attribution import rank_agreement
from alignmt.decoding.engine import METHODS, Engine, Method
from alignmt.decoding.translator import Translator
from alignmt.text.links import Link, Words

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
    engine: Engine,
    pairs: Pairs,
    *,
    batch_size: int = 32,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> Comparison:
    """Attention and each attribution of the model on `engine` over teacher-forced `pairs`.

    Args:
        engine: an attention model on an engine that attributes (the torch engine).
        pairs: (source ids, reference ids), encoded without specials.
        batch_size: pairs per pass.
        progress: told (pairs done, pairs in all) after each `batch_size` pairs.

    Returns:
        Token links (source position, reference position) per method, and the taus.
    """
    links: dict[Method, list[set[Link]]] = {m: [set() for _ in pairs] for m in METHODS}
    taus: dict[Method, list[float]] = {m: [] for m in METHODS if m != "attention"}
    # by length, as the engine batches them: each chunk is one batch of its
    order = sorted(range(len(pairs)), key=lambda k: (len(pairs[k][0]), len(pairs[k][1])))
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        chunk = [pairs[k] for k in rows]
        attention = engine.relevance(chunk, "attention", batch_size=batch_size)
        for method in METHODS:
            scores = (
                attention
                if method == "attention"
                else engine.relevance(chunk, method, batch_size=batch_size)
            )
            for k, found in zip(rows, argmax_links(scores), strict=True):
                links[method][k] = found
            if method != "attention":
                taus[method] += rank_agreement(attention, scores)
        progress(start + len(rows), len(pairs))
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
    found = compare(translator.engine, pairs, batch_size=batch_size, progress=progress)
    words = {m: between_words(sources, references, links) for m, links in found.links.items()}
    return Comparison(words, found.taus)


def greedy_flips(
    translator: Translator, lines: Sequence[str], *, batch_size: int = 32
) -> tuple[int, int]:
    """`Engine.flips` over the translator's greedy translations of raw source `lines`:
    (steps whose word changed, steps tried)."""
    translator.engine.require(["teacher-forced attention"])
    outputs = translator.translate(list(lines), beam_size=1, batch_size=batch_size, warn=False)
    eos = translator.tgt_vocab.eos_id
    pairs = []
    for line, (best, *_) in zip(lines, outputs, strict=True):
        ids = translator.tgt_vocab.encode(best.tokens)
        body = ids[:-1] if ids and ids[-1] == eos else ids
        pairs.append((translator.src_vocab.encode(translator.source_tokens(line)), body))
    return translator.engine.flips(pairs, batch_size=batch_size)
