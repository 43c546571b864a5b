"""Where an exported model's decoding time goes on ONNX Runtime at one batch size: in the
encoder graph, in the step graph (and, with --ops, in which of its operators, by ONNX
Runtime's own profiler), and in the NumPy search around them; for each thread count asked.

    python benchmarks/onnx_profile.py EXPORTED [--weights int8] [--beam 5] [--batch 64]

It translates the first --sentences lines of test_2016_flickr (tokenised before the clock
starts) after a warm-up batch, and prints one table per search: seconds and shares. Run it
with nothing else using the CPU; results are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import onnxruntime as ort

from alignmt.decoding.door import open_translator
from alignmt.decoding.exported import STEP, int8_name
from alignmt.text.corpora import data_root

MULTI30K = data_root() / "multi30k"  # alignmt data get multi30k


def main() -> None:
    args = _arguments()
    with gzip.open(MULTI30K / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line, _ in zip(f, range(args.sentences), strict=False)]
    print(f"# {args.exported}, {args.weights}, batch {args.batch}, {len(lines)} sentences\n")
    print("| beam | threads | total s | sentences/s | encoder | step graph | search (NumPy) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for beam in args.beam:
        for threads in args.threads:
            print(_row(args, lines, beam, threads), flush=True)
    if args.ops:
        _operators(args, lines)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("exported", help="a folder `alignmt export` wrote")
    parser.add_argument("--weights", choices=("float32", "int8"), default="float32")
    parser.add_argument("--beam", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, nargs="+", default=[0], help="0: ORT's default")
    parser.add_argument("--sentences", type=int, default=320)
    parser.add_argument("--ops", action="store_true", help="the step graph's operators, by type")
    return parser.parse_args()


def _row(args: argparse.Namespace, lines: list[str], beam: int, threads: int) -> str:
    translator = open_translator(args.exported, weights=args.weights, threads=threads)
    spent = _timed(translator.engine.model)
    tokens = [translator.source_tokens(line) for line in lines]
    translator.translate_tokens(
        tokens[: args.batch], batch_size=args.batch, beam_size=beam, warn=False
    )
    spent.clear()
    start = time.perf_counter()
    translator.translate_tokens(tokens, batch_size=args.batch, beam_size=beam, warn=False)
    total = time.perf_counter() - start
    rest = total - spent["encoder"] - spent["step"]
    shares = [f"{spent[k]:.2f} s ({spent[k] / total:.0%})" for k in ("encoder", "step")]
    return (
        f"| {beam} | {threads or 'default'} | {total:.2f} | {len(lines) / total:,.1f} | "
        f"{' | '.join(shares)} | {rest:.2f} s ({rest / total:.0%}) |"
    )


def _timed(model) -> dict[str, float]:
    """Wrap the model's two graph runs with clocks; returns the seconds each has taken."""
    spent: dict[str, float] = defaultdict(float)
    for name, session in (("encoder", model.encoder), ("step", model.step_graph)):
        run = session.run

        def timed(*args, _run=run, _name=name, **kwargs):
            start = time.perf_counter()
            out = _run(*args, **kwargs)
            spent[_name] += time.perf_counter() - start
            return out

        session.run = timed
    return spent


def _operators(args: argparse.Namespace, lines: list[str]) -> None:
    """ONNX Runtime's profile of the step graph during a greedy run: time by operator type."""
    translator = open_translator(args.exported, weights=args.weights)
    model = translator.engine.model
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(Path(tempfile.mkdtemp()) / "step")
    graph = str(Path(args.exported) / (int8_name(STEP) if args.weights == "int8" else STEP))
    model.step_graph = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
    tokens = [translator.source_tokens(line) for line in lines]
    translator.translate_tokens(tokens, batch_size=args.batch, beam_size=1, warn=False)
    events = json.loads(Path(model.step_graph.end_profiling()).read_text())
    by_type: dict[str, float] = defaultdict(float)
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            by_type[event["args"]["op_name"]] += event["dur"] / 1e6
    total = sum(by_type.values())
    print("\n## the step graph's operators (greedy), by type\n")
    print("| operator | seconds | share |")
    print("| --- | ---: | ---: |")
    for op, seconds in sorted(by_type.items(), key=lambda item: -item[1])[:12]:
        print(f"| {op} | {seconds:.3f} | {seconds / total:.0%} |")


if __name__ == "__main__":
    main()
