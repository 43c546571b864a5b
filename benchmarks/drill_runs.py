"""Drills on training runs: kills, signals, a full or read-only disk, non-finite losses.

Each drill returns {"tried": N, "held": N, "failures": [...]}: `tried` counts the faults
sent, `held` those after which every promise checked still held, and `failures` says what
broke (at most 20 lines). benchmarks/drills.py runs them at full counts, tests/test_drills.py
with a few each. Training runs in subprocesses (`alignmt train`, or torchrun), as a user
runs it, except where a fault is injected into the loop itself.

- `kills`: SIGKILL at random moments (every third kill while a file of the run is being
  written), resuming after each, until the run ends. Then its checkpoints (weights,
  optimizer moments, generator states) must equal an uninterrupted run's bit for bit, and
  its metrics too but for their clock; after every kill the folder must translate once it
  holds a checkpoint. Under torchrun (2 processes) one rank is killed.
- `signals`: SIGTERM or SIGINT mid-training: exit 0 within `SIGNAL_BOUND` seconds with a
  checkpoint of the step it stopped at; `--resume` then ends as an uninterrupted run.
- `disks`: checkpoint writes that fail for lack of space (a write through to /dev/full; a
  full tmpfs, where mounting one is allowed) or on a read-only filesystem (a tmpfs remounted
  read-only, where allowed): exit 1 naming the folder and the cause, the last good
  checkpoint byte for byte as it was, no partial file left, and a resume that ends as an
  uninterrupted run once the fault is gone.
- `nonfinite`: NaN and inf losses and gradients at random steps: each update is skipped and
  counted in metrics.jsonl, and the weights stay finite; `max_bad_steps` in a row stop the
  run with an error and leave the last good checkpoint, from which it resumes.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from alignmt.checkpoint.rundir import RUN_FILES
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.config import Config, DataConfig, ModelConfig, SearchConfig, TrainConfig, dump_config
from alignmt.decoding.translator import Translator
from alignmt.training.loop import TrainingError, train

WORDS = dict(cat="katze", dog="hund", red="rot", big="gross", the="die", sees="sieht",
             small="klein", house="haus", runs="rennt")  # fmt: skip
SIGNAL_BOUND = 10.0  # seconds from a signal to the exit, checkpoint written
WAIT = 300.0  # the longest any one training process may take
KEPT = 20  # failures listed


def outcome(problems: list[list[str]], **extra: int) -> dict:
    """The drill's result from the problems found after each fault ([] where all held)."""
    failures = [problem for found in problems for problem in found]
    return {"tried": len(problems), "held": sum(not found for found in problems),
            "failures": failures[:KEPT], **extra}  # fmt: skip


# --- runs to drill on -----------------------------------------------------------------------


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
        src = [" ".join(rng.choice(sorted(WORDS)) for _ in range(rng.randint(1, 6)))
               for _ in range(n)]  # fmt: skip
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
            **{
                "steps": 120,
                "log_every": 10,
                "eval_every": 20,
                "batch_size": 16,
                "threads": 1,
                **train_keys,
            }
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
    command = [sys.executable, *(launcher if nproc > 1 else []), "-m", "alignmt", "train",
               str(config), *flags]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip


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
        translator = Translator.from_checkpoint(load_checkpoint(run))
        [[best]] = translator.translate([sentence], warn=False)
        return [] if isinstance(best.text, str) else [f"{run}: no translation"]
    except Exception as err:  # any failure to use the folder is what the drill looks for
        return [f"{run}: cannot translate with it after a kill: {err!r}"[:300]]


def last_step(path: Path) -> int:
    with safe_open(str(path), framework="pt") as f:
        return json.loads(f.metadata()["train_state"])["progress"]["step"]


# --- 1. kills ---------------------------------------------------------------------------------


def kills(workdir: Path, count: int, seed: int = 0, *, corpus: bool = False, nproc: int = 1,
          steps: int | None = None) -> dict:  # fmt: skip
    """SIGKILL training `count` times at random moments, resuming after each; with `nproc`
    processes under torchrun, one rank at a time. Each run is killed until one of its
    attempts reaches the end (a moment drawn after the end kills nothing), and compared
    with an uninterrupted run; as many runs as it takes to make `count` kills."""
    rng = random.Random(seed)
    make = corpus_config if corpus else reverse_config
    sentence = "the big cat" if corpus else "abcde"
    sized = {"steps": steps} if steps else {}
    reference = make(workdir / "whole", **sized)
    seconds, problems = run_to_end(reference, nproc=nproc)
    if problems:
        return outcome([problems])
    results: list[list[str]] = []
    runs = mid_write = 0
    while len(results) < count and runs < 4 * count:  # bounded, should moments fall past the end
        cfg = make(workdir / f"killed{runs}", **sized)
        found, torn = _kill_until_done(cfg, rng, seconds, (len(results), count), nproc, sentence)
        ended = differences(Path(cfg.out_dir), Path(reference.out_dir))
        results += [problems + ended for problems in found]  # a kill held if the run ended well
        runs, mid_write = runs + 1, mid_write + torn
    return outcome(results, runs=runs, during_writes=mid_write)


def _kill_until_done(cfg: Config, rng: random.Random, seconds: float, kills: tuple[int, int],
                     nproc: int, sentence: str) -> tuple[list[list[str]], int]:  # fmt: skip
    """Train `cfg`, killing it at random moments and resuming after each, to its end: the
    problems found after each kill, and how many kills cut a file's write short. `kills`:
    (those made so far, those to make)."""
    run_dir, config, flags = Path(cfg.out_dir), write_config(cfg), []
    found: list[list[str]] = []
    torn = 0
    while True:
        made = kills[0] + len(found)
        process = start(config, *flags, nproc=nproc)
        if made < kills[1] and _kill_at_random(process, run_dir, rng, seconds, made % 3 == 2,
                                               nproc):  # fmt: skip
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


def _kill_at_random(process: subprocess.Popen, run_dir: Path, rng: random.Random,
                    seconds: float, mid_write: bool, nproc: int) -> bool:  # fmt: skip
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
    workers = _workers(process, nproc)
    with contextlib.suppress(ProcessLookupError):
        os.kill(rng.choice(workers), signal.SIGKILL)
        for pid in workers:  # those _caught_writing stopped and the kill spared
            os.kill(pid, signal.SIGCONT)
    return True


def _caught_writing(process: subprocess.Popen, run_dir: Path, nproc: int) -> bool:
    """Whether the training processes are stopped (SIGSTOP) in the middle of writing a file
    of the run: a write takes a millisecond or two, so a .tmp seen may be gone by the time a
    kill lands, and stopping first makes sure the kill cuts the write short."""
    if not _writing(run_dir):
        return False
    workers = _workers(process, nproc)
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    if _writing(run_dir):
        return True
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    return False


def _workers(process: subprocess.Popen, nproc: int) -> list[int]:
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


# --- 2. signals -----------------------------------------------------------------------------


def signals(workdir: Path, count: int, seed: int = 0, steps: int = 1000) -> dict:
    """SIGTERM and SIGINT in turn, once each into `count` runs, at random moments of
    training; each run is then resumed to its end."""
    rng = random.Random(seed)
    reference = reverse_config(workdir / "whole", steps=steps, save_every=0)
    seconds, problems = run_to_end(reference)
    if problems:
        return outcome([problems])
    results = []
    for trial in range(count):
        sent = (signal.SIGTERM, signal.SIGINT)[trial % 2]
        cfg = reverse_config(workdir / f"signalled{trial}", steps=steps, save_every=0)
        problems, stopped = _signal_once(cfg, sent, rng, seconds)
        ended = differences(Path(cfg.out_dir), Path(reference.out_dir), stopped)
        results.append(problems + (ended if stopped else []))
    return outcome(results)


def _signal_once(cfg: Config, sent: signal.Signals, rng: random.Random,
                 seconds: float) -> tuple[list[str], int]:  # fmt: skip
    """Signal a training run once, check how it stopped, and resume it to the end:
    (problems, the step it stopped at; 0 if it did not)."""
    run_dir = Path(cfg.out_dir)
    process = start(write_config(cfg))
    metrics = run_dir / "metrics.jsonl"
    while process.poll() is None and not (metrics.is_file() and metrics.stat().st_size):
        time.sleep(0.01)  # until training has begun
    time.sleep(rng.uniform(0, 0.3) * seconds)
    if process.poll() is not None:
        return [f"{run_dir}: ended before the {sent.name} could be sent; lengthen the run"], 0
    sent_at = time.monotonic()
    process.send_signal(sent)
    status, out, err = finish(process, timeout=60)
    took = time.monotonic() - sent_at
    problems = []
    if status != 0 or f"stopped by {sent.name} at step" not in out:
        problems.append(f"{run_dir}: {sent.name}: exit {status}, said {out.strip()!r} "
                        f"{err.strip()[-300:]!r}")  # fmt: skip
    if took > SIGNAL_BOUND:
        problems.append(f"{run_dir}: {sent.name}: took {took:.1f} s to stop")
    if problems:
        return problems, 0
    said = int(out.split(" at step ")[1].split(",")[0])
    if last_step(run_dir / "last.safetensors") != said:
        problems.append(f"{run_dir}: stopped at step {said}, checkpoint of another step")
    return problems + run_to_end(cfg, "--resume")[1], said


# --- 3. a full or read-only disk --------------------------------------------------------------


def disks(workdir: Path, *, mounts: bool = True) -> dict:
    """Checkpoint writes that fail: through to /dev/full; into a full tmpfs (with `mounts`,
    where this process may mount one); and on a read-only filesystem, in-process: the write
    raises EROFS as the kernel would (a filesystem with files open for writing cannot be
    remounted read-only under a running process)."""
    reference = reverse_config(workdir / "whole")
    problems = run_to_end(reference)[1]
    if problems:
        return outcome([problems])
    faults = {"dev_full": lambda folder: _fail_a_write(folder, _through_dev_full, "No space")}
    if mounts and _can_mount(workdir / "probe"):
        faults["tmpfs_full"] = lambda folder: _fail_a_write(folder, _fill_tmpfs, "No space")
    faults["read_only"] = _read_only
    results = []
    for name, fail in faults.items():
        folder = workdir / name
        try:
            found = fail(folder)
            found += differences(folder / "run", Path(reference.out_dir))
        finally:
            subprocess.run(["umount", str(folder)], capture_output=True)  # the tmpfs, if any
        results.append(found)
    return outcome(results)


def _fail_a_write(folder: Path, fault: Callable[[Path], Callable[[], None]],
                  cause: str) -> list[str]:  # fmt: skip
    """Train in `folder`, bring on `fault` once a checkpoint is on disk, and check that the
    run stopped as it should and kept that checkpoint; then clear the fault (the callable
    `fault` returned) and resume to the end."""
    cfg = reverse_config(folder)
    run_dir, last = Path(cfg.out_dir), Path(cfg.out_dir) / "last.safetensors"
    if fault is _fill_tmpfs:
        folder.mkdir(parents=True, exist_ok=True)
        mount = ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)]
        subprocess.run(mount, check=True, capture_output=True)
    process = start(write_config(cfg))
    while process.poll() is None and not last.is_file():
        time.sleep(0.005)
    clear = fault(folder)
    good = last.read_bytes()  # no write can succeed from here on
    status, _, err = finish(process, timeout=120)
    problems = []
    if status != 1 or f"in {run_dir}" not in err or cause not in err or "Traceback" in err:
        problems.append(f"{folder.name}: exit {status}, said {err.strip()[-300:]!r}")
    if last.read_bytes() != good:
        problems.append(f"{folder.name}: the last good checkpoint changed")
    left = sorted(p.name for p in run_dir.glob("*.tmp"))
    if left:
        problems.append(f"{folder.name}: partial files left: {left}")
    clear()
    return problems + run_to_end(cfg, "--resume")[1]


def _through_dev_full(folder: Path) -> Callable[[], None]:
    """The next checkpoint's temporary file is a link to /dev/full: its write fails with
    ENOSPC as on a full disk, with no mount and no root."""
    tmp = folder / "run" / "last.safetensors.tmp"
    while True:
        try:
            tmp.symlink_to("/dev/full")
            return lambda: None  # the failed write removes the link itself
        except FileExistsError:  # a write is under way: plant it after
            time.sleep(0.001)


def _can_mount(probe: Path) -> bool:
    probe.mkdir(parents=True, exist_ok=True)
    mount = ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)]
    if subprocess.run(mount, capture_output=True).returncode:
        return False
    subprocess.run(["umount", str(probe)], check=True)
    return True


def _fill_tmpfs(folder: Path) -> Callable[[], None]:
    """Fill the tmpfs the run is on; the callable frees the space again."""
    if not os.path.ismount(folder):  # never fill a real disk
        raise RuntimeError(f"{folder} is not a mounted tmpfs")
    filler = folder / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as f:
        while True:
            f.write(bytes(1 << 16))
            f.flush()
    return filler.unlink


def _read_only(folder: Path) -> list[str]:
    """Train in-process, with every checkpoint write after the first raising EROFS."""
    from alignmt.cli import main

    cfg = reverse_config(folder)
    config, run_dir = write_config(cfg), Path(cfg.out_dir)
    real = Path.write_bytes

    def refused(path: Path, data: bytes) -> int:
        if path.parent == run_dir and (run_dir / "last.safetensors").is_file():
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real(path, data)

    with mock.patch.object(Path, "write_bytes", refused), _kept_threads():
        status, err = _main(main, ["train", str(config)])
        good = (run_dir / "last.safetensors").read_bytes()
    problems = []
    if status != 1 or f"in {run_dir}" not in err or "Read-only file system" not in err:
        problems.append(f"read_only: exit {status}, said {err.strip()[-300:]!r}")
    if last_step(run_dir / "last.safetensors") != 10 or list(run_dir.glob("*.tmp")):
        problems.append("read_only: the first checkpoint was not kept as it was")
    with _kept_threads():
        status, err = _main(main, ["train", str(config), "--resume"])
    if status or (run_dir / "last.safetensors").read_bytes() == good:
        problems.append(f"read_only: the resumed run exited {status}: {err.strip()[-300:]!r}")
    return problems


def _main(main: Callable[[list[str]], int], argv: list[str]) -> tuple[int, str]:
    """`alignmt ARGV` in this process: (status, what it wrote on stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(argv)
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else 1
    return status, err.getvalue()


@contextlib.contextmanager
def _kept_threads() -> Iterator[None]:
    """Training in-process sets torch's thread count from the config: put it back."""
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# --- 4. non-finite losses and gradients -------------------------------------------------------


class _Blow(torch.autograd.Function):
    """The identity whose gradient is multiplied by `factor`: a finite loss with a NaN or
    infinite gradient."""

    @staticmethod
    def forward(ctx, loss: torch.Tensor, factor: float) -> torch.Tensor:
        ctx.factor = factor
        return loss.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.factor, None


POISONS = {
    "NaN loss": lambda loss: loss * float("nan"),
    "inf loss": lambda loss: loss * float("inf"),
    "NaN gradient": lambda loss: _Blow.apply(loss, float("nan")),
    "inf gradient": lambda loss: _Blow.apply(loss, float("inf")),
}


@contextlib.contextmanager
def poisoned(at: dict[int, str]) -> Iterator[None]:
    """Training's loss poisoned (`POISONS`) at the given calls, counted from 1."""
    module = importlib.import_module("alignmt.training.optim")
    real, calls = module.loss_of, [0]

    def loss_of(*args):
        calls[0] += 1
        loss = real(*args)
        return POISONS[at[calls[0]]](loss) if calls[0] in at else loss

    with mock.patch.object(module, "loss_of", loss_of), _kept_threads():
        yield


def nonfinite(workdir: Path, count: int, seed: int = 0) -> dict:
    """`count` poisoned updates at random steps of one run, and then a run poisoned
    `max_bad_steps` times in a row."""
    rng = random.Random(seed)
    cfg = reverse_config(workdir / "scattered", steps=300)
    at = {step: rng.choice(sorted(POISONS)) for step in rng.sample(range(1, 301), count)}
    with poisoned(at):
        result = train(cfg, progress=False)
    skipped = [json.loads(line).get("skipped") for line in
               (result.run_dir / "metrics.jsonl").read_text().splitlines()]  # fmt: skip
    problems = [] if skipped[-1] == count else [f"{count} poisoned, {skipped[-1]} skipped"]
    for name in ("last.safetensors", "model.safetensors"):
        bad = [k for k, t in load_file(str(result.run_dir / name)).items()
               if t.is_floating_point() and not torch.isfinite(t).all()]  # fmt: skip
        problems += [f"{result.run_dir / name}: {k} is not finite" for k in bad]
    results = [problems if i == 0 else [] for i in range(count)]  # one run holds them all
    return outcome([*results, _streak(workdir / "streak", rng)])


def _streak(folder: Path, rng: random.Random) -> list[str]:
    cfg = reverse_config(folder, steps=100, max_bad_steps=5)
    first = rng.randint(25, 90)
    try:
        with poisoned({step: "NaN loss" for step in range(first, first + 5)}):
            train(cfg, progress=False)
        return [f"{folder}: 5 poisoned updates in a row did not stop the run"]
    except TrainingError as err:
        said = str(err)
    last = Path(cfg.out_dir) / "last.safetensors"
    problems = [] if "5 updates in a row" in said else [f"{folder}: said {said!r}"]
    # the last checkpoint before the error at step first + 4 (which writes none): one written
    # amid the streak holds the weights of the last applied update, as skipping changes nothing
    if last_step(last) != (first + 3) // 10 * 10:
        problems.append(f"{folder}: kept step {last_step(last)}, not the last checkpoint")
    if not all(torch.isfinite(t).all() for t in load_file(str(last)).values()
               if t.is_floating_point()):  # fmt: skip
        problems.append(f"{last}: not finite")
    with _kept_threads():
        problems += [] if train(cfg, progress=False, resume=True).step == 100 else ["no resume"]
    return problems
