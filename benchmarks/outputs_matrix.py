"""Every architecture the tests build, trained briefly and decoded every way, written to files:
run it with two checkouts and compare the folders, to show that a change of code moved no
output of any model.

    python benchmarks/outputs_matrix.py train RUNS            # once, with the older checkout
    PYTHONPATH=OLD/src python benchmarks/outputs_matrix.py decode RUNS --out BEFORE
    python benchmarks/outputs_matrix.py decode RUNS --out AFTER
    diff -r BEFORE AFTER && echo identical

`train` trains one run folder per architecture of tests/architectures.py (every cell,
direction, depth, score and decoder order, the sparse mappings, the local windows and the
location score, with and without coverage) on the reversal task with PyTorch, and with Flax
where that checkout's Flax model builds it, and exports each PyTorch run to ONNX. `decode`
writes, for each run folder, one JSON file per way of decoding: greedy; beam 4 with 3-best,
each hypothesis' score, token probabilities and attention; the coverage penalty; sampling;
int8; lexical constraints; the step-through with a forced prefix and an attention override;
the Flax engine's greedy and beam search; and the exported graphs on ONNX Runtime. Floats are
written as Python's repr, so that files are equal only where every bit is. It prints one line
per run folder: its name and how many files it wrote.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.architectures, the list of what the model builds

from tests.architectures import (  # noqa: E402
    ARCHITECTURES,
    LOCAL_ARCHITECTURES,
    SPARSE_ARCHITECTURES,
    arch_id,
)

COVERAGE = [  # the coverage model in each decoder order (PyTorch-trained only)
    dict(rnn=rnn, bidirectional=True, layers=1, attention=a, order=o, coverage=c)
    for rnn, a, o, c in [
        ("gru", "additive", "bahdanau", "fertility"),
        ("lstm", "concat", "luong", "sum"),
        ("gru", "additive", "cgru", "sum"),
    ]
]
SIZES = dict(emb_dim=16, enc_hidden=16, attn_dim=16, readout_dim=16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["train", "decode"])
    parser.add_argument("runs", help="the folder of the run folders")
    parser.add_argument("--out", help="decode: the folder the outputs go to")
    parser.add_argument("--steps", type=int, default=150, help="train: steps per run")
    parser.add_argument("--only", help="only the run folders whose name contains this")
    args = parser.parse_args()
    runs = Path(args.runs)
    if args.command == "train":
        train_all(runs, args.steps, args.only)
    else:
        decode_all(runs, Path(args.out), args.only)


def model_fields(arch: dict) -> dict:
    """The config fields of an architecture of tests/architectures.py, at SIZES."""
    dirs = 2 if arch["bidirectional"] else 1
    fields = dict(
        rnn=arch["rnn"],
        bidirectional=arch["bidirectional"],
        enc_layers=arch["layers"],
        dec_layers=arch["layers"],
        attention=arch["attention"],
        order=arch["order"],
        dec_hidden=SIZES["enc_hidden"] * dirs,  # D = C: the dot scores need it
        **SIZES,
    )
    for key in ("attention_fn", "attention_window", "window", "coverage"):
        if key in arch:
            fields[key] = arch[key]
    if arch.get("context") == "init_only":
        fields.update(context="init_only", init="bridge")
    return fields


def every_architecture() -> dict[str, dict]:
    archs = ARCHITECTURES + SPARSE_ARCHITECTURES + LOCAL_ARCHITECTURES
    named = {arch_id(arch): arch for arch in archs}
    named |= {f"{arch_id(arch)}-coverage_{arch['coverage']}": arch for arch in COVERAGE}
    return named


def train_all(runs: Path, steps: int, only: str | None) -> None:
    import alignmt
    from alignmt.checkpoint.torch_io import load_checkpoint
    from alignmt.decoding.torch_engine.export import export_onnx

    for name, arch in every_architecture().items():
        if only and only not in name:
            continue
        fields = model_fields(arch)
        common = dict(steps=steps, eval_every=0, progress=False, show=False, overwrite=True)
        alignmt.train("reverse", out_dir=str(runs / f"torch-{name}"), **common, **fields)
        export_onnx(load_checkpoint(runs / f"torch-{name}"), runs / f"onnx-{name}")
        if "coverage" in arch:
            continue
        flax = runs / f"flax-{name}"
        alignmt.train("reverse", out_dir=str(flax), engine="flax", **common, **fields)
        print(name, flush=True)


def sentences(count: int = 24, seed: int = 7) -> list[str]:
    """Reversal inputs of 2 to 12 letters."""
    draw = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(draw.choice(letters) for _ in range(draw.randint(2, 12))) for _ in range(count)]


def decode_all(runs: Path, out: Path, only: str | None) -> None:
    lines = sentences()
    for run in sorted(p for p in runs.iterdir() if p.is_dir()):
        if only and only not in run.name:
            continue
        folder = out / run.name
        folder.mkdir(parents=True, exist_ok=True)
        written = 0
        for mode, result in decodings(run, lines):
            (folder / f"{mode}.json").write_text(json.dumps(result, indent=0) + "\n")
            written += 1
        print(run.name, written, flush=True)


def decodings(run: Path, lines: list[str]):
    """(mode, what it decoded) for every way of decoding this run folder."""
    from alignmt.decoding.door import open_translator
    from alignmt.decoding.rules import Sampling

    if run.name.startswith("onnx-"):
        translator = open_translator(run)
        yield "greedy", as_data(translator.translate(lines))
        yield "beam", as_data(translator.translate(lines, beam_size=4, nbest=3))
        return
    torch_run = open_translator(run, device="cpu")
    yield "greedy", as_data(torch_run.translate(lines))
    yield "beam", as_data(torch_run.translate(lines, beam_size=4, nbest=3))
    sampling = Sampling(temperature=0.9, samples=2, seed=3)
    yield "sampling", as_data(torch_run.translate(lines, sampling=sampling))
    int8 = open_translator(run, device="cpu", weights="int8")
    yield "int8", as_data(int8.translate(lines, beam_size=4, nbest=2))
    constraints = [torch_run.constraint(include=[line[0]]) for line in lines]
    yield "constraints", as_data(torch_run.translate(lines, beam_size=4, constraints=constraints))
    if not torch_run.has_attention:
        return
    covered = open_translator(run, device="cpu", coverage_penalty=0.4)
    yield "coverage_penalty", as_data(covered.translate(lines, beam_size=4, nbest=2))
    stepped = torch_run.step_through(lines[0], prefix=[lines[0][-1]], override={1: 0}, top_k=3)
    yield "step_through", as_data([[stepped.translation]]) | {"steps": step_data(stepped)}
    if "coverage" not in run.name:
        flax = open_translator(run, engine="flax", device="cpu")
        yield "flax_greedy", as_data(flax.translate(lines))
        yield "flax_beam", as_data(flax.translate(lines, beam_size=4, nbest=3))


def as_data(translations: list) -> dict:
    """Every field of every translation, floats as their repr."""
    return {
        "translations": [
            [
                {
                    "text": t.text,
                    "tokens": t.tokens,
                    "score": repr(t.score),
                    "probabilities": [repr(p) for p in t.probabilities],
                    "attention": None
                    if t.attention is None
                    else [[repr(float(a)) for a in row] for row in t.attention],
                }
                for t in hyps
            ]
            for hyps in translations
        ]
    }


def step_data(stepped) -> list[dict]:
    return [
        {
            "token": s.token,
            "log_prob": repr(s.log_prob),
            "top": s.top_tokens,
            "top_log_probs": [repr(p) for p in s.top_log_probs],
        }
        for s in stepped.steps
    ]


if __name__ == "__main__":
    main()
