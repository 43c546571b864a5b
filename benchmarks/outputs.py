"""Every way alignmt decodes, written to files: run it at two commits and compare the folders,
to show that a change of code moved no output.

    python benchmarks/outputs.py RUN [FLAX_RUN] [--exported DIR] --out OUT [--src FILE]
    diff -r OUT_BEFORE OUT_AFTER && echo identical

Each case is a command line of `alignmt translate` (greedy; beam with n-best, token
probabilities and alignments; the coverage penalty; sampling; int8; lexical constraints;
the shortlist; bfloat16; an ensemble; the Flax backend; the exported model on ONNX Runtime,
float32 and int8), plus the answers of a running `alignmt serve` to /v1/translate, /v1/step
(with a forced prefix and an attention override) and /v1/beam, each written as its own file.
The commands run in subprocesses with `--python`, so the script drives whichever checkout
that interpreter imports (`PYTHONPATH=../other/src`). It prints one line per case: its
file, its size and its SHA-256's first 16 hex digits.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from load import free_port, local_server  # beside this script

from alignmt.text.corpora import data_root

DEFAULT_SRC = data_root() / "multi30k/test_2016_flickr.en.gz"  # alignmt data get multi30k


def main() -> None:
    args = _arguments()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = _source(args.src, args.lines)
    (out / "input.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    few = out / "input_few.txt"
    few.write_text("".join(line + "\n" for line in lines[: args.few]), encoding="utf-8")
    constraints = out / "constraints.jsonl"
    constraints.write_text(_constraints(args.few), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": args.pythonpath} if args.pythonpath else None
    for name, runs, flags, given in _cases(args, constraints):
        text = _translate(args.python, runs, flags, out / given, env)
        _keep(out, name, text)
    _served(args, out, env, lines[: args.few])


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a run folder trained with PyTorch")
    parser.add_argument("flax_run", nargs="?", help="a run folder trained with train.engine=flax")
    parser.add_argument("--exported", help="RUN exported with `alignmt export --int8`")
    parser.add_argument("--out", required=True, help="the folder the outputs go to")
    parser.add_argument("--src", default=str(DEFAULT_SRC), help="source sentences (.gz too)")
    parser.add_argument("--lines", type=int, default=1000, help="sentences of the main cases")
    parser.add_argument("--few", type=int, default=100, help="sentences of the slower cases")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that decodes")
    parser.add_argument("--pythonpath", help="PYTHONPATH for it: another checkout's src")
    return parser.parse_args()


def _source(path: str, count: int) -> list[str]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line, _ in zip(f, range(count), strict=False)]


def _constraints(count: int) -> str:
    """A constraint on every third line: words the Multi30k model knows."""
    rows = []
    for i in range(count):
        if i % 3 == 0:
            rows.append(json.dumps({"include": ["mann"], "exclude": ["ein"]}))
        elif i % 3 == 1:
            rows.append(json.dumps({"include": ["eine frau", "hund"]}))
        else:
            rows.append("")
    return "\n".join(rows) + "\n"


def _cases(args: argparse.Namespace, constraints: Path) -> list[tuple[str, list[str], list, str]]:
    """(name, run folders, flags, input file) of every `alignmt translate` case."""
    run, all_lines, few = [args.run], "input.txt", "input_few.txt"
    jsonl = ["--jsonl", "--alignment"]
    cases = [
        ("torch_greedy", run, ["--beam", "1", "--alignment"], all_lines),
        ("torch_beam5", run, ["--beam", "5"], all_lines),
        ("torch_beam5_nbest3_jsonl", run, ["--beam", "5", "--nbest", "3", *jsonl], few),
        ("torch_coverage", run, ["--beam", "5", "--coverage-penalty", "0.2"], few),
        ("torch_sample", run, ["--sample", "--samples", "3", "--seed", "7", "--top-k", "20"], few),
        ("torch_int8_beam5", run, ["--beam", "5", "--weights", "int8", "--jsonl"], few),
        ("torch_constraints", run, ["--beam", "5", "--constraints", constraints, "--jsonl"], few),
        ("torch_shortlist", run, ["--beam", "5", "--shortlist", "50"], few),
        ("torch_bfloat16", run, ["--beam", "3", "--precision", "bfloat16"], few),
        ("torch_words", run, ["--beam", "2", "--alignment", "words"], few),
    ]
    if args.flax_run:
        flax = [args.flax_run]
        cases += [
            ("flaxrun_torch_beam5", flax, ["--beam", "5", "--nbest", "2"], few),
            ("flaxrun_flax_greedy", flax, ["--backend", "flax", "--beam", "1"], few),
            ("torchrun_flax_beam5", run, ["--backend", "flax", "--beam", "5", "--nbest", "2"], few),
            ("ensemble_beam5", [args.run, args.flax_run], ["--beam", "5", "--jsonl"], few),
        ]
    if args.exported:
        onnx = [args.exported]
        cases += [
            ("onnx_greedy", onnx, ["--beam", "1", "--jsonl", "--alignment"], all_lines),
            ("onnx_beam5", onnx, ["--beam", "5"], all_lines),
            ("onnx_beam5_nbest3", onnx, ["--beam", "5", "--nbest", "3", *jsonl], few),
            ("onnx_int8_greedy", onnx, ["--beam", "1", "--weights", "int8"], all_lines),
            ("onnx_int8_beam5", onnx, ["--beam", "5", "--weights", "int8", "--jsonl"], few),
        ]
    return cases


def _translate(python: str, runs: list[str], flags: list, given: Path, env) -> str:
    command = [python, "-m", "alignmt", "translate", *runs, *map(str, flags)]
    with given.open("rb") as stdin:
        done = subprocess.run(command, stdin=stdin, capture_output=True, env=env, check=False)
    if done.returncode:
        return f"exit {done.returncode}: {done.stderr.decode()[-1000:]}"
    return done.stdout.decode("utf-8")


def _keep(out: Path, name: str, text: str) -> None:
    path = out / f"{name}.txt"
    path.write_text(text, encoding="utf-8")
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    print(f"{path.name:<32} {len(text.encode()):>9,} bytes  {digest}", flush=True)


def _served(args: argparse.Namespace, out: Path, env, lines: list[str]) -> None:
    """The server's answers to the translate, step and beam routes, for each model served."""
    folders = [args.run] + ([args.exported] if args.exported else [])
    names = [Path(folder).name for folder in folders]
    port = free_port()
    if env is not None:
        os.environ["PYTHONPATH"] = env["PYTHONPATH"]
    with local_server(folders, port, python=args.python):
        for name in names:
            onnx = name == Path(args.exported or "").name
            bodies = _requests(name, lines, onnx)
            answers = [_post(port, route, body) for route, body in bodies]
            _keep(out, f"serve_{'onnx' if onnx else 'torch'}", "\n".join(answers) + "\n")


def _requests(model: str, lines: list[str], onnx: bool) -> list[tuple[str, dict]]:
    asks = [
        ("translate", {"model": model, "sentences": lines[:20], "attention": True}),
        ("translate", {"model": model, "sentences": lines[20:40], "beam_size": 5, "nbest": 2}),
    ]
    if onnx:
        return asks
    sentence = lines[0]
    return [
        *asks,
        ("translate", {"model": model, "sentences": lines[40:50], "sample": {"seed": 3}}),
        ("step", {"model": model, "sentence": sentence, "top_k": 3}),
        ("step", {"model": model, "sentence": sentence, "prefix": ["ein"], "override": {"2": 1}}),
        ("step", {"model": model, "sentence": sentence, "beam_size": 4}),
        ("beam", {"model": model, "sentence": sentence, "beam_size": 3}),
    ]


def _post(port: int, route: str, body: dict) -> str:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/{route}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            text = answer.read().decode()
    except urllib.error.HTTPError as error:
        text = f"{error.code}: {error.read().decode()}"
    return f"{route} {json.dumps(body)}\n{text}"


if __name__ == "__main__":
    main()
