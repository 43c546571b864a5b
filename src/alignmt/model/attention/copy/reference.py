"""The pointer-generator (See, Liu & Manning 2017, "Get To The Point", §2.2; after Vinyals
et al. 2015's pointer networks and Gu et al. 2016's copying) in float64 NumPy, and its
declaration.

At each step the decoder either generates a word from its vocabulary or copies a source word
by pointing at it with its attention:

    p_gen = sigma(w_c . c_i + w_s . s_i + w_y . y_{i-1} + b)
    P(w)  = p_gen P_vocab(w) + (1 - p_gen) sum_{j: x_j = w} alpha_ij

over a vocabulary extended by the source's words that the target vocabulary lacks, so that a
name or a number never seen in training is copied by name. alignmt numbers the extended
vocabulary per sentence: V target words, then one id per source position, V + j for the
word first seen at source position j. A source word whose target id is known copies into it
(`copy_ids`); another copies into V + j. The distribution has V + T_src entries and sums to
one; ids no source word copies into have probability 0.

What the paper leaves open, and what alignmt chooses:
- p_gen reads what the decoder's output layer reads, [s_i; c_i; y_{i-1}] in Bahdanau's and
  the conditional GRU's orders, [h~_i; y_{i-1}] in Luong's, whose attentional vector h~_i
  holds c_i and s_i.
- A source word the source vocabulary lacks is copied into V + j even where the target
  vocabulary has the word, since the model reads it as <unk> and cannot look its target id
  up; the data gives such a target word the same extended id, so training and decoding
  agree (alignmt.text.copy).
- Label smoothing spreads its share over the V vocabulary words, not the extended ids.
- A copied id read back as y_{i-1} is embedded as <unk>, as See et al. do.
"""

from __future__ import annotations

import numpy as np

from alignmt.config import ModelConfig
from alignmt.model.attention.spec import Shown, Slot, Spec

Array = np.ndarray


def from_config(cfg: ModelConfig) -> Spec | None:
    """The pointer-generator where `cfg.copy` asks for it."""
    if not cfg.copy:
        return None
    refuse = "model.copy points at source words with the attention, and "
    if cfg.attention == "none":
        raise ValueError(refuse + "model.attention=none has none: use model.copy=false")
    if cfg.attention_fn == "hard_monotonic":
        raise ValueError(
            refuse + "hard monotonic attention's output is already a mixture over source "
            "positions: use model.copy=false"
        )
    return Spec(
        entry=__package__,
        kind="copy",
        about="the pointer-generator (See et al. 2017): each word generated or copied from "
        "the source by attention",
        state=(Slot("p_gen", ("rows",)), Slot("copied", ("rows", "source", "units"))),
        memory=(Slot("copy_ids", ("rows", "source")),),
        shown=(
            Shown(
                slot="p_gen",
                label="p_gen",
                about="the probability that the step generates from the vocabulary rather "
                "than copies a source word",
                kind="probability",
            ),
            Shown(
                slot="copied",
                label="copy",
                about="each source word's share of the output by copying, (1 - p_gen) alpha_ij",
                kind="weights",
            ),
        ),
    )


def copy_ids(src: Array, table: Array, src_vocab_size: int, tgt_vocab_size: int) -> Array:
    """(T,) where each source position copies into: its word's target id, where the source
    vocabulary has it (src < V_src) and `table` gives one (>= 0); else V_tgt + the first
    position of the same word. src: (T,) source ids, an unknown word as V_src + its first
    position; table: (V_src,) the target id of each source word, or -1."""
    ids = np.empty(len(src), dtype=np.int64)
    for j, x in enumerate(src):
        first = next(k for k in range(len(src)) if src[k] == x)
        known = x < src_vocab_size and table[x] >= 0
        ids[j] = table[x] if known else tgt_vocab_size + first
    return ids


def extended_distribution(p_vocab: Array, alpha: Array, ids: Array, p_gen: float) -> Array:
    """(V + T,) P(w) = p_gen P_vocab(w) + (1 - p_gen) sum_{j: ids_j = w} alpha_j, from
    P_vocab (V,), alpha (T,) and the copy ids (T,)."""
    P = np.concatenate([p_gen * p_vocab, np.zeros(len(alpha))])
    for a, w in zip(alpha, ids, strict=True):
        P[w] += (1 - p_gen) * a
    return P
