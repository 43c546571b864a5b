"""Validation during training, whichever the backend: the teacher-forced loss and the BLEU of
greedy translations of the held-out pairs.

What the loop measures at every `eval_every` steps to keep the best model, halve a plateaued
learning rate and stop early. The backend computes a batch's loss and gives the engine its
current weights decode with (`loop.Backend`); the translator over that engine, and scoring
(sacreBLEU, `alignmt.analysis.scores`), are the same for both.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from alignmt.analysis.scores import corpus_scores
from alignmt.config import Config
from alignmt.decoding.translator import Translator
from alignmt.text.prepare import Text

if TYPE_CHECKING:
    from alignmt.training.loop import Backend


def validate(backend: Backend, text: Text, cfg: Config, batch_size: int = 64) -> dict[str, float]:
    """Validation loss (teacher-forced, no smoothing, per target token) and BLEU of greedy
    translations, of the backend's current weights."""
    total, tokens = 0.0, 0
    for start in range(0, len(text.valid_ids), batch_size):
        loss, count = backend.valid_loss(text.valid_ids[start : start + batch_size])
        total += loss * count
        tokens += count
    greedy = replace(cfg.search, beam_size=1)
    translator = Translator(
        backend.engine(greedy),
        tokenizers=text.tokenizers,
        vocabs=(text.src_vocab, text.tgt_vocab),
        search=greedy,
    )
    hyps = [t[0].text for t in translator.translate([p.src for p in text.valid], warn=False)]
    bleu = corpus_scores(hyps, [p.tgt for p in text.valid], lowercase=cfg.data.lowercase).bleu
    return {"valid_loss": total / tokens, "bleu": bleu}
