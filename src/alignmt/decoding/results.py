"""What decoding gives back, whichever engine ran it: a search's `Hypothesis` in token ids,
a `Translation` in words, and the records of one sentence's decoding seen from inside (the
decoder step by step, beam search as a tree). Attention is a NumPy array in all of them,
on the CPU; nothing here imports a framework.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from alignmt.decoding.words import hard_alignment


@dataclass
class Hypothesis:
    """One output of a search, in target ids."""

    tokens: list[int]  # output ids; ends with </s> unless the length limit stopped it
    score: float  # the sum of the tokens' log-probabilities
    attention: np.ndarray | None  # (len(tokens), src_len) float32 alpha per token; None: vanilla
    token_scores: list[float]  # each token's log-probability given those before it


@dataclass
class Translation:
    """One output of a sentence, in words."""

    text: str  # the detokenised output
    tokens: list[str]  # output tokens, </s> included when produced
    src_tokens: list[str]  # the source as the model read it: tokens (<unk> for unknown) + </s>
    score: float  # summed log-probability
    attention: np.ndarray | None  # (len(tokens), len(src_tokens)); None for vanilla
    probabilities: list[float]  # each output token's, given those before it

    @property
    def alignment(self) -> str | None:
        """The hard alignment in Pharaoh format; None for vanilla (see `hard_alignment`)."""
        return None if self.attention is None else hard_alignment(self.attention, self.tokens)


@dataclass
class DecoderStep:
    """One output position of a sentence decoded step by step."""

    token: int  # the token taken
    log_prob: float  # its log-probability
    forced: bool  # True where the caller's prefix chose it
    attention: np.ndarray | None  # (T_src,) alpha (one-hot where overridden); None: vanilla
    top_tokens: list[int]  # the top_k most probable tokens at this step, best first
    top_log_probs: list[float]  # their log-probabilities
    # the attention mechanisms' values the explorer shows after this step, by slot name (a
    # local window's centre p_i, each head's weights (N, T_src)); what each is, the model's
    # `Shown` declarations say
    shown: dict[str, float | list[list[float]]] = field(default_factory=dict)


@dataclass
class Stepped:
    """One sentence's decoding, step by step."""

    translation: Translation  # the output it reached
    steps: list[DecoderStep]  # one per output token; ids index the target vocabulary

    def weights(self, slot: str) -> np.ndarray:
        """A shown value of kind weights over the whole output, (N, T_out, T_src): each
        head's weights at every step, for multi-head attention's `heads`."""
        return np.stack([step.shown[slot] for step in self.steps], axis=1)


BeamStatus = Literal["live", "finished", "pruned", "stopped"]


@dataclass
class BeamNode:
    """One candidate that beam search weighed: a hypothesis one token longer than its parent."""

    step: int  # the output position of its last token
    slot: int  # its place among the step's 2K candidates: the K live ones first
    parent: int | None  # the index (in `BeamTrace.nodes`) of the hypothesis it extends
    token: int
    score: float  # summed log-probability
    status: BeamStatus  # live: extended at the next step; finished: ended (</s> or the
    # length limit); pruned: not among the K kept; stopped: live when the search stopped
    final_score: float | None  # score / length penalty, by which finished ones are ranked
    attention: np.ndarray | None  # (T_src,) alpha of the step that chose its token


@dataclass
class BeamTrace:
    """Every candidate of one sentence's beam search."""

    nodes: list[BeamNode]  # step by step, each step's in slot order
    finished: list[int]  # the finished nodes, best first by final_score

    def path(self, node: int) -> list[int]:
        """The nodes of the hypothesis that ends at `node`, from its first token on."""
        out = []
        at: int | None = node
        while at is not None:
            out.append(at)
            at = self.nodes[at].parent
        return out[::-1]

    def tokens(self, node: int) -> list[int]:
        """The output of the hypothesis that ends at `node`."""
        return [self.nodes[i].token for i in self.path(node)]

    def hypothesis(self, node: int) -> Hypothesis:
        """The hypothesis that ends at `node`."""
        nodes = [self.nodes[i] for i in self.path(node)]
        sums = [n.score for n in nodes]  # each node's summed log-probability
        log_probs = [b - a for a, b in zip([0.0, *sums], sums, strict=False)]
        attention = stack_rows([n.attention for n in nodes])
        return Hypothesis([n.token for n in nodes], sums[-1], attention, log_probs)


def summed(log_probs: list[float]) -> float:
    """A float32 sum in order, token after token, as beam search sums its scores."""
    total = np.float32(0.0)
    for value in log_probs:
        total = np.float32(total + np.float32(value))
    return float(total)


def stack_rows(rows: list[np.ndarray | None]) -> np.ndarray | None:
    """Per-step attention rows (T_src,) as one (steps, T_src) matrix; None for vanilla."""
    return None if not rows or rows[0] is None else np.stack(rows)


def shown_value(value: np.ndarray, kind: str) -> float | list[list[float]]:
    """A shown value of one row (`DecoderStep.shown`) as the answers give it: a number, or
    weights (T_src, N) as N rows over the source."""
    return np.asarray(value, np.float64).T.tolist() if kind == "weights" else float(value)
