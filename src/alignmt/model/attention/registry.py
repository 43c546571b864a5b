"""The room's entries, and the composition a model config chooses from them. Plain Python:
the server, the exporter's manifest and the config checks read it without a framework.

Each entry is a package beside this module whose `reference.py` holds the mechanism's
float64 equations and its `from_config(cfg) -> Spec | None`, with `torch.py` and `flax.py`
building it in each framework. Adding a mechanism is one package, and here its import and
its place in `SCORES`, `MAPPINGS`, `MODIFIERS`, `SPLITS` or `OUTPUTS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from alignmt.config import ModelConfig
from alignmt.model.attention.additive import reference as additive
from alignmt.model.attention.copy import reference as copy
from alignmt.model.attention.coverage import reference as coverage
from alignmt.model.attention.hard_monotonic import reference as hard_monotonic
from alignmt.model.attention.heads import reference as heads
from alignmt.model.attention.local import reference as local
from alignmt.model.attention.location import reference as location
from alignmt.model.attention.mappings import reference as mappings
from alignmt.model.attention.monotonic import reference as monotonic
from alignmt.model.attention.multiplicative import reference as multiplicative
from alignmt.model.attention.spec import Composition

SCORES = (additive, multiplicative, location)
MAPPINGS = (mappings, monotonic, hard_monotonic)
MODIFIERS = (local, coverage)  # in the order they act on a step
SPLITS = (heads,)  # what divides the attention into parts (the heads)
OUTPUTS = (copy,)  # what makes the output distribution from the attention


def compose(cfg: ModelConfig) -> Composition | None:
    """The attention `cfg` describes, checked; None for a model without attention."""
    split = next((spec for entry in SPLITS if (spec := entry.from_config(cfg))), None)
    output = next((spec for entry in OUTPUTS if (spec := entry.from_config(cfg))), None)
    modifiers = tuple(spec for entry in MODIFIERS if (spec := entry.from_config(cfg)))
    if cfg.attention == "none":
        for spec in modifiers:
            raise ValueError(
                f"the {spec.about} acts on attention, and model.attention=none has none: "
                f"use model.{spec.off}"
            )
        return None
    score = next((spec for entry in SCORES if (spec := entry.from_config(cfg))), None)
    if score is None:
        raise ValueError(f"model.attention={cfg.attention} is no score of the attention room")
    for spec in modifiers:
        if spec.hidden_term and not score.hidden_term:
            takers = ", ".join(
                kind for entry in SCORES if entry.HIDDEN_LAYER for kind in entry.KINDS
            )
            raise ValueError(
                f"the {spec.about} adds a term inside the score's hidden layer, and the "
                f"{score.kind} score has none: use a score with one ({takers}), or "
                f"model.{spec.off}"
            )
    mapping = next(spec for entry in MAPPINGS if (spec := entry.from_config(cfg)))
    return Composition(score, mapping, modifiers, split, output)


def current_names(tensors: Mapping[str, Any], composition: Composition | None) -> dict[str, Any]:
    """A run folder's model tensors under today's names: those of a folder written before the
    room (its weights stored where each mechanism's `former` says) renamed, others as they
    are."""
    if composition is None or composition.heads or composition.output:  # none then had these
        return dict(tensors)
    moves = [
        (f"decoder.{old}", f"decoder.{new}") for spec in composition for new, old in spec.former
    ]
    if any(name.startswith(new) for name in tensors for _, new in moves):
        return dict(tensors)
    moves.sort(key=lambda move: -len(move[0]))  # coverage's attention.V before the score's
    renamed = {}
    for name, value in tensors.items():
        old, new = next(((o, n) for o, n in moves if name.startswith(o)), ("", ""))
        renamed[new + name[len(old) :]] = value
    return renamed
