"""Decoding over a lexical shortlist (text/shortlist.py) on any engine: each sentence may
output only its source tokens' k likeliest translations and the always-allowed words. Which
words those are, whether a run's shortlist fits its vocabularies, and one step's
log-probabilities renormalised over them, in NumPy.

The torch engine computes the logits of the allowed words only (torch_engine/shortlist.py);
the flax and onnxruntime engines compute the whole distribution and keep each row's allowed
words, renormalised, which is the same distribution (log_softmax over a subset of the
logits is the full log-probabilities less their log-sum-exp over the subset), without the
saving. Nothing here imports a framework.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from alignmt.config import ModelConfig
from alignmt.model.attention.registry import compose
from alignmt.text.shortlist import Shortlist
from alignmt.text.vocab import Vocab


def fitting(
    k: int, shortlist: Shortlist | None, vocabs: tuple[Vocab, Vocab], cfg: ModelConfig | None
) -> Shortlist:
    """The run's `shortlist` cut to `k` words a source token (`search.shortlist`), or a
    ValueError: the run has none, or it does not fit the vocabularies, or (given the model's
    `cfg`) the output layer is not a plain projection (a copying or mixture decoder)."""
    if cfg is not None and not plain_output(cfg):
        raise ValueError(
            f"search.shortlist={k} holds for a plain output projection (log p = "
            "log_softmax(W h + b)), and this model's decoder declares another output layer: "
            "decode it without"
        )
    if shortlist is None:
        raise ValueError(
            f"search.shortlist={k}: this run folder has no shortlist.safetensors; "
            "build it with `alignmt shortlist RUN_DIR`"
        )
    src_vocab, tgt_vocab = vocabs
    table = shortlist.table
    if table.shape[0] != len(src_vocab) or table.max() >= len(tgt_vocab):
        raise ValueError(
            f"the run's shortlist.safetensors ({table.shape[0]} source tokens) does not fit "
            f"its vocabularies ({len(src_vocab)} / {len(tgt_vocab)}); build it again"
        )
    return shortlist.top(k)


def plain_output(cfg: ModelConfig) -> bool:
    """Whether the model's log p is log_softmax of one projection: not a copying (See et al.
    2017) nor a mixture (hard monotonic) decoder."""
    composition = compose(cfg)
    return composition is None or (composition.output is None and not composition.mixture)


def allowed_words(shortlist: Shortlist, sentences: Sequence[Sequence[int]], vocab: int):
    """(B, V) bool: which target words each sentence (source ids) may output, every
    translation the shortlist holds for its tokens and the always-allowed words."""
    allowed = np.zeros((len(sentences), vocab), bool)
    allowed[:, shortlist.frequent] = True
    for row, ids in enumerate(sentences):
        allowed[row, shortlist.table[np.asarray(ids)].ravel()] = True
    return allowed


def restricted(log_probs: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """(N, V) log-probabilities over each row's allowed words (N, V) only, renormalised;
    -inf elsewhere."""
    kept = np.where(allowed, log_probs, -np.inf)
    top = kept.max(axis=1, keepdims=True)
    total = np.log(np.exp(kept - top).sum(axis=1, keepdims=True))
    return (kept - top - total).astype(np.float32)
