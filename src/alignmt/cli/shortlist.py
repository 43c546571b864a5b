"""`alignmt shortlist RUN_DIR`: build the lexical shortlist of a run trained without one."""

from __future__ import annotations

import argparse

from alignmt.training.run import build_run_shortlist


def run(args: argparse.Namespace) -> int:
    path, shortlist = build_run_shortlist(args.run_dir)
    print(
        f"wrote {path}: the {shortlist.depth} best translations of each of "
        f"{shortlist.table.shape[0]:,} source tokens, and {len(shortlist.frequent)} words "
        "allowed in every sentence"
    )
    return 0
