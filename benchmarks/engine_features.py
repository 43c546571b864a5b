"""Every engine, every feature: what each feature an engine offers costs there, as sentences/s
beside the same engine's greedy search, on one run, in one sitting.

    alignmt train multi30k_en_de out_dir=runs/m30k
    alignmt export runs/m30k --out m30k_onnx
    python benchmarks/engine_features.py runs/m30k m30k_onnx

The first 320 lines of test_2016_flickr, tokenised, decoded 64 at a time after a warm-up
call of the same kind (which compiles Flax's programs), one engine at a time in this process,
with nothing else using the CPU. A feature an engine does not offer (`FEATURES`) is a dash.
The constrained column asks each output to contain its reference's longest word that the
model can write. A second table times what the explorer asks of one sentence at a time
(`/v1/step` and `/v1/beam`: stepping through the decoder, steered, with a beam, and the beam
tree), in milliseconds per output step over the first 40 of those sentences; a third, beam 5
over the run's shortlist against the whole vocabulary (the run needs its
shortlist.safetensors, which the export carries). Results are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gzip
import time
from collections.abc import Callable

from alignmt.decoding.engine import FEATURES
from alignmt.decoding.rules import Sampling
from alignmt.text.corpora import data_root

SENTENCES = 320
BATCH = 64  # translate_tokens' default batch size
# each column: the feature it needs (None: every engine searches), and the translate call
# (translator, source tokens, each sentence's constraint)
KINDS: dict[str, tuple[str | None, Callable]] = {
    "greedy": (None, lambda t, tokens, _: t.translate_tokens(tokens, beam_size=1, warn=False)),
    "beam 5": (None, lambda t, tokens, _: t.translate_tokens(tokens, beam_size=5, warn=False)),
    "sampling": (
        "sampling",
        lambda t, tokens, _: t.translate_tokens(tokens, sampling=Sampling(seed=1), warn=False),
    ),
    "constrained, beam 5": (
        "constrained search",
        lambda t, tokens, wanted: t.translate_tokens(
            tokens, beam_size=5, warn=False, constraints=wanted[: len(tokens)]
        ),
    ),
}


INSIDE_SENTENCES = 40
SHORTLIST = 50  # words a source token, for the third table
# each column of the second table: one sentence's call, and the output steps it took
INSIDE: dict[str, Callable] = {
    "step through": lambda t, line: len(t.step_through(line).steps),
    "steered at step 1": lambda t, line: len(t.step_through(line, override={1: 0}).steps),
    "step through, beam 5": lambda t, line: len(t.step_through(line, beam_size=5).steps),
    "beam tree, beam 5": lambda t, line: (
        1 + max(n.step for n in t.beam_trace(line, beam_size=5)[1].nodes)
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a run folder (torch and flax engines)")
    parser.add_argument("exported", help="its export (the onnxruntime engine)")
    args = parser.parse_args()
    folder = data_root() / "multi30k"
    with gzip.open(folder / "test_2016_flickr.en.gz", "rt") as f:
        lines = [line.rstrip("\n") for line in f][:SENTENCES]
    with gzip.open(folder / "test_2016_flickr.de.gz", "rt") as f:
        references = [line.rstrip("\n") for line in f][:SENTENCES]
    print(f"# {args.run} and {args.exported}, {time.strftime('%Y-%m-%d %H:%M UTC')}")
    print(
        f"\n{SENTENCES} sentences, {BATCH} at a time: sentences/s and output tokens/s, each "
        "× the engine's greedy\n"
    )
    _table(list(KINDS), lambda engine: _row(engine, args, lines, references))
    print(
        f"\nOne sentence at a time, the first {INSIDE_SENTENCES}: milliseconds per output step "
        "(mean over the sentences; the slowest sentence's in brackets)\n"
    )
    _table(list(INSIDE), lambda engine: _inside(engine, args, lines[:INSIDE_SENTENCES]))
    print(
        f"\nBeam 5 over the whole vocabulary and over the run's shortlist of {SHORTLIST} words "
        "a source token: sentences/s, and outputs the same as the whole vocabulary's\n"
    )
    columns = ["whole vocabulary", "shortlist", "same outputs"]
    _table(columns, lambda engine: _listed(engine, args, lines))


def _table(columns: list[str], cells: Callable[[str], list[str]]) -> None:
    """A Markdown table of each engine's `cells`, printed row by row as they are measured."""
    print("| engine | " + " | ".join(columns) + " |")
    print("| --- |" + " ---: |" * len(columns))
    for engine in ("torch", "flax", "onnxruntime"):
        print(f"| {engine} | " + " | ".join(cells(engine)) + " |", flush=True)


def _listed(engine: str, args: argparse.Namespace, lines: list[str]) -> list[str]:
    """Beam 5's sentences/s over the whole vocabulary and over the shortlist, and how many
    outputs the two share."""
    from alignmt.decoding.door import open_translator

    folder = args.exported if engine == "onnxruntime" else args.run
    speeds, texts = [], []
    for k in (0, SHORTLIST):
        translator = open_translator(folder, engine=engine, shortlist=k)
        tokens = [translator.source_tokens(line) for line in lines]
        translator.translate_tokens(tokens[:BATCH], beam_size=5, warn=False)  # warm-up
        start = time.perf_counter()
        found = translator.translate_tokens(tokens, beam_size=5, warn=False)
        speeds.append(len(lines) / (time.perf_counter() - start))
        texts.append([hyps[0].text for hyps in found])
    same = sum(a == b for a, b in zip(*texts, strict=True))
    ratio = speeds[1] / speeds[0]
    return [f"{speeds[0]:.1f}", f"{speeds[1]:.1f} ({ratio:.2f}×)", f"{same} of {len(lines)}"]


def _include(translator, reference: str):
    """The constraint that the output contain the reference's longest word that the model
    can write (a content word the model may or may not choose), or None."""
    for word in sorted(reference.split(), key=len, reverse=True):
        try:
            return translator.constraint([word])
        except ValueError:  # not a word of the target vocabulary
            continue
    return None


def _opened(engine: str, args: argparse.Namespace):
    from alignmt.decoding.door import open_translator

    return open_translator(args.exported if engine == "onnxruntime" else args.run, engine=engine)


def _inside(engine: str, args: argparse.Namespace, lines: list[str]) -> list[str]:
    """Each INSIDE call's milliseconds per output step: mean (slowest sentence's)."""
    translator = _opened(engine, args)
    cells = []
    for call in INSIDE.values():
        for line in lines:  # warm-up: Flax compiles its step for each source bucket here
            call(translator, line)
        per_step = []
        for line in lines:
            start = time.perf_counter()
            steps = call(translator, line)
            per_step.append(1000 * (time.perf_counter() - start) / steps)
        cells.append(f"{sum(per_step) / len(per_step):.1f} ({max(per_step):.1f})")
    return cells


def _row(
    engine: str, args: argparse.Namespace, lines: list[str], references: list[str]
) -> list[str]:
    translator = _opened(engine, args)
    tokens = [translator.source_tokens(line) for line in lines]
    wanted = [_include(translator, reference) for reference in references]
    cells, greedy = [], None
    for needs, call in KINDS.values():
        if needs is not None and needs not in FEATURES[engine]:
            cells.append("—")
            continue
        call(translator, tokens[:BATCH], wanted)  # warm-up: Flax compiles its programs here
        start = time.perf_counter()
        found = call(translator, tokens, wanted)
        seconds = time.perf_counter() - start
        written = sum(len(hyps[0].tokens) for hyps in found)
        speed = (len(tokens) / seconds, written / seconds)
        greedy = greedy or speed
        cells.append(
            f"{speed[0]:,.1f} ({speed[0] / greedy[0]:.2f}×) / {speed[1]:,.0f} "
            f"({speed[1] / greedy[1]:.2f}×)"
        )
    return cells


if __name__ == "__main__":
    main()
