"""`alignmt explore RUN_DIR ... --input F --out PAGE.html`: the explorer as one offline page."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tqdm import tqdm

from alignmt.answers.page import precompute, self_contained
from alignmt.answers.registry import load_models
from alignmt.model.device import pick_device
from alignmt.text.corpus import read_lines


def run(args: argparse.Namespace) -> int:
    pick_device(args.device)  # a bad --device is said before any file is read
    sentences = _sentences(args.input)
    models = load_models(
        args.run_dirs, engine=args.engine, device=args.device, precision=args.precision
    )
    beam = args.beam or next(iter(models.values())).translator.search.beam_size
    with tqdm(total=len(sentences), unit="sentence", disable=None, file=sys.stderr) as bar:
        data = precompute(
            models,
            sentences,
            beam_size=beam,
            top_k=args.top_k,
            progress=lambda done: bar.update(done - bar.n),
            where=args.input,
        )
    command = " ".join(["alignmt explore", *args.run_dirs, "--input", args.input])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(self_contained(data, command), encoding="utf-8")
    size = out.stat().st_size
    print(
        f"wrote {out}: {len(sentences)} sentences, {len(models)} model(s), beam {beam}, "
        f"{size / 1e6:.2f} MB; open it in a browser (no server needed)"
    )
    return 0


def _sentences(path: str) -> list[str]:
    sentences = read_lines(path)
    for number, line in enumerate(sentences, 1):
        if not line.strip():
            raise ValueError(f"{path}:{number}: empty line; give one sentence per line")
    if not sentences:
        raise ValueError(f"{path}: no sentences")
    return sentences
