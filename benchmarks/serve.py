"""Serving benchmark: what `alignmt serve` delivers against the same model decoding in-process.

    python benchmarks/serve.py runs/multi30k_en_de      # about 2 minutes
    python benchmarks/serve.py runs/multi30k_en_de --device cuda   # model and server on a GPU

In one run, on test_2016_flickr (greedy):
1. in-process: the model decodes all 1,000 sentences with batch 64 (sentences/s); then in
   arrival order, 32 at a time, each group decoded on its own: the most that 32 clients with
   one sentence each in flight can give the decoder, so the server's ceiling; then each of
   the first N sentences alone (median milliseconds);
2. a real server (`alignmt serve` in a subprocess on 127.0.0.1) answers the same N sentences
   one at a time (median latency: the idle server), then 32 concurrent clients sending single
   sentences (sentences/s, p50/p95/p99 latency, the server's RSS as requests complete), then
   /v1/step one sentence at a time (p95 latency).

Prints the table and the ratios that docs/benchmarks.md records. Run from the repository root
after `alignmt data get multi30k`, with nothing else using the CPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

# Run as a script, this file's folder is on the path but not the repository root, from
# which it imports its helpers (as `benchmarks.load`, ...).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.load import LoadResult, local_server, run_load

from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.config import DEVICES, PRECISIONS
from alignmt.decoding.door import open_translator
from alignmt.model.device import pick_device
from alignmt.text.corpora import data_root
from alignmt.text.corpus import read_lines

FLICKR = data_root() / "multi30k/test_2016_flickr.en.gz"  # alignmt data get multi30k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", nargs="?", default="runs/multi30k_en_de")
    parser.add_argument("--src", default=str(FLICKR), help="source sentences, one per line")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=2_000, help="for the concurrent test")
    parser.add_argument("--single", type=int, default=200, help="N, sentences sent one by one")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--device", default="cpu", help=f"{DEVICES}, in-process and the server's")
    parser.add_argument("--precision", default="float32", choices=PRECISIONS)
    args = parser.parse_args()
    sentences = read_lines(args.src)
    single = sentences[: args.single]

    device = pick_device(args.device)
    batch_rate, ceiling, alone_ms = in_process(
        args.run_dir, sentences, single, args.clients, device, args.precision
    )
    flags = (
        "--max-queue",
        str(max(1_024, args.clients * 2)),
        "--device",
        args.device,
        "--precision",
        args.precision,
    )
    with local_server([args.run_dir], args.port, *flags) as server:
        idle = run_load("127.0.0.1", args.port, single, clients=1, requests=len(single))
        loaded = run_load(
            "127.0.0.1",
            args.port,
            sentences,
            clients=args.clients,
            requests=args.requests,
            server_pid=server.pid,
            rss_every=200,
        )
        step = run_load(
            "127.0.0.1",
            args.port,
            single,
            clients=1,
            requests=len(single),
            path="/v1/step",
            body=lambda s: {"sentence": s},
        )
    report(args, batch_rate, ceiling, alone_ms, idle, loaded, step)


def in_process(
    run_dir: str,
    sentences: list[str],
    single: list[str],
    clients: int,
    device: torch.device,
    precision: str,
) -> tuple[float, float, float]:
    """Greedy sentences/s over all sentences with batch 64 and in groups of `clients`, and
    the median milliseconds of translating each of `single` alone, on `device` at
    `precision`."""
    ckpt = load_checkpoint(run_dir, device=device)
    search = replace(ckpt.config.search, beam_size=1)
    translator = open_translator(ckpt, search=search, precision=precision)
    translator.translate(sentences[:64], warn=False)  # warm-up
    start = time.perf_counter()
    translator.translate(sentences, batch_size=64, warn=False)
    rate = len(sentences) / (time.perf_counter() - start)
    start = time.perf_counter()
    for first in range(0, len(sentences), clients):
        translator.translate(sentences[first : first + clients], warn=False)
    ceiling = len(sentences) / (time.perf_counter() - start)
    times = []
    for sentence in single:
        start = time.perf_counter()
        translator.translate([sentence], warn=False)
        times.append((time.perf_counter() - start) * 1000)
    return rate, ceiling, statistics.median(times)


def report(
    args,
    batch_rate: float,
    ceiling: float,
    alone_ms: float,
    idle: LoadResult,
    loaded: LoadResult,
    step: LoadResult,
) -> None:
    for name, result in [("idle", idle), ("concurrent", loaded), ("step", step)]:
        if result.errors:
            print(f"{name}: {len(result.errors)} errors, first: {result.errors[0]}")
    rss = loaded.rss
    first, last = rss[min(rss)], rss[max(rss)]
    print(
        f"model {args.run_dir}, {torch.get_num_threads()} torch threads in-process, device "
        f"{args.device}, precision {args.precision}, torch {torch.__version__}\n"
    )
    print("| measure | value |\n| --- | ---: |")
    rows = [
        ("in-process greedy, batch 64, sentences/s", f"{batch_rate:,.1f}"),
        (
            f"in-process, arrival order, groups of {args.clients}, sentences/s",
            f"{ceiling:,.1f} ({ceiling / batch_rate:.0%})",
        ),
        (f"server, {args.clients} concurrent clients, sentences/s", f"{loaded.throughput:,.1f}"),
        ("  share of in-process batch 64 (target >= 60%)", f"{loaded.throughput / batch_rate:.0%}"),
        (f"  share of groups of {args.clients}", f"{loaded.throughput / ceiling:.0%}"),
        ("  latency p50 / p95 / p99, ms", _percentiles(loaded)),
        (
            f"  server RSS after {min(rss)} / {max(rss)} requests, MiB",
            f"{first / 2**20:,.0f} / {last / 2**20:,.0f} ({last / first - 1:+.1%})",
        ),
        (
            f"in-process, one sentence alone, median ms ({len(idle.latencies)} sentences)",
            f"{alone_ms:.1f}",
        ),
        ("idle server, one sentence, p50 ms", f"{idle.percentile(50):.1f}"),
        ("  ratio to in-process (target <= 2x)", f"{idle.percentile(50) / alone_ms:.2f}x"),
        ("/v1/step, one sentence, p50 / p95 / p99 ms (target p95 < 100)", _percentiles(step)),
    ]
    for name, value in rows:
        print(f"| {name} | {value} |")


def _percentiles(result: LoadResult) -> str:
    return " / ".join(f"{result.percentile(p):.1f}" for p in (50, 95, 99))


if __name__ == "__main__":
    main()
