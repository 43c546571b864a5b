"""The explorer in the browser (`alignmt export RUN --out DIR --web`): how big the site is,
how soon a page shows its first translation, and how fast the page decodes against ONNX
Runtime in Python.

    python benchmarks/web.py runs/reverse --sentences 50
    python benchmarks/web.py runs/d2l_fra_eng --src eng-fra.tsv   # the first column is read

It exports RUN with --web (int8 graphs where they keep every probability within the export's
tolerance, as a user's export would; --float32 to keep float32), then serves the folder from
127.0.0.1 as any static host would and opens it in a headless Chromium in which no other
host resolves. It measures:
- the folder's size on disk, and as sent gzipped (each file at gzip's level 6, as a static
  host that compresses sends it), by part: the runtime, the graphs, the rest;
- the time from opening `index.html?sentence=...` to the frame that shows its translation
  (a fresh browser each time, so nothing is cached; the median of --opens);
- greedy sentences/s in the page against `alignmt translate DIR --beam 1` on ONNX Runtime in
  Python with the same graphs and as many threads as the page gets (one: a page that is not
  cross-origin isolated has one), all N sentences at once (the worker's translate answer,
  one batch) and one at a time (the explorer's step-through against one-sentence calls).

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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.browser import LOCAL_ONLY, Explorer, StaticHost, start_chromium

from alignmt.cli import main as alignmt
from alignmt.text.corpus import read_lines
from alignmt.text.tasks import ALPHABET

TARGETS = {"open_s": 3.0, "speed_ratio": 1 / 3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--src", help="source sentences, one per line (a .tsv: its first column)")
    parser.add_argument("--sentences", type=int, default=50)
    parser.add_argument("--opens", type=int, default=5, help="page opens timed")
    parser.add_argument("--float32", action="store_true", help="export with --float32")
    parser.add_argument("--out", help="export here (default: a temporary folder)")
    args = parser.parse_args()
    sentences = source_sentences(args.src, args.sentences)
    with tempfile.TemporaryDirectory() as scratch:
        site = Path(args.out or Path(scratch) / "site")
        flags = ["--float32"] if args.float32 else []
        assert alignmt(["export", args.run_dir, "--out", str(site), "--web", *flags]) == 0
        sizes = folder_sizes(site)
        with StaticHost(site) as url:
            opens = [open_seconds(url, sentences[0]) for _ in range(args.opens)]
            page_rate = page_sentences_per_second(url, sentences)
        python_rate = python_sentences_per_second(site, sentences)
    report(args.run_dir, sizes, opens, page_rate, python_rate, len(sentences))


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


def page_sentences_per_second(url: str, sentences: list[str]) -> dict[str, float]:
    """Greedy sentences/s of the page's worker: all at once (/v1/translate's answer, one
    batch) and one after another (the explorer's step-through, top 5 at every step), each
    the best of ten, after untimed calls have opened the model and warmed up the browser's
    compilers (three batches, ten sentences one at a time)."""
    driver = start_chromium(flags=LOCAL_ONLY)
    try:
        driver.get(f"{url}index.html")
        driver.set_script_timeout(600)
        seconds = driver.execute_async_script(
            """
            const [sentences, done] = arguments;
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
              await ask("open", { folders: [new URL(".", location.href).href] });
              // WebAssembly and JavaScript are compiled in tiers: warm both ways up first
              for (let i = 0; i < 3; i++) await ask("translate", { sentences, beam_size: 1 });
              for (const sentence of sentences.slice(0, 10)) await ask("step", { sentence });
              const batch = await best(() => ask("translate", { sentences, beam_size: 1 }));
              const each = await best(async () => {
                for (const sentence of sentences) await ask("step", { sentence });
              });
              done({ batch, each });
            })().catch((error) => done(String(error)));
            """,
            sentences,
        )
    finally:
        driver.quit()
    if isinstance(seconds, str):
        raise RuntimeError(f"the page says: {seconds}")
    return {way: len(sentences) / s for way, s in seconds.items()}


def python_sentences_per_second(site: Path, sentences: list[str]) -> dict[str, float]:
    """Greedy sentences/s of `alignmt translate DIR --beam 1` on ONNX Runtime in Python,
    with one thread, on the graphs the page ran: all at once (its batches) and one sentence
    per call, each the best of ten."""
    from alignmt.decoding.door import open_translator

    # the graphs the page runs: the int8 ones where the site kept only those
    translator = open_translator(site, threads=1, beam_size=1)
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


def report(run: str, sizes: dict, opens: list[float], page: dict, python: dict, n: int) -> None:
    mb = 1e6
    print(f"\n{run}: the site `alignmt export --web` writes\n")
    print(f"| {'part':<22} | {'on disk (MB)':>12} | {'gzipped (MB)':>12} |")
    print(f"| {'-' * 22} | {'-' * 12}:| {'-' * 12}:|")
    for name, (disk, packed) in sizes.items():
        print(f"| {name:<22} | {disk / mb:>12.2f} | {packed / mb:>12.2f} |")
    opened = statistics.median(opens)
    print(f"\n| {'measure':<40} | {'value':>10} | target |")
    print(f"| {'-' * 40} | {'-' * 10}:| --- |")
    first = "open to first translation (s, median)"
    print(f"| {first:<40} | {opened:>10.2f} | <= {TARGETS['open_s']} |")
    for way, said in (("batch", "all at once"), ("each", "one at a time")):
        ratio = page[way] / python[way]
        print(f"| {f'greedy sentences/s {said}, page':<40} | {page[way]:>10.1f} |  |")
        print(f"| {'... Python ORT, 1 thread':<40} | {python[way]:>10.1f} |  |")
        print(f"| {'... page / Python':<40} | {ratio:>10.2f} | >= {TARGETS['speed_ratio']:.2f} |")
    print(f"\nopens (s): {', '.join(f'{s:.2f}' for s in opens)}")


if __name__ == "__main__":
    main()
