"""A test set translated and scored: the work `alignmt evaluate` and a notebook's
`Run.evaluate` share."""

from __future__ import annotations

import time
from collections.abc import Sequence

from alignmt.analysis.scores import Evaluation, score_translations
from alignmt.config import DataConfig
from alignmt.decoding.results import Translation
from alignmt.decoding.translator import Translator
from alignmt.text.split import read_split
from alignmt.text.tokenize import MosesTokenizer


def read_test_set(data: DataConfig, run: str, instead: str) -> tuple[list[str], list[str]]:
    """(sources, references) of a run's `data.test`; refused, naming `run` and what to
    give `instead`, where its config names none."""
    if not data.test:
        raise ValueError(f"{run}: its config names no data.test; pass {instead}")
    pairs = read_split(
        data.test,
        src_lang=data.src_lang,
        tgt_lang=data.tgt_lang,
        swap=data.tsv_swap,
        what="data.test",
    )
    return [p.src for p in pairs], [p.tgt for p in pairs]


def translate_and_score(
    name: str,
    translator: Translator,
    src: Sequence[str],
    ref: Sequence[str],
    lang: str,
    batch_size: int = 64,
) -> tuple[Evaluation, list[Translation]]:
    """Translate `src` (best hypothesis each) and score it against `ref`: BLEU and chrF,
    lowercased and cased, and BLEU by source length. Returns the scores and translations."""
    start = time.perf_counter()
    best = [hyps[0] for hyps in translator.translate(list(src), batch_size=batch_size)]
    seconds = time.perf_counter() - start
    # Buckets count Moses words of the source, whatever the model's own tokens are, so that
    # runs with different tokenizers share buckets.
    moses = MosesTokenizer(lang=lang)
    lengths = [len(moses.encode(line)) for line in src]
    return score_translations(name, [t.text for t in best], ref, lengths, seconds), best
