"""Scoring translations of real corpora: sacreBLEU's corpus BLEU and chrF on detokenised
text with their signatures (never a hand-written corpus BLEU), and BLEU per source-length
bucket and as a curve over source length (Bahdanau et al. 2015, Fig. 2: the fixed-vector
baseline falls off on long sentences, attention does not); also the d2l book's sentence BLEU
(Zhang et al., *Dive into Deep Learning*, §10.7) for printing a few examples. Translating
files and choosing what to score is the caller's job; these functions take lists of strings.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from sacrebleu.metrics import BLEU, CHRF


@dataclass
class CorpusScores:
    bleu: float  # sacreBLEU corpus BLEU, 0-100
    chrf: float  # sacreBLEU chrF (character 6-grams, β = 2), 0-100
    bleu_signature: str  # e.g. "nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:2.6.0"
    chrf_signature: str  # e.g. "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0"
    lowercase: bool  # both metrics were computed on lowercased text
    sentences: int

    def as_dict(self) -> dict:
        """The scores as a JSON-ready dict (floats, strings, a bool and an int)."""
        return asdict(self)


def _check_parallel(hyps: Sequence[str], refs: Sequence[str]) -> None:
    if len(hyps) != len(refs):
        raise ValueError(
            f"got {len(hyps)} hypotheses but {len(refs)} references; need one reference per "
            "hypothesis"
        )
    if not hyps:
        raise ValueError("no hypotheses to score; need at least one sentence")


def _corpus_bleu(hyps: Sequence[str], refs: Sequence[str], lowercase: bool) -> tuple[float, str]:
    # One metric object per call: sacreBLEU fixes `lowercase` when the object is built and
    # fills the signature's nrefs only once it has scored something.
    metric = BLEU(lowercase=lowercase)
    score = metric.corpus_score(list(hyps), [list(refs)]).score
    return score, str(metric.get_signature())


def corpus_scores(
    hyps: Sequence[str], refs: Sequence[str], *, lowercase: bool = False
) -> CorpusScores:
    """Corpus BLEU and chrF of detokenised hypotheses against raw references, via sacreBLEU.

    Args:
        hyps: N detokenised system outputs, one sentence each.
        refs: N reference translations as they appear in the test file (one reference each).
        lowercase: lowercase hypotheses and references before scoring, for both metrics;
            the signatures then read "case:lc" instead of "case:mixed".

    Returns:
        CorpusScores with both scores (0-100), their sacreBLEU signatures and N.

    Raises:
        ValueError: if `hyps` and `refs` differ in length (both counts are named) or are empty.
    """
    _check_parallel(hyps, refs)
    bleu, bleu_signature = _corpus_bleu(hyps, refs, lowercase)
    chrf_metric = CHRF(lowercase=lowercase)
    chrf = chrf_metric.corpus_score(list(hyps), [list(refs)]).score
    return CorpusScores(
        bleu=bleu,
        chrf=chrf,
        bleu_signature=bleu_signature,
        chrf_signature=str(chrf_metric.get_signature()),
        lowercase=lowercase,
        sentences=len(hyps),
    )


# Source-length buckets in tokens, bounds inclusive; None: no upper bound: short, medium and
# long sentences, "< 10", "10–20", "> 20".
BUCKETS: tuple[tuple[int, int | None], ...] = ((0, 9), (10, 20), (21, None))


@dataclass
class BucketScore:
    name: str  # "< 10", "10–20", "> 20"
    sentences: int  # sentences whose source length falls in the bucket
    bleu: float | None  # sacreBLEU corpus BLEU over them; None when the bucket is empty

    def as_dict(self) -> dict:
        """The bucket as a JSON-ready dict (`bleu` is null for an empty bucket)."""
        return asdict(self)


def bucket_name(low: int, high: int | None) -> str:
    """Display name of an inclusive token range: (0, 9) -> "< 10", (21, None) -> "> 20"."""
    if high is None:
        return f"> {low - 1}"
    if low == 0:
        return f"< {high + 1}"
    return f"{low}–{high}"


def _check_lengths(src_lengths: Sequence[int], hyps: Sequence[str]) -> None:
    if len(src_lengths) != len(hyps):
        raise ValueError(
            f"got {len(src_lengths)} source lengths but {len(hyps)} hypotheses; need one "
            "source length per hypothesis"
        )


def bucket_scores(
    src_lengths: Sequence[int],
    hyps: Sequence[str],
    refs: Sequence[str],
    *,
    lowercase: bool = False,
    buckets: Sequence[tuple[int, int | None]] = BUCKETS,
) -> list[BucketScore]:
    """Corpus BLEU over the sentences in each source-length bucket.

    Each bucket's BLEU is a corpus BLEU of its own sentences (n-gram counts pooled within the
    bucket), not an average of sentence BLEUs. Sentences outside every bucket are left out.

    Args:
        src_lengths: N source lengths in tokens, counted by the caller with its tokeniser.
        hyps: N detokenised system outputs.
        refs: N raw references.
        lowercase: score lowercased text, as in `corpus_scores`.
        buckets: inclusive (low, high) token ranges, high None for no upper bound.

    Returns:
        One BucketScore per bucket, in the order of `buckets`; `bleu` is None for an empty one.

    Raises:
        ValueError: if the three sequences differ in length or are empty.
    """
    _check_parallel(hyps, refs)
    _check_lengths(src_lengths, hyps)
    scores = []
    for low, high in buckets:
        members = [i for i, n in enumerate(src_lengths) if low <= n and (high is None or n <= high)]
        bleu = None
        if members:
            bleu, _ = _corpus_bleu(
                [hyps[i] for i in members], [refs[i] for i in members], lowercase
            )
        scores.append(BucketScore(bucket_name(low, high), len(members), bleu))
    return scores


def bleu_by_length(
    src_lengths: Sequence[int],
    hyps: Sequence[str],
    refs: Sequence[str],
    *,
    lowercase: bool = False,
    width: int = 5,
    min_sentences: int = 20,
) -> tuple[list[float], list[float], list[int]]:
    """Corpus BLEU against source length, for a Bahdanau et al. (2015) Fig. 2 style curve.

    Sentences go into bins of `width` tokens (0-4, 5-9, ... for width 5). A corpus BLEU over
    a handful of sentences is mostly noise, so bins are merged until each holds at least
    `min_sentences`: walking from short to long, consecutive bins are pooled until the pool
    is large enough, and a final pool that never gets there (the long tail) is merged into
    the point before it rather than dropped. Every sentence is therefore counted exactly
    once, unless the whole set has fewer than `min_sentences`, when nothing is returned.

    Args:
        src_lengths: N source lengths in tokens, counted by the caller.
        hyps: N detokenised system outputs.
        refs: N raw references.
        lowercase: score lowercased text, as in `corpus_scores`.
        width: bin width in tokens (>= 1).
        min_sentences: fewest sentences behind a point (>= 1).

    Returns:
        (centres, bleus, counts), one entry per point from short to long: the midpoint of the
        token range the point covers (the first pooled bin's low end to the last one's high
        end, e.g. 2.0 for 0-4, 9.5 for 5-14 at width 5), its corpus BLEU and its sentences.

    Raises:
        ValueError: if the sequences differ in length or are empty, or `width` or
            `min_sentences` is below 1.
    """
    _check_parallel(hyps, refs)
    _check_lengths(src_lengths, hyps)
    if width < 1 or min_sentences < 1:
        raise ValueError(f"width and min_sentences must be >= 1; got {width}, {min_sentences}")
    centres, bleus, counts = [], [], []
    for first, last, members in _length_pools(src_lengths, width, min_sentences):
        centres.append((first * width + (last + 1) * width - 1) / 2)
        bleus.append(
            _corpus_bleu([hyps[i] for i in members], [refs[i] for i in members], lowercase)[0]
        )
        counts.append(len(members))
    return centres, bleus, counts


def _length_pools(src_lengths: Sequence[int], width: int, min_sentences: int) -> list[list]:
    """`bleu_by_length`'s points: bins of `width` tokens, pooled short to long until each
    holds `min_sentences`, the long tail that never does merged into the point before it.

    Args:
        src_lengths: N source lengths in tokens.
        width: bin width in tokens (>= 1).
        min_sentences: fewest sentences behind a point (>= 1).

    Returns:
        [first bin, last bin, sentence indices] per point, short to long; no point when all
        N sentences together are fewer than `min_sentences`.
    """
    by_bin: dict[int, list[int]] = {}
    for i, n in enumerate(src_lengths):
        by_bin.setdefault(n // width, []).append(i)
    pools: list[list] = []  # [first bin, last bin, sentence indices], short to long
    for b in sorted(by_bin):
        if pools and len(pools[-1][2]) < min_sentences:
            pools[-1][1:] = [b, pools[-1][2] + by_bin[b]]
        else:
            pools.append([b, b, by_bin[b]])
    if pools and len(pools[-1][2]) < min_sentences:  # the long tail never filled up
        _, last, members = pools.pop()
        if pools:
            pools[-1][1:] = [last, pools[-1][2] + members]
    return pools


def sentence_bleu_d2l(pred: str, label: str, k: int = 2) -> float:
    """The d2l book's sentence BLEU (its `bleu`), for printing a few examples, not for reporting.

    Whitespace tokens; brevity penalty exp(min(0, 1 - len_label / len_pred)); then for
    n = 1 .. min(k, len_pred) the clipped n-gram precision p_n, weighted as p_n ** (0.5 ** n)
    so that longer matches count more. No smoothing: one n-gram order without a match gives 0.
    Use `corpus_scores` for numbers to compare with papers.

    Args:
        pred: the predicted sentence, tokens separated by whitespace.
        label: the reference sentence, tokenised the same way.
        k: the longest n-gram order.

    Returns:
        The score in [0, 1]; 0.0 for an empty prediction (d2l would divide by zero).
    """
    pred_tokens, label_tokens = pred.split(), label.split()
    if not pred_tokens:
        return 0.0
    score = math.exp(min(0.0, 1 - len(label_tokens) / len(pred_tokens)))
    for n in range(1, min(k, len(pred_tokens)) + 1):
        pred_ngrams = Counter(
            tuple(pred_tokens[i : i + n]) for i in range(len(pred_tokens) - n + 1)
        )
        label_ngrams = Counter(
            tuple(label_tokens[i : i + n]) for i in range(len(label_tokens) - n + 1)
        )
        matches = sum((pred_ngrams & label_ngrams).values())  # & keeps min counts: clipping
        score *= (matches / (len(pred_tokens) - n + 1)) ** (0.5**n)
    return score


@dataclass
class Evaluation:
    """One model's translations of a test set, scored."""

    name: str
    lowercased: CorpusScores
    cased: CorpusScores
    buckets: list[BucketScore]  # lowercased BLEU by source length
    curve: tuple[list[float], list[float]]  # (length, lowercased BLEU), see bleu_by_length
    hyps: list[str]  # detokenised best translations, one per source line
    seconds: float  # translation time

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "bleu_lowercased": self.lowercased.as_dict(),
            "bleu_cased": self.cased.as_dict(),
            "buckets": [b.as_dict() for b in self.buckets],
            "seconds": self.seconds,
        }


def score_translations(
    name: str, hyps: Sequence[str], refs: Sequence[str], src_lengths: Sequence[int], seconds: float
) -> Evaluation:
    """BLEU and chrF, lowercased and cased, and lowercased BLEU by source-length bucket."""
    centres, bleus, _ = bleu_by_length(src_lengths, hyps, refs, lowercase=True)
    return Evaluation(
        name=name,
        lowercased=corpus_scores(hyps, refs, lowercase=True),
        cased=corpus_scores(hyps, refs, lowercase=False),
        buckets=bucket_scores(src_lengths, hyps, refs, lowercase=True),
        curve=(centres, bleus),
        hyps=list(hyps),
        seconds=seconds,
    )
