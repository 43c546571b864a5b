"""Scale benchmark: tokenise and cache a corpus of millions of pairs, then train from the cache.

    python benchmarks/scale.py                        # 5M pairs (tens of minutes)
    python benchmarks/scale.py --pairs 200000         # a quick check of the whole path
    python benchmarks/scale.py --ddp                  # also 2 processes x 1 thread (torchrun)

Steps, each measured in a fresh subprocess:
  (a) write a synthetic corpus, PREFIX.en + PREFIX.de in --out: each pair a random Multi30k
      training pair, or (probability --join) two of them joined; seeded, nothing downloaded;
  (b) tokenise and cache it with SentencePiece (8000 pieces a side) through `prepare_text`,
      in a fresh cache folder: seconds, the cache's size, peak RSS of the main process and
      of the largest worker;
  (c) prepare it again, as every later run and every other rank does: a cache hit;
  (d) train from it (`alignmt train configs/multi30k_en_de.yaml`, validating on Multi30k val
      at the end): 1 process x 2 threads, and with --ddp 2 processes x 1 thread; tokens/s
      from metrics.jsonl (its `tokens` records, else steps x batch x mean target length)
      and peak RSS (of the largest process).
Prints a markdown table. Run from the repository root after `alignmt data get multi30k`,
with nothing else using the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from alignmt.text.corpora import data_root
from alignmt.text.split import read_split

REPO = Path(__file__).resolve().parents[1]
MULTI30K = data_root() / "multi30k"  # alignmt data get multi30k
CONFIG = REPO / "configs/multi30k_en_de.yaml"

# Runs in the prepare subprocess: prints seconds, pairs and peak RSS as JSON.
PREPARE = """
import json, resource, sys, time
from alignmt.config import load_config
from alignmt.text.prepare import prepare_text
cfg = load_config(sys.argv[1], sys.argv[2:])
start = time.perf_counter()
text = prepare_text(cfg.data, cfg.seed, progress=False)
print(json.dumps({"seconds": time.perf_counter() - start, "pairs": len(text.train),
                  "tgt_tokens": int(text.train.lengths[:, 1].sum()),
                  "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def write_corpus(prefix: Path, pairs: int, join: float, seed: int) -> float:
    """PREFIX.en and PREFIX.de of `pairs` synthetic pairs; returns the seconds it took."""
    start = time.perf_counter()
    base = read_split(
        str(MULTI30K / "train"), src_lang="en", tgt_lang="de", swap=False, what="Multi30k train"
    )
    rng = random.Random(seed)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with (
        open(f"{prefix}.en", "w", buffering=1 << 24) as en,
        open(f"{prefix}.de", "w", buffering=1 << 24) as de,
    ):
        for start_row in range(0, pairs, 100_000):
            rows = [_pair(base, rng, join) for _ in range(min(100_000, pairs - start_row))]
            en.write("".join(src + "\n" for src, _ in rows))  # one large write per block
            de.write("".join(tgt + "\n" for _, tgt in rows))
    return time.perf_counter() - start


def _pair(base, rng: random.Random, join: float) -> tuple[str, str]:
    first = base[rng.randrange(len(base))]
    if rng.random() >= join:
        return first.src, first.tgt
    second = base[rng.randrange(len(base))]
    return f"{first.src} {second.src}", f"{first.tgt} {second.tgt}"


def measured(command: list[str], env: dict[str, str], log: Path) -> tuple[int, float, float, str]:
    """Run `command`; return its exit status, seconds, peak RSS in MiB of the process or its
    largest waited-for descendant (wait4), and its stdout."""
    start = time.perf_counter()
    with open(log, "w") as stderr:
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=stderr, cwd=REPO, text=True
        )
        stdout = process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, time.perf_counter() - start, usage.ru_maxrss / 1024, stdout


def data_overrides(prefix: Path) -> list[str]:
    return [
        f"data.train={prefix}",
        f"data.valid={MULTI30K / 'val'}",
        "data.tokenizer=sentencepiece",
        "data.spm_vocab_size=8000",
    ]


def prepare(prefix: Path, env: dict[str, str], log: Path) -> dict:
    """Prepare the corpus in a subprocess; its JSON report plus `rss_mib` (largest process)."""
    command = [sys.executable, "-c", PREPARE, str(CONFIG), *data_overrides(prefix)]
    status, seconds, rss, stdout = measured(command, env, log)
    if status:
        raise SystemExit(f"prepare failed ({status}); see {log}")
    return {**json.loads(stdout.strip().splitlines()[-1]), "rss_mib": rss, "wall": seconds}


def train(prefix: Path, env: dict, run: Path, args, *, processes: int) -> dict | None:
    """Train from the cache; tokens/s and peak RSS, or None when the run failed."""
    overrides = [
        *data_overrides(prefix),
        f"out_dir={run}",
        f"train.steps={args.steps}",
        f"train.log_every={args.log_every}",
        "train.minutes=0",
        "train.eval_every=0",
        f"train.threads={2 // processes}",
    ]
    launcher = [sys.executable, "-m", "alignmt"]
    if processes > 1:
        launcher = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={processes}",
            "-m",
            "alignmt",
        ]
    shutil.rmtree(run, ignore_errors=True)
    log = run.parent / f"{run.name}.log"
    status, seconds, rss, _ = measured([*launcher, "train", str(CONFIG), *overrides], env, log)
    if status:
        print(
            f"training with {processes} process(es) failed ({status}); see {log}", file=sys.stderr
        )
        return None
    return {"tokens_per_s": tokens_per_s(run, args, processes), "rss_mib": rss, "wall": seconds}


def tokens_per_s(run: Path, args, processes: int) -> float:
    """Target tokens per second between the first logged interval (warm-up) and the last."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    intervals = [r for r in records if "loss" in r]
    first, last = intervals[0], intervals[-1]
    if "tokens" in last:
        tokens = last["tokens"] - first["tokens"]
    else:  # an estimate: every batch full, of the corpus's mean target length (+ </s>)
        tokens = (last["step"] - first["step"]) * args.batch_size * processes * args.mean_tgt
    return tokens / (last["seconds"] - first["seconds"])


def folder_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def table(rows: list[tuple[str, ...]]) -> str:
    head = ("step", "seconds", "tokens/s", "peak RSS (MiB)", "notes")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=5_000_000)
    parser.add_argument("--out", type=Path, default=Path("/tmp/alignmt_scale"))
    parser.add_argument("--join", type=float, default=0.3, help="share of joined pairs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=200, help="training steps per run")
    parser.add_argument("--log-every", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64, help="the config's, for estimates")
    parser.add_argument("--ddp", action="store_true", help="also 2 processes x 1 thread")
    args = parser.parse_args()
    if not MULTI30K.is_dir():
        raise SystemExit(f"{MULTI30K} is absent: the synthetic corpus is made from Multi30k")
    prefix = args.out / f"synthetic{args.pairs}"
    cache = args.out / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "ALIGNMT_CACHE": str(cache)}
    rows = [("(a) write corpus", "", "", "", f"{prefix}.{{en,de}} reused")]
    if not Path(f"{prefix}.de").is_file():
        seconds = write_corpus(prefix, args.pairs, args.join, args.seed)
        rows[0] = ("(a) write corpus", f"{seconds:.1f}", "", "", f"{args.pairs:,} pairs")
    built = prepare(prefix, env, args.out / "prepare.log")
    args.mean_tgt = built["tgt_tokens"] / max(1, built["pairs"]) + 1  # + 1: </s>
    notes = f"{built['pairs']:,} pairs kept, cache {folder_mib(cache):.0f} MiB"
    rows.append(
        (
            "(b) tokenise + cache (SentencePiece 8000)",
            f"{built['seconds']:.1f}",
            "",
            f"{built['rss_kib'] / 1024:.0f} main, {built['rss_mib']:.0f} largest",
            notes,
        )
    )
    hit = prepare(prefix, env, args.out / "prepare_hit.log")
    rows.append(
        (
            "(c) prepare again: cache hit",
            f"{hit['seconds']:.1f}",
            "",
            f"{hit['rss_kib'] / 1024:.0f}",
            "hash the files, map and check the arrays",
        )
    )
    for processes in (1, 2) if args.ddp else (1,):
        result = train(prefix, env, args.out / f"run{processes}", args, processes=processes)
        name = f"(d) train: {processes} process(es) x {2 // processes} thread(s)"
        if result is None:
            rows.append((name, "", "", "", "failed: see the log in --out"))
            continue
        rows.append(
            (
                name,
                f"{result['wall']:.1f}",
                f"{result['tokens_per_s']:.0f}",
                f"{result['rss_mib']:.0f}",
                f"{args.steps} steps, eval at the end",
            )
        )
    print(table(rows))


if __name__ == "__main__":
    main()
