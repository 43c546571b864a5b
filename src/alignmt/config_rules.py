"""The rules a config field's type can carry, as `Annotated` metadata: `Count` is
`Annotated[int, AtLeast(1)]`. Each rule's `problem(value, whole config)` says what is wrong
with a value, or None; `config` checks every field against its rules after merging.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Annotated, Any


@dataclass(frozen=True)
class AtLeast:
    low: float

    def problem(self, value: Any, cfg: Any) -> str | None:
        says = "must not be negative" if self.low == 0 else f"must be at least {self.low:g}"
        return None if value >= self.low else says


@dataclass(frozen=True)
class Above:
    low: float

    def problem(self, value: Any, cfg: Any) -> str | None:
        says = "must be positive" if self.low == 0 else f"must be above {self.low:g}"
        return None if value > self.low else says


@dataclass(frozen=True)
class Between:
    low: float
    high: float  # excluded

    def problem(self, value: Any, cfg: Any) -> str | None:
        ok = self.low <= value < self.high
        return None if ok else f"must be in [{self.low:g}, {self.high:g})"


@dataclass(frozen=True)
class ZeroOrAtLeast:
    low: float
    zero: str  # what 0 means, for the message

    def problem(self, value: Any, cfg: Any) -> str | None:
        ok = value == 0 or value >= self.low
        return None if ok else f"must be 0 ({self.zero}) or at least {self.low:g}"


@dataclass(frozen=True)
class AtMost:
    key: str  # dotted path of the field that bounds this one

    def problem(self, value: Any, cfg: Any) -> str | None:
        bound = reduce(getattr, self.key.split("."), cfg)
        return f"must not exceed {self.key} ({bound})" if value > bound else None


@dataclass(frozen=True)
class Needs:
    key: str  # dotted path of the field that a nonzero value needs set (or unset)
    unset: bool = False

    def problem(self, value: Any, cfg: Any) -> str | None:
        other = reduce(getattr, self.key.split("."), cfg)
        if not value or bool(other) != self.unset:
            return None
        return f"needs {self.key} {'unset' if self.unset else 'set'} (it is {other!r})"


Count = Annotated[int, AtLeast(1)]  # a size or a number of things: 0 would mean nothing runs
NonNegative = Annotated[int, AtLeast(0)]  # a count or interval whose 0 means none, all or off
Positive = Annotated[float, Above(0)]
Probability = Annotated[float, Between(0, 1)]  # in [0, 1)
