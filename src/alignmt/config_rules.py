"""The rules a config field's type can carry, as `Annotated` metadata: `Count` is
`Annotated[int, AtLeast(1)]`. Each rule's `problem(value, whole config)` says what is wrong
with a value, or None; `config_merge` checks every field against its rules after merging.

`check_model` holds the rules that tie model fields together, which every backend's model
builder applies before it builds anything, so that both refuse the same with the same words
(the attention mechanisms' own rules are the room's: `model.attention.registry.compose`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Annotated, Any

if TYPE_CHECKING:  # config imports this module
    from alignmt.config import ModelConfig


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


@dataclass(frozen=True)
class DecayK:
    """The k of train.scheduled_sampling's schedule: eps_0 <= 1 and eps_i falling."""

    def problem(self, value: Any, cfg: Any) -> str | None:
        schedule = cfg.train.scheduled_sampling
        if schedule == "linear" and not 0 < value <= 1:
            return "must be in (0, 1] for the linear schedule (k is eps at update 0)"
        if schedule == "exponential" and not 0 < value < 1:
            return "must be in (0, 1) for the exponential schedule (eps_i = k ** i)"
        if schedule == "inverse_sigmoid" and value < 1:
            return "must be at least 1 for the inverse_sigmoid schedule (k / (k + exp(i / k)))"
        return None


Count = Annotated[int, AtLeast(1)]  # a size or a number of things: 0 would mean nothing runs
NonNegative = Annotated[int, AtLeast(0)]  # a count or interval whose 0 means none, all or off
Positive = Annotated[float, Above(0)]
Probability = Annotated[float, Between(0, 1)]  # in [0, 1)


def check_model(cfg: ModelConfig) -> None:
    """Raise ValueError for a combination of model fields that no backend can build."""
    vanilla, luong = cfg.attention == "none", cfg.attention != "none" and cfg.order == "luong"
    if vanilla and cfg.context == "init_only" and cfg.init != "bridge":
        raise ValueError(
            "model.context=init_only passes the source only through s_0, so it needs "
            f"model.init=bridge (got init={cfg.init}: the decoder would never see it)"
        )
    if luong and cfg.readout != "none":
        raise ValueError(
            f"model.readout={cfg.readout} has no place in the luong order, whose "
            "attentional vector tanh(W_c [c_i; s_i]) is its readout; use readout=none"
        )
    units = cfg.dec_hidden if luong else projection_inputs(cfg)
    if cfg.tie_embeddings and units != cfg.emb_dim:
        raise ValueError(
            f"model.tie_embeddings needs {cfg.emb_dim} (emb_dim) units before the vocabulary "
            f"projection, found {units}: use a tanh or maxout readout with "
            "readout_dim = emb_dim (luong order: dec_hidden = emb_dim)"
        )


def projection_inputs(cfg: ModelConfig) -> int:
    """The units the vocabulary projection reads in the Bahdanau order or without attention:
    the readout's, or else [s_i; c_i; E y_{i-1}] (c_i only where a context is fed)."""
    if cfg.readout != "none":
        return cfg.readout_dim
    context = cfg.attention != "none" or cfg.context == "every_step"
    enc_dim = cfg.enc_hidden * (2 if cfg.bidirectional else 1)
    return cfg.dec_hidden + (enc_dim if context else 0) + cfg.emb_dim
