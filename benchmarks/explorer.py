"""Explorer benchmark: how long each interaction on the page takes to show its result, in a
real headless Chromium against a real `alignmt serve`, and the size of a written page.

    python benchmarks/explorer.py runs/multi30k_en_de      # about 5 minutes

For each of the first N test_2016_flickr sentences, as a user would: translate it (greedy,
step by step, top 5), step forward three times with the → key, force the second candidate
at that step and go back, put all of one step's attention on another word and go back, and
open the beam tree. Each interaction is timed by the page itself, from the click to the frame
that shows its result (window.alignmtTimings). Then `alignmt explore` writes the static page
for the first 10 sentences, which is opened from its file with the network off.

Prints a table of milliseconds per interaction (median, p95, max) and the page's size. Run
from the repository root after `alignmt data get multi30k`, with nothing else using the CPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this file's folder is on the path but not the repository root, from
# which it imports its helpers (as `benchmarks.load`, ...).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.browser import Explorer, start_chromium
from benchmarks.load import local_server

from alignmt.cli import main as alignmt
from alignmt.config import DEVICES, PRECISIONS
from alignmt.text.corpora import data_root
from alignmt.text.corpus import read_lines

FLICKR = data_root() / "multi30k/test_2016_flickr.en.gz"  # alignmt data get multi30k
TARGET_MS = 200.0
STATIC_SENTENCES = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", nargs="?", default="runs/multi30k_en_de")
    parser.add_argument("--src", default=str(FLICKR), help="source sentences, one per line")
    parser.add_argument("--sentences", type=int, default=100, help="N")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--screenshot", help="save the page, after the last sentence, here")
    parser.add_argument("--device", default="cpu", help=f"{DEVICES}: where the server decodes")
    parser.add_argument("--precision", default="float32", choices=PRECISIONS)
    args = parser.parse_args()
    sentences = read_lines(args.src)[: args.sentences]
    devices = ("--device", args.device, "--precision", args.precision)

    driver = start_chromium()
    try:
        with local_server([args.run_dir], args.port, *devices):
            page = Explorer(driver)
            page.open(f"http://127.0.0.1:{args.port}/")
            for sentence in sentences:
                interact(page, sentence)
            if args.screenshot:
                screenshot(page, sentences[-1], args.screenshot)
            timings = [t for t in page.timings() if t["kind"] != "screenshot"]
        size, opened_ms = static_page(driver, args.run_dir, sentences[:STATIC_SENTENCES], devices)
    finally:
        driver.quit()
    report(args, timings, size, opened_ms)


def interact(page: Explorer, sentence: str) -> None:
    """One sentence, as a user would explore it; every interaction leaves the page as it was."""
    page.translate(sentence)
    for _ in range(3):
        page.key("ArrowRight")
    shown = page.panel()
    at = shown["current"]
    second = next((c for c in shown["candidates"] if c != shown["tokens"][at]), None)
    if second is not None:
        page.force(second)
        back(page)
    ranked = sorted(range(len(shown["alpha"]) - 1), key=lambda j: -shown["alpha"][j])
    if len(ranked) > 1:
        page.override(ranked[1])  # the word it attended to second most
        back(page)
    page.open_beam()
    page.js("document.querySelector('.panel .beam-box').open = false")


def back(page: Explorer) -> None:
    page.act("document.querySelector('.panel .whatif button').click()")


def screenshot(page: Explorer, sentence: str, path: str) -> None:
    """The view the README shows: a forced second choice at step 4, the beam open."""
    page.translate(sentence)
    for _ in range(3):
        page.key("ArrowRight")
    shown = page.panel()
    page.force(next(c for c in shown["candidates"] if c != shown["tokens"][3]))
    page.open_beam()
    height = page.js("return document.documentElement.scrollHeight")
    page.driver.set_window_size(1400, height + 120)  # the whole page, beam tree included
    page.driver.save_screenshot(path)


def static_page(
    driver, run_dir: str, sentences: list[str], devices: tuple[str, ...]
) -> tuple[int, float]:
    """Write the page for `sentences` (`alignmt explore` with the `devices` flags); its size in
    bytes, and ms to show the first one offline."""
    with tempfile.TemporaryDirectory() as folder:
        source, out = Path(folder) / "in.txt", Path(folder) / "page.html"
        source.write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
        argv = ["explore", run_dir, "--input", str(source), "--out", str(out), *devices]
        assert alignmt(argv) == 0
        start = time.perf_counter()
        page = Explorer(driver)
        page.open(out.as_uri(), offline=True)
        page.wait_for(1)
        opened_ms = (time.perf_counter() - start) * 1000
        if page.resources():
            raise RuntimeError(f"the written page fetched {page.resources()}")
        return out.stat().st_size, opened_ms


def report(args, timings: list[dict], size: int, opened_ms: float) -> None:
    kinds: dict[str, list[float]] = {}
    for t in timings:
        kinds.setdefault(t["kind"], []).append(t["ms"])
    print(
        f"\n{args.run_dir}, {args.sentences} sentences of {Path(args.src).name}, "
        "headless Chromium, ms from the click to the frame that shows the result\n"
    )
    print("| interaction | n | median | p95 | max | ≤ 200 ms |")
    print("|---|---:|---:|---:|---:|---|")
    for kind, ms in kinds.items():
        p95 = statistics.quantiles(ms, n=20, method="inclusive")[-1] if len(ms) > 1 else ms[0]
        met = "yes" if max(ms) <= TARGET_MS else f"no: {sum(m > TARGET_MS for m in ms)} over"
        print(
            f"| {kind} | {len(ms)} | {statistics.median(ms):.1f} | {p95:.1f} | "
            f"{max(ms):.1f} | {met} |"
        )
    print(
        f"\nstatic page, {STATIC_SENTENCES} sentences: {size / 1e6:.2f} MB (target < 2 MB); "
        f"opened from its file with the network off, it showed the first in {opened_ms:.0f} ms"
    )


if __name__ == "__main__":
    main()
