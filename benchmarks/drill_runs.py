"""Drills on interrupted training runs: kills; and the runs every drill on training uses
(drill_signals.py's and drill_faults.py's too).

Each drill returns a `drill_common.Tally` result, {"tried": N, "held": N, "failures": [...]}:
`tried` counts the faults sent, `held` those after which every promise checked still held,
and `failures` says what broke. benchmarks/drills.py runs them at full counts,
tests/test_drills.py with a few each. The runs faults are sent to train in subprocesses
(`alignmt train`, or torchrun), as a user runs them; an uninterrupted run they are compared
with trains in this process, unless the drill times it (kills) or it is torchrun's.

`kills`: SIGKILL at random moments (every third kill while a file of the run is being
written), resuming after each, until the run ends. Then its checkpoints (weights, optimizer
moments, generator states) must equal an uninterrupted run's bit for bit, and its metrics
too but for their clock; after every kill the folder must translate once it holds a
checkpoint. Under torchrun (2 processes) one rank is killed. It trains with either engine
(`train.engine`).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import torch
from benchmarks.drill_common import outcome
from safetensors import safe_open
from safetensors.torch import load_file

from alignmt.checkpoint.rundir import RUN_FILES
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.config import Config, DataConfig, ModelConfig, SearchConfig, TrainConfig, dump_config
from alignmt.decoding.door import open_translator
from alignmt.training.run import train

WORDS = dict(
    cat="katze",
    dog="hund",
    red="rot",
    big="gross",
    the="die",
    sees="sieht",
    small="klein",
    house="haus",
    runs="rennt",
)
WAIT = 300.0  # the longest any one training process may take


# --- runs to drill on -------------------------------------------------------------------------


def reverse_config(folder: Path, **train_keys) -> Config:
    """The reversal task, small and quick, with dropout and a checkpoint every 10 steps."""
    return Config(
        model=ModelConfig(emb_dim=16, enc_hidden=16, dec_hidden=32, attn_dim=16, dropout=0.1),
        data=DataConfig(task="reverse", min_len=2, max_len=6),
        train=TrainConfig(
            **{"steps": 300, "log_every": 10, "save_every": 10, "batch_size": 32, "threads": 1}
            | train_keys
        ),
        out_dir=str(folder / "run"),
    )


def corpus_config(folder: Path, **train_keys) -> Config:
    """A toy parallel corpus validated every 20 steps (loss, BLEU, the best model)."""
    rng, data = random.Random(0), folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 300), ("valid", 30)):
        src = [
            " ".join(rng.choice(sorted(WORDS)) for _ in range(rng.randint(1, 6))) for _ in range(n)
        ]
        (data / f"{split}.en").write_text("".join(line + "\n" for line in src))
        tgt = (" ".join(WORDS[word] for word in line.split()) + " .\n" for line in src)
        (data / f"{split}.de").write_text("".join(tgt))
    return Config(
        model=ModelConfig(emb_dim=16, enc_hidden=16, dec_hidden=32, attn_dim=16, dropout=0.1),
        data=DataConfig(
            task="corpus",
            train=str(data / "train"),
            valid=str(data / "valid"),
            tokenizer="moses",
            cache_dir=str(folder / "cache"),
        ),
        train=TrainConfig(
            **{"steps": 120, "log_every": 10, "eval_every": 20, "batch_size": 16, "threads": 1}
            | train_keys
        ),
        search=SearchConfig(beam_size=2),
        out_dir=str(folder / "run"),
    )


def write_config(cfg: Config) -> Path:
    """`cfg` as a YAML file beside its run folder."""
    path = Path(cfg.out_dir).parent / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_config(cfg))
    return path


def start(config: Path, *flags: str, nproc: int = 1) -> subprocess.Popen:
    """`alignmt train CONFIG FLAGS`, under torchrun when `nproc` > 1."""
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    command = [sys.executable, *(launcher if nproc > 1 else []), "-m", "alignmt", "train"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [*command, str(config), *flags],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(process: subprocess.Popen, timeout: float = WAIT) -> tuple[int, str, str]:
    """Wait for `process` (killing its group past `timeout`); (status, stdout, stderr)."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        err += f"\n(killed after {timeout:.0f} s)"
    return process.returncode, out, err


def run_to_end(cfg: Config, *flags: str, nproc: int = 1) -> tuple[float, list[str]]:
    """Train `cfg` (or resume it) to the end: (seconds, problems)."""
    began = time.monotonic()
    status, _, err = finish(start(write_config(cfg), *flags, nproc=nproc))
    problems = [f"{cfg.out_dir}: exit {status}: {err.strip()[-400:]}"] if status else []
    return time.monotonic() - began, problems


def uninterrupted(cfg: Config) -> list[str]:
    """Train `cfg` to its end in this process: the run a faulted one must end as. Faults go
    to `alignmt train` processes; the run they are compared with needs no process of its
    own, except where a drill draws its moments from that process's time (`run_to_end`)."""
    try:
        train(cfg, progress=False)
    except Exception as err:  # a reference that cannot train fails the drill, not the caller
        return [f"{cfg.out_dir}: the uninterrupted run failed: {err!r}"[:400]]
    return []


class Reference(NamedTuple):
    """An uninterrupted run that faulted runs of its config must end as, and the seconds it
    took (a kill drill draws its moments within them)."""

    cfg: Config
    seconds: float


def reference_run(workdir: Path, *, corpus: bool, nproc: int = 1, **keys) -> tuple[Reference, list]:
    """Train the uninterrupted run of `corpus_config` or `reverse_config` with `keys` in
    `workdir / "whole"` as the faulted runs will be trained (a process of its own, torchrun's
    when `nproc` > 1): the reference and the problems met."""
    cfg = (corpus_config if corpus else reverse_config)(workdir / "whole", **keys)
    seconds, problems = run_to_end(cfg, nproc=nproc)
    return Reference(cfg, seconds), problems


def faulted(reference: Reference, folder: Path) -> Config:
    """The reference's config, training into `folder / "run"` (its data is shared)."""
    return replace(reference.cfg, out_dir=str(folder / "run"))


def differences(run: Path, reference: Path, stopped: int = 0, log_every: int = 10) -> list[str]:
    """How the run in `run` ended otherwise than `reference`: its checkpoints bit for bit
    (weights, optimizer moments, generator states) and its metrics but for their clock. A
    run `stopped` by a signal at that step logged the interval it cut short there, and the
    rest of that interval at its end: those two records are left out."""
    found = []
    for name in ("last.safetensors", "model.safetensors"):
        if not (run / name).is_file():
            found.append(f"{run}: no {name}")
            continue
        ours, theirs = load_file(str(run / name)), load_file(str(reference / name))
        if ours.keys() != theirs.keys():
            found.append(f"{run / name}: holds other tensors than {reference / name}")
        changed = [key for key in ours if key in theirs and not torch.equal(ours[key], theirs[key])]
        found += [f"{run / name}: {key} differs from {reference / name}" for key in changed]
    cut = {stopped, -(-stopped // log_every) * log_every} if stopped % log_every else set()
    ours = [r for r in _records(run) if "loss" not in r or r["step"] not in cut]
    theirs = [r for r in _records(reference) if "loss" not in r or r["step"] not in cut]
    if ours != theirs:
        found.append(f"{run}/metrics.jsonl differs from {reference}'s")
    return found


def _records(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in lines]


def translates(run: Path, sentence: str) -> list[str]:
    """[] when the folder's model (or last checkpoint) translates `sentence`."""
    if not any((run / name).is_file() for name in ("model.safetensors", "last.safetensors")):
        return []  # killed before its first checkpoint: resuming starts from step 0
    try:
        translator = open_translator(load_checkpoint(run))
        [[best]] = translator.translate([sentence], warn=False)
        return [] if isinstance(best.text, str) else [f"{run}: no translation"]
    except Exception as err:  # any failure to use the folder is what the drill looks for
        return [f"{run}: cannot translate with it after a kill: {err!r}"[:300]]


def last_step(path: Path) -> int:
    with safe_open(str(path), framework="pt") as f:
        return json.loads(f.metadata()["train_state"])["progress"]["step"]


# --- kills ------------------------------------------------------------------------------------


def kills(
    workdir: Path,
    count: int,
    seed: int = 0,
    *,
    corpus: bool = False,
    nproc: int = 1,
    steps: int | None = None,
    engine: str = "torch",
    reference: Reference | None = None,
) -> dict:
    """SIGKILL training `count` times at random moments, resuming after each; with `nproc`
    processes under torchrun, one rank at a time. Each run is killed until one of its
    attempts reaches the end (a moment drawn after the end kills nothing), and compared
    with an uninterrupted run (`reference`, trained here unless given; then `corpus` must
    say which config it is, and `steps` and `engine` are its); as many runs as it takes
    to make `count` kills."""
    rng = random.Random(seed)
    sentence = "the big cat" if corpus else "abcde"
    if reference is None:
        keys = {"engine": engine} | ({"steps": steps} if steps else {})
        reference, problems = reference_run(workdir, corpus=corpus, nproc=nproc, **keys)
        if problems:
            return outcome([problems])
    results: list[list[str]] = []
    runs = mid_write = 0
    while len(results) < count and runs < 4 * count:  # bounded, should moments fall past the end
        cfg = faulted(reference, workdir / f"killed{runs}")
        moments = (len(results), count)
        found, torn = _kill_until_done(cfg, rng, reference.seconds, moments, nproc, sentence)
        ended = differences(Path(cfg.out_dir), Path(reference.cfg.out_dir))
        results += [problems + ended for problems in found]  # a kill held if the run ended well
        runs, mid_write = runs + 1, mid_write + torn
    return outcome(results, runs=runs, during_writes=mid_write)


def _kill_until_done(
    cfg: Config,
    rng: random.Random,
    seconds: float,
    kills: tuple[int, int],
    nproc: int,
    sentence: str,
) -> tuple[list[list[str]], int]:
    """Train `cfg`, killing it at random moments and resuming after each, to its end: the
    problems found after each kill, and how many kills cut a file's write short. `kills`:
    (those made so far, those to make)."""
    run_dir, config, flags = Path(cfg.out_dir), write_config(cfg), []
    found: list[list[str]] = []
    torn = 0
    while True:
        made = kills[0] + len(found)
        process = start(config, *flags, nproc=nproc)
        if made < kills[1] and _kill_at_random(
            process, run_dir, rng, seconds, made % 3 == 2, nproc
        ):
            finish(process, timeout=120)  # under torchrun, the other rank stops too
            torn += _writing(run_dir)  # its .tmp was left behind
            found.append(translates(run_dir, sentence))
            flags = ["--resume"]
            continue
        status, _, err = finish(process)
        if status:
            problem = f"{run_dir}: exit {status} after {len(found)} kills: {err.strip()[-400:]}"
            found = [[*problems, problem] for problems in found] or [[problem]]
        return found, torn


def _kill_at_random(
    process: subprocess.Popen,
    run_dir: Path,
    rng: random.Random,
    seconds: float,
    mid_write: bool,
    nproc: int,
) -> bool:
    """SIGKILL a training process of `process` (one of torchrun's workers when `nproc` > 1)
    at a random moment within `seconds`, or (`mid_write`) while a file of the run is being
    written; False if it ended first."""
    deadline = time.monotonic() + (seconds if mid_write else rng.uniform(0.2, 0.9) * seconds)
    while time.monotonic() < deadline and process.poll() is None:
        if mid_write and _caught_writing(process, run_dir, nproc):
            break
        time.sleep(0.0002 if mid_write else 0.01)
    if process.poll() is not None:
        return False
    pids = workers(process, nproc)
    with contextlib.suppress(ProcessLookupError):
        os.kill(rng.choice(pids), signal.SIGKILL)
        for pid in pids:  # those _caught_writing stopped and the kill spared
            os.kill(pid, signal.SIGCONT)
    return True


def _caught_writing(process: subprocess.Popen, run_dir: Path, nproc: int) -> bool:
    """Whether the training processes are stopped (SIGSTOP) in the middle of writing a file
    of the run: a write takes a millisecond or two, so a .tmp seen may be gone by the time a
    kill lands, and stopping first makes sure the kill cuts the write short."""
    if not _writing(run_dir):
        return False
    pids = workers(process, nproc)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    if _writing(run_dir):
        return True
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    return False


def workers(process: subprocess.Popen, nproc: int) -> list[int]:
    """The training processes: `process`, or torchrun's workers, its children."""
    return (_children(process.pid) or [process.pid]) if nproc > 1 else [process.pid]


def _writing(run_dir: Path) -> bool:
    """A file of the run is being written: its .tmp beside it exists."""
    return any((run_dir / f"{name}.tmp").exists() for name in (*RUN_FILES, "config.yaml"))


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found
