"""What every drill returns, and the `alignmt` command line run inside a drill's process.

A drill sends faults and counts them in a `Tally`: how many it tried, how many held (every
promise checked after the fault still held), and a line on each failure. `Tally.result()`
is what every drill returns and benchmarks/drills.py tabulates: {"tried": N, "held": N,
"failures": [...]}, and whatever else the drill reports. At most `KEPT` failure lines are
kept: the first ones as they came, then one that counts the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

KEPT = 20  # failure lines in a result
# What counts as work in a command (loading a model, training, running the demo, loading
# the models to serve), by name -> the module that defines it.
WORK = {
    "load_checkpoint": "alignmt.checkpoint.torch_io",
    "train": "alignmt.training.run",
    "run_demo": "alignmt.experiments.demo",
    "load_models": "alignmt.answers.registry",
}


@dataclass
class Tally:
    """What a drill tried, how many held, and what broke; threads may share one."""

    tried: int = 0
    held: int = 0
    failures: list[str] = field(default_factory=list)  # the first KEPT
    dropped: int = 0  # failures past the first KEPT, counted only
    lock: Any = field(default_factory=threading.RLock, repr=False, compare=False)

    def add(self, problems: Iterable[str], what: str = "") -> None:
        """One fault tried: it held if `problems` is empty; else each is a failure line,
        after "`what`: " where given."""
        problems = list(problems)
        with self.lock:
            self.tried += 1
            self.held += not problems
            for problem in problems:
                self.fail(f"{what}: {problem}" if what else problem)

    def fail(self, line: str) -> None:
        """Keep a failure line: `add` keeps a fault's this way, and a drill calls it itself
        for a failure that is no fault's (a reference run that failed, a server that died)."""
        with self.lock:
            if len(self.failures) < KEPT:
                self.failures.append(line)
            else:
                self.dropped += 1

    def result(self, **extra: Any) -> dict[str, Any]:
        """The drill's result, with `extra` after the three keys every drill has."""
        failures = self.failures
        if self.dropped:
            failures = [*failures[: KEPT - 1], f"... and {self.dropped + 1} more"]
        return {"tried": self.tried, "held": self.held, "failures": failures, **extra}


def outcome(problems: Iterable[list[str]], **extra: Any) -> dict[str, Any]:
    """The result of a drill from the problems found after each fault ([] where all held)."""
    tally = Tally()
    for found in problems:
        tally.add(found)
    return tally.result(**extra)


class WorkStarted(Exception):
    """A command went past its checks to real work."""


def run_cli(argv: Sequence[str], stdin: str = "", *, tripwires: bool = False) -> tuple[int, str]:
    """`alignmt ARGV` in this process: (status, stderr). With `tripwires`, the functions in
    `WORK` raise `WorkStarted` wherever the command line calls them; serving never starts a
    server either way."""
    from alignmt import cli

    err = io.StringIO()
    with contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.redirect_stderr(err))
        stack.enter_context(contextlib.redirect_stdout(io.TextIOWrapper(io.BytesIO())))
        stack.enter_context(
            mock.patch.object(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
        )
        stack.enter_context(mock.patch("alignmt.cli.serve.run_server", _trip))
        if tripwires:
            for module, name in _bound_work():
                stack.enter_context(mock.patch.object(module, name, _trip))
        try:
            status = cli.main(list(argv))
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else 1
    return status, err.getvalue()


def commands() -> dict[str, argparse.ArgumentParser]:
    """The `alignmt` commands, by name -> their parsers."""
    from alignmt import cli

    parser = cli.build_parser()
    [found] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found.choices)


def _trip(*args: Any, **kwargs: Any) -> None:
    raise WorkStarted


def _bound_work() -> list[tuple[Any, str]]:
    """(module, name) for each function of `WORK` in its own module and in every module of
    the command line that imported it. Every command's module is imported first: one
    imported while a tripwire is in place would keep the tripwire."""
    for command in commands():
        with contextlib.suppress(ImportError):
            importlib.import_module(f"alignmt.cli.{command}")
    bound = []
    for name, owner in WORK.items():
        real = getattr(importlib.import_module(owner), name)
        for module_name, module in list(sys.modules.items()):
            in_cli = module_name == "alignmt.cli" or module_name.startswith("alignmt.cli.")
            if (in_cli or module_name == owner) and getattr(module, name, None) is real:
                bound.append((module, name))
    return bound
