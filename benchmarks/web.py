"""The explorer in the browser (`alignmt export RUN --out DIR --web`): how big the site is,
how soon a page shows its first translation, and how fast the page decodes against ONNX
Runtime in Python.

    python benchmarks/web.py runs/reverse --sentences 50
    python benchmarks/web.py runs/d2l_fra_eng --src eng-fra.tsv   # the first column is read
    python benchmarks/web.py runs/multi30k_en_de --src test_2016_flickr.en.gz

It exports RUN with --web (the weights stored in int8 where the site would weigh over 30 MB
and int8 keeps every probability within the export's tolerance, as a user's export would;
--float32 to keep float32), then serves the folder from 127.0.0.1 as any static host would
(no COOP/COEP headers: the page isolates itself with its service worker) and opens it in a
headless Chromium in which no other host resolves. It measures:
- the folder's size on disk, and as sent gzipped (each file at gzip's level 6, as a static
  host that compresses sends it), by part: the runtime, the graphs, the rest;
- the time from opening `index.html?sentence=...` to the frame that shows its translation
  (a fresh browser each time, so nothing is cached, the service worker's reload included;
  the median of --opens);
- greedy sentences/s in the page, on the threads ONNX Runtime Web picks there and on
  --threads, against `alignmt translate DIR --beam 1` on ONNX Runtime in Python with the
  same graphs on one thread and on --threads: all N sentences at once (the worker's
  translate answer, one batch) and one at a time (the explorer's step-through against
  one-sentence calls).

Prints a table. Run from the repository root, with nothing else using the CPU.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.browser import LOCAL_ONLY, Explorer, StaticHost, settle, start_chromium

from alignmt.cli import main as alignmt
from alignmt.text.corpus import read_lines
from alignmt.text.tasks import ALPHABET

TARGETS = {"open_s": 3.0, "speed_ratio": 1 / 2, "disk_mb": 30.0, "gzip_mb": 15.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--src", help="source sentences, one per line (a .tsv: its first column)")
    parser.add_argument("--sentences", type=int, default=50)
    parser.add_argument("--opens", type=int, default=5, help="page opens timed")
    parser.add_argument("--float32", action="store_true", help="export with --float32")
    parser.add_argument("--out", help="export here (default: a temporary folder)")
    parser.add_argument("--threads", type=int, default=2, help="threads also measured")
    args = parser.parse_args()
    sentences = source_sentences(args.src, args.sentences)
    with tempfile.TemporaryDirectory() as scratch:
        site = Path(args.out or Path(scratch) / "site")
        flags = ["--float32"] if args.float32 else []
        assert alignmt(["export", args.run_dir, "--out", str(site), "--web", *flags]) == 0
        sizes = folder_sizes(site)
        with StaticHost(site) as url:
            opens = [open_seconds(url, sentences[0]) for _ in range(args.opens)]
            page = {
                "picked": page_sentences_per_second(url, sentences),
                args.threads: page_sentences_per_second(url, sentences, args.threads),
            }
            feeds = step_feeds(site, sentences)
            counts = (1, args.threads)
            ceiling = {n: step_seconds_page(url, feeds, n) for n in counts}
        python = {n: python_sentences_per_second(site, sentences, n) for n in counts}
        ceiling |= {f"python {n}": step_seconds_python(site, feeds, n) for n in counts}
    report(args.run_dir, sizes, opens, page, python, args.threads)
    report_ceiling(ceiling, args.threads, len(sentences))


def source_sentences(src: str | None, n: int) -> list[str]:
    """`n` sentences from `src`, or random letter strings for the reversal task."""
    if src is None:
        import random

        rng = random.Random(5)
        return ["".join(rng.choices(ALPHABET, k=rng.randint(3, 10))) for _ in range(n)]
    lines = read_lines(src)
    return [line.split("\t")[0] for line in lines[:n]]


def folder_sizes(site: Path) -> dict[str, tuple[int, int]]:
    """(bytes on disk, bytes gzipped) of the runtime, the graphs, the rest and the whole."""
    parts: dict[str, list[int]] = {
        "runtime": [0, 0],
        "graphs": [0, 0],
        "page and model files": [0, 0],
    }
    for path in site.rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()
        part = (
            "runtime"
            if "ort" in path.parts
            else "graphs"
            if path.suffix == ".onnx"
            else "page and model files"
        )
        parts[part][0] += len(data)
        parts[part][1] += len(gzip.compress(data, compresslevel=6))
    total = [sum(p[0] for p in parts.values()), sum(p[1] for p in parts.values())]
    return {name: tuple(size) for name, size in {**parts, "whole folder": total}.items()}


def open_seconds(url: str, sentence: str) -> float:
    """Seconds from opening the page on `sentence` to the frame that shows its translation,
    in a fresh browser (nothing cached)."""
    from urllib.parse import quote

    driver = start_chromium(flags=LOCAL_ONLY)
    try:
        page = Explorer(driver, timeout=120)
        page.open(f"{url}index.html?sentence={quote(sentence)}")
        page.wait_for(1)
        return page.timings()[0]["shown"] / 1000
    finally:
        driver.quit()


def page_sentences_per_second(url: str, sentences: list[str], threads: int = 0) -> dict:
    """Greedy sentences/s of the page's worker on `threads` (0: ONNX Runtime Web's pick): all
    at once (/v1/translate's answer, one batch) and one after another (the explorer's
    step-through, top 5 at every step), each the best of ten, after untimed calls have opened
    the model and warmed up the browser's compilers (three batches, ten sentences one at a
    time); and the page's own line on how it runs them ("runtime")."""
    seconds = in_page(
        url,
        """
            const [sentences, threads, done] = arguments;
            const worker = new Worker("static/web/worker.js", { type: "module" });
            let last = 0;
            const ask = (what, body) => new Promise((resolve, reject) => {
              const id = ++last;
              worker.onmessage = ({ data }) =>
                data.error ? reject(data.error) : resolve(data.answer);
              worker.postMessage({ id, what, body });
            });
            const best = async (work) => {
              let least = Infinity;
              for (let i = 0; i < 10; i++) {
                const start = performance.now();
                await work();
                least = Math.min(least, (performance.now() - start) / 1000);
              }
              return least;
            };
            (async () => {
              const folders = [new URL(".", location.href).href];
              await ask("open", threads ? { folders, threads } : { folders });
              const [{ runtime }] = await ask("models", {});
              // WebAssembly and JavaScript are compiled in tiers: warm both ways up first
              for (let i = 0; i < 3; i++) await ask("translate", { sentences, beam_size: 1 });
              for (const sentence of sentences.slice(0, 10)) await ask("step", { sentence });
              const batch = await best(() => ask("translate", { sentences, beam_size: 1 }));
              const each = await best(async () => {
                for (const sentence of sentences) await ask("step", { sentence });
              });
              done({ batch, each, runtime });
            })().catch((error) => done(String(error)));
            """,
        sentences,
        threads,
    )
    runtime = seconds.pop("runtime")
    return {way: len(sentences) / s for way, s in seconds.items()} | {"runtime": runtime}


def python_sentences_per_second(site: Path, sentences: list[str], threads: int) -> dict:
    """Greedy sentences/s of `alignmt translate DIR --beam 1` on ONNX Runtime in Python,
    on `threads`, on the graphs the page runs: all at once (its batches) and one sentence
    per call, each the best of ten."""
    from alignmt.decoding.door import open_translator

    translator = open_translator(site, threads=threads, beam_size=1, weights="float32")
    for _ in range(3):  # as the page is warmed up
        translator.translate(sentences, warn=False)
    ways = {
        "batch": lambda: translator.translate(sentences, warn=False),
        "each": lambda: [translator.translate([s], warn=False) for s in sentences],
    }
    rates = {}
    for way, work in ways.items():
        best = float("inf")
        for _ in range(10):
            start = time.perf_counter()
            work()
            best = min(best, time.perf_counter() - start)
        rates[way] = len(sentences) / best
    return rates


def step_feeds(site: Path, sentences: list[str]) -> dict:
    """The decoder step's inputs for the first step of `sentences` as one batch, as ONNX
    Runtime takes them: name -> array."""
    from alignmt.decoding.onnx_engine.model import OnnxModel

    model = OnnxModel(site, threads=1)
    header = model.header
    ids = [header.src_vocab.encode(header.src_tokenizer.encode(s), add_eos=True) for s in sentences]
    state, memory = model.encode_ids(ids)
    given = {"prev": np.full(len(ids), model.bos_id, np.int64), **state, **memory}
    given["steer"] = np.zeros(memory["mask"].shape, np.float32)
    return {name: given[name] for name in model.takes}


def step_seconds_python(site: Path, feeds: dict, threads: int, calls: int = 50) -> float:
    """Seconds per call of the step graph alone in ONNX Runtime on `threads` (best of 5)."""
    from alignmt.decoding.onnx_engine.model import OnnxModel

    graph = OnnxModel(site, threads=threads).step_graph
    graph.run(None, feeds)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            graph.run(None, feeds)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def step_seconds_page(url: str, feeds: dict, threads: int, calls: int = 50) -> float:
    """Seconds per call of the step graph alone in ONNX Runtime Web on `threads` (best of 5),
    on the page's thread, as the worker opens it: the arithmetic's ceiling in the page."""
    kinds = {np.dtype("int64"): "int64", np.dtype("float32"): "float32", np.dtype("bool"): "bool"}
    given = {n: [kinds[a.dtype], a.ravel().tolist(), list(a.shape)] for n, a in feeds.items()}
    return in_page(
        url,
        """
            const [given, threads, calls, done] = arguments;
            (async () => {
              const ort = await import("./static/web/ort/ort.wasm.min.mjs");
              ort.env.wasm.wasmPaths = new URL("static/web/ort/", location.href).href;
              ort.env.wasm.numThreads = threads;
              const site = await (await fetch("site.json")).json();
              const bytes = new Uint8Array(await (await fetch(site.graphs.step)).arrayBuffer());
              const graph = await ort.InferenceSession.create(bytes, {
                executionProviders: ["wasm"], graphOptimizationLevel: "all",
                extra: { session: { disable_quant_qdq: "1" } } });
              const arrays = { int64: (d) => BigInt64Array.from(d, BigInt),
                float32: (d) => Float32Array.from(d), bool: (d) => Uint8Array.from(d) };
              const feeds = Object.fromEntries(Object.entries(given).map(([n, [t, d, dims]]) =>
                [n, new ort.Tensor(t, arrays[t](d), dims)]));
              await graph.run(feeds);
              let best = Infinity;
              for (let round = 0; round < 5; round++) {
                const start = performance.now();
                for (let i = 0; i < calls; i++) await graph.run(feeds);
                best = Math.min(best, (performance.now() - start) / 1000 / calls);
              }
              done(best);
            })().catch((error) => done(String(error)));
            """,
        given,
        threads,
        calls,
    )


def in_page(url: str, script: str, *args: object) -> Any:
    """What the asynchronous `script` gives `done` with `args`, run in the site's page in a
    fresh headless Chromium, once the page is settled (cross-origin isolated where it can
    be); a string it gives is the page's error."""
    driver = start_chromium(flags=LOCAL_ONLY)
    try:
        driver.get(f"{url}index.html")
        settle(driver)
        driver.set_script_timeout(600)
        answer = driver.execute_async_script(script, *args)
    finally:
        driver.quit()
    if isinstance(answer, str):
        raise RuntimeError(f"the page says: {answer}")
    return answer


def report(run: str, sizes: dict, opens: list[float], page: dict, python: dict, n: int) -> None:
    """The tables: sizes, then the page's times and speeds against Python's (`page` by
    "picked" and by `n` threads, `python` by 1 and `n` threads)."""
    mb = 1e6
    print(f"\n{run}: the site `alignmt export --web` writes\n")
    print(f"| {'part':<22} | {'on disk (MB)':>12} | {'gzipped (MB)':>12} |")
    print(f"| {'-' * 22} | {'-' * 12}:| {'-' * 12}:|")
    for name, (disk, packed) in sizes.items():
        print(f"| {name:<22} | {disk / mb:>12.2f} | {packed / mb:>12.2f} |")
    disk, packed = sizes["whole folder"]
    print(f"\ntargets: <= {TARGETS['disk_mb']} MB on disk, <= {TARGETS['gzip_mb']} MB gzipped")
    print(f"\nthe page, on ONNX Runtime Web's pick: {page['picked']['runtime']}")
    print(f"\n| {'measure':<46} | {'value':>8} | target |")
    print(f"| {'-' * 46} | {'-' * 8}:| --- |")
    first = "open to first translation (s, median)"
    print(f"| {first:<46} | {statistics.median(opens):>8.2f} | <= {TARGETS['open_s']} |")
    aim = f">= {TARGETS['speed_ratio']:.2f}"
    for way, said in (("batch", "all at once"), ("each", "one at a time")):
        print(f"| {f'greedy sentences/s {said}:':<46} | {'':>8} |  |")
        rows = [
            ("page, ONNX Runtime Web's pick of threads", page["picked"][way], ""),
            (f"page, {n} threads", page[n][way], ""),
            ("Python ONNX Runtime, 1 thread", python[1][way], ""),
            (f"Python ONNX Runtime, {n} threads", python[n][way], ""),
            ("page (pick) / Python (1 thread)", page["picked"][way] / python[1][way], aim),
            (f"page ({n}) / Python (1 thread)", page[n][way] / python[1][way], aim),
            (f"page ({n}) / Python ({n}): same threads", page[n][way] / python[n][way], ""),
        ]
        for name, value, target in rows:
            print(f"| {'  ' + name:<46} | {value:>8.2f} | {target} |")
    print(f"\nopens (s): {', '.join(f'{s:.2f}' for s in opens)}")


def report_ceiling(ceiling: dict, n: int, rows: int) -> None:
    """The step graph alone on a batch's first step: the page's arithmetic against Python's."""
    print(f"\nthe step graph alone, {rows} rows (ms per call; Python's time / the page's):\n")
    print("| threads | page | Python | page's speed / Python's |")
    print("| ---: | ---: | ---: | ---: |")
    for threads in (1, n):
        page, python = ceiling[threads], ceiling[f"python {threads}"]
        print(f"| {threads} | {page * 1e3:.2f} | {python * 1e3:.2f} | {python / page:.2f} |")
    page, python = ceiling[n], ceiling["python 1"]
    print(f"| page {n}, Python 1 | {page * 1e3:.2f} | {python * 1e3:.2f} | {python / page:.2f} |")


if __name__ == "__main__":
    main()
