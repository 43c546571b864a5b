"""The exported model on ONNX Runtime against the run folder on PyTorch, float32 and int8:
decoding speed at batch 64 and batch 1, BLEU, cold start, install size, and the server
under 32 clients. One sitting, so the ratios hold as the machine drifts.

    alignmt export runs/m30k_bahdanau --out m30k_onnx --int8
    python3 -m venv .venv-runtime && .venv-runtime/bin/pip install -e '.[runtime]'
    python3 -m venv .venv-torch && .venv-torch/bin/pip install torch==2.13.0 -e '.[torch]'
    python benchmarks/runtime.py runs/m30k_bahdanau m30k_onnx \\
        --runtime-python .venv-runtime/bin/python --torch-python .venv-torch/bin/python

Each decoding cell runs in a process of its own, so that its peak RSS is its own; the ONNX
Runtime cells run in the torch-free environment. Speed is decoding alone (tokenised input
to output tokens), after a warm-up batch. Run from the repository root after
`alignmt data get multi30k`, with nothing else using the CPU. Results are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import yaml
from load import free_port, local_server, run_load  # beside this script

from alignmt.text.corpora import data_root

MULTI30K = data_root() / "multi30k"  # alignmt data get multi30k
SEARCHES = {"greedy": 1, "beam 5": 5}
# the first lines of test_2016_flickr decoded for speed: at batch 64 five batches (PyTorch's
# int8 is slow where the CPU has no fast int8 GEMM), at batch 1 a hundred sentences
SPEED_SENTENCES = {64: 320, 1: 100}


def main() -> None:
    args = _arguments()
    if args.cell:
        print(json.dumps(_cell(args)))
        return
    print(f"# {args.run} against {args.exported}, {time.strftime('%Y-%m-%d %H:%M UTC')}")
    _speed_table(args)
    _bleu_table(args)
    _cold_start(args)
    _install_size(args)
    _server(args)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="the run folder (PyTorch)")
    parser.add_argument("exported", help="its export, with --int8 (ONNX Runtime)")
    parser.add_argument("--runtime-python", default=sys.executable, help="a torch-free env's")
    parser.add_argument("--torch-python", default=sys.executable, help="a [torch] env's")
    parser.add_argument(
        "--requests", type=int, default=400, help="one-sentence requests per server"
    )
    parser.add_argument("--cell", help=argparse.SUPPRESS)  # engine,weights,beam,batch,split
    parser.add_argument("--speed", action="store_true", help=argparse.SUPPRESS)  # a subset
    return parser.parse_args()


def _lines(split: str) -> tuple[list[str], list[str]]:
    import gzip

    def read(lang: str) -> list[str]:
        with gzip.open(MULTI30K / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f]

    return read("en"), read("de")


def _cell(args: argparse.Namespace) -> dict:
    """One engine, weights, beam and batch size, decoding `split`: speed, peak RSS, outputs."""
    engine, weights, beam, batch, split = args.cell.split(",")
    beam, batch = int(beam), int(batch)
    translator = _translator(engine, weights, args)
    source, _ = _lines(split)
    if args.speed:
        source = source[: SPEED_SENTENCES[batch]]
    tokens = [translator.source_tokens(line) for line in source]
    translator.translate_tokens(tokens[:64], batch_size=batch, beam_size=beam, warn=False)
    start = time.perf_counter()
    found = translator.translate_tokens(tokens, batch_size=batch, beam_size=beam, warn=False)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "sentences": len(tokens),
        "tokens": sum(len(hyps[0].tokens) for hyps in found),
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "texts": [hyps[0].text for hyps in found],
    }


def _translator(engine: str, weights: str, args: argparse.Namespace):
    from alignmt.decoding.door import open_translator

    if engine == "onnx":
        return open_translator(args.exported, weights=weights)
    from alignmt.model.allocator import keep_freed_memory

    keep_freed_memory()  # as `alignmt translate` does
    return open_translator(args.run, weights=weights)


def _run_cell(
    args, engine: str, weights: str, beam: int, batch: int, split: str, speed: bool = False
) -> dict:
    python = args.runtime_python if engine == "onnx" else args.torch_python
    command = [python, __file__, args.run, args.exported]
    command += ["--cell", f"{engine},{weights},{beam},{batch},{split}", *["--speed"] * speed]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


ENGINES = [("torch", "float32"), ("torch", "int8"), ("onnx", "float32"), ("onnx", "int8")]


def _speed_table(args: argparse.Namespace) -> None:
    print("\n## decoding speed (sentences/s, output tokens/s, peak RSS)\n")
    print(f"test_2016_flickr's first {SPEED_SENTENCES} lines, by batch size\n")
    print("| search | batch | " + " | ".join(f"{e} {w}" for e, w in ENGINES) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in ENGINES) + " |")
    for name, beam in SEARCHES.items():
        for batch in (64, 1):
            cells = [
                _run_cell(args, e, w, beam, batch, "test_2016_flickr", speed=True)
                for e, w in ENGINES
            ]
            shown = [
                f"{c['sentences'] / c['seconds']:,.1f} / {c['tokens'] / c['seconds']:,.0f} / "
                f"{c['peak_mib']:,.0f} MiB"
                for c in cells
            ]
            print(f"| {name} | {batch} | " + " | ".join(shown) + " |", flush=True)


def _bleu_table(args: argparse.Namespace) -> None:
    import sacrebleu

    config = yaml.safe_load((Path(args.run) / "config.yaml").read_text())
    lowercase = bool(config["data"].get("lowercase"))
    # PyTorch's int8 is measured where its speed allows (speed.py --weights int8)
    engines = [(e, w) for e, w in ENGINES if (e, w) != ("torch", "int8")]
    print(f"\n## BLEU, beam 5, batch 64 (sacreBLEU, lowercase={lowercase})\n")
    print("| split | " + " | ".join(f"{e} {w}" for e, w in engines) + " |")
    print("| --- | " + " | ".join("---:" for _ in engines) + " |")
    for split in ("test_2016_flickr", "val"):
        _, refs = _lines(split)
        scores = []
        for engine, weights in engines:
            texts = _run_cell(args, engine, weights, 5, 64, split)["texts"]
            scores.append(sacrebleu.corpus_bleu(texts, [refs], lowercase=lowercase).score)
        print(f"| {split} | " + " | ".join(f"{s:.2f}" for s in scores) + " |", flush=True)


def _cold_start(args: argparse.Namespace) -> None:
    """Process start to the first translated line, three times each."""
    print("\n## cold start: `alignmt translate` of one line, process start to output\n")
    for label, python, folder in (
        ("ONNX Runtime (torch-free env)", args.runtime_python, args.exported),
        ("PyTorch", args.torch_python, args.run),
    ):
        seconds = []
        for _ in range(3):
            start = time.perf_counter()
            subprocess.run(
                [python, "-m", "alignmt", "translate", folder],
                input="A man is riding a bike.\n", capture_output=True, text=True, check=True,
            )  # fmt: skip
            seconds.append(time.perf_counter() - start)
        print(f"- {label}: " + ", ".join(f"{s:.2f} s" for s in seconds))


def _install_size(args: argparse.Namespace) -> None:
    print("\n## installed size (du of the environment)\n")
    sizes = {}
    for label, python in (("torch-free", args.runtime_python), ("PyTorch", args.torch_python)):
        prefix = subprocess.run(
            [python, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True
        ).stdout.strip()
        du = subprocess.run(["du", "-sm", prefix], capture_output=True, text=True).stdout
        sizes[label] = int(du.split()[0])
        print(f"- {label} ({prefix}): {sizes[label]:,} MiB")
    print(f"- ratio: 1 / {sizes['PyTorch'] / sizes['torch-free']:.1f}")


def _server(args: argparse.Namespace) -> None:
    print(f"\n## server: 32 closed-loop clients, {args.requests} requests per server\n")
    print("| server | requests/s | p50 | p95 | p99 | peak RSS |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    sentences, _ = _lines("test_2016_flickr")
    for label, python, folder, flags in (
        ("PyTorch float32", args.torch_python, args.run, ()),
        ("PyTorch int8", args.torch_python, args.run, ("--weights", "int8")),
        ("ONNX Runtime float32", args.runtime_python, args.exported, ()),
        ("ONNX Runtime int8", args.runtime_python, args.exported, ("--weights", "int8")),
    ):
        port = free_port()
        with local_server([folder], port, *flags, python=python) as server:
            result = run_load(
                "127.0.0.1", port, sentences, clients=32, requests=args.requests,
                server_pid=server.pid, rss_every=args.requests // 4, timeout=60,
            )  # fmt: skip
        assert not result.errors, result.errors[:3]
        latency = [f"{result.percentile(p):,.0f} ms" for p in (50, 95, 99)]
        peak = max(result.rss.values()) / 2**20
        print(f"| {label} | {result.throughput:,.1f} | {' | '.join(latency)} | {peak:,.0f} MiB |")


if __name__ == "__main__":
    main()
