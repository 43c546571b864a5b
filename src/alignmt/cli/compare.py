"""`alignmt compare RUN_A RUN_B ...`: several runs scored on one test set, side by side."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from alignmt.analysis.evaluation import translate_and_score
from alignmt.cli.evaluate import load_test_set, print_scores, write_plots
from alignmt.cli.translate import translator_for


def run(args: argparse.Namespace) -> int:
    first = translator_for(args.run_dirs[0], args)
    src, ref, lang = load_test_set(args, args.run_dirs[0], first.origin.header.config)
    results = {}
    for run in args.run_dirs:
        name = Path(run).name if Path(run).name not in results else run
        translator = first if run == args.run_dirs[0] else translator_for(run, args)
        results[name] = translate_and_score(name, translator, src, ref, lang, args.batch_size)[0]
    print_scores(results, args.beam)
    out = Path(args.out or "runs/compare")
    files = write_plots(results, out)
    (out / "scores.json").write_text(
        json.dumps([r.as_dict() for r in results.values()], indent=2) + "\n"
    )
    print("\nExamples (longest first of every 100th line):")
    for i in sorted(range(0, len(src), 100), key=lambda i: -len(src[i]))[:3]:
        print(f"\n  source    {src[i]}\n  reference {ref[i]}")
        for name, result in results.items():
            print(f"  {name:9} {result.hyps[i]}")
    print("\nWritten: " + ", ".join(str(f) for f in [*files, out / "scores.json"]))
    return 0
