"""Attention variants on Multi30k English→German, one sitting: train the 15-minute recipe
(configs/multi30k_en_de.yaml) once per variant, then score each on test_2016_flickr:
lowercased BLEU (beam 5), AER of its teacher-forced argmax alignments against eflomal's, and
the share of attention weights (over real source tokens, of every output token of the beam's
best translations) that are exactly zero.

- `sparse`: softmax, sparsemax and 1.5-entmax (`model.attention_fn`), in the recipe's
  Bahdanau order and additive score.
- `luong`: in Luong's order (its attentional vector is its readout, so the recipe's readout
  and tied embeddings are off), his general score, the scaled general score and the additive
  score; then global, local-m and local-p attention (`model.attention_window`, D = 10) over
  the scaled general score, as Luong et al. (2015), Tables 4 and 6, compare windows over the
  general score (global is the scaled general row).
- `monotonic`: softmax and monotonic attention (Raffel et al. 2017; the walk in decoding),
  in the recipe's Bahdanau order and additive score; then monotonic attention in Luong's
  order, whose query has read the word just written.
- `heads`: one attention and four heads of 128 units (`model.heads`, Chen et al. 2018's
  RNMT+ heads), in the recipe's order and additive score; each head's additive score with
  A = 64 units, so that the four cost what the one attention's 256 do.
- `hard`: exact hard monotonic attention (`model.attention_fn=hard_monotonic`, Wu &
  Cotterell 2019), whose every step runs the output layer once per source word.
- `copy`: each vocabulary cut to its 2,000 most frequent words (`data.max_vocab`), then
  `replace_unk` (an output <unk> becomes its most attended source word) against the
  pointer-generator (`model.copy`, See et al. 2017); besides BLEU, how many of the test
  source's words outside the source vocabulary reach the output.

    python benchmarks/attention_variants.py sparse                  # ~50 minutes on 2 cores
    python benchmarks/attention_variants.py luong --skip-training   # score runs/luong/* again

Run from the repository root after `alignmt data get multi30k`, with nothing else using the
CPU. Prints a markdown table; the runs are in runs/SET/VARIANT.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

from alignmt.analysis.align import alignment_error_rate, eflomal_reference_links, word_links
from alignmt.analysis.evaluation import read_test_set, translate_and_score
from alignmt.decoding.door import open_translator
from alignmt.text.links import sentence_words

LUONG = ["model.order=luong", "model.readout=none", "model.tie_embeddings=false"]
# snapshots for benchmarks/score_scale.py, which reads how sharp the scores grew
LUONG += ["train.snapshot_every=500"]
# set -> (the config key that varies, {variant: the recipe's overrides})
SETS = {
    "sparse": (
        "model.attention_fn",
        {fn: [f"model.attention_fn={fn}"] for fn in ("softmax", "sparsemax", "entmax15")},
    ),
    "luong": (
        "model.attention, model.attention_window (luong)",
        {
            "general": [*LUONG, "model.attention=general"],
            "scaled_general": [*LUONG, "model.attention=scaled_general"],
            "additive": [*LUONG, "model.attention=additive"],
            **{
                f"scaled_general, {w}": [
                    *LUONG,
                    "model.attention=scaled_general",
                    f"model.attention_window={w}",
                ]
                for w in ("local_m", "local_p")
            },
        },
    ),
    "monotonic": (
        "model.attention_fn",
        {
            **{fn: [f"model.attention_fn={fn}"] for fn in ("softmax", "monotonic")},
            "monotonic, luong": [*LUONG[:3], "model.attention_fn=monotonic"],
        },
    ),
    "heads": ("model.heads", {"1": [], "4": ["model.heads=4", "model.attn_dim=64"]}),
    "hard": ("model.attention_fn", {"hard_monotonic": ["model.attention_fn=hard_monotonic"]}),
    "copy": (
        "2,000 words a side",
        {
            "replace_unk": ["data.max_vocab=2000", "search.replace_unk=true"],
            "copy": ["data.max_vocab=2000", "model.copy=true", "search.replace_unk=false"],
        },
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("set", choices=SETS, help="which variants")
    parser.add_argument("--out", default="runs", help="the runs go in OUT/SET/VARIANT")
    parser.add_argument("--skip-training", action="store_true", help="score existing runs")
    args = parser.parse_args()
    key, variants = SETS[args.set]
    rows = []
    for name, overrides in variants.items():
        run = Path(args.out) / args.set / name.replace(", ", "_")
        if not args.skip_training:
            train(run, overrides)
        rows.append(score(run, name) if args.set != "copy" else score_copying(run, name))
    if args.set == "copy":
        print(f"| {key} | steps | BLEU lc (beam 5) | unknown source words in the output |")
        print("| --- | ---: | ---: | ---: |")
        for name, steps, bleu, (reached, unknown) in rows:
            print(f"| {name} | {steps:,} | {bleu:.1f} | {reached:,} of {unknown:,} |")
        return
    print(f"| {key} | steps | BLEU lc (beam 5) | AER vs eflomal | weights exactly 0 |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, steps, bleu, aer, zeros in rows:
        print(f"| {name} | {steps:,} | {bleu:.1f} | {aer:.3f} | {zeros:.1%} |")


def train(run: Path, overrides: list[str]) -> None:
    command = [sys.executable, "-m", "alignmt", "train", "multi30k_en_de"]
    command += [*overrides, f"out_dir={run}", "--overwrite"]
    print(" ".join(command[1:]), file=sys.stderr, flush=True)
    subprocess.run(command, check=True)


def score(run: Path, name: str) -> tuple[str, int, float, float, float]:
    """(variant, steps trained, lowercased BLEU, AER against eflomal, share of zero weights)."""
    translator = open_translator(run)  # the config's search: beam 5
    config = translator.origin.header.config
    src, ref = read_test_set(config.data, str(run), "a test set")
    result, best = translate_and_score(name, translator, src, ref, config.data.tgt_lang)
    weights = np.concatenate([t.attention[:, : len(t.src_tokens)].ravel() for t in best])
    sources = [sentence_words(translator.src_tokenizer, line) for line in src]
    references = [sentence_words(translator.tgt_tokenizer, line) for line in ref]
    hyps = word_links(translator, sources, references)
    links = eflomal_reference_links(
        config.data, translator, [s.words for s in sources], [r.words for r in references]
    )
    aer = alignment_error_rate(hyps, links, links).aer
    steps = translator.origin.header.step
    return name, steps, result.lowercased.bleu, aer, float((weights == 0).mean())


def score_copying(run: Path, name: str) -> tuple[str, int, float, tuple[int, int]]:
    """(variant, steps, lowercased BLEU, (the test source's words outside the source
    vocabulary that the output has, and how many there are))."""
    translator = open_translator(run)
    config = translator.origin.header.config
    src, ref = read_test_set(config.data, str(run), "a test set")
    result, best = translate_and_score(name, translator, src, ref, config.data.tgt_lang)
    reached = unknown = 0
    for line, translation in zip(src, best, strict=True):
        words = [w for w in translator.source_tokens(line) if w not in translator.src_vocab.stoi]
        unknown += len(words)
        output = translator.tgt_tokenizer.encode(translation.text)  # replace_unk's words too
        reached += sum(w in output for w in words)
    steps = translator.origin.header.step
    return name, steps, result.lowercased.bleu, (reached, unknown)


if __name__ == "__main__":
    main()
