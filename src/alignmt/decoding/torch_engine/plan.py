"""How a search runs, as one typed value: `SearchPlan`, which `search.search` takes whole and
greedy and beam search read their part of. `SearchPlan.from_config` builds it from the config's
`SearchConfig` and the choices a call makes (n-best, batch width, sampling, a deadline).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from alignmt.config import SearchConfig
from alignmt.decoding.engine import Check
from alignmt.decoding.rules import check_search_args
from alignmt.decoding.torch_engine.constraints import Table
from alignmt.decoding.torch_engine.speed import Speed
from alignmt.decoding.torch_engine.steps import Pick


@dataclass(frozen=True)
class SearchPlan:
    """Greedy search, sampling or beam search, and everything each reads."""

    beam_size: int = 1  # K; 1 with nbest 1 and no coverage penalty is greedy search
    nbest: int = 1  # hypotheses returned per sentence, at most K
    length_penalty: float = 0.0  # GNMT's alpha (rules.length_penalty); 0 ranks by score
    coverage_penalty: float = 0.0  # GNMT's beta (beam.coverage_penalty); 0: none
    max_len_ratio: float = 2.0  # the length limit (rules.max_output_len)
    max_len_offset: int = 10
    width: int = 64  # the most sentences searched in one step
    pick: Pick | None = None  # draws each token (sample.sampler); None: search
    speed: Speed = field(default_factory=Speed)  # int8 matmuls and a shortlist
    check: Check | None = None
    # each sentence's lexical constraints, in input order (constraints.Table); beam search
    # only, even with a beam of one
    constraints: Table | None = None

    def __post_init__(self) -> None:
        check_search_args(self.beam_size, self.nbest, self.width)
        if self.constraints is not None and self.pick is not None:
            raise ValueError("lexical constraints need beam search: they cannot be sampled")

    @classmethod
    def from_config(
        cls,
        cfg: SearchConfig,
        *,
        nbest: int = 1,
        width: int = 64,
        beam_size: int | None = None,
        pick: Pick | None = None,
        speed: Speed | None = None,
        check: Check | None = None,
    ) -> SearchPlan:
        """`cfg`'s search with a call's choices: `beam_size` None is cfg's; a `pick`
        samples one output per row, whatever the beam."""
        beam = 1 if pick is not None else beam_size or cfg.beam_size
        return cls(
            beam_size=beam,
            nbest=1 if pick is not None else nbest,
            length_penalty=cfg.length_penalty,
            coverage_penalty=0.0 if pick is not None else cfg.coverage_penalty,
            max_len_ratio=cfg.max_len_ratio,
            max_len_offset=cfg.max_len_offset,
            width=width,
            pick=pick,
            speed=speed or Speed(),
            check=check,
        )

    @property
    def greedy(self) -> bool:
        """Whether greedy search's loop runs (to sample, or for a beam of one)."""
        plain = self.beam_size == 1 and self.nbest == 1 and not self.coverage_penalty
        return self.pick is not None or (plain and self.constraints is None)

    @property
    def rows(self) -> int:
        """The rows of a full step: the width, times K for beam search."""
        return self.width * (1 if self.greedy else self.beam_size)
