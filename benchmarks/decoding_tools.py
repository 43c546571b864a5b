"""What sampling and word-level confidence give on a real test set, for one run folder.

    python benchmarks/decoding_tools.py runs/multi30k_en_de     # its config's data.test

Sampling: for a few temperature / top-p settings, the lowercased BLEU of one sample per
sentence, and how many distinct outputs five samples of a sentence give (1: the model
always says the same; 5: never twice). Confidence: the test set sorted by its beam
output's mean token log-probability and cut into quartiles; if the probabilities mean
anything, BLEU rises from the least to the most confident quarter.
"""

from __future__ import annotations

import argparse
import logging
import statistics

from alignmt.analysis.scores import corpus_scores
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.decoding.door import open_translator
from alignmt.decoding.rules import Sampling
from alignmt.text.split import read_split

SETTINGS = [
    dict(temperature=1.0),
    dict(temperature=0.7),
    dict(temperature=1.0, top_p=0.9),
    dict(temperature=0.5, top_k=10),
    dict(top_k=1),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    logging.getLogger("alignmt").setLevel(logging.ERROR)  # unknown words: not our subject
    ckpt = load_checkpoint(args.run_dir)
    data = ckpt.config.data
    pairs = read_split(
        data.test, src_lang=data.src_lang, tgt_lang=data.tgt_lang, swap=False, what="data.test"
    )
    src, ref = [p.src for p in pairs], [p.tgt for p in pairs]
    translator = open_translator(ckpt)
    bleu = lambda hyps, refs: corpus_scores(hyps, refs, lowercase=True).bleu  # noqa: E731

    print(f"{args.run_dir}: {len(src)} sentences of {data.test}\n")
    print("| sampling | BLEU lc, one sample | distinct outputs of 5 samples, mean |")
    print("| --- | ---: | ---: |")
    for setting in SETTINGS:
        sampling = Sampling(**setting, samples=5, seed=args.seed)
        drawn = translator.translate(src, sampling=sampling)
        first = [samples[0].text for samples in drawn]
        distinct = statistics.mean(len({s.text for s in samples}) for samples in drawn)
        name = ", ".join(f"{k.replace('_', '-')} {v}" for k, v in setting.items())
        print(f"| {name} | {bleu(first, ref):.1f} | {distinct:.2f} |")
    beam = translator.search.beam_size
    best = [hyps[0] for hyps in translator.translate(src)]
    print(f"| (beam {beam}, for comparison) | {bleu([t.text for t in best], ref):.1f} | 1 |")

    mean_log_prob = [t.score / max(1, len(t.tokens)) for t in best]
    order = sorted(range(len(src)), key=lambda i: mean_log_prob[i])
    quarter = len(order) // 4
    print(f"\nconfidence: beam-{beam} outputs by mean token log-probability, in quartiles\n")
    print("| quartile | sentences | mean token probability | BLEU lc |")
    print("| --- | ---: | ---: | ---: |")
    for q in range(4):
        rows = order[q * quarter : (q + 1) * quarter if q < 3 else len(order)]
        probs = statistics.mean(p for i in rows for p in best[i].probabilities)
        score = bleu([best[i].text for i in rows], [ref[i] for i in rows])
        label = ["least confident", "second", "third", "most confident"][q]
        print(f"| {label} | {len(rows)} | {probs:.3f} | {score:.1f} |")


if __name__ == "__main__":
    main()
