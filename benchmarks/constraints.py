"""Lexically constrained beam search on a real test set, for one run folder.

    python benchmarks/constraints.py runs/multi30k_en_de     # its config's data.test

Each test sentence gets one include constraint: the rarest word of its reference (the
reference token latest in the target vocabulary, which is ordered by training count),
the kind of term a user would insist on; then, harder, its three rarest words as three
phrases (four banks). Printed: lowercased BLEU of unconstrained and constrained beam
search, the share of sentences whose output holds every constraint, and each search's
speed in sentences/s on the same sentences in one sitting (each timed `--repeats` times,
best kept).
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import replace

import torch

from alignmt.analysis.scores import corpus_scores
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.decoding.constraint import Constraint
from alignmt.decoding.door import open_translator
from alignmt.decoding.translator import Translator
from alignmt.text.split import read_split
from alignmt.text.vocab import SPECIALS


def rarest_words(reference: str, translator: Translator, count: int) -> Constraint | None:
    """The reference's `count` rarest known words (with letters or digits), each an
    include phrase; None where the reference has no known word."""
    stoi = translator.tgt_vocab.stoi
    words = {
        stoi[t]
        for t in translator.tgt_tokenizer.encode(reference)
        if t in stoi and t not in SPECIALS and any(c.isalnum() for c in t)
    }
    if not words:
        return None
    return Constraint(include=tuple((w,) for w in sorted(words)[-count:]))


def timed(translator: Translator, tokens, constraints, batch: int, repeats: int):
    """The translations and the best of `repeats` wall times."""
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = translator.translate_tokens(
            tokens, batch_size=batch, warn=False, constraints=constraints
        )
        best = min(best, time.perf_counter() - start)
    return out, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    logging.getLogger("alignmt").setLevel(logging.ERROR)
    ckpt = load_checkpoint(args.run_dir)
    data = ckpt.config.data
    pairs = read_split(
        data.test, src_lang=data.src_lang, tgt_lang=data.tgt_lang, swap=False, what="data.test"
    )
    refs = [p.tgt for p in pairs]
    search = replace(ckpt.config.search, beam_size=args.beam)
    translator = open_translator(ckpt, search=search)
    tokens = [translator.source_tokens(p.src) for p in pairs]
    n = len(tokens)
    plain, plain_s = timed(translator, tokens, None, args.batch, args.repeats)
    print(f"{args.run_dir}: {n} sentences of {data.test}, beam {args.beam}, batch {args.batch}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    print("| search | BLEU lc | outputs holding every constraint | sentences/s | speed vs plain |")
    print("| --- | ---: | ---: | ---: | ---: |")
    bleu = lambda found: corpus_scores([h[0].text for h in found], refs, lowercase=True).bleu  # noqa: E731
    for words in (1, 3):
        constraints = [rarest_words(ref, translator, words) for ref in refs]
        if words == 1:
            row(
                f"beam {args.beam}",
                bleu(plain),
                held_by(translator, plain, constraints),
                n / plain_s,
                1.0,
            )
        held, held_s = timed(translator, tokens, constraints, args.batch, args.repeats)
        name = f"beam {args.beam}, the rarest {'word' if words == 1 else f'{words} words'}"
        row(name, bleu(held), held_by(translator, held, constraints), n / held_s, plain_s / held_s)


def held_by(translator: Translator, found, constraints) -> str:
    """How many outputs hold every include phrase of their sentence's constraint."""
    given = [(c, hyps[0]) for c, hyps in zip(constraints, found, strict=True) if c is not None]
    held = sum(all(translator.met(t, c)) for c, t in given)
    return f"{held}/{len(given)} ({100 * held / len(given):.1f}%)"


def row(name: str, bleu: float, held: str, speed: float, ratio: float) -> None:
    print(f"| {name} | {bleu:.1f} | {held} | {speed:.1f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
