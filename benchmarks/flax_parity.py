"""Do the two frameworks translate alike? A run folder's test set decoded by PyTorch and by
JAX/Flax, greedy and beam 5, on the same weights: the share of identical outputs, and the
first few that differ.

    python benchmarks/flax_parity.py runs/multi30k_en_de        # its config's data.test
    python benchmarks/flax_parity.py RUN --src test.en --beams 1

Identical is too strong a promise for float32: the frameworks sum in different orders, so
where two tokens' probabilities tie to about 1e-6, either may win, and the rest of the output
follows the winner. This prints how often that happens.
"""

from __future__ import annotations

import argparse
import logging
import time

from alignmt.analysis.evaluation import read_test_set
from alignmt.checkpoint.format import load_header
from alignmt.decoding.door import open_translator
from alignmt.text.corpus import read_lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--src", help="source sentences, one per line (default: data.test)")
    parser.add_argument("--beams", default="1,5", help="beam sizes to compare (default 1,5)")
    parser.add_argument("--shown", type=int, default=3, help="differing outputs to print")
    args = parser.parse_args()
    logging.getLogger("alignmt").setLevel(logging.ERROR)  # unknown words: not our subject
    cfg = load_header(args.run_dir).config
    if args.src:
        lines, where = read_lines(args.src), args.src
    else:
        lines, where = read_test_set(cfg.data, args.run_dir, "--src")[0], cfg.data.test
    print(f"{args.run_dir}: {len(lines)} sentences of {where}\n")
    print("| search | identical | PyTorch s | Flax s (compilation included) |")
    print("| --- | ---: | ---: | ---: |")
    differ = {}
    for beam in map(int, args.beams.split(",")):
        outputs = {}
        seconds = {}
        sides = {
            "torch": open_translator(args.run_dir, device="cpu", beam_size=beam),
            "flax": open_translator(args.run_dir, engine="flax", device="cpu", beam_size=beam),
        }
        for name, side in sides.items():
            start = time.perf_counter()
            outputs[name] = [h[0].text for h in side.translate(lines)]
            seconds[name] = time.perf_counter() - start
        same = sum(a == b for a, b in zip(outputs["torch"], outputs["flax"], strict=True))
        label = "greedy" if beam == 1 else f"beam {beam}"
        print(
            f"| {label} | {same / len(lines):.1%} ({same}/{len(lines)}) | "
            f"{seconds['torch']:.1f} | {seconds['flax']:.1f} |"
        )
        differ[label] = [
            (i, a, b)
            for i, (a, b) in enumerate(zip(outputs["torch"], outputs["flax"], strict=True))
            if a != b
        ]
    for label, rows in differ.items():
        for i, a, b in rows[: args.shown]:
            print(f"\n{label}, line {i + 1}:\n  PyTorch {a}\n  Flax    {b}")


if __name__ == "__main__":
    main()
