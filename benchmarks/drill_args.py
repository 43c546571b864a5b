"""Drill: bad run folders and arguments, each refused with a message and never a traceback.

`bad_inputs(workdir, run_dir)` runs the `alignmt` command line in this process on:
- run folders whose checkpoint is damaged or foreign (`CHECKPOINT_FAULTS`: truncated, empty,
  random bytes, a garbage header, a config from a newer alignmt with keys this one lacks, a
  missing, garbage or wrongly sized vocabulary, no config, no checkpoint at all), for each of
  translate, evaluate, serve and `train --resume`;
- `train --resume` on a corpus that now builds another vocabulary, or with another
  architecture;
- every numeric flag of every command given bad values (`BAD_VALUES`), and numeric config
  overrides out of range.

A case held when the command returned 1 or 2 with an "error:" line that names the file, the
flag or the key at fault, without raising, and (flags and overrides) before any work began:
loading a model, training or serving count as work, and are replaced by a tripwire here.
It returns a `drill_common.Tally` result: {"tried": N, "held": N, "failures": [...]}.
"""

from __future__ import annotations

import argparse
import random
import shutil
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml
from benchmarks.drill_common import WorkStarted, commands, outcome, run_cli
from safetensors import safe_open
from safetensors.torch import load_file, save_file

BAD_VALUES = ["-1", "0", "nan", "inf", "1e999", "abc", ""]
ALLOWED = {("demo", "--seed"): {"-1", "0"}, ("translate", "--seed"): {"-1", "0"}}  # any integer
BAD_OVERRIDES = [
    "train.steps=0",
    "train.lr=nan",
    "train.save_every=-1",
    "model.dropout=1.5",
    "train.minutes=inf",
    "data.max_len=-3",
    "train.batch_size=2.5",
]


# --- what is done to a checkpoint -------------------------------------------------------------


def _rewrite(path: Path, drop: tuple[str, ...] = (), **changes: str) -> None:
    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata())
    kept = {k: v for k, v in (meta | changes).items() if k not in drop}
    save_file(load_file(str(path)), str(path), metadata=kept)


def _newer(path: Path) -> None:
    with safe_open(str(path), framework="pt") as f:
        stored = yaml.safe_load(f.metadata()["config"])
    stored["model"]["rotary"] = True  # a key a later version might add
    _rewrite(path, config=yaml.safe_dump(stored), alignmt="9.0.0")


def _garbage_header(path: Path) -> None:
    path.write_bytes(struct.pack("<Q", 64) + b'{"a": not json' + bytes(50))


CHECKPOINT_FAULTS: dict[str, Callable[[Path], None]] = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "empty": lambda p: p.write_bytes(b""),
    "random bytes": lambda p: p.write_bytes(random.Random(0).randbytes(4096)),
    "garbage header": _garbage_header,
    "config from a newer alignmt": _newer,
    "missing vocabulary": lambda p: _rewrite(p, drop=("src_vocab",)),
    "garbage vocabulary": lambda p: _rewrite(p, tgt_vocab="{"),
    "vocabulary of another size": lambda p: _rewrite(
        p, tgt_vocab='{"itos": ["<pad>", "<s>", "</s>", "<unk>", "x"]}'
    ),
    "no config": lambda p: _rewrite(p, drop=("config",)),
    "no checkpoint": lambda p: p.unlink(),
}


# --- running the command line here ------------------------------------------------------------


def refused(argv: list[str], named: str, stdin: str = "", *, tripwires: bool = False) -> list[str]:
    """[] if `alignmt ARGV` was refused with an error naming `named`; else what happened."""
    try:
        status, err = run_cli(argv, stdin, tripwires=tripwires)
    except WorkStarted:
        return [f"alignmt {' '.join(argv)}: started work before refusing"]
    except Exception as error:  # a traceback for the user: what this drill looks for
        return [f"alignmt {' '.join(argv)}: raised {error!r}"[:300]]
    if status not in (1, 2) or "error:" not in err or named not in err:
        return [f"alignmt {' '.join(argv)}: exit {status}, said {err.strip()[-200:]!r}"]
    return []


# --- the cases --------------------------------------------------------------------------------


def bad_inputs(workdir: Path, run_dir: Path) -> dict:
    """Every case above against copies of the trained corpus run `run_dir` (which must hold
    model.safetensors, last.safetensors and config.yaml, with its data where it says)."""
    results = [
        _damaged(workdir / f"{i}", run_dir, fault, command)
        for i, fault in enumerate(CHECKPOINT_FAULTS)
        for command in ("translate", "evaluate", "serve", "resume")
    ]
    results += _mismatches(workdir / "mismatch", run_dir)
    results += [
        refused([command, *positionals, f"{flag}={value}"], flag, tripwires=True)
        for command, positionals, flag, value in _flag_cases(run_dir, workdir)
    ]
    config = str(run_dir / "config.yaml")
    results += [
        refused(["train", config, override, "--resume"], override.split("=")[0], tripwires=True)
        for override in BAD_OVERRIDES
    ]
    return outcome(results)


def _damaged(folder: Path, run_dir: Path, fault: str, command: str) -> list[str]:
    """`command` on a copy of `run_dir` whose checkpoint has `fault`."""
    copy = folder / command / "run"
    shutil.rmtree(copy.parent, ignore_errors=True)
    shutil.copytree(run_dir, copy)
    target = "last.safetensors" if command == "resume" else "model.safetensors"
    CHECKPOINT_FAULTS[fault](copy / target)
    if fault == "no checkpoint":
        (copy / "last.safetensors").unlink(missing_ok=True)
    if command == "resume":
        if fault == "no checkpoint":
            return []  # resuming a run with no checkpoint starts it from step 0: not an error
        config = _config_for(copy)
        return _named(refused(["train", str(config), "--resume"], str(copy)), fault)
    text = copy.parent / "src.txt"
    text.write_text("the cat\n")
    argv = {
        "translate": ["translate", str(copy)],
        "evaluate": ["evaluate", str(copy), "--src", str(text), "--ref", str(text)],
        "serve": ["serve", str(copy)],
    }[command]
    return _named(refused(argv, str(copy), stdin="the cat\n"), fault)


def _named(problems: list[str], fault: str) -> list[str]:
    return [f"{fault}: {problem}" for problem in problems]


def _config_for(run: Path) -> Path:
    """The run's config.yaml, pointed at the run's (copied) folder."""
    stored = yaml.safe_load((run / "config.yaml").read_text())
    stored["out_dir"] = str(run)
    path = run.parent / "config.yaml"
    path.write_text(yaml.safe_dump(stored))
    return path


def _mismatches(folder: Path, run_dir: Path) -> list[list[str]]:
    """`train --resume` with another architecture, and on a corpus that changed."""
    copy = folder / "run"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(run_dir, copy)
    config = _config_for(copy)
    wider = refused(["train", str(config), "--resume", "model.dec_hidden=128"], "model.dec_hidden")
    stored = yaml.safe_load(config.read_text())
    data = folder / "data"
    data.mkdir()
    for side in ("en", "de"):
        train = Path(f"{stored['data']['train']}.{side}").read_text().splitlines()
        (data / f"train.{side}").write_text("\n".join(train[: len(train) // 3]) + "\n")
    stored["data"]["train"] = str(data / "train")
    config.write_text(yaml.safe_dump(stored))
    other = refused(["train", str(config), "--resume"], "vocabulary")
    return [wider, other]


def _flag_cases(run_dir: Path, workdir: Path) -> Iterator[tuple[str, list[str], str, str]]:
    """(command, its positional arguments, a numeric flag, a bad value) for every numeric
    flag of every command, read from the parser itself."""
    page = workdir / "page.html"
    positionals = {
        "demo": [],
        "train": [],
        "translate": [str(run_dir)],
        "evaluate": [str(run_dir)],
        "compare": [str(run_dir)],
        "average": [str(run_dir), "--out", str(workdir / "averaged")],
        "serve": [str(run_dir)],
        "explore": [str(run_dir), "--input", str(run_dir / "config.yaml"), "--out", str(page)],
    }
    for command, parser in commands().items():
        for action in parser._actions:
            if not action.option_strings or not _numeric(action):
                continue
            flag = action.option_strings[-1]
            for value in BAD_VALUES:
                if value not in ALLOWED.get((command, flag), set()):
                    yield command, positionals[command], flag, value


def _numeric(action: argparse.Action) -> bool:
    """Whether a flag takes numbers: by its type, or by its default."""
    numeric_default = isinstance(action.default, int | float) and not isinstance(
        action.default, bool
    )
    return (
        action.type in (int, float)
        or numeric_default
        or getattr(action.type, "__name__", "").lstrip("_")
        in ("positive", "positive_list", "length_range", "seconds", "port")
    )
