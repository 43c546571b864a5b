"""A run's progress on stderr: tqdm's bar on a terminal (a widget in a notebook), and where
stderr is a file or a pipe, a line every half minute, so a run in the background or under a
scheduler is never silent for long.

The estimate of the time left starts after the first update: that one may compile (JAX's
jit), and counted in, a minute of compiling would make a one-minute run look like hours.
"""

from __future__ import annotations

import sys
import time
from typing import Literal

from tqdm.auto import tqdm  # a widget in a notebook, text in a terminal

LINE_SECONDS = 30.0  # between progress lines where there is no terminal

Show = Literal["bar", "lines", "none"]


def how_to_show(progress: bool | None) -> Show:
    """True: a bar; False: nothing; None: a bar on a terminal, else lines."""
    if progress is None:
        return "bar" if sys.stderr.isatty() else "lines"
    return "bar" if progress else "none"


class ProgressReport:
    """The progress of run `name` from step `initial` to `total`; see the module docstring.
    `compiles` names what the first update compiles (None: nothing), said while it does;
    `deadline`, on time.perf_counter's clock, is when a time budget stops the run (None:
    none), which the time left never passes."""

    def __init__(
        self,
        name: str,
        total: int,
        initial: int,
        show: Show,
        compiles: str | None = None,
        deadline: float | None = None,
    ) -> None:
        self.name, self.total, self.step, self.show = name, total, initial, show
        self.deadline = deadline
        self.bar: tqdm | None = None
        self.loss = ""
        self.started: tuple[float, int] | None = None  # (clock, step) after the first update
        self.said = time.perf_counter()  # when the last line was printed
        self.lines = 0
        if compiles and show != "none":
            print(
                f"train {name}: compiling the first update ({compiles}); the time left is "
                "estimated from the updates after it",
                file=sys.stderr,
                flush=True,
            )

    def update(self) -> None:
        """One more step done."""
        self.step += 1
        now = time.perf_counter()
        if self.started is None:
            self.started, self.said = (now, self.step), now
            if self.show == "bar":
                self.bar = tqdm(
                    total=self.total, initial=self.step, desc=f"train {self.name}", file=sys.stderr
                )
            return
        if self.bar is not None:
            self.bar.update()
        elif self.show == "lines" and now - self.said >= LINE_SECONDS:
            self._line(now)

    def set_loss(self, loss: str) -> None:
        """The last interval's mean loss, shown from now on."""
        self.loss = loss
        if self.bar is not None:
            self.bar.set_postfix(loss=loss)

    def close(self) -> None:
        """The bar closed; where lines were printed, a last one."""
        if self.bar is not None:
            self.bar.close()
        elif self.lines:
            self._line(time.perf_counter())

    def _line(self, now: float) -> None:
        self.said, self.lines = now, self.lines + 1
        parts = [f"step {self.step}/{self.total} ({100 * self.step / max(1, self.total):.0f}%)"]
        if self.loss:
            parts.append(f"loss {self.loss}")
        left = self.seconds_left(now)
        if left is not None:
            parts.append(f"about {_duration(left)} left")
        print(f"train {self.name}: {', '.join(parts)}", file=sys.stderr, flush=True)

    def seconds_left(self, now: float) -> float | None:
        """The time left at the pace since the first update, or to the deadline where that
        comes first; None before there is a pace."""
        if self.started is None or self.step <= self.started[1]:
            return None
        clock, step = self.started
        left = (now - clock) / (self.step - step) * max(0, self.total - self.step)
        return left if self.deadline is None else min(left, max(0.0, self.deadline - now))


def _duration(seconds: float) -> str:
    """`42 s`, `3 min 5 s`, `2 h 20 min`."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
