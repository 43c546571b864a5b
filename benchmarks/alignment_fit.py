"""How closely does a guided run's attention fit the links it was trained towards? The
teacher-forced argmax attention of a run on its own training pairs, scored (precision,
recall, AER) against the eflomal links that `train.guided_alignment=eflomal` cached for them:
the ceiling that the same attention meets on a test set, where the links are new.

    python benchmarks/alignment_fit.py runs/m30k_guided --pairs 2000

Token links, as training sees them (the Multi30k configs cut Moses words: one token each).
Needs the run's token cache and eflomal cache, which its training left behind.
"""

from __future__ import annotations

import argparse
import logging
import random

from alignmt.analysis.align import alignment_error_rate, token_links
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.decoding.door import open_translator
from alignmt.text.cache import cache_root
from alignmt.text.guide import eflomal_training_links
from alignmt.text.prepare import prepare_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--pairs", type=int, default=2000, help="training pairs scored")
    args = parser.parse_args()
    logging.getLogger("alignmt").setLevel(logging.WARNING)
    ckpt = load_checkpoint(args.run_dir)
    cfg = ckpt.config
    text = prepare_text(cfg.data, cfg.seed, progress=False)
    vocabs, subwords = (text.src_vocab, text.tgt_vocab), cfg.data.tokenizer == "sentencepiece"
    cache = cache_root(cfg.data.cache_dir)
    guides = eflomal_training_links(text.train, vocabs, subwords=subwords, cache=cache)
    rows = sorted(random.Random(1).sample(range(len(text.train)), args.pairs))
    pairs = text.train.pairs(rows)
    found = token_links(open_translator(ckpt).engine, pairs)
    gold = [set(links) for links in guides.of(rows)]
    score = alignment_error_rate(found, gold)
    print(
        f"{args.run_dir}: {args.pairs} training pairs, attention against the links it was "
        f"guided towards: precision {score.precision:.1%}, recall {score.recall:.1%}, "
        f"AER {score.aer:.1%}"
    )


if __name__ == "__main__":
    main()
