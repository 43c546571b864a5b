"""Validation during training: teacher-forced loss and greedy BLEU on the held-out pairs.

What the loop measures at every `eval_every` steps to keep the best model, halve a plateaued
learning rate and stop early. Scoring itself (sacreBLEU) is `alignmt.analysis.scores`'.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from alignmt.analysis.scores import corpus_scores
from alignmt.config import Config
from alignmt.decoding.translator import Translator
from alignmt.model.batch import make_batch
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.prepare import Text


@torch.no_grad()
def validate(model: Seq2Seq, text: Text, cfg: Config, batch_size: int = 64) -> dict[str, float]:
    """Validation loss (teacher-forced, no smoothing) and BLEU of greedy translations."""
    model.eval()
    device = next(model.parameters()).device
    total, tokens = 0.0, 0
    for start in range(0, len(text.valid_ids), batch_size):
        batch = make_batch(
            text.valid_ids[start : start + batch_size], text.src_vocab, text.tgt_vocab
        ).to(device)
        loss = model.loss(batch.src, batch.src_len, batch.tgt_in, batch.tgt_out)
        total += float(loss) * batch.num_tgt_tokens
        tokens += batch.num_tgt_tokens
    greedy = replace(cfg.search, beam_size=1)
    translator = Translator(
        model,
        tokenizers=text.tokenizers,
        vocabs=(text.src_vocab, text.tgt_vocab),
        search=greedy,
        precision=cfg.train.precision,
    )
    hyps = [t[0].text for t in translator.translate([p.src for p in text.valid], warn=False)]
    bleu = corpus_scores(hyps, [p.tgt for p in text.valid], lowercase=cfg.data.lowercase).bleu
    return {"valid_loss": total / tokens, "bleu": bleu}
