"""The decoder step's hand-written paths (model/fused.py) against eager PyTorch's operators,
interleaved in one process on the matched Multi30k model of benchmarks/speed.py, so that the
VM's drift falls on both alike:

    python benchmarks/fused.py                 # about 4 minutes on two cores

Trains the model `--warmup` steps, then alternates the two paths `--rounds` times over the
same 8 training batches (ms a step: forward, backward and Adam) and over test_2016_flickr
(greedy and beam 5, batches of 64, sentences/s of the decoding loop), and counts the test
sentences whose output differs between them. Prints one table. Run from the repository root
after `alignmt data get multi30k`, with nothing else using the CPU.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from speed import MAX_OUTPUT, test_batches  # beside this script
from train_profile import PATHS, warmed_up

from alignmt.decoding.torch_engine.plan import SearchPlan
from alignmt.decoding.torch_engine.search import search


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warmup", type=int, default=30, help="training steps before timing")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the two paths")
    args = parser.parse_args()
    trained = warmed_up(args.warmup, 8)
    model, cfg = trained.model, trained.cfg

    def train() -> float:
        """ms a training step over the 8 timed batches."""
        start = time.perf_counter()
        trained.run()
        return (time.perf_counter() - start) / 8 * 1000

    test = test_batches(trained.text, cfg, torch.device("cpu"))
    sentences = len(test.pairs)
    searches = {
        "greedy": SearchPlan(width=64, **MAX_OUTPUT),
        "beam 5": SearchPlan(beam_size=5, length_penalty=0.6, width=64, **MAX_OUTPUT),
    }

    def decode(settings: SearchPlan) -> tuple[float, list]:
        """sentences/s of one pass, and its outputs' tokens."""
        start = time.perf_counter()
        with torch.no_grad():
            outputs = search(model, test.batches, settings)
        rate = sentences / (time.perf_counter() - start)
        return rate, [(o[0] if isinstance(o, list) else o).tokens for o in outputs]

    results = {path: {"train": []} for path in PATHS}
    for _ in range(args.rounds):
        for path, context in PATHS.items():
            with context():
                results[path]["train"].append(train())
    model.eval()
    differ = {}
    for name, settings in searches.items():
        outputs = {}
        for _ in range(args.rounds):
            for path, context in PATHS.items():
                with context():
                    rate, outputs[path] = decode(settings)
                results[path].setdefault(name, []).append(rate)
        differ[name] = sum(a != b for a, b in zip(*outputs.values(), strict=True))
    report(results, differ, args.rounds)


def report(results: dict, differ: dict, rounds: int) -> None:
    print(f"\ninterleaved, {rounds} rounds; min (median) for ms, max (median) for sentences/s\n")
    print("| path | training, ms a step | greedy, sentences/s | beam 5, sentences/s |")
    print("| --- | ---: | ---: | ---: |")
    for path, got in results.items():
        train = f"{min(got['train']):.1f} ({statistics.median(got['train']):.1f})"
        rates = [f"{max(got[n]):.1f} ({statistics.median(got[n]):.1f})" for n in differ]
        print(f"| {path} | {train} | " + " | ".join(rates) + " |")
    eager, fast = results["eager"], results["fused"]
    ratios = [min(eager["train"]) / min(fast["train"])]
    ratios += [max(fast[n]) / max(eager[n]) for n in differ]
    print("| fused / eager, speed | " + " | ".join(f"{r:.3f}" for r in ratios) + " |")
    differing = ", ".join(f"{name} {count}" for name, count in differ.items())
    print(f"\ntest sentences whose output differs: {differing}")


if __name__ == "__main__":
    main()
