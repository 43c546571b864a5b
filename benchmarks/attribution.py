"""Is attention an explanation? Attention beside attribution on trained runs, scored on their
test set (test_2016_flickr for the Multi30k recipe):

- AER against eflomal of each method's teacher-forced argmax links (`alignmt evaluate
  --reference-aligner eflomal --alignment-from METHOD`): attention, shift-att, gradient x
  input, integrated gradients, erasure;
- Kendall's tau between each step's attention and each attribution over the source tokens,
  the references teacher-forced (the mean over target tokens, and the share above 0.5);
- the counterfactual: how often a step of the greedy output writes another word when its
  attention is moved to the word attention ranks second (the explorer's what-if).

    python benchmarks/attribution.py runs/sparse/softmax runs/local/global runs/cgru
    python benchmarks/attribution.py RUN --limit 200     # the first 200 test pairs

Run from the repository root after `alignmt data get multi30k`, with eflomal installed
(`pip install -e '.[align]'`). Prints two markdown tables.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from alignmt.analysis.align import alignment_error_rate, argmax_links, eflomal_reference_links
from alignmt.analysis.attribution import (
    METHODS,
    counterfactual_flips,
    rank_agreement,
    relevance,
    torch_model,
)
from alignmt.analysis.evaluation import read_test_set
from alignmt.decoding.door import open_translator
from alignmt.model.batch import make_batch
from alignmt.text.links import sentence_words


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR")
    parser.add_argument("--limit", type=int, default=0, help="the first N test pairs; 0: all")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    aer_rows, flip_rows = [], []
    for run in args.runs:
        name, aers, taus, flips = measure(Path(run), args.limit, args.batch_size)
        for method in METHODS:
            tau = taus.get(method)
            aer_rows.append((name, method, aers[method], tau))
        flip_rows.append((name, *flips))
    print("| run | links from | AER vs eflomal | Kendall tau with attention | tau > 0.5 |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, method, aer, tau in aer_rows:
        mean = "—" if tau is None else f"{np.mean(tau):.3f}"
        high = "—" if tau is None else f"{np.mean(tau > 0.5):.1%}"
        print(f"| {name} | {method} | {aer:.3f} | {mean} | {high} |")
    print()
    print("| run | greedy steps tried | word changed with attention on the second word |")
    print("| --- | ---: | ---: |")
    for name, flipped, tried in flip_rows:
        print(f"| {name} | {tried:,} | {flipped / tried:.1%} |")


def measure(run: Path, limit: int, batch_size: int):
    """(the run's name and order, AER per method, taus per attribution, (flipped, tried))."""
    translator = open_translator(run, device="cpu")
    config = translator.origin.header.config
    src, ref = read_test_set(config.data, str(run), "a test set")
    if limit:
        src, ref = src[:limit], ref[:limit]
    sources = [sentence_words(translator.src_tokenizer, line) for line in src]
    references = [sentence_words(translator.tgt_tokenizer, line) for line in ref]
    golds = eflomal_reference_links(
        config.data, translator, [s.words for s in sources], [r.words for r in references]
    )
    model = torch_model(translator, "gradient")
    pairs = [
        (translator.src_vocab.encode(s.tokens), translator.tgt_vocab.encode(r.tokens))
        for s, r in zip(sources, references, strict=True)
    ]
    links = {method: [set() for _ in pairs] for method in METHODS}
    taus: dict[str, list[float]] = {m: [] for m in METHODS if m != "attention"}
    done = 0
    for rows, batch in batches(pairs, translator, batch_size):
        attention = relevance(model, batch, "attention")
        for method in METHODS:
            scores = attention if method == "attention" else relevance(model, batch, method)
            found = argmax_links(scores, batch.src_len - 1, batch.tgt_len - 1)
            for k, token_links in zip(rows, found, strict=True):
                s, r = sources[k], references[k]
                links[method][k] = {(s.word_of[i], r.word_of[j]) for i, j in token_links}
            if method != "attention":
                taus[method] += rank_agreement(attention, scores, batch)
        done += len(rows)
        print(f"{run.name}: {done:,} of {len(pairs):,} pairs", flush=True)
    aers = {m: alignment_error_rate(links[m], golds, golds).aer for m in METHODS}
    flips = greedy_flips(translator, model, src, batch_size)
    name = f"{run.name} ({config.model.order})"
    return name, aers, {m: np.array(t) for m, t in taus.items()}, flips


def batches(pairs, translator, batch_size: int):
    """(indices, batch) over `pairs` in order of length, on the model's device."""
    order = sorted(range(len(pairs)), key=lambda k: (len(pairs[k][0]), len(pairs[k][1])))
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        batch = make_batch([pairs[k] for k in rows], translator.src_vocab, translator.tgt_vocab)
        yield rows, batch


def greedy_flips(translator, model, src, batch_size: int) -> tuple[int, int]:
    """`counterfactual_flips` over the greedy translations of `src`."""
    outputs = translator.translate(list(src), beam_size=1, batch_size=batch_size)
    pairs = []
    for line, (best, *_) in zip(src, outputs, strict=True):
        ids = translator.tgt_vocab.encode(best.tokens)
        body = ids[:-1] if ids and ids[-1] == translator.tgt_vocab.eos_id else ids
        pairs.append((translator.src_vocab.encode(translator.source_tokens(line)), body))
    flipped = tried = 0
    with torch.no_grad():
        for _, batch in batches(pairs, translator, batch_size):
            f, t = counterfactual_flips(model, batch)
            flipped, tried = flipped + f, tried + t
    return flipped, tried


if __name__ == "__main__":
    main()
